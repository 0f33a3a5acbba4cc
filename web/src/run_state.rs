//! Where a run or a workload stands (running, finished, …): a leaf both the agent's
//! protocol state ([`crate::agent`]) and the workload records ([`crate::workload`])
//! use, so neither imports the other for it.

/// How a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// Phases are still arriving.
    Running,
    /// `run_finished` arrived with the results document.
    Finished,
    /// `run_failed` arrived: no results document.
    Failed,
    /// The agent went away before the run ended.
    Interrupted,
    /// Read from an imported sheet.
    Imported,
}
