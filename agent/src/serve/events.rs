//! What the producers of a session's traffic hand to it: [`SessionEvent`]s, and the
//! stamped [`frame`] each pushed message travels in.
//!
//! A leaf: the session consumes these events and the producers — a measurement child
//! (`runner`), a replay (`replay`), a pushed workload (`live`) — send them, so the
//! arrows run one way (producers → events ← session) and no producer imports the
//! session that reads it.

use std::time::{SystemTime, UNIX_EPOCH};

use gpumem_proto::wire::{AgentFrame, AgentMessage};

/// What wakes the session thread.
pub enum SessionEvent {
    /// A frame to push to the page (from a run, live or replayed).
    Send(Box<AgentFrame>),
    /// A frame already serialised (a replayed `run_finished`, shared by every viewer).
    SendText(String),
    /// The run with this id ended; the session may start another.
    RunEnded(u64),
    /// Bytes arrived on the socket.
    Readable,
}

/// Wraps a message into a frame stamped with the current wall-clock time.
pub(crate) fn frame(replay: bool, message: AgentMessage) -> AgentFrame {
    AgentFrame {
        replay,
        sent_unix_ns: unix_nanos(),
        message,
    }
}

/// Nanoseconds since the Unix epoch (0 if the clock is before it, which only a broken
/// clock is; the figure is for latency display, never for logic).
pub(crate) fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
