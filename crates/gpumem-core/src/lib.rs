//! gpumem-core: the pure estimator behind the page and the agent.
//!
//! Facts come in as arguments; nothing here touches files, the environment, clocks,
//! sockets or a GPU (enforced by `clippy.toml` and by building for `wasm32`). The same
//! code runs natively in `gpumem-agent` and as WebAssembly in the page, so both print
//! identical numbers for the same input.

pub mod catalogue;
pub mod error;
pub mod network;
pub mod units;

pub use error::EstimateError;
pub use units::Bytes;
