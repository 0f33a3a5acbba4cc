//! `gpumem-agent estimate` (being written).

use crate::exit::Exit;

/// Arguments of `estimate`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `estimate`.
pub fn run(_args: Args) -> anyhow::Result<Exit> {
    anyhow::bail!("`estimate` is not built yet")
}
