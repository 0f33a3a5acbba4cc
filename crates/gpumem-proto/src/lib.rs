//! gpumem-proto: serialisable documents shared by the agent and the page — the
//! measurement results file, the agent↔page wire messages and the sheet.

pub mod results;
pub mod sheet;
pub mod wire;
