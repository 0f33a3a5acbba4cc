//! `gpumem-agent estimate`: the estimator on the command line.
//!
//! Every estimator flag is generated from [`gpumem_core::params::KEYS`], so the
//! flags are exactly the page's URL keys with two dashes in front, and values are
//! validated by the same parser the page uses. Model files are read here (the core
//! does no I/O) and only their headers: a safetensors header or a GGUF header is
//! enough, the weights are never read.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Arg, ArgAction, ArgMatches, Command, FromArgMatches};
use gpumem_core::EstimateError;
use gpumem_core::estimate::{Estimate, Kind, estimate};
use gpumem_core::fit::{CardFit, fit_table};
use gpumem_core::import::{TensorSummary, gguf, hf_config, safetensors};
use gpumem_core::params::{self, KEYS, describe};
use gpumem_core::units::{Bytes, group_digits};
use serde::Serialize;

use crate::exit::Exit;

/// Largest GGUF header read (the metadata of big vocabularies is tens of MB).
const MAX_GGUF_HEADER: u64 = 1 << 30;

/// Arguments of `estimate`: the shared keys as flags, plus files and output mode.
#[derive(Debug, Default)]
pub struct Args {
    /// `key=value` pairs from the flags, in command-line order.
    pairs: Vec<(String, String)>,
    /// Print JSON instead of a table.
    json: bool,
    /// A Hugging Face config.json.
    config: Option<PathBuf>,
    /// safetensors files (shards).
    safetensors: Vec<PathBuf>,
    /// A GGUF file.
    gguf: Option<PathBuf>,
}

impl clap::Args for Args {
    fn augment_args(cmd: Command) -> Command {
        let mut cmd = cmd
            .arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("Print JSON (weights_bytes, kv_cache_bytes, reserve_bytes, total_bytes, lines, fit)"))
            .arg(Arg::new("config").long("config").value_name("CONFIG_JSON").value_parser(clap::value_parser!(PathBuf)).help("Read the architecture from a Hugging Face config.json (flags override it)"))
            .arg(
                Arg::new("safetensors")
                    .long("safetensors")
                    .value_name("PATH")
                    .action(ArgAction::Append)
                    .value_parser(clap::value_parser!(PathBuf))
                    .help("Count every tensor of a .safetensors file from its header (repeat for shards)"),
            )
            .arg(Arg::new("gguf").long("gguf").value_name("PATH").value_parser(clap::value_parser!(PathBuf)).help("Count every tensor of a GGUF file from its header"));
        for key in KEYS {
            cmd = cmd.arg(
                Arg::new(*key)
                    .long(*key)
                    .value_name("VALUE")
                    .allow_hyphen_values(true)
                    .help(describe(key)),
            );
        }
        cmd
    }
    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for Args {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut pairs: Vec<(usize, String, String)> = Vec::new();
        for key in KEYS {
            if let (Some(values), Some(indices)) = (m.get_many::<String>(key), m.indices_of(key)) {
                for (v, i) in values.zip(indices) {
                    pairs.push((i, (*key).to_string(), v.clone()));
                }
            }
        }
        pairs.sort_by_key(|(i, _, _)| *i);
        Ok(Args {
            pairs: pairs.into_iter().map(|(_, k, v)| (k, v)).collect(),
            json: m.get_flag("json"),
            config: m.get_one::<PathBuf>("config").cloned(),
            safetensors: m
                .get_many::<PathBuf>("safetensors")
                .map(|v| v.cloned().collect())
                .unwrap_or_default(),
            gguf: m.get_one::<PathBuf>("gguf").cloned(),
        })
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

/// What `--json` prints.
#[derive(Serialize)]
struct JsonOutput<'a> {
    schema: &'static str,
    input: std::collections::BTreeMap<&'static str, String>,
    #[serde(flatten)]
    estimate: &'a Estimate,
    fit: Vec<CardFit>,
}

/// Runs `estimate`.
pub fn run(args: Args) -> Result<Exit> {
    // Step 1: gather every input (files are read, headers only), then validate once.
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut imported: Option<hf_config::ImportedConfig> = None;
    if let Some(path) = &args.config {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let c = hf_config::parse_config(&text)
            .with_context(|| format!("reading {}", path.display()))?;
        pairs.extend(c.pairs().into_iter().map(|(k, v)| (k.to_string(), v)));
        imported = Some(c);
    }
    pairs.extend(args.pairs.iter().cloned());
    let (mut input, errors) =
        params::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if !errors.is_empty() {
        for e in &errors {
            crate::out::errln!("gpumem-agent: invalid input: --{e}");
        }
        return Ok(Exit::Unavailable);
    }
    let mut summary: Option<TensorSummary> = None;
    for path in &args.safetensors {
        let s = read_safetensors(path)?;
        match &mut summary {
            Some(acc) => acc.merge(&s).context("merging safetensors shards")?,
            None => summary = Some(s),
        }
    }
    if let Some(path) = &args.gguf {
        if summary.is_some() {
            anyhow::bail!("give either --safetensors or --gguf, not both");
        }
        summary = Some(read_gguf(path)?.tensors);
    }
    input.tensors = summary;
    // Step 2: compute.
    let mut est = match estimate(&input) {
        Ok(e) => e,
        Err(e) => {
            crate::out::errln!("gpumem-agent: invalid input: {}", flagify(&e));
            return Ok(Exit::Unavailable);
        }
    };
    // What the config reader assumed and could not model belongs with the figures.
    if let Some(c) = &imported {
        est.assumptions
            .extend(c.notes.iter().map(|n| format!("config.json: {n}")));
        est.warnings
            .extend(c.warnings.iter().map(|w| format!("config.json: {w}")));
    }
    let fit = fit_table(&est);
    if args.json {
        let out = JsonOutput {
            schema: "gpumem.estimate/v1",
            input: params::to_pairs(&input).into_iter().collect(),
            estimate: &est,
            fit,
        };
        emit(&(serde_json::to_string_pretty(&out)? + "\n"))?;
    } else {
        emit(&render_table(&est, &fit, input.gpus > 1))?;
    }
    Ok(Exit::Ok)
}

/// Writes to stdout; a closed pipe (`… | head`) ends the output quietly instead of
/// panicking as `print!` would.
fn emit(text: &str) -> Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout"),
    }
}

/// `field: reason` → `--field: reason` so the message names the flag to fix.
fn flagify(e: &EstimateError) -> String {
    match e {
        EstimateError::Invalid { field, .. } if KEYS.contains(field) => format!("--{e}"),
        _ => e.to_string(),
    }
}

fn read_prefix(path: &Path, len: u64) -> Result<Vec<u8>> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut buf = Vec::new();
    file.take(len)
        .read_to_end(&mut buf)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(buf)
}

/// Reads only the safetensors header: 8 bytes, then the JSON they announce.
pub fn read_safetensors(path: &Path) -> Result<TensorSummary> {
    let head = read_prefix(path, 8)?;
    let n =
        safetensors::header_len(&head).with_context(|| format!("reading {}", path.display()))?;
    let bytes = read_prefix(path, 8 + n)?;
    safetensors::parse_header(&bytes).with_context(|| format!("reading {}", path.display()))
}

/// Reads a GGUF header, fetching more of the file only while the parser asks for it.
pub fn read_gguf(path: &Path) -> Result<gguf::GgufHeader> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    let mut want: u64 = 1 << 20;
    loop {
        let bytes = read_prefix(path, want.min(size))?;
        match gguf::parse_header(&bytes) {
            Err(EstimateError::Truncated { needed, .. })
                if (bytes.len() as u64) < size && want < MAX_GGUF_HEADER =>
            {
                want = needed.max(want.saturating_mul(4)).min(MAX_GGUF_HEADER);
            }
            other => return other.with_context(|| format!("reading {}", path.display())),
        }
    }
}

/// The human table: every line with bytes, GB and GiB, then the per-card fit.
pub fn render_table(est: &Estimate, fit: &[CardFit], per_device: bool) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let row = |s: &mut String, label: &str, kind: &str, b: u64| {
        let _ = writeln!(
            s,
            "{label:<58} {kind:<9} {:>22} {:>10} {:>10}",
            group_digits(b),
            Bytes(b).gb_string(2),
            Bytes(b).gib_string(2)
        );
    };
    let _ = writeln!(
        s,
        "{:<58} {:<9} {:>22} {:>10} {:>10}",
        "line", "kind", "bytes", "GB", "GiB"
    );
    for l in &est.lines {
        let kind = match l.kind {
            Kind::Computed => "computed",
            Kind::Assumed => "assumed",
        };
        let label = if l.in_total {
            l.label.to_string()
        } else {
            format!("({})", l.label)
        };
        row(&mut s, &label, kind, l.bytes);
    }
    row(&mut s, "Total", "", est.total_bytes);
    if per_device {
        row(
            &mut s,
            "Per device (most loaded, reserve included)",
            "",
            est.per_device_bytes,
        );
    }
    if let Some(p) = est.parameters {
        let _ = writeln!(s, "\nparameters: {}", group_digits(p));
        if let Some(a) = est.active_parameters.filter(|a| *a != p) {
            let _ = writeln!(s, "active parameters per token: {}", group_digits(a));
        }
    }
    for a in &est.assumptions {
        let _ = writeln!(s, "assumed: {a}");
    }
    for w in &est.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    let _ = writeln!(
        s,
        "\nfit per device ({} B each):",
        group_digits(est.per_device_bytes)
    );
    for f in fit {
        let _ = writeln!(
            s,
            "  {:<4} {:<28} {:>22} B ({:<8}) headroom {:>23} B  {:>8} GiB",
            if f.fits { "fits" } else { "NO" },
            f.name,
            group_digits(f.capacity_bytes),
            f.capacity_kind,
            signed(f.headroom_bytes),
            signed_gib(f.headroom_bytes)
        );
    }
    s
}

fn signed(v: i64) -> String {
    if v < 0 {
        format!("-{}", group_digits(v.unsigned_abs()))
    } else {
        group_digits(v.unsigned_abs())
    }
}

fn signed_gib(v: i64) -> String {
    let g = Bytes(v.unsigned_abs()).gib_string(2);
    if v < 0 { format!("-{g}") } else { g }
}
