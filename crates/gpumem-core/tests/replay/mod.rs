//! The replay of published fine-tuning peaks shared by `training_calibration.rs` (the
//! corpus of `calibration/training/`) and `training_external.rs` (runs of other
//! frameworks, `calibration/external/`): every record's model (its config.json, read by
//! the same reader as `--config`) and its `gpumem.flags` (the agent's `estimate` flags
//! without their dashes; `--card`, the card the run used, read as the agent reads it)
//! go through `params::from_pairs` and `estimate` with no reserve, and the figure of
//! the counter the source read is compared with the peak it printed:
//! `max_memory_allocated` and PyTorch's peak active bytes with the allocated peak,
//! `max_memory_reserved` — and a figure whose counter the source does not name — with
//! the reserved one, the verdict's. The table (record, method,
//! measured, predicted, error, both peaks and the model loading's) and the median and
//! worst error per method are printed.
//!
//! Bounds: each record's error stays within its `gpumem.max_error_pct`; a record whose
//! run ran out of memory must need more than its card, or fall short of it by no more
//! than `gpumem.max_shortfall_pct`; a record gpumem cannot express is listed with the
//! option it lacks (`gpumem.inexpressible`), never skipped silently.

// The harness prints its per-record table for the reader (the harness captures it).
#![allow(clippy::disallowed_macros, dead_code)]

use gpumem_core::estimate::{EstimateInput, LineKey, estimate};
use gpumem_core::import::config::parse_config;
use serde_json::Value;

const GIB: f64 = (1u64 << 30) as f64;

/// The measured figure in bytes: `gb` (10^9 B), `gib` (2^30 B) or `bytes`.
pub fn measured_bytes(m: &Value) -> Option<f64> {
    if let Some(b) = m["bytes"].as_f64() {
        return Some(b);
    }
    if let Some(g) = m["gib"].as_f64() {
        return Some(g * GIB);
    }
    m["gb"].as_f64().map(|g| g * 1e9)
}

/// Which counter a record's figure read: `max_memory_allocated` and PyTorch's peak
/// active bytes are the allocated figure; `max_memory_reserved`, and a figure whose
/// counter the source does not name, the reserved one (the verdict's).
fn reads_allocated(what: &str) -> bool {
    let w = what.to_ascii_lowercase();
    (w.contains("allocated") || w.contains("active")) && !w.contains("reserved")
}

/// The estimate for a record's config and flags (no reserve): the allocated peak
/// (the lines without the caching allocator's), the reserved one (the total), and
/// the model's loading peak, allocated and reserved.
struct Predicted {
    allocated: u64,
    reserved: u64,
    load: Option<(u64, u64)>,
}

/// A record's input: its config (one of `configs`, by the name the record gives) read
/// as `--config` reads it, then its `gpumem.flags` and no reserve, through
/// `inputs::read` with its `--card` (the ranks corpus replays its records the same way).
pub fn input_of(r: &Value, configs: &[(&str, &str)]) -> EstimateInput {
    let id = r["id"].as_str().unwrap();
    let config = r["config"].as_str().unwrap();
    let text = configs
        .iter()
        .find(|(name, _)| *name == config)
        .unwrap_or_else(|| panic!("{id}: no config {config}"))
        .1;
    let mut pairs: Vec<(&str, String)> = parse_config(text)
        .unwrap_or_else(|e| panic!("{config}: {e}"))
        .pairs();
    let flags: Vec<&str> = r["gpumem"]["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(flags.len().is_multiple_of(2), "{id}: flags come in pairs");
    let mut card: Option<&str> = None;
    for kv in flags.chunks(2) {
        let key = kv[0]
            .strip_prefix("--")
            .unwrap_or_else(|| panic!("{id}: {} is not a flag", kv[0]));
        // `--card` is read as the agent reads it (an engine flag, the card's
        // generation set on the input), the others by the estimate's reader.
        if key == "card" {
            card = Some(kv[1]);
            continue;
        }
        pairs.push((key, kv[1].to_string()));
    }
    pairs.push(("reserve-gib", "0".into()));
    // `--card` is read as the agent reads it: through the one reader, which settles
    // the card's generation on the input.
    let read = gpumem_core::inputs::read(
        pairs.iter().map(|(k, v)| (*k, v.as_str())),
        card.map(|c| ("card", c)),
    );
    assert!(read.errors.is_empty(), "{id}: {:?}", read.errors);
    if let Some(c) = card {
        assert!(
            read.engine_errors.is_empty(),
            "{id}: --card {c}: {:?}",
            read.engine_errors
        );
        assert!(
            read.input.card_sm90().is_some(),
            "{id}: --card {c} of unknown generation"
        );
    }
    read.input
}

fn predict(r: &Value, configs: &[(&str, &str)]) -> Predicted {
    let id = r["id"].as_str().unwrap();
    let input = input_of(r, configs);
    let e = estimate(&input).unwrap_or_else(|e| panic!("{id}: {e}"));
    let of = |k: LineKey| e.lines.iter().find(|l| l.key == k);
    let cache = of(LineKey::AllocatorCache).map_or(0, |l| l.bytes);
    Predicted {
        allocated: e.total_bytes - cache,
        reserved: e.total_bytes,
        load: of(LineKey::ModelLoad).map(|l| {
            (
                l.bytes,
                l.inputs["reserved"]
                    .parse()
                    .expect("the loading's reserved bytes"),
            )
        }),
    }
}

/// Replays every record of `records` (JSON lines) with its config from `configs`,
/// prints the table and the per-method summary, and returns the failed bounds and
/// the errors of the replayed records.
pub fn run(records: &str, configs: &[(&str, &str)]) -> (Vec<String>, Vec<(String, f64)>) {
    let mut failures = Vec::new();
    let mut errors: Vec<(String, f64)> = Vec::new();
    eprintln!(
        "\n{:<50} {:<6} {:>12} {:>12} {:>8}  note",
        "record", "method", "measured GiB", "predict GiB", "err %"
    );
    for line in records.lines().filter(|l| !l.trim().is_empty()) {
        let r: Value = serde_json::from_str(line).unwrap();
        let id = r["id"].as_str().unwrap();
        let method = r["method"].as_str().unwrap();
        let m = &r["measured"];
        let g = &r["gpumem"];
        let missing: Vec<&str> = g["inexpressible"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !missing.is_empty() {
            let names: Vec<&str> = missing
                .iter()
                .map(|f| f.split(':').next().unwrap_or(f))
                .collect();
            eprintln!(
                "{id:<50} {method:<6} {:>12} {:>12} {:>8}  inexpressible: gpumem lacks {}",
                measured_bytes(m).map_or("-".into(), |b| format!("{:.2}", b / GIB)),
                "-",
                "-",
                names.join("; ")
            );
            continue;
        }
        let p = predict(&r, configs);
        let what = m["what"].as_str().unwrap_or("unknown");
        let allocated = reads_allocated(what);
        let pred = if allocated { p.allocated } else { p.reserved };
        if m["oom"].as_bool() == Some(true) {
            // The run did not fit: the need should exceed the card. Where it does not
            // yet, the shortfall may shrink, never grow (`gpumem.max_shortfall_pct`).
            let card = m["card_bytes"].as_u64().unwrap();
            let short = (card as f64 - pred as f64) / card as f64 * 100.0;
            let allowed = g["max_shortfall_pct"].as_f64().unwrap_or(0.0);
            eprintln!(
                "{id:<50} {method:<6} {:>12} {:>12.2} {:>8}  out of memory: {}",
                format!("> {:.1}", card as f64 / GIB),
                pred as f64 / GIB,
                "-",
                if pred > card {
                    "the need exceeds the card".to_string()
                } else {
                    format!("the need is {short:.1} % below the card (allowed {allowed} %)")
                }
            );
            if pred <= card && short > allowed {
                failures.push(format!(
                    "{id}: need {pred} B is {short:.2} % below the {card} B card (allowed {allowed} %)"
                ));
            }
            continue;
        }
        let obs = measured_bytes(m).unwrap_or_else(|| panic!("{id}: no measured figure"));
        let err = (pred as f64 - obs) / obs * 100.0;
        let bound = g["max_error_pct"]
            .as_f64()
            .unwrap_or_else(|| panic!("{id}: no gpumem.max_error_pct"));
        eprintln!(
            "{id:<50} {method:<6} {:>12.2} {:>12.2} {err:>+8.1}  bound ±{bound}; {} ({what}); allocated {:.2}, reserved {:.2}{}",
            obs / GIB,
            pred as f64 / GIB,
            if allocated { "allocated" } else { "reserved" },
            p.allocated as f64 / GIB,
            p.reserved as f64 / GIB,
            p.load.map_or(String::new(), |(a, r)| format!(
                ", loading {:.2} / {:.2}",
                a as f64 / GIB,
                r as f64 / GIB
            ))
        );
        if err.abs() > bound {
            failures.push(format!("{id}: error {err:+.2} % beyond ±{bound} %"));
        }
        errors.push((method.to_string(), err));
    }
    eprintln!();
    for method in ["full", "lora", "qlora"] {
        let mut es: Vec<f64> = errors
            .iter()
            .filter(|(m, _)| m == method)
            .map(|(_, e)| *e)
            .collect();
        es.sort_by(f64::total_cmp);
        if es.is_empty() {
            continue;
        }
        let within = es.iter().filter(|e| e.abs() <= 10.0).count();
        let worst = es
            .iter()
            .copied()
            .fold(0.0f64, |w, e| if e.abs() > w.abs() { e } else { w });
        eprintln!(
            "{method:<6} {within}/{} within 10 %, median {:+.1} %, worst {worst:+.1} %",
            es.len(),
            es[es.len() / 2]
        );
    }
    (failures, errors)
}
