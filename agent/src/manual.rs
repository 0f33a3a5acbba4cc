//! `gpumem-agent completions` and `gpumem-agent man`: shell completions and man pages
//! generated from the clap definitions themselves, so the long flag lists (estimate
//! alone has dozens) are discoverable from the shell and stay true as flags change.
//!
//! A man page is clap_mangen's sections (name, synopsis, description, options,
//! subcommands) plus three of our own that clap does not know: EXAMPLES (per command,
//! from [`examples`]), EXIT STATUS (the [`Exit`] contract) and SEE ALSO. The wheel
//! installs every page under `share/man/man1` (`scripts/build-man.sh` writes them for
//! maturin).

use std::io::Write;
use std::path::{Path, PathBuf};

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
    let cmd = built();
    if let Some(dir) = args.dir {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        write_pages(&cmd, &dir)?;
        crate::out::outln!("gpumem-agent man: pages written into {}", dir.display());
        return Ok(Exit::Ok);
    }
    let mut page = Vec::new();
    render(&cmd, &mut page).context("rendering the man page")?;
    crate::out::out!("{}", String::from_utf8_lossy(&page));
    Ok(Exit::Ok)
}

/// The command tree as the pages describe it: built, so each subcommand's display name
/// is `gpumem-agent-<name>` (the page's name), without clap's `help` subcommand, and
/// with the bare package version (the commit `--version` adds would make the committed
/// pages stale at every commit).
fn built() -> clap::Command {
    let mut cmd = crate::Cli::command()
        .version(env!("CARGO_PKG_VERSION"))
        .disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// Writes every page ([`pages`]) into `dir`.
fn write_pages(cmd: &clap::Command, dir: &Path) -> anyhow::Result<()> {
    for (file, page) in pages(cmd)? {
        let path = dir.join(file);
        std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The page of `cmd` and of each visible subcommand, as (file name, roff).
fn pages(cmd: &clap::Command) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        out.extend(pages(sub)?);
    }
    let file = format!("{}.1", page_name(cmd));
    let mut page = Vec::new();
    render(cmd, &mut page).with_context(|| format!("rendering {file}"))?;
    out.push((file, page));
    Ok(out)
}

/// `gpumem-agent` or `gpumem-agent-<subcommand>`.
fn page_name(cmd: &clap::Command) -> String {
    cmd.get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_owned()
}

/// One page: clap_mangen's page (name, synopsis, description, options, subcommands,
/// version) with EXAMPLES, EXIT STATUS and SEE ALSO inserted before its VERSION.
fn render(cmd: &clap::Command, w: &mut dyn Write) -> std::io::Result<()> {
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .source(concat!("gpumem-agent ", env!("CARGO_PKG_VERSION")))
        .manual("gpumem")
        .render(&mut page)?;
    let page = String::from_utf8_lossy(&page);
    let at = page.find("\n.SH VERSION").map_or(page.len(), |i| i + 1);
    w.write_all(page[..at].as_bytes())?;
    let name = page_name(cmd);
    let sub = name.strip_prefix("gpumem-agent-").unwrap_or("");
    let examples = examples(sub);
    if !examples.is_empty() {
        writeln!(w, ".SH EXAMPLES")?;
        for (what, line) in examples {
            writeln!(
                w,
                ".PP\n{}\n.PP\n.RS 4\n.EX\n{}\n.EE\n.RE",
                roff_text(what),
                roff_text(line)
            )?;
        }
    }
    writeln!(w, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in exit_status(sub) {
        writeln!(w, ".TP\n.B {code}\n{}", roff_text(meaning))?;
    }
    writeln!(w, ".SH \"SEE ALSO\"")?;
    let mut see: Vec<String> = built()
        .get_subcommands()
        .map(|s| format!("gpumem-agent-{}", s.get_name()))
        .chain(std::iter::once("gpumem-agent".to_owned()))
        .filter(|p| *p != name)
        .map(|p| format!("\\fB{}\\fR(1)", roff_text(&p)))
        .collect();
    see.sort();
    writeln!(
        w,
        "{}\n.PP\nThe guides and the method: the docs/ folder of the source repository.",
        see.join(", ")
    )?;
    w.write_all(page[at..].as_bytes())
}

/// The examples of one command's page (`""`: the top page), as (what, command line).
fn examples(sub: &str) -> &'static [(&'static str, &'static str)] {
    match sub {
        "" => &[
            (
                "Will Llama-3.1-8B fit with 4 sequences of 8 192 tokens, on an L40S?",
                "gpumem-agent estimate --model meta-llama/Llama-3.1-8B --context 8192 --sequences 4 --card l40s-48gb",
            ),
            (
                "Serve the page and pair it with this agent:",
                "gpumem-agent serve",
            ),
            (
                "Measure your own training script phase by phase:",
                "gpumem-agent run --output train.workload.json -- python train.py",
            ),
        ],
        "estimate" => &[
            (
                "Weights of 7 billion parameters at 16 bits, with a 4 GiB reserve:",
                "gpumem-agent estimate --parameters 7000000000 --bits 16 --reserve-gib 4",
            ),
            (
                "A bundled model (its config.json is in the agent: no network) at 16 000 tokens:",
                "gpumem-agent estimate --model meta-llama/Llama-3.1-8B --context 16000",
            ),
            (
                "The same from the Hugging Face Hub (config.json and the weights' headers, nothing downloaded):",
                "gpumem-agent estimate --model meta-llama/Llama-3.1-8B --revision main --context 16000",
            ),
            (
                "A local config.json quantised to GPTQ 4-bit, 4 sequences of 8 192 tokens, as JSON:",
                "gpumem-agent estimate --config config.json --format gptq-4-g128 --context 8192 --sequences 4 --json",
            ),
            (
                "Exact bytes from a GGUF file's header:",
                "gpumem-agent estimate --gguf model.Q4_K_M.gguf",
            ),
            (
                "The KV cache alone: 32 layers, 8 KV heads of 128, 8 192 tokens in bf16 (1 GiB):",
                "gpumem-agent estimate --layers 32 --kv-heads 8 --head-dim 128 --context 8192 --kv-dtype bf16",
            ),
            (
                "The KV-cache pool vLLM leaves on an H100 and how many sequences it serves:",
                "gpumem-agent estimate --model meta-llama/Llama-3.1-8B --engine vllm --card h100-sxm-80gb --max-model-len 16000",
            ),
            (
                "LoRA fine-tuning at rank 16 on every projection:",
                "gpumem-agent estimate --model meta-llama/Llama-3.1-8B --train lora --lora-rank 16 --lora-targets all --context 2048",
            ),
        ],
        "cards" => &[
            (
                "Every catalogue card with its id, capacity and support:",
                "gpumem-agent cards",
            ),
            (
                "The same with capacities in bytes and their sources:",
                "gpumem-agent cards --json",
            ),
        ],
        "models" => &[
            (
                "Every bundled model: the ids estimate --model reads with no network:",
                "gpumem-agent models",
            ),
            (
                "The Qwen3 models, with their published parameter counts and sources:",
                "gpumem-agent models qwen3 --json",
            ),
        ],
        "environment" => &[(
            "Every device, as JSON:",
            "gpumem-agent environment --device all --json",
        )],
        "measure" => &[(
            "The test network, 3 warm-up passes and 5 kept repeats, into a new file:",
            "gpumem-agent measure --device cuda:0 --batch 2 --context 128 --width 1024 --dtype float32 --warmup 3 --repeats 5 --output mesures.json",
        )],
        "bisect" => &[(
            "The largest batch that passes, each trial in a fresh process:",
            "gpumem-agent bisect --vary batch --from 1 --to 4096 --context 128 --width 1024 --output-dir trials/",
        )],
        "serve" => &[
            (
                "Serve the pages on a free loopback port and open the pairing link:",
                "gpumem-agent serve",
            ),
            (
                "Replay a saved results file (labelled replay everywhere):",
                "gpumem-agent serve --replay mesures.json",
            ),
            (
                "Allow a copy of the page hosted elsewhere to pair:",
                "gpumem-agent serve --allow-origin https://gpumem.example",
            ),
        ],
        "run" => &[
            (
                "Three instrumented training steps, then the computed-vs-observed table:",
                "gpumem-agent run --output train.workload.json -- python train.py --batch 8",
            ),
            (
                "Two ranks, watched live in the page:",
                "gpumem-agent run --serve -- torchrun --nproc-per-node 2 train.py",
            ),
        ],
        "trace" => &[
            (
                "One full training step of a model's own code on PyTorch's meta device (no GPU, no weights):",
                "gpumem-agent trace --config config.json --train full --sequences 4 --context 2048",
            ),
            (
                "A prefill of 4 096 tokens of a bundled model (its config.json is in the agent: no network):",
                "gpumem-agent trace --model Qwen/Qwen3-0.6B --context 4096",
            ),
        ],
        "export" => &[
            (
                "A saved run as Prometheus metrics for node_exporter's textfile collector:",
                "gpumem-agent export train.workload.json --output /var/lib/node_exporter/textfile/gpumem.prom",
            ),
            (
                "The same text on stdout:",
                "gpumem-agent export mesures.json",
            ),
        ],
        "merge" => &[(
            "One fleet sheet from every results and workload file below a folder:",
            "gpumem-agent merge /shared/gpumem --output fleet.json",
        )],
        "completions" => &[(
            "Bash completions for the current user:",
            "gpumem-agent completions bash > ~/.local/share/bash-completion/completions/gpumem-agent",
        )],
        "man" => &[(
            "Every page into a folder that man searches:",
            "gpumem-agent man --dir ~/.local/share/man/man1",
        )],
        _ => &[],
    }
}

/// The exit statuses a command can end with (the [`Exit`] contract, worded for it).
fn exit_status(sub: &str) -> Vec<(u8, &'static str)> {
    let ok = (Exit::Ok as u8, "Done.");
    let failed = (
        Exit::MeasureFailed as u8,
        "A measurement failed (for example out of memory) and the failure was recorded in the output.",
    );
    let unavailable = (
        Exit::Unavailable as u8,
        "Cannot run here (no CUDA driver, no device), bad usage or bad input; nothing was written.",
    );
    match sub {
        "measure" | "bisect" | "run" | "" => vec![ok, failed, unavailable],
        "estimate" => vec![
            (
                Exit::Ok as u8,
                "The workload fits, or is borderline (running it decides).",
            ),
            (
                Exit::MeasureFailed as u8,
                "The workload does not fit (the answer says what does).",
            ),
            (
                Exit::Unavailable as u8,
                "Bad usage or bad input (an unreadable file, an unknown model, a refused value), with a message saying which; no answer.",
            ),
        ],
        _ => vec![
            ok,
            (
                Exit::Unavailable as u8,
                "Bad usage or bad input (an unreadable file, an unknown model, a refused value), with a message saying which.",
            ),
        ],
    }
}

/// Text made safe for roff: backslashes and hyphens escaped, and a leading `.` or `'`
/// kept from being read as a request.
fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with('.') || escaped.starts_with('\'') {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::{built, examples, page_name, pages, render, roff_text};

    fn page(sub: Option<&str>) -> String {
        let cmd = built();
        let cmd = match sub {
            Some(s) => cmd.find_subcommand(s).expect("subcommand").clone(),
            None => cmd,
        };
        let mut out = Vec::new();
        render(&cmd, &mut out).expect("render");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn every_page_has_examples_and_exit_status() {
        let cmd = built();
        let subs: Vec<String> = cmd
            .get_subcommands()
            .map(|s| s.get_name().to_owned())
            .collect();
        assert!(subs.len() >= 8, "{subs:?}");
        for sub in subs.iter().map(|s| Some(s.as_str())).chain([None]) {
            let text = page(sub);
            let name = sub.unwrap_or("(top)");
            assert!(text.contains("\n.TH "), "{name}: no title");
            assert!(text.contains(".SH EXAMPLES\n"), "{name}: no EXAMPLES");
            assert!(
                text.contains(".SH \"EXIT STATUS\"\n.TP\n.B 0\n"),
                "{name}: no EXIT STATUS"
            );
            assert!(text.contains(".SH \"SEE ALSO\""), "{name}: no SEE ALSO");
            assert!(
                !examples(sub.unwrap_or("")).is_empty(),
                "{name}: no examples"
            );
        }
    }

    #[test]
    fn the_measuring_pages_document_the_recorded_failure() {
        assert!(page(Some("measure")).contains(".B 1\n"));
        assert!(page(Some("run")).contains(".B 1\n"));
        // estimate's 1 is its own: the workload does not fit.
        let estimate = page(Some("estimate"));
        assert!(
            estimate.contains(".B 1\nThe workload does not fit"),
            "{estimate}"
        );
        assert!(!page(Some("cards")).contains(".B 1\n"));
    }

    #[test]
    fn examples_are_valid_command_lines_of_their_page() {
        // Every example parses with the real CLI (shell redirections cut off), so a
        // renamed flag cannot leave a stale example behind.
        let cmd = built();
        for sub in cmd
            .get_subcommands()
            .map(|s| s.get_name().to_owned())
            .chain([String::new()])
        {
            for (_, line) in examples(&sub) {
                let words: Vec<&str> = line
                    .split(" > ")
                    .next()
                    .unwrap_or("")
                    .split_whitespace()
                    .collect();
                assert_eq!(words[0], "gpumem-agent", "{line}");
                if !sub.is_empty() {
                    assert_eq!(words[1], sub, "{line}");
                }
                crate::Cli::command()
                    .try_get_matches_from(&words)
                    .unwrap_or_else(|e| panic!("{line}: {e}"));
            }
        }
    }

    #[test]
    fn subcommand_pages_are_named_after_the_command() {
        let cmd = built();
        let est = cmd.find_subcommand("estimate").expect("estimate");
        assert_eq!(page_name(est), "gpumem-agent-estimate");
        assert_eq!(page_name(&cmd), "gpumem-agent");
    }

    #[test]
    fn roff_escapes() {
        assert_eq!(roff_text("--card a\\b"), "\\-\\-card a\\eb");
        assert_eq!(roff_text(".hidden"), "\\&.hidden");
    }

    /// The pages the wheel installs (`share/man/man1`, pyproject.toml's maturin `data`)
    /// are committed; this fails when they differ from what the CLI renders today.
    /// Regenerate with `GPUMEM_BLESS=1 cargo test -p gpumem-agent --bin gpumem-agent manual`.
    #[test]
    fn committed_pages_are_current() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("wheel-data/data/share/man/man1");
        let wanted = pages(&built()).expect("pages");
        if std::env::var_os("GPUMEM_BLESS").is_some() {
            if dir.exists() {
                std::fs::remove_dir_all(&dir).expect("clear the pages");
            }
            std::fs::create_dir_all(&dir).expect("create the folder");
            for (file, page) in &wanted {
                std::fs::write(dir.join(file), page).expect("write a page");
            }
        }
        let mut committed: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        committed.sort();
        let mut names: Vec<String> = wanted.iter().map(|(f, _)| f.clone()).collect();
        names.sort();
        let hint = "regenerate with `GPUMEM_BLESS=1 cargo test -p gpumem-agent --bin gpumem-agent manual` and commit them";
        assert_eq!(
            committed,
            names,
            "{}: the pages differ from the commands; {hint}",
            dir.display()
        );
        for (file, page) in &wanted {
            let on_disk = std::fs::read(dir.join(file)).expect("read a page");
            assert!(on_disk == *page, "{file} is stale; {hint}");
        }
    }
}
