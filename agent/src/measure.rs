//! `gpumem-agent measure` (being written).

use crate::exit::Exit;

/// Arguments of `measure`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `measure`.
pub fn run(_args: Args) -> anyhow::Result<Exit> {
    anyhow::bail!("`measure` is not built yet")
}
