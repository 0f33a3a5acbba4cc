//! `gpumem-agent models`: the bundled catalogue as a list — the ids `estimate --model`
//! and `trace --model` answer without a network, each with its parameters (counted
//! from its config.json by the estimator, as `estimate` counts them; the published
//! count beside it in `--json` where a source states one) and its family.

use std::fmt::Write;

use anyhow::Result;
use gpumem_core::estimate::estimate;
use gpumem_core::import::config::parse_config;
use gpumem_core::units::Bytes;
use serde::Serialize;

use crate::exit::Exit;
use crate::hub::bundled::{self, Bundled};

/// Arguments of `models`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "estimate --model ID (and trace --model ID) reads a listed model's bundled \
    config.json, with no request; the weights are then counted from the config. \
    --revision REV reads the Hub instead (config.json and the checkpoint's headers)."
)]
pub struct Args {
    /// Only the ids containing this text (case-insensitive), e.g. qwen3 or llama-3.1.
    #[arg(value_name = "FILTER")]
    filter: Option<String>,
    /// Print JSON (exact parameter counts, the published count, source and day read).
    #[arg(long)]
    json: bool,
}

/// One model in `--json`.
#[derive(Serialize)]
struct Row<'a> {
    id: &'a str,
    model_type: Option<String>,
    parameters: Option<u64>,
    active_parameters: Option<u64>,
    published_parameters: Option<u64>,
    confidence: Option<String>,
    source: &'a str,
    read: &'a str,
}

/// What the estimator reads from a bundled config: its family, parameters, active
/// parameters per token and confidence (`None` where the config cannot be read, which
/// the tests rule out).
fn row(b: &Bundled) -> Row<'_> {
    let mut r = Row {
        id: &b.id,
        model_type: None,
        parameters: None,
        active_parameters: None,
        published_parameters: b.published_parameters,
        confidence: None,
        source: &b.source,
        read: &b.read,
    };
    if let Ok(c) = parse_config(&b.config) {
        let pairs = c.pairs();
        // Read as `estimate --model ID` reads it (no engine flag: none decides anything).
        let (input, errors) =
            crate::estimate::read_input(pairs.iter().map(|(k, v)| (*k, v.as_str())), []);
        if errors.is_empty()
            && let Ok(est) = estimate(&input)
        {
            r.parameters = est.parameters;
            r.active_parameters = est.active_parameters;
        }
        r.model_type = Some(c.model_type.clone());
        r.confidence = Some(c.confidence.to_string());
    }
    r
}

/// The models whose id contains `filter`, in id order.
fn selected(filter: Option<&str>) -> Vec<&'static Bundled> {
    let filter = filter.map(str::to_ascii_lowercase);
    bundled::all()
        .iter()
        .filter(|b| {
            filter
                .as_deref()
                .is_none_or(|f| b.id.to_ascii_lowercase().contains(f))
        })
        .collect()
}

/// "8.03 B"; "-" where unknown.
fn billions(p: Option<u64>) -> String {
    p.map_or_else(
        || "-".to_owned(),
        |p| format!("{} B", Bytes(p).gb_string(2)),
    )
}

/// The list within 100 columns: id, parameters, active parameters per token (a
/// mixture of experts' share), family.
fn render(models: &[&Bundled]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<48} {:>10} {:>10}  model_type",
        "id", "parameters", "active"
    );
    for b in models {
        let r = row(b);
        let active = match (r.active_parameters, r.parameters) {
            (Some(a), Some(p)) if a != p => billions(Some(a)),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "{:<48} {:>10} {:>10}  {}",
            r.id,
            billions(r.parameters),
            active,
            r.model_type.as_deref().unwrap_or("-")
        );
    }
    let _ = write!(
        s,
        "\n{} of {} bundled models; parameters counted from each config.json by the estimator.\n\
         --json adds the published count, the source and the day each config.json was read.\n\
         estimate --model ID reads the bundled config.json with no request; --revision main reads the Hub.\n",
        models.len(),
        bundled::all().len()
    );
    s
}

/// Runs `models`.
pub fn run(args: Args) -> Result<Exit> {
    let models = selected(args.filter.as_deref());
    if args.json {
        let rows: Vec<Row<'_>> = models.iter().map(|b| row(b)).collect();
        crate::out::outln!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        crate::out::out!("{}", render(&models));
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_once_within_100_columns_with_its_parameters() {
        let all = selected(None);
        let text = render(&all);
        for b in bundled::all() {
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with(&format!("{} ", b.id)))
                .collect();
            assert_eq!(lines.len(), 1, "{}", b.id);
            assert!(!lines[0].contains(" - "), "{}: no parameters", lines[0]);
        }
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "{line}");
        }
    }

    #[test]
    fn the_filter_ignores_case() {
        let some = selected(Some("LLAMA-3.1"));
        assert!(!some.is_empty());
        assert!(
            some.iter()
                .all(|b| b.id.to_ascii_lowercase().contains("llama-3.1"))
        );
    }
}
