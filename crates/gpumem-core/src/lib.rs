//! gpumem-core: the pure estimator behind the page and the agent.
//!
//! Facts come in as arguments; nothing here touches files, the environment, clocks,
//! sockets or a GPU (enforced by `clippy.toml` and by building for `wasm32`). The same
//! code runs natively in `gpumem-agent` and as WebAssembly in the page, so both print
//! identical numbers for the same input.
//!
//! Front door: [`estimate::estimate`] turns an [`estimate::EstimateInput`] — usually
//! built from `key=value` pairs by [`params::from_pairs`], the vocabulary the CLI
//! flags and the page's URL share — into an [`estimate::Estimate`]: headline bytes
//! and [`estimate::Line`]s, each computed or assumed, with its formula's inputs.

pub mod allocator;
pub mod arch;
pub mod catalogue;
pub mod diffusion;
pub mod engine;
pub mod error;
pub mod estimate;
pub mod field;
pub mod fields;
pub mod fit;
pub mod format;
pub mod headline;
pub mod import;
pub mod inputs;
pub mod kv;
pub mod max_memory;
pub mod network;
pub mod params;
pub mod placement;
pub mod presets;
pub mod summary;
pub mod training;
pub mod units;

pub use error::EstimateError;
pub use units::Bytes;
