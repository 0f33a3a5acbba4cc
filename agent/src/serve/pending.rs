//! The connections still sending their request head: a bounded set in which the oldest
//! gives way to a newcomer.
//!
//! Each pending connection holds a thread that reads its head under [`http`]'s size and
//! time bounds. A fixed number of slots alone is a lock-out: clients that open
//! connections and drip their head (or send nothing) hold every slot for the whole
//! head deadline, and every page load and pairing behind them is refused (100
//! dripping connections locked the page out). So when every slot is taken, the
//! connection that has waited longest for its head is *evicted* — its socket is shut
//! down, which ends the blocked read in its thread at once — and the newcomer takes its
//! slot. A browser sends its whole head in one segment as soon as it connects, so a
//! good client is read within microseconds of being accepted and is never the oldest
//! for long; a dripper is always older. Only connections still reading their head can
//! be evicted: one whose head is complete is being answered (a file, or the hand-off to
//! a WebSocket session) and keeps its slot until it is done.
//!
//! Bounds: at most [`MAX_PENDING`] counted slots; an evicted thread stops counting at
//! eviction and ends as soon as its read returns, so the threads alive at once are
//! [`MAX_PENDING`] plus the few just evicted.
//!
//! [`http`]: super::http

use std::collections::VecDeque;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Connections reading their request head or being answered a file, at once.
pub const MAX_PENDING: usize = 64;

/// The set of pending connections, shared by the accept loop and the connection threads.
pub struct Pending {
    inner: Mutex<Inner>,
    max: usize,
}

struct Inner {
    next_id: u64,
    /// Counted slots (reading a head or answering).
    taken: usize,
    /// The connections still reading their head, oldest first (the evictable ones).
    reading: VecDeque<Reading>,
}

struct Reading {
    id: u64,
    /// A second handle on the connection's socket, to shut it down on eviction.
    stream: TcpStream,
    evicted: Arc<AtomicBool>,
}

/// One connection's slot; freed when dropped, however the connection ends.
pub struct Ticket {
    pending: Arc<Pending>,
    id: u64,
    evicted: Arc<AtomicBool>,
}

impl Pending {
    /// An empty set of `max` slots.
    pub fn new(max: usize) -> Arc<Pending> {
        Arc::new(Pending {
            inner: Mutex::new(Inner {
                next_id: 0,
                taken: 0,
                reading: VecDeque::new(),
            }),
            max: max.max(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // No code under this lock panics; a poisoned lock still holds consistent data.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a new connection: a free slot, or the slot of the oldest connection still
    /// reading its head (which is shut down). `None` when every slot is answering (or
    /// the socket cannot be duplicated): the caller refuses with 503.
    pub fn admit(self: &Arc<Self>, stream: &TcpStream) -> Option<Ticket> {
        let handle = stream.try_clone().ok()?;
        let mut inner = self.lock();
        if inner.taken >= self.max {
            let oldest = inner.reading.pop_front()?;
            // The slot passes to the newcomer: the evicted ticket no longer counts.
            oldest.evicted.store(true, Ordering::Release);
            let _ = oldest.stream.shutdown(Shutdown::Both);
        } else {
            inner.taken += 1;
        }
        let id = inner.next_id;
        inner.next_id = inner.next_id.wrapping_add(1);
        let evicted = Arc::new(AtomicBool::new(false));
        inner.reading.push_back(Reading {
            id,
            stream: handle,
            evicted: Arc::clone(&evicted),
        });
        Some(Ticket {
            pending: Arc::clone(self),
            id,
            evicted,
        })
    }

    /// Slots counted now (for tests and the architecture's bounds).
    #[cfg(test)]
    fn taken(&self) -> usize {
        self.lock().taken
    }
}

impl Ticket {
    /// Marks the head as read: the connection can no longer be evicted. `false` if it
    /// was evicted meanwhile (its socket is shut down; the caller just returns).
    pub fn head_read(&self) -> bool {
        let mut inner = self.pending.lock();
        if self.evicted.load(Ordering::Acquire) {
            return false;
        }
        inner.reading.retain(|r| r.id != self.id);
        true
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut inner = self.pending.lock();
        if self.evicted.load(Ordering::Acquire) {
            return;
        }
        inner.reading.retain(|r| r.id != self.id);
        inner.taken = inner.taken.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        (client, server)
    }

    #[test]
    fn a_full_set_evicts_the_oldest_reader_and_keeps_the_count() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let pending = Pending::new(2);
        let (_c1, mut s1) = pair(&listener);
        let (_c2, s2) = pair(&listener);
        let (_c3, s3) = pair(&listener);
        let t1 = pending.admit(&s1).expect("slot 1");
        let t2 = pending.admit(&s2).expect("slot 2");
        assert_eq!(pending.taken(), 2);
        // Full: the third evicts the first, whose blocked read now ends at once.
        let t3 = pending.admit(&s3).expect("slot 3 by eviction");
        assert_eq!(pending.taken(), 2);
        let mut buf = [0u8; 1];
        assert_eq!(s1.read(&mut buf).unwrap_or(0), 0);
        assert!(!t1.head_read());
        drop(t1);
        assert_eq!(
            pending.taken(),
            2,
            "an evicted ticket does not free a slot twice"
        );
        // Answering connections are never evicted: with both heads read, a fourth is refused.
        assert!(t2.head_read());
        assert!(t3.head_read());
        let (_c4, s4) = pair(&listener);
        assert!(pending.admit(&s4).is_none());
        drop(t2);
        drop(t3);
        assert_eq!(pending.taken(), 0);
        assert!(pending.admit(&s4).is_some());
    }
}
