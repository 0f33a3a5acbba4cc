//! The agent's documented exit codes.

use std::process::ExitCode;

/// How a command ended; the numeric values are a public contract (README, scripts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: the command did what was asked.
    Ok = 0,
    /// 1: a measurement failed (e.g. out of memory) and the failure was recorded; for
    /// `estimate`, the workload does not fit.
    MeasureFailed = 1,
    /// 2: cannot run here (no CUDA driver, no device), bad usage or bad input.
    Unavailable = 2,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}
