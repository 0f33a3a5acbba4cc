//! `gpumem-agent completions` and `gpumem-agent man`: shell completions and man pages
//! generated from the clap definitions themselves, so the long flag lists (estimate
//! alone has dozens) are discoverable from the shell and stay true as flags change.

use std::path::PathBuf;

use anyhow::Context;
use clap::CommandFactory;

use crate::exit::Exit;

/// Arguments of `gpumem-agent completions`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Install, e.g.:\n  \
    bash: gpumem-agent completions bash > ~/.local/share/bash-completion/completions/gpumem-agent\n  \
    zsh:  gpumem-agent completions zsh > \"${fpath[1]}/_gpumem-agent\"\n  \
    fish: gpumem-agent completions fish > ~/.config/fish/completions/gpumem-agent.fish")]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Arguments of `gpumem-agent man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write one page per command (gpumem-agent.1, gpumem-agent-estimate.1, …) into
    /// this directory (created if missing) instead of printing the top page to stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Prints the completion script for `args.shell` to stdout.
pub fn completions(args: CompletionsArgs) -> anyhow::Result<Exit> {
    let mut cmd = crate::Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "gpumem-agent", &mut script);
    crate::out::out!("{}", String::from_utf8_lossy(&script));
    Ok(Exit::Ok)
}

/// Prints the top man page (roff) to stdout, or writes every page into `args.dir`.
pub fn man(args: ManArgs) -> anyhow::Result<Exit> {
    let cmd = crate::Cli::command();
    if let Some(dir) = args.dir {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        clap_mangen::generate_to(cmd, &dir)
            .with_context(|| format!("writing man pages into {}", dir.display()))?;
        crate::out::outln!("gpumem-agent man: pages written into {}", dir.display());
        return Ok(Exit::Ok);
    }
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut page)
        .context("rendering the man page")?;
    crate::out::out!("{}", String::from_utf8_lossy(&page));
    Ok(Exit::Ok)
}
