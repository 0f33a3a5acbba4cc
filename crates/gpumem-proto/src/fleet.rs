//! The fleet sheet (`gpumem.fleet/v1`) written by `gpumem-agent merge`: every results
//! and workload document of a fleet (ranks, nodes, array tasks) gathered into one table
//! of configurations × cards, with the observed peaks per phase, the computed lines
//! beside them, the distribution of the estimate's error and the worst rank named.
//!
//! The rules of [`crate::results`] hold: raw integer bytes in `_bytes` fields, `null`
//! for what was not observed or not computed (never `0`), allocator and device-level
//! figures apart. Errors are integers too: `error_bytes` is observed − computed and
//! `error_ppm` the same over computed in parts per million, so the sheet reads the same
//! on every machine. A sheet with any synthetic input says so (`synthetic: true`, and
//! each row that holds one): its figures are not GPU measurements.

use serde::{Deserialize, Serialize};

use crate::context::RunContext;
use crate::results::SchemaError;
use crate::workload::Basis;

/// Schema identifier of the file written by `gpumem-agent merge`.
pub const FLEET_SCHEMA: &str = "gpumem.fleet/v1";

/// The whole sheet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FleetSheet {
    /// Always [`FLEET_SCHEMA`].
    pub schema: String,
    /// True when any merged document is synthetic (a test stand-in, not a GPU).
    pub synthetic: bool,
    /// What the synthetic figures are, when there are any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// `gpumem-agent` version that merged.
    pub agent_version: String,
    /// Every document read, in the order read (sorted by path).
    pub sources: Vec<FleetSource>,
    /// Files found but not merged, with the reason.
    pub refused: Vec<Refused>,
    /// One row per configuration × card, sorted by configuration then card.
    pub rows: Vec<FleetRow>,
    /// The error of every computed figure that has an observation beside it.
    pub errors: ErrorDistribution,
    /// The observation furthest above its computed figure (relative), when any.
    pub worst: Option<Worst>,
}

impl FleetSheet {
    /// Refuses a file whose `schema` is not [`FLEET_SCHEMA`].
    pub fn check_schema(&self) -> Result<(), SchemaError> {
        if self.schema == FLEET_SCHEMA {
            Ok(())
        } else {
            Err(SchemaError::UnknownVersion {
                found: self.schema.clone(),
                expected: FLEET_SCHEMA,
            })
        }
    }
}

/// Which kind of document a source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum DocumentKind {
    /// `gpumem.results/v1` (`measure`, `bisect` trials): the agent's test network.
    Results,
    /// `gpumem.workload/v1` (`run`): the user's own program.
    Workload,
}

/// One merged document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FleetSource {
    /// Its path as given to `merge` (joined with the folder it was found in).
    pub path: String,
    /// Results or workload.
    pub kind: DocumentKind,
    /// Its figures come from a test stand-in.
    pub synthetic: bool,
    /// False when a phase, a rank or the command failed.
    pub ok: bool,
    /// Where it ran, when the document recorded it.
    pub context: Option<RunContext>,
}

/// A file that was found but not merged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Refused {
    /// Its path.
    pub path: String,
    /// Why, in words.
    pub reason: String,
}

/// One configuration on one card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FleetRow {
    /// Results or workload.
    pub kind: DocumentKind,
    /// The configuration: the network's dimensions (`batch=… context=… width=…
    /// layers=… dtype=…`) or the command as run.
    pub configuration: String,
    /// The card's name as the driver or NVML gave it; `unknown` when not read,
    /// `SYNTHETIC` for a stand-in.
    pub card: String,
    /// Any of its observations is synthetic.
    pub synthetic: bool,
    /// Documents merged into it.
    pub documents: u64,
    /// Observed entries: devices of a results file, ranks of a workload.
    pub entries: u64,
    /// Entries that failed (a phase out of memory, a crashed rank, …).
    pub failed: u64,
    /// Observed peaks per phase, with the computed figure beside them when one exists.
    pub phases: Vec<FleetPhase>,
    /// The estimator's lines for a workload (weights, optimizer states, …) beside what
    /// was observed, across its ranks.
    pub lines: Vec<FleetLine>,
}

/// One phase of a row, over every entry that reached it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FleetPhase {
    /// The phase's name (`model_load`, `forward`, …).
    pub phase: String,
    /// A workload's first step, kept apart from the later ones.
    pub first_step: bool,
    /// Phase readings merged (entries × steps or repeats).
    pub observations: u64,
    /// Largest allocated peak over them.
    pub allocated_peak_bytes: Option<u64>,
    /// Smallest allocated peak over them (the spread across ranks and cards).
    pub allocated_peak_min_bytes: Option<u64>,
    /// Largest reserved peak over them.
    pub reserved_peak_bytes: Option<u64>,
    /// The computed allocated peak for the phase, when the estimator gives one (the
    /// test network's prediction).
    pub computed_bytes: Option<u64>,
    /// Largest observed − computed over the entries.
    pub error_bytes: Option<i64>,
    /// The entry with the largest allocated peak.
    pub peak_at: Option<EntryRef>,
}

/// One estimator line of a workload row across its ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FleetLine {
    /// `weights`, `gradients`, `optimizer_states`, `kv_cache`, `activations`, …
    pub item: String,
    /// Computed or assumed (as the rank's comparison said).
    pub basis: Basis,
    /// The computed bytes (the largest, should ranks differ).
    pub computed_bytes: Option<u64>,
    /// Largest observed over the ranks.
    pub observed_max_bytes: Option<u64>,
    /// Smallest observed over the ranks.
    pub observed_min_bytes: Option<u64>,
    /// Largest observed − computed over the ranks.
    pub error_bytes: Option<i64>,
    /// The rank with the largest observed figure.
    pub observed_max_at: Option<EntryRef>,
}

/// Names one observed entry: which run, which host, which rank, which device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EntryRef {
    /// The document it came from.
    pub path: String,
    /// The run's id, when recorded.
    pub run_id: Option<String>,
    /// Its host, when recorded.
    pub hostname: Option<String>,
    /// Slurm's job id, when it ran in Slurm.
    pub slurm_job_id: Option<String>,
    /// The pod, when it ran in Kubernetes.
    pub pod: Option<String>,
    /// Its rank (`RANK`, else `SLURM_PROCID`, else the Indexed Job's index), when known.
    pub rank: Option<u32>,
    /// `cuda:N`.
    pub device: Option<String>,
    /// The device's UUID, when known.
    pub uuid: Option<String>,
}

/// The estimate's error over every observation that has a computed figure beside it:
/// observed − computed over computed, in parts per million.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ErrorDistribution {
    /// Observations counted.
    pub count: u64,
    /// Smallest error (ppm).
    pub min_ppm: Option<i64>,
    /// Median (nearest rank, ppm).
    pub p50_ppm: Option<i64>,
    /// 90th percentile (nearest rank, ppm).
    pub p90_ppm: Option<i64>,
    /// Largest error (ppm).
    pub max_ppm: Option<i64>,
    /// Counts per bucket, in the order of [`ERROR_BUCKETS`].
    pub buckets: Vec<Bucket>,
}

/// One bucket of the error histogram.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Bucket {
    /// Its label, e.g. `"+1% to +10%"`.
    pub label: String,
    /// Observations in it.
    pub count: u64,
}

/// The histogram's upper bounds in ppm (a value goes in the first bucket whose bound
/// is ≥ it; the last bucket is open), with their labels.
pub const ERROR_BUCKETS: [(i64, &str); 8] = [
    (-500_000, "below -50%"),
    (-100_000, "-50% to -10%"),
    (-10_000, "-10% to -1%"),
    (10_000, "-1% to +1%"),
    (100_000, "+1% to +10%"),
    (500_000, "+10% to +50%"),
    (1_000_000, "+50% to +100%"),
    (i64::MAX, "above +100%"),
];

/// The observation furthest above its computed figure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Worst {
    /// The row's configuration.
    pub configuration: String,
    /// The row's card.
    pub card: String,
    /// The phase or line.
    pub what: String,
    /// Observed bytes.
    pub observed_bytes: u64,
    /// Computed bytes.
    pub computed_bytes: u64,
    /// observed − computed.
    pub error_bytes: i64,
    /// The same over computed, ppm.
    pub error_ppm: i64,
    /// Where it was observed.
    pub at: EntryRef,
}

/// observed − computed over computed, in ppm (rounded toward zero); `None` when the
/// computed figure is 0 or the result does not fit.
pub fn error_ppm(observed: u64, computed: u64) -> Option<i64> {
    if computed == 0 {
        return None;
    }
    let diff = i128::from(observed) - i128::from(computed);
    let ppm = diff.checked_mul(1_000_000)? / i128::from(computed);
    i64::try_from(ppm).ok()
}

/// observed − computed, when it fits.
pub fn error_bytes(observed: u64, computed: u64) -> Option<i64> {
    i64::try_from(i128::from(observed) - i128::from(computed)).ok()
}

/// The distribution of `errors` (ppm): nearest-rank quantiles and the buckets.
pub fn distribution(errors: &[i64]) -> ErrorDistribution {
    let mut sorted = errors.to_vec();
    sorted.sort_unstable();
    // Nearest rank: the smallest value with at least q of the observations at or
    // below it.
    let rank = |num: usize, den: usize| -> Option<i64> {
        let n = sorted.len();
        if n == 0 {
            return None;
        }
        let k = (n * num).div_ceil(den).clamp(1, n);
        sorted.get(k - 1).copied()
    };
    let mut buckets: Vec<Bucket> = ERROR_BUCKETS
        .iter()
        .map(|(_, label)| Bucket {
            label: (*label).to_owned(),
            count: 0,
        })
        .collect();
    for e in &sorted {
        if let Some(i) = ERROR_BUCKETS.iter().position(|(bound, _)| e <= bound)
            && let Some(b) = buckets.get_mut(i)
        {
            b.count += 1;
        }
    }
    ErrorDistribution {
        count: sorted.len() as u64,
        min_ppm: sorted.first().copied(),
        p50_ppm: rank(1, 2),
        p90_ppm: rank(9, 10),
        max_ppm: sorted.last().copied(),
        buckets,
    }
}

/// The fleet sheet in one line, read from a plain JSON value: how the agent page shows
/// an imported fleet sheet without a typed reader of its own (its wasm is at its size
/// ceiling, so the line is plain: errors in ppm, numbers not read as 0). `None` when `v`
/// is not a fleet sheet.
pub fn summary_from_value(v: &serde_json::Value) -> Option<String> {
    if v.get("schema")?.as_str()? != FLEET_SCHEMA {
        return None;
    }
    let n = |k: &str| v[k].as_array().map_or(0, Vec::len);
    let t = |x: &serde_json::Value| x.as_str().unwrap_or("?").to_owned();
    let i = |x: &serde_json::Value| x.as_i64().unwrap_or(0);
    let (e, w) = (&v["errors"], &v["worst"]);
    Some(format!(
        "{}fleet sheet: {} documents, {} rows; error over {} observations: median {} ppm, max {} ppm; worst: {} of {} at run {} on {}",
        if v["synthetic"].as_bool() == Some(true) {
            "SYNTHETIC (not GPU figures) "
        } else {
            ""
        },
        n("sources"),
        n("rows"),
        i(&e["count"]),
        i(&e["p50_ppm"]),
        i(&e["max_ppm"]),
        t(&w["what"]),
        t(&w["configuration"]),
        t(&w["at"]["run_id"]),
        t(&w["at"]["hostname"]),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_integers_and_refuse_what_does_not_fit() {
        assert_eq!(error_ppm(110, 100), Some(100_000));
        assert_eq!(error_ppm(90, 100), Some(-100_000));
        assert_eq!(error_ppm(1, 3), Some(-666_666));
        assert_eq!(error_ppm(5, 0), None);
        assert_eq!(error_ppm(u64::MAX, 1), None, "2^64 × 10^6 does not fit i64");
        assert_eq!(error_bytes(u64::MAX, 0), None);
        assert_eq!(error_bytes(3, 5), Some(-2));
    }

    #[test]
    fn the_distribution_uses_nearest_rank_and_fills_every_bucket_once() {
        let d = distribution(&[-600_000, 0, 5_000, 50_000, 2_000_000]);
        assert_eq!(d.count, 5);
        assert_eq!(d.min_ppm, Some(-600_000));
        assert_eq!(d.p50_ppm, Some(5_000));
        assert_eq!(d.p90_ppm, Some(2_000_000));
        assert_eq!(d.max_ppm, Some(2_000_000));
        let counts: Vec<u64> = d.buckets.iter().map(|b| b.count).collect();
        assert_eq!(counts, [1, 0, 0, 2, 1, 0, 0, 1]);
        let empty = distribution(&[]);
        assert_eq!(empty.count, 0);
        assert_eq!(empty.p50_ppm, None);
    }

    #[test]
    fn the_page_summary_reads_a_plain_value_and_says_synthetic() {
        let v = serde_json::json!({
            "schema": FLEET_SCHEMA,
            "synthetic": true,
            "sources": [1, 2, 3],
            "refused": [],
            "rows": [1, 2],
            "errors": {"count": 9, "p50_ppm": 0, "p90_ppm": 12_345, "max_ppm": 2_500_000},
            "worst": {"what": "cold_forward", "configuration": "network batch=32", "card": "SYNTHETIC",
                      "error_ppm": 2_500_000, "at": {"run_id": "slurm-7-0", "hostname": "n1"}},
        });
        assert_eq!(
            summary_from_value(&v).unwrap(),
            "SYNTHETIC (not GPU figures) fleet sheet: 3 documents, 2 rows; error over 9 observations: median 0 ppm, max 2500000 ppm; worst: cold_forward of network batch=32 at run slurm-7-0 on n1"
        );
        assert_eq!(
            summary_from_value(&serde_json::json!({"schema": "gpumem.sheet/v1"})),
            None
        );
        assert_eq!(summary_from_value(&serde_json::json!([1])), None);
        // A sheet without observations says so instead of failing.
        let empty = serde_json::json!({"schema": FLEET_SCHEMA, "worst": null});
        assert!(
            summary_from_value(&empty)
                .unwrap()
                .contains("worst: ? of ?")
        );
    }

    /// The published JSON Schema is generated from these types; a stale file fails
    /// here. Regenerate with
    /// `GPUMEM_BLESS=1 cargo test -p gpumem-proto --features schema fleet_schema`.
    #[cfg(feature = "schema")]
    #[test]
    fn published_fleet_schema_matches_the_types() {
        crate::assert_published_schema(
            "fleet.v1.schema.json",
            schemars::schema_for!(FleetSheet),
            format!(
                "{FLEET_SCHEMA}: the fleet sheet written by `gpumem-agent merge`. Byte counts are raw integers in fields ending in _bytes; errors are integers (bytes, parts per million); null means not observed or not computed, never 0."
            ),
        );
    }
}
