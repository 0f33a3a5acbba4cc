//! `gpumem-agent bisect` (being written).

use crate::exit::Exit;

/// Arguments of `bisect`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `bisect`.
pub fn run(_args: Args) -> anyhow::Result<Exit> {
    anyhow::bail!("`bisect` is not built yet")
}
