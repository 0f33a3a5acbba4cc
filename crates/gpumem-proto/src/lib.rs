//! gpumem-proto: serialisable documents shared by the agent and the page — the
//! measurement results file, the agent↔page wire messages, the sheet and the workload
//! results of `gpumem-agent run` and the trace of `gpumem-agent trace`.

pub mod context;
pub mod fleet;
pub mod json;
pub mod lookup;
pub mod probe;
pub mod results;
pub mod sheet;
pub mod trace;
pub mod wire;
pub mod workload;
