//! `gpumem-agent`: the estimator on the command line, GPU measurements phase by phase,
//! and the local server that pairs with the page.
//!
//! Exit codes (see [`exit::Exit`]): 0 ok; 1 a measurement failed but its result was
//! recorded; 2 cannot measure here, or bad usage.

mod answer;
mod bisect;
mod cards;
mod count;
mod device;
mod diffusion_cli;
mod engine_cli;
mod environment;
mod estimate;
mod exit;
mod export;
mod flags;
mod gpu;
mod hub;
mod manual;
mod measure;
mod merge;
mod models;
mod out;
mod private;
mod process;
mod run;
mod sched;
mod serve;
mod trace;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// `--version`: the workspace version and the commit built from (agent/build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("GPUMEM_GIT_COMMIT"),
    ")"
);

/// Will this workload fit in GPU memory, and why did the measured peak exceed the estimate?
#[derive(Debug, Parser)]
#[command(name = "gpumem-agent", version = VERSION, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compute weights, KV cache, training state and reserve (no GPU needed).
    #[command(after_help = estimate::EXAMPLES)]
    Estimate(Box<estimate::Args>),
    /// List the catalogue's cards: id, capacity, bandwidth, bf16/fp8 support, name.
    Cards(cards::Args),
    /// List the bundled models: the ids `estimate --model` reads with no network, with
    /// their parameters.
    Models(models::Args),
    /// Report the GPU environment: devices, memory, driver, allocator.
    Environment(environment::Args),
    /// Measure the dense test network phase by phase on a GPU.
    Measure(measure::Args),
    /// Find the boundary between passing and failing for one dimension.
    Bisect(bisect::Args),
    /// Serve the page and pair it with this agent over a local WebSocket.
    Serve(serve::Args),
    /// Run your own command and measure it phase by phase against the estimate.
    Run(run::Args),
    /// Print a saved results or workload file as Prometheus metrics (text format).
    Export(export::Args),
    /// Gather the results and workload files of a fleet into one fleet sheet.
    Merge(merge::Args),
    /// Trace a training step or a generation without a GPU: the model's own code on
    /// PyTorch's meta device, memory phase by phase and by category.
    Trace(Box<trace::Args>),
    /// Print shell completions (bash, zsh, fish) generated from these definitions.
    Completions(manual::CompletionsArgs),
    /// Print the man page (roff), or write one page per command with --dir.
    Man(manual::ManArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Estimate(args) => estimate::run(*args),
        Command::Cards(args) => cards::run(args),
        Command::Models(args) => models::run(args),
        Command::Environment(args) => environment::run(args),
        Command::Measure(args) => measure::run(args),
        Command::Bisect(args) => bisect::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Run(args) => run::run(args),
        Command::Export(args) => export::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Trace(args) => trace::run(*args),
        Command::Completions(args) => manual::completions(args),
        Command::Man(args) => manual::man(args),
    };
    match outcome {
        Ok(exit) => exit.into(),
        Err(err) => {
            crate::out::errln!("gpumem-agent: error: {err:#}");
            exit::Exit::Unavailable.into()
        }
    }
}
