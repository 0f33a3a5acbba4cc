//! The allocator's own history (`gpumem.history/v1`) and its attribution to the
//! estimate's lines.
//!
//! PyTorch's caching allocator can record every allocation and free with the Python
//! stack that made it (`torch.cuda.memory._record_memory_history`, read back with
//! `_snapshot()`). `gpumem-agent run --memory-history` turns it on in the probe;
//! `gpumem-agent trace --memory-history` writes the same shape from the meta device,
//! where the allocator is the trace's model of it. Both reach this module as a
//! [`MemoryHistory`]: a bounded, interned copy of the snapshot's trace (frames and
//! stacks stored once), each event tagged with the phase and the module it ran in.
//!
//! [`attribute`] replays the events, finds each phase's peak and assigns every block
//! live there to a [`HistoryLine`] by its lifetime (the phase that allocated it and
//! whether it outlived that phase), its stack and its size:
//!
//! | line | rule |
//! |---|---|
//! | weights | allocated before the first step (the model's load), or before the window opened |
//! | master weights | as weights, with a frame whose function name says `master` |
//! | KV cache | a frame in a cache module (`cache_utils.py`, `kv_cache`) |
//! | optimizer state | allocated in an optimizer step and outliving it |
//! | gradients | allocated in a backward and outliving it |
//! | logits | in a forward, backward or decode: a request of a whole number (≥ 2) of vocabulary-wide rows |
//! | activations | allocated in a forward (or prefill) and outliving it |
//! | workspaces | allocated in a step and never freed (library workspaces, caches) |
//! | temporaries | everything else |
//!
//! and the allocator's slack (reserved but not allocated) beside them. Blocks are
//! counted as the allocator counts them: each request rounded up to 512 B
//! (`kMinBlockSize`, c10/cuda/CUDACachingAllocator.cpp); a large block the allocator
//! did not split (a remainder of at most 1 MiB left in it) is not seen, and stays in the
//! slack.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

/// The `schema` value of a history.
pub const HISTORY_SCHEMA: &str = "gpumem.history/v1";

/// Most events a history keeps (the probe and the trace keep the last ones; the agent
/// refuses more).
pub const MAX_EVENTS: usize = 200_000;
/// Most distinct frames.
pub const MAX_FRAMES: usize = 50_000;
/// Most distinct stacks.
pub const MAX_STACKS: usize = 100_000;
/// Frames kept per stack, innermost first.
pub const MAX_STACK_DEPTH: usize = 12;
/// Most distinct phases and module scopes.
pub const MAX_NAMES: usize = 10_000;
/// Longest text kept in a frame, phase or scope.
pub const MAX_NAME_CHARS: usize = 300;
/// Largest history file the agent reads.
pub const MAX_HISTORY_BYTES: u64 = 48 << 20;
/// Blocks live when the window opened, at most.
pub const MAX_BEFORE: usize = 200_000;
/// Notes a history carries, at most (each at most [`MAX_NAME_CHARS`] characters).
pub const MAX_NOTES: usize = 64;
/// Points of the timeline [`attribute`] draws (events are sampled down to it).
pub const TIMELINE_POINTS: usize = 600;
/// Largest blocks named per line at a peak.
pub const LARGEST_PER_LINE: usize = 3;

/// The CUDA caching allocator's rounding of a request (`kMinBlockSize`).
pub const MIN_BLOCK: u64 = 512;

/// A bounded copy of the allocator's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MemoryHistory {
    /// Always [`HISTORY_SCHEMA`].
    pub schema: String,
    /// `cuda` (PyTorch's allocator on a GPU), `meta` (the trace's model of it: no
    /// memory was allocated) or `synthetic` (the tests' stand-in: not memory of anything).
    pub source: String,
    /// The torch version that recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_version: Option<String>,
    /// The CUDA device index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// The vocabulary size, when known: a request of whole vocabulary-wide rows is
    /// counted as logits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab: Option<u64>,
    /// Phases named by the events, `(name, step)`.
    pub phases: Vec<HistoryPhase>,
    /// Module paths named by the events (`model.layers.3`).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Distinct stack frames.
    #[serde(default)]
    pub frames: Vec<HistoryFrame>,
    /// Distinct stacks: indexes into `frames`, innermost first.
    #[serde(default)]
    pub stacks: Vec<Vec<u32>>,
    /// Blocks already allocated when the window opened (from the snapshot's segments
    /// and the frees of blocks the window did not see allocated).
    #[serde(default)]
    pub before: Vec<HistoryBlock>,
    /// Bytes reserved when the window opened.
    pub reserved_before_bytes: u64,
    /// The events in order.
    pub events: Vec<HistoryEvent>,
    /// Events the recorder dropped or the copy left out (its ring buffer wrapped, or
    /// [`MAX_EVENTS`]): the window then starts after the program did.
    #[serde(default)]
    pub dropped_events: u64,
    /// What the copy simplified, in words.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// A phase as the probe names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HistoryPhase {
    /// `model_load`, `forward`, `backward`, `optimizer_step`, `prefill`, `decode`, or a
    /// manual marker's name.
    pub name: String,
    /// The step (training) or generate call (inference).
    pub step: Option<u32>,
}

/// One stack frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HistoryFrame {
    /// Source file.
    pub file: String,
    /// Line.
    pub line: u32,
    /// Function.
    pub name: String,
}

/// A block allocated before the window opened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HistoryBlock {
    /// Its address.
    pub address: u64,
    /// Bytes requested.
    pub size: u64,
    /// Its stack, when the snapshot kept one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<u32>,
}

/// What the allocator did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum HistoryAction {
    /// A block handed to a tensor.
    Alloc,
    /// A block given back (`free_completed`).
    Free,
    /// Memory reserved from the driver (`cudaMalloc`, or an expandable segment's map).
    SegmentAlloc,
    /// Memory given back to the driver.
    SegmentFree,
    /// An allocation that failed (out of memory).
    Oom,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HistoryEvent {
    /// What happened.
    pub action: HistoryAction,
    /// The block's (or segment's) address.
    pub address: u64,
    /// Bytes requested (a block) or reserved (a segment).
    pub size: u64,
    /// Index into `phases` of the phase open when it happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<u32>,
    /// Index into `scopes` of the module it ran in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u32>,
    /// Index into `stacks` (allocations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<u32>,
}

/// Why a history cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryError {
    /// `schema` is not [`HISTORY_SCHEMA`].
    Schema(String),
    /// A list is longer than its bound.
    TooLong(&'static str, usize),
    /// An index points past its list.
    BadIndex(&'static str, usize),
    /// A text is longer than [`MAX_NAME_CHARS`].
    TooLongText(&'static str),
}

impl std::fmt::Display for HistoryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HistoryError::Schema(s) => {
                write!(f, "not a {HISTORY_SCHEMA} document (schema {s:?})")
            }
            HistoryError::TooLong(what, n) => {
                write!(f, "the history has {n} {what}, more than it may keep")
            }
            HistoryError::BadIndex(what, i) => {
                write!(f, "event {i} names a {what} the history does not hold")
            }
            HistoryError::TooLongText(what) => write!(
                f,
                "a {what} in the history is longer than {MAX_NAME_CHARS} characters"
            ),
        }
    }
}

impl std::error::Error for HistoryError {}

impl MemoryHistory {
    /// Checks the bounds and every index, so that [`attribute`] never reads past a
    /// list (a history comes from a child process or a file: untrusted).
    pub fn validate(&self) -> Result<(), HistoryError> {
        if self.schema != HISTORY_SCHEMA {
            return Err(HistoryError::Schema(self.schema.clone()));
        }
        let bound = |what, n: usize, max: usize| {
            if n > max {
                Err(HistoryError::TooLong(what, n))
            } else {
                Ok(())
            }
        };
        bound("events", self.events.len(), MAX_EVENTS)?;
        bound("frames", self.frames.len(), MAX_FRAMES)?;
        bound("stacks", self.stacks.len(), MAX_STACKS)?;
        bound("phases", self.phases.len(), MAX_NAMES)?;
        bound("scopes", self.scopes.len(), MAX_NAMES)?;
        bound("blocks before the window", self.before.len(), MAX_BEFORE)?;
        let text = |what, s: &str| {
            if s.chars().count() > MAX_NAME_CHARS {
                Err(HistoryError::TooLongText(what))
            } else {
                Ok(())
            }
        };
        for f in &self.frames {
            text("frame", &f.file)?;
            text("frame", &f.name)?;
        }
        for p in &self.phases {
            text("phase", &p.name)?;
        }
        bound("notes", self.notes.len(), MAX_NOTES)?;
        for n in &self.notes {
            text("note", n)?;
        }
        text("source", &self.source)?;
        if let Some(v) = &self.torch_version {
            text("torch version", v)?;
        }
        for s in &self.scopes {
            text("scope", s)?;
        }
        let frames = self.frames.len();
        for (i, s) in self.stacks.iter().enumerate() {
            if s.len() > MAX_STACK_DEPTH {
                return Err(HistoryError::TooLong("frames in one stack", s.len()));
            }
            if s.iter().any(|&f| f as usize >= frames) {
                return Err(HistoryError::BadIndex("frame", i));
            }
        }
        let within = |idx: Option<u32>, len: usize| idx.is_none_or(|v| (v as usize) < len);
        for (i, e) in self.events.iter().enumerate() {
            if !within(e.phase, self.phases.len()) {
                return Err(HistoryError::BadIndex("phase", i));
            }
            if !within(e.scope, self.scopes.len()) {
                return Err(HistoryError::BadIndex("scope", i));
            }
            if !within(e.stack, self.stacks.len()) {
                return Err(HistoryError::BadIndex("stack", i));
            }
        }
        for (i, b) in self.before.iter().enumerate() {
            if !within(b.stack, self.stacks.len()) {
                return Err(HistoryError::BadIndex("stack", i));
            }
        }
        Ok(())
    }

    fn frames_of(&self, stack: Option<u32>) -> impl Iterator<Item = &HistoryFrame> {
        stack
            .and_then(|s| self.stacks.get(s as usize))
            .into_iter()
            .flatten()
            .filter_map(|&f| self.frames.get(f as usize))
    }
}

/// The allocator's block for a request of `size` bytes.
pub fn block_bytes(size: u64) -> u64 {
    size.max(1).div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK)
}

/// A line of the attribution: the estimate's line it stands beside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum HistoryLine {
    /// The model's parameters and buffers (`weights`).
    Weights,
    /// fp32 master copies (`training.master_weights`).
    MasterWeights,
    /// Gradients (`training.gradients`).
    Gradients,
    /// Optimizer states (`training.optimizer`).
    OptimizerState,
    /// What the forward kept for the backward (`activations`).
    Activations,
    /// Logits and their gradient (`logits`, `prefill.logits`).
    Logits,
    /// The KV cache (`kv_cache`).
    KvCache,
    /// Blocks a step allocated and never freed: library workspaces and caches
    /// (`cuda_context`'s workspaces).
    Workspaces,
    /// Everything else: a phase's transients.
    Temporaries,
}

impl HistoryLine {
    /// Every line, in the order shown.
    pub const ALL: [HistoryLine; 9] = [
        HistoryLine::Weights,
        HistoryLine::MasterWeights,
        HistoryLine::Gradients,
        HistoryLine::OptimizerState,
        HistoryLine::Activations,
        HistoryLine::Logits,
        HistoryLine::KvCache,
        HistoryLine::Workspaces,
        HistoryLine::Temporaries,
    ];

    /// Its name in words.
    pub fn label(self) -> &'static str {
        match self {
            HistoryLine::Weights => "weights",
            HistoryLine::MasterWeights => "master weights",
            HistoryLine::Gradients => "gradients",
            HistoryLine::OptimizerState => "optimizer state",
            HistoryLine::Activations => "activations",
            HistoryLine::Logits => "logits",
            HistoryLine::KvCache => "KV cache",
            HistoryLine::Workspaces => "workspaces",
            HistoryLine::Temporaries => "temporaries",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What was live at each phase's peak, by line, and the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Attribution {
    /// One per phase, in the order the phases first appear.
    pub peaks: Vec<PeakAttribution>,
    /// Allocated by line and reserved over the events, sampled to at most
    /// [`TIMELINE_POINTS`] points (each point the largest allocated of its span).
    pub timeline: Vec<TimelinePoint>,
    /// Phases as bands of the timeline: `(phase index, first event, last event)`.
    pub bands: Vec<PhaseBand>,
    /// The highest allocated over the window.
    pub allocated_peak_bytes: u64,
    /// The highest reserved over the window.
    pub reserved_peak_bytes: u64,
    /// What the attribution could not see, in words (a window opened late, frees of
    /// unknown blocks).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One phase's peak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PeakAttribution {
    /// The phase.
    pub phase: String,
    /// Its step.
    pub step: Option<u32>,
    /// The event at which allocated was highest in the phase.
    pub event: u64,
    /// Allocated there.
    pub allocated_bytes: u64,
    /// Reserved there.
    pub reserved_bytes: u64,
    /// Reserved but not allocated: the allocator's cache and fragmentation.
    pub slack_bytes: u64,
    /// Bytes by line (every line, zeros included), adding up to `allocated_bytes`.
    pub lines: Vec<LineBytes>,
    /// The largest blocks of each line, with where they were made.
    pub largest: Vec<LargestBlock>,
    /// Activations by module scope (`model.layers.3`), largest first; blocks made
    /// outside any scope under `""`.
    #[serde(default)]
    pub activations_by_scope: Vec<ScopeBytes>,
}

impl PeakAttribution {
    /// The bytes of `line`.
    pub fn bytes(&self, line: HistoryLine) -> u64 {
        self.lines
            .iter()
            .find(|l| l.line == line)
            .map_or(0, |l| l.bytes)
    }
}

/// Bytes of one line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LineBytes {
    /// The line.
    pub line: HistoryLine,
    /// Its bytes (blocks as the allocator counts them).
    pub bytes: u64,
    /// How many blocks.
    pub blocks: u64,
}

/// A large block at a peak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LargestBlock {
    /// Its line.
    pub line: HistoryLine,
    /// Its bytes.
    pub bytes: u64,
    /// Where it was made: the innermost frame outside torch's own files, as
    /// `file:line function`; empty when no stack was kept.
    pub site: String,
    /// The module scope it was made in.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope: String,
}

/// Bytes of one module scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ScopeBytes {
    /// The module path.
    pub scope: String,
    /// Bytes.
    pub bytes: u64,
}

/// One point of the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TimelinePoint {
    /// The event.
    pub event: u64,
    /// Reserved.
    pub reserved_bytes: u64,
    /// Allocated by line, in [`HistoryLine::ALL`]'s order.
    pub by_line: Vec<u64>,
}

impl TimelinePoint {
    /// Allocated, all lines.
    pub fn allocated(&self) -> u64 {
        self.by_line.iter().sum()
    }
}

/// A phase's span on the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PhaseBand {
    /// The phase's name.
    pub phase: String,
    /// Its step.
    pub step: Option<u32>,
    /// First event.
    pub first: u64,
    /// Last event.
    pub last: u64,
}

/// A block's life, as the replay saw it.
#[derive(Clone)]
struct Life {
    bytes: u64,
    size: u64,
    /// Phase of allocation (None: before the window, or outside any phase).
    phase: Option<u32>,
    before: bool,
    scope: Option<u32>,
    stack: Option<u32>,
    /// Event index of the free, if any.
    freed_at: Option<usize>,
}

/// The phase kinds the lifetime rules know.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Load,
    Forward,
    Backward,
    Optimizer,
    Generate,
    Other,
}

fn kind_of(name: &str) -> Kind {
    match name {
        "model_load" => Kind::Load,
        "forward" | "prefill" => Kind::Forward,
        "backward" => Kind::Backward,
        "optimizer_step" => Kind::Optimizer,
        "decode" => Kind::Generate,
        _ => Kind::Other,
    }
}

fn in_cache_module(f: &HistoryFrame) -> bool {
    f.file.ends_with("cache_utils.py") || f.file.contains("kv_cache") || f.name.contains("kv_cache")
}

/// Files of torch itself (and of the run probe, which wraps the program's calls),
/// skipped when naming a site.
fn is_framework_file(file: &str) -> bool {
    file.contains("/torch/") || file.contains("gpumem_probe")
}

/// Replays `h` (already [validated](MemoryHistory::validate)) and attributes each
/// phase's peak.
pub fn attribute(h: &MemoryHistory) -> Attribution {
    let n = h.events.len();
    let kinds: Vec<Kind> = h.phases.iter().map(|p| kind_of(&p.name)).collect();
    // Each phase's last event (to tell whether a block outlived the phase it was made
    // in): a phase is one (name, step), so its events may not be contiguous only when
    // a manual phase interleaves; the last one is what counts.
    let mut phase_last = vec![0usize; h.phases.len()];
    let mut phase_first = vec![usize::MAX; h.phases.len()];
    for (i, e) in h.events.iter().enumerate() {
        if let Some(p) = e.phase {
            let p = p as usize;
            phase_last[p] = i;
            phase_first[p] = phase_first[p].min(i);
        }
    }
    let mut notes = Vec::new();
    if h.dropped_events > 0 {
        notes.push(format!(
            "{} earlier event(s) were not kept: blocks made before the window count as weights",
            h.dropped_events
        ));
    }

    // Pass 1: the life of every block (alloc → free), keyed by address.
    let mut lives: Vec<Life> = Vec::with_capacity(h.before.len() + n / 2);
    let mut open: HashMap<u64, usize> = HashMap::new();
    // Event index → life index (for allocs and frees).
    let mut event_life: Vec<Option<usize>> = vec![None; n];
    for b in &h.before {
        open.insert(b.address, lives.len());
        lives.push(Life {
            bytes: block_bytes(b.size),
            size: b.size,
            phase: None,
            before: true,
            scope: None,
            stack: b.stack,
            freed_at: None,
        });
    }
    let mut unknown_frees = 0u64;
    for (i, e) in h.events.iter().enumerate() {
        match e.action {
            HistoryAction::Alloc => {
                if let Some(prev) = open.insert(e.address, lives.len()) {
                    // A block allocated twice without a free between: the free was
                    // not recorded; close the old life here.
                    lives[prev].freed_at.get_or_insert(i);
                }
                event_life[i] = Some(lives.len());
                lives.push(Life {
                    bytes: block_bytes(e.size),
                    size: e.size,
                    phase: e.phase,
                    before: false,
                    scope: e.scope,
                    stack: e.stack,
                    freed_at: None,
                });
            }
            HistoryAction::Free => match open.remove(&e.address) {
                Some(l) => {
                    lives[l].freed_at = Some(i);
                    event_life[i] = Some(l);
                }
                None => unknown_frees += 1,
            },
            _ => {}
        }
    }
    if unknown_frees > 0 {
        notes.push(format!(
            "{unknown_frees} free(s) of blocks the history never saw allocated were left out"
        ));
    }

    // Each life's line, by the rules in the module's documentation.
    let outlived = |l: &Life| -> bool {
        match l.phase {
            Some(p) => l.freed_at.is_none_or(|f| f > phase_last[p as usize]),
            None => true,
        }
    };
    let load_phase = |p: Option<u32>| p.is_none_or(|p| kinds[p as usize] == Kind::Load);
    let lines: Vec<HistoryLine> = lives
        .iter()
        .map(|l| {
            let mut frames = h.frames_of(l.stack);
            let master = || h.frames_of(l.stack).any(|f| f.name.contains("master"));
            if l.before || (load_phase(l.phase) && l.phase.is_some()) {
                return if master() {
                    HistoryLine::MasterWeights
                } else {
                    HistoryLine::Weights
                };
            }
            if frames.any(in_cache_module) {
                return HistoryLine::KvCache;
            }
            let kind = l.phase.map_or(Kind::Other, |p| kinds[p as usize]);
            let lives_on = outlived(l);
            match kind {
                Kind::Optimizer if lives_on => return HistoryLine::OptimizerState,
                Kind::Backward if lives_on => return HistoryLine::Gradients,
                _ => {}
            }
            if let Some(v) = h.vocab.filter(|&v| v > 0)
                && matches!(kind, Kind::Forward | Kind::Backward | Kind::Generate)
                && l.size >= 2 * v
                && l.size % v == 0
            {
                return HistoryLine::Logits;
            }
            if l.phase.is_none() && l.freed_at.is_none() {
                // Made between phases and kept: the program's own state (inputs moved
                // to the device, a model built late) as weights are.
                return HistoryLine::Weights;
            }
            match kind {
                Kind::Forward if lives_on && l.freed_at.is_some() => HistoryLine::Activations,
                Kind::Forward | Kind::Backward | Kind::Generate | Kind::Optimizer
                    if l.freed_at.is_none() =>
                {
                    HistoryLine::Workspaces
                }
                _ => HistoryLine::Temporaries,
            }
        })
        .collect();

    // Pass 2: replay allocated (by line) and reserved; record each phase's peak.
    let mut by_line = [0u64; 9];
    let mut live_blocks: HashSet<usize> = HashSet::new();
    for (i, l) in lives.iter().enumerate() {
        if l.before {
            by_line[lines[i].index()] += l.bytes;
            live_blocks.insert(i);
        }
    }
    let mut reserved = h.reserved_before_bytes;
    let mut peak_at: Vec<Option<(usize, u64)>> = vec![None; h.phases.len()];
    let mut allocated_peak = by_line.iter().sum::<u64>();
    let mut reserved_peak = reserved;
    let step = n.div_ceil(TIMELINE_POINTS).max(1);
    let mut timeline = Vec::new();
    let mut span_best: Option<TimelinePoint> = None;
    for (i, e) in h.events.iter().enumerate() {
        match e.action {
            HistoryAction::Alloc => {
                if let Some(l) = event_life[i] {
                    by_line[lines[l].index()] += lives[l].bytes;
                    live_blocks.insert(l);
                }
            }
            HistoryAction::Free => {
                if let Some(l) = event_life[i]
                    && live_blocks.remove(&l)
                {
                    let v = &mut by_line[lines[l].index()];
                    *v = v.saturating_sub(lives[l].bytes);
                }
            }
            HistoryAction::SegmentAlloc => reserved = reserved.saturating_add(e.size),
            HistoryAction::SegmentFree => reserved = reserved.saturating_sub(e.size),
            HistoryAction::Oom => {}
        }
        let allocated: u64 = by_line.iter().sum();
        allocated_peak = allocated_peak.max(allocated);
        reserved_peak = reserved_peak.max(reserved);
        if let Some(p) = e.phase {
            let slot = &mut peak_at[p as usize];
            if slot.is_none_or(|(_, best)| allocated > best) {
                *slot = Some((i, allocated));
            }
        }
        let point = TimelinePoint {
            event: i as u64,
            reserved_bytes: reserved,
            by_line: by_line.to_vec(),
        };
        if span_best
            .as_ref()
            .is_none_or(|b| point.allocated() > b.allocated())
        {
            span_best = Some(point);
        }
        if (i + 1) % step == 0 || i + 1 == n {
            timeline.extend(span_best.take());
        }
    }

    // Pass 3: the live set at each phase's peak (one more replay per phase, in event
    // order, so the cost stays linear in events × phases with a small constant).
    let mut order: Vec<usize> = (0..h.phases.len())
        .filter(|&p| peak_at[p].is_some())
        .collect();
    order.sort_by_key(|&p| phase_first[p]);
    let mut targets: Vec<(usize, usize)> = order
        .iter()
        .filter_map(|&p| peak_at[p].map(|(i, _)| (i, p)))
        .collect();
    targets.sort_unstable();
    let mut results: HashMap<usize, PeakAttribution> = HashMap::new();
    let mut live: HashSet<usize> = lives
        .iter()
        .enumerate()
        .filter(|(_, l)| l.before)
        .map(|(i, _)| i)
        .collect();
    let mut reserved = h.reserved_before_bytes;
    let mut t = 0;
    for (i, e) in h.events.iter().enumerate() {
        if t >= targets.len() {
            break;
        }
        match e.action {
            HistoryAction::Alloc => {
                if let Some(l) = event_life[i] {
                    live.insert(l);
                }
            }
            HistoryAction::Free => {
                if let Some(l) = event_life[i] {
                    live.remove(&l);
                }
            }
            HistoryAction::SegmentAlloc => reserved = reserved.saturating_add(e.size),
            HistoryAction::SegmentFree => reserved = reserved.saturating_sub(e.size),
            HistoryAction::Oom => {}
        }
        while t < targets.len() && targets[t].0 == i {
            let p = targets[t].1;
            results.insert(p, peak_of(h, p, i, reserved, &live, &lives, &lines));
            t += 1;
        }
    }
    let peaks = order.iter().filter_map(|p| results.remove(p)).collect();
    let bands = order
        .iter()
        .map(|&p| PhaseBand {
            phase: h.phases[p].name.clone(),
            step: h.phases[p].step,
            first: phase_first[p] as u64,
            last: phase_last[p] as u64,
        })
        .collect();
    Attribution {
        peaks,
        timeline,
        bands,
        allocated_peak_bytes: allocated_peak,
        reserved_peak_bytes: reserved_peak,
        notes,
    }
}

fn site_of(h: &MemoryHistory, stack: Option<u32>) -> String {
    let mut first = None;
    for f in h.frames_of(stack) {
        first.get_or_insert(f);
        if !is_framework_file(&f.file) {
            return format!("{}:{} {}", short_file(&f.file), f.line, f.name);
        }
    }
    first.map_or_else(String::new, |f| {
        format!("{}:{} {}", short_file(&f.file), f.line, f.name)
    })
}

/// The last two components of a path (`models/llama/modeling_llama.py` → `llama/modeling_llama.py`).
fn short_file(file: &str) -> &str {
    let mut cut = file.len();
    for _ in 0..2 {
        match file[..cut].rfind('/') {
            Some(i) => cut = i,
            None => return file,
        }
    }
    &file[cut + 1..]
}

fn peak_of(
    h: &MemoryHistory,
    p: usize,
    event: usize,
    reserved: u64,
    live: &HashSet<usize>,
    lives: &[Life],
    lines: &[HistoryLine],
) -> PeakAttribution {
    let mut bytes = [0u64; 9];
    let mut blocks = [0u64; 9];
    let mut largest: Vec<Vec<usize>> = vec![Vec::new(); 9];
    let mut scopes: HashMap<Option<u32>, u64> = HashMap::new();
    let mut ids: Vec<usize> = live.iter().copied().collect();
    ids.sort_unstable();
    for l in ids {
        let line = lines[l];
        let k = line.index();
        bytes[k] += lives[l].bytes;
        blocks[k] += 1;
        let top = &mut largest[k];
        top.push(l);
        top.sort_by(|a, b| lives[*b].bytes.cmp(&lives[*a].bytes).then(a.cmp(b)));
        top.truncate(LARGEST_PER_LINE);
        if line == HistoryLine::Activations {
            *scopes.entry(lives[l].scope).or_default() += lives[l].bytes;
        }
    }
    let allocated: u64 = bytes.iter().sum();
    let mut activations_by_scope: Vec<ScopeBytes> = scopes
        .into_iter()
        .map(|(s, b)| ScopeBytes {
            scope: s
                .and_then(|s| h.scopes.get(s as usize))
                .cloned()
                .unwrap_or_default(),
            bytes: b,
        })
        .collect();
    activations_by_scope.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.scope.cmp(&b.scope)));
    PeakAttribution {
        phase: h.phases[p].name.clone(),
        step: h.phases[p].step,
        event: event as u64,
        allocated_bytes: allocated,
        reserved_bytes: reserved,
        slack_bytes: reserved.saturating_sub(allocated),
        lines: HistoryLine::ALL
            .iter()
            .map(|&line| LineBytes {
                line,
                bytes: bytes[line.index()],
                blocks: blocks[line.index()],
            })
            .collect(),
        largest: HistoryLine::ALL
            .iter()
            .flat_map(|&line| largest[line.index()].iter().map(move |&l| (line, l)))
            .map(|(line, l)| LargestBlock {
                line,
                bytes: lives[l].bytes,
                site: site_of(h, lives[l].stack),
                scope: lives[l]
                    .scope
                    .and_then(|s| h.scopes.get(s as usize))
                    .cloned()
                    .unwrap_or_default(),
            })
            .collect(),
        activations_by_scope,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(action: HistoryAction, address: u64, size: u64, phase: u32) -> HistoryEvent {
        HistoryEvent {
            action,
            address,
            size,
            phase: Some(phase),
            scope: None,
            stack: None,
        }
    }

    /// A two-step training run in miniature: weights loaded, activations kept by the
    /// forward and freed in the backward, gradients made in the backward, optimizer
    /// state made in step 0's optimizer step, a temporary, and logits.
    fn tiny() -> MemoryHistory {
        use HistoryAction::*;
        let phases = ["model_load", "forward", "backward", "optimizer_step"]
            .iter()
            .map(|n| HistoryPhase {
                name: (*n).into(),
                step: (*n != "model_load").then_some(0),
            })
            .collect();
        MemoryHistory {
            schema: HISTORY_SCHEMA.into(),
            source: "meta".into(),
            torch_version: None,
            device: None,
            vocab: Some(1000),
            phases,
            scopes: vec!["model.layers.0".into()],
            frames: vec![],
            stacks: vec![],
            before: vec![],
            reserved_before_bytes: 0,
            events: vec![
                ev(SegmentAlloc, 0, 20 << 20, 0),
                ev(Alloc, 0, 4096, 0), // weight
                HistoryEvent {
                    scope: Some(0),
                    ..ev(Alloc, 4096, 1024, 1)
                }, // activation
                ev(Alloc, 8192, 600, 1), // temporary (500 B → 1 block of 1024? no: 1024)
                ev(Free, 8192, 600, 1),
                ev(Alloc, 16384, 8000, 1), // logits: 8 rows of the vocabulary
                ev(Alloc, 32768, 4096, 2), // gradient
                ev(Free, 4096, 1024, 2),   // the activation freed in the backward
                ev(Free, 16384, 8000, 2),  // logits freed in the backward
                ev(Alloc, 65536, 8192, 3), // optimizer state
            ],
            dropped_events: 0,
            notes: vec![],
        }
    }

    #[test]
    fn each_block_goes_to_its_line() {
        let h = tiny();
        h.validate().unwrap();
        let a = attribute(&h);
        let fwd = a.peaks.iter().find(|p| p.phase == "forward").unwrap();
        assert_eq!(fwd.bytes(HistoryLine::Weights), 4096);
        assert_eq!(fwd.bytes(HistoryLine::Activations), 1024);
        assert_eq!(fwd.bytes(HistoryLine::Logits), 8192);
        assert_eq!(fwd.allocated_bytes, 4096 + 1024 + 8192);
        assert_eq!(fwd.slack_bytes, (20 << 20) - fwd.allocated_bytes);
        assert_eq!(fwd.activations_by_scope[0].scope, "model.layers.0");
        let opt = a
            .peaks
            .iter()
            .find(|p| p.phase == "optimizer_step")
            .unwrap();
        assert_eq!(opt.bytes(HistoryLine::Gradients), 4096);
        assert_eq!(opt.bytes(HistoryLine::OptimizerState), 8192);
        assert_eq!(opt.bytes(HistoryLine::Activations), 0);
        // The lines add up at every peak.
        for p in &a.peaks {
            assert_eq!(
                p.lines.iter().map(|l| l.bytes).sum::<u64>(),
                p.allocated_bytes
            );
        }
        assert_eq!(a.allocated_peak_bytes, 4096 + 1024 + 8192 + 4096);
        assert_eq!(a.timeline.last().unwrap().allocated(), 4096 + 4096 + 8192);
        assert_eq!(a.bands.len(), 4);
    }

    #[test]
    fn a_block_made_before_the_window_is_a_weight() {
        let mut h = tiny();
        h.before.push(HistoryBlock {
            address: 1 << 40,
            size: 1 << 20,
            stack: None,
        });
        let a = attribute(&h);
        assert_eq!(a.peaks[0].bytes(HistoryLine::Weights), 4096 + (1 << 20));
    }

    #[test]
    fn bad_indexes_and_bounds_are_refused() {
        let mut h = tiny();
        h.events[1].stack = Some(3);
        assert_eq!(h.validate(), Err(HistoryError::BadIndex("stack", 1)));
        let mut h = tiny();
        h.schema = "x".into();
        assert!(h.validate().is_err());
        let mut h = tiny();
        h.scopes.push("x".repeat(MAX_NAME_CHARS + 1));
        assert!(matches!(h.validate(), Err(HistoryError::TooLongText(_))));
    }

    #[test]
    fn sites_skip_torch_and_shorten_paths() {
        let mut h = tiny();
        h.frames = vec![
            HistoryFrame {
                file: "/venv/lib/python3.12/site-packages/torch/nn/functional.py".into(),
                line: 2000,
                name: "linear".into(),
            },
            HistoryFrame {
                file: "/venv/transformers/models/llama/modeling_llama.py".into(),
                line: 140,
                name: "forward".into(),
            },
        ];
        h.stacks = vec![vec![0, 1]];
        assert_eq!(site_of(&h, Some(0)), "llama/modeling_llama.py:140 forward");
        assert_eq!(short_file("x.py"), "x.py");
    }

    #[cfg(feature = "schema")]
    #[test]
    fn published_schema_matches_the_types() {
        crate::assert_published_schema(
            "history.v1.schema.json",
            schemars::schema_for!(MemoryHistory),
            format!(
                "{HISTORY_SCHEMA}: the CUDA caching allocator's history as `gpumem-agent run --memory-history` records it (or as `trace --memory-history` models it on the meta device): every allocation and free with the phase, module scope and Python stack that made it, bounded and interned. Sizes are bytes requested; the allocator's blocks are them rounded up to 512 B."
            ),
        );
    }
}
