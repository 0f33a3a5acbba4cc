//! gpumem-proto: serialisable documents shared by the agent and the page — the
//! measurement results file, the agent↔page wire messages, the sheet, the workload
//! results of `gpumem-agent run`, the trace of `gpumem-agent trace` and the
//! `estimate --json` document.

pub mod context;
pub mod estimate;
pub mod fleet;
pub mod json;
pub mod lookup;
pub mod probe;
pub mod results;
pub mod sheet;
pub mod trace;
pub mod wire;
pub mod workload;
