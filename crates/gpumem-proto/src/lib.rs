//! gpumem-proto: serialisable documents shared by the agent and the page — the
//! measurement results file, the agent↔page wire messages, the sheet, the workload
//! results of `gpumem-agent run` and the `estimate --json` document.

pub mod context;
pub mod estimate;
pub mod fleet;
pub mod json;
pub mod lookup;
pub mod results;
pub mod sheet;
pub mod wire;
pub mod workload;
