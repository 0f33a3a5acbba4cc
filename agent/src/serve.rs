//! `gpumem-agent serve` (being written).

use crate::exit::Exit;

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `serve`.
pub fn run(_args: Args) -> anyhow::Result<Exit> {
    anyhow::bail!("`serve` is not built yet")
}
