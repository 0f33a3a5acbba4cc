//! `gpumem-agent environment` (being written).

use crate::exit::Exit;

/// Arguments of `environment`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `environment`.
pub fn run(_args: Args) -> anyhow::Result<Exit> {
    anyhow::bail!("`environment` is not built yet")
}
