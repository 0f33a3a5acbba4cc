//! `gpumem-agent cards`: the catalogue as a list — what `--card` accepts, with each
//! card's capacity (the figure the verdict compares against, and whether the device
//! reported it or it is the label), bandwidth and the formats it computes in; with
//! `--json`, every fact of the card's row and the source of each, the engines' facts
//! (torch's total, the SM count, the interconnect) included.

use std::fmt::Write;

use anyhow::Result;
use gpumem_core::catalogue::{CATALOGUE, GpuCard, sources};
use gpumem_core::units::{Bytes, group_digits};
use serde::Serialize;

use crate::exit::Exit;

/// Arguments of `cards`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "--card takes an id, a short form (4090, rtx4090, t4, a100-40, l40s, \
    h100-sxm, mi300x) or a capacity (24GiB, 22.5GB); a card followed by @ and the total \
    torch reports on your machine (rtx-3090@23.58GiB) keeps the card's facts; a short \
    form that names several cards is refused with their ids."
)]
pub struct Args {
    /// Print JSON (capacities in bytes, sources included).
    #[arg(long)]
    json: bool,
}

/// One card in `--json`.
#[derive(Serialize)]
struct Row {
    id: &'static str,
    name: &'static str,
    capacity_bytes: u64,
    capacity_kind: &'static str,
    label: &'static str,
    label_bytes: u64,
    reported_bytes: Option<u64>,
    bandwidth_gb_per_s: u32,
    arch: &'static str,
    bf16: bool,
    fp8: bool,
    label_source: &'static str,
    reported_source: Option<&'static str>,
    /// The total torch reports, bytes, when a public readout is known.
    torch_bytes: Option<u64>,
    torch_source: Option<&'static str>,
    /// Streaming multiprocessors (compute units on AMD), when known.
    sms: Option<u16>,
    sms_source: Option<&'static str>,
    /// How the card reaches its peers at tp > 1 (NVLink/NVSwitch, PCIe only, either,
    /// unknown), which the serving engines' communicators follow.
    links: &'static str,
    links_source: &'static str,
}

fn row(c: &GpuCard) -> Row {
    let (capacity_bytes, kind) = c.capacity();
    let src = sources(c.id);
    let facts = c.engine_facts();
    Row {
        id: c.id,
        name: c.name,
        capacity_bytes,
        capacity_kind: kind.as_str(),
        label: c.label,
        label_bytes: c.label_bytes,
        reported_bytes: c.reported_bytes,
        bandwidth_gb_per_s: c.bandwidth_gb_s,
        arch: c.arch.name(),
        bf16: c.arch.bf16(),
        fp8: c.arch.fp8(),
        label_source: src.map_or("", |s| s.label),
        reported_source: src.and_then(|s| s.reported),
        torch_bytes: facts.torch_bytes,
        torch_source: src.and_then(|s| s.torch),
        sms: facts.sms,
        sms_source: src.and_then(|s| s.sms),
        links: facts.links.as_str(),
        links_source: src.map_or("", |s| s.links),
    }
}

/// The list, smallest capacity first, within 100 columns.
pub fn render() -> String {
    let mut cards: Vec<&GpuCard> = CATALOGUE.iter().collect();
    cards.sort_by_key(|c| c.capacity().0);
    let yes = |b: bool| if b { "yes" } else { "no" };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<18} {:>15} {:>6} {:<11} {:>4} {:<4} {:<3} name",
        "id", "capacity, B", "GiB", "figure", "GB/s", "bf16", "fp8"
    );
    for c in cards {
        let (bytes, kind) = c.capacity();
        let _ = writeln!(
            s,
            "{:<18} {:>15} {:>6} {:<11} {:>4} {:<4} {:<3} {}",
            c.id,
            group_digits(bytes),
            Bytes(bytes).gib_string(2),
            kind.as_str(),
            c.bandwidth_gb_s,
            yes(c.arch.bf16()),
            yes(c.arch.fp8()),
            c.name
        );
    }
    s.push_str(
        "\nfigure: \"reported\" is what the device reports (a public nvidia-smi or NVML reading,\n\
         cited in --json); \"label\" is the vendor's GB × 2^30; \"working set\" is what macOS lets\n\
         a Mac's GPU use of its unified memory (Metal's recommendedMaxWorkingSetSize: 2/3 of\n\
         the RAM below 64 GiB, 3/4 from it; the rest is left for the system). fp8: fp8 tensor\n\
         units (W8A8).\n",
    );
    s
}

/// Runs `cards`.
pub fn run(args: Args) -> Result<Exit> {
    if args.json {
        let rows: Vec<Row> = CATALOGUE.iter().map(row).collect();
        crate::out::out!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        crate::out::out!("{}", render().trim_end());
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_card_once_within_100_columns_smallest_first() {
        let text = render();
        for c in CATALOGUE {
            assert_eq!(
                text.lines()
                    .filter(|l| l.starts_with(&format!("{} ", c.id)))
                    .count(),
                1,
                "{}",
                c.id
            );
        }
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
        let t4 = text.find("t4-16gb ").unwrap();
        let h200 = text.find("h200-141gb ").unwrap();
        assert!(t4 < h200);
        let t4_line = text.lines().find(|l| l.starts_with("t4-16gb ")).unwrap();
        assert!(
            t4_line.contains("16 106 127 360") && t4_line.contains(" no "),
            "{t4_line}"
        );
    }

    /// `--json` carries every fact of a card's row with its source, the engines' too.
    #[test]
    fn json_rows_carry_the_engines_facts_and_their_sources() {
        let card = |id: &str| {
            let c = CATALOGUE.iter().find(|c| c.id == id).expect("a card");
            serde_json::to_value(row(c)).expect("json")
        };
        let h100 = card("h100-sxm-80gb");
        assert_eq!(h100["torch_bytes"], 81_089u64 << 20);
        assert_eq!(h100["sms"], 132);
        assert!(
            h100["torch_source"]
                .as_str()
                .is_some_and(|s| s.contains("81089"))
        );
        let pcie = card("h100-pcie-80gb");
        assert!(pcie["torch_bytes"].is_null() && pcie["torch_source"].is_null());
        assert_eq!(pcie["sms"], 114);
    }
}
