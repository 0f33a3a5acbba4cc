//! `run --memory-history`: PyTorch's allocator history, recorded by the probe in each
//! process, read back, attributed to the estimate's lines and kept, bounded, in the
//! workload document — with the raw snapshot beside it for PyTorch's own viewer.
//!
//! The probe (`gpumem_probe._History`) records with
//! `torch.cuda.memory._record_memory_history` (at most [`ENTRIES`] events, Python stacks),
//! takes the events out of the recorder after every phase and, at the end, writes two
//! new files into the run's private folder: `history-<pid>.pickle` (the shape of
//! `torch.cuda.memory._snapshot()`) and `history-<pid>.json` (its `gpumem.history/v1`
//! conversion, at most [`BYTES_PER_PROCESS`] bytes); then it says so on the channel
//! (`memory_history`). Nothing the probe sends names a path: the agent reads the two
//! names it expects for each process's pid, through [`crate::private::read_child_file`]
//! (no link followed, bounded), validates the history and attributes it
//! (`gpumem_proto::history::attribute`). A document keeps at most [`BYTES_PER_DOCUMENT`]
//! of histories, ranks together (the rest keep their attribution); the page and the
//! sheet are given it without the events.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use gpumem_proto::history::{HISTORY_SCHEMA, MemoryHistory, attribute};
use gpumem_proto::workload::{HistoryStatus, RankHistory, WorkloadFile};

use super::messages::ProbeMessage;

/// Environment variable that turns the recording on, with the most events kept.
pub const ENV_ENTRIES: &str = "GPUMEM_PROBE_HISTORY_ENTRIES";
/// Environment variable with the byte cap of each process's converted history.
pub const ENV_BYTES: &str = "GPUMEM_PROBE_HISTORY_BYTES";

/// Events the recorder and the probe keep per process (the history document's bound).
pub const ENTRIES: usize = gpumem_proto::history::MAX_EVENTS;
/// Bytes of one process's converted history (its JSON).
pub const BYTES_PER_PROCESS: u64 = 8 << 20;
/// Bytes of histories one workload document keeps, all processes together: the
/// document stays readable by `merge` and `export` (64 MiB each).
pub const BYTES_PER_DOCUMENT: u64 = 32 << 20;
/// Largest snapshot pickle copied out of the probe's folder.
pub const MAX_PICKLE_BYTES: u64 = crate::trace::python::MAX_PICKLE_BYTES;

/// What a process's probe said about its history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    /// `recorded` or `not_possible`.
    pub status: String,
    /// In words.
    pub detail: String,
}

impl Said {
    /// From the probe's `memory_history` message.
    pub fn of(message: &ProbeMessage) -> Option<Said> {
        match message {
            ProbeMessage::MemoryHistory { status, detail, .. } => Some(Said {
                status: status.clone(),
                detail: detail.clone(),
            }),
            _ => None,
        }
    }
}

/// Where the raw snapshot of `--memory-history [PATH]` goes: PATH, else `--output` with
/// the extension `.pickle`, else nowhere (the document still holds the history).
pub fn pickle_target(explicit: Option<&Path>, output: Option<&Path>) -> Option<PathBuf> {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| output.map(|o| o.with_extension("pickle")))
}

/// The pickle of one of several recording processes: `NAME.rank{R}.EXT` (or `.pid{P}`).
fn per_process(target: &Path, rank: Option<u32>, pid: u32) -> PathBuf {
    let tag = rank.map_or_else(|| format!("pid{pid}"), |r| format!("rank{r}"));
    let stem = target
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match target.extension() {
        Some(ext) => format!("{stem}.{tag}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{tag}"),
    };
    target.with_file_name(name)
}

/// Reads, checks and attributes one process's history from the probe's folder.
fn read_history(folder: &Path, pid: u32) -> Result<(MemoryHistory, u64)> {
    let path = folder.join(format!("history-{pid}.json"));
    let bytes = crate::private::read_child_file(&path, gpumem_proto::history::MAX_HISTORY_BYTES)
        .context("the probe's history")?;
    let size = bytes.len() as u64;
    let h: MemoryHistory =
        serde_json::from_slice(&bytes).context("the probe's history is not a history")?;
    if h.schema != HISTORY_SCHEMA {
        bail!("the probe's history has schema {:?}", h.schema);
    }
    h.validate().context("the probe's history")?;
    Ok((h, size))
}

/// Fills every rank's `memory_history` (`said`: each process's message, by pid), copies
/// each recorded snapshot to `pickle` (per process when several recorded), and sets
/// the attributed column of each comparison. Runs while the probe's folder exists.
pub fn attach(
    file: &mut WorkloadFile,
    folder: &Path,
    said: &BTreeMap<u32, Said>,
    pickle: Option<&Path>,
) {
    let recorded = file
        .ranks
        .iter()
        .filter(|r| said.get(&r.pid).is_some_and(|s| s.status == "recorded"))
        .count();
    let mut budget = BYTES_PER_DOCUMENT;
    let mut first = true;
    for rank in &mut file.ranks {
        let Some(s) = said.get(&rank.pid) else {
            if rank.worker_of.is_none() {
                rank.memory_history = Some(not_possible(
                    "the probe wrote no history: the process ended before its end (killed or crashed), or it never imported torch with the probe loaded".into(),
                ));
            }
            continue;
        };
        if s.status != "recorded" {
            rank.memory_history = Some(not_possible(s.detail.clone()));
            continue;
        }
        let (history, size) = match read_history(folder, rank.pid) {
            Ok(h) => h,
            Err(e) => {
                rank.memory_history = Some(not_possible(format!("{e:#}")));
                continue;
            }
        };
        let attribution = attribute(&history);
        super::compare::attribute_lines(&mut rank.comparison, &attribution);
        let synthetic = history.source == "synthetic";
        let mut detail = format!(
            "{}{}; {} events kept, {} left out; torch {}",
            if synthetic {
                "SYNTHETIC (the recording stand-in's plan of allocations, not PyTorch's recorder): "
            } else {
                ""
            },
            s.detail,
            history.events.len(),
            history.dropped_events,
            history.torch_version.as_deref().unwrap_or("?"),
        );
        let pickle = match pickle {
            Some(target) => {
                let to = if recorded > 1 && !first {
                    per_process(target, rank.rank, rank.pid)
                } else {
                    target.to_path_buf()
                };
                first = false;
                match copy_pickle(folder, rank.pid, &to) {
                    Ok(()) => Some(to.display().to_string()),
                    Err(e) => {
                        detail.push_str(&format!("; the snapshot was not written: {e:#}"));
                        None
                    }
                }
            }
            None => {
                detail.push_str(
                    "; the raw snapshot was not kept (give --memory-history PATH or --output)",
                );
                None
            }
        };
        let (history, left_out) = if size <= budget {
            budget -= size;
            (Some(history), None)
        } else {
            (
                None,
                Some(format!(
                    "the events are left out: this document keeps at most {BYTES_PER_DOCUMENT} bytes of histories and earlier processes took them (the snapshot holds them)"
                )),
            )
        };
        rank.memory_history = Some(RankHistory {
            status: HistoryStatus::Recorded,
            detail,
            pickle,
            attribution: Some(attribution),
            history,
            left_out,
        });
    }
}

fn not_possible(detail: String) -> RankHistory {
    RankHistory {
        status: HistoryStatus::NotPossible,
        detail,
        pickle: None,
        attribution: None,
        history: None,
        left_out: None,
    }
}

/// Copies the probe's snapshot (bounded) to a new private file `to`.
fn copy_pickle(folder: &Path, pid: u32, to: &Path) -> Result<()> {
    let from = folder.join(format!("history-{pid}.pickle"));
    let bytes =
        crate::private::read_child_file(&from, MAX_PICKLE_BYTES).context("the probe's snapshot")?;
    crate::private::write_new_atomically(to, &bytes)
        .with_context(|| format!("writing {}", to.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_goes_beside_the_output_or_where_asked() {
        assert_eq!(
            pickle_target(None, Some(Path::new("/t/train.workload.json"))),
            Some(PathBuf::from("/t/train.workload.pickle"))
        );
        assert_eq!(
            pickle_target(Some(Path::new("h.pkl")), Some(Path::new("o.json"))),
            Some(PathBuf::from("h.pkl"))
        );
        assert_eq!(pickle_target(None, None), None);
        assert_eq!(
            per_process(Path::new("/t/h.pickle"), Some(3), 9),
            PathBuf::from("/t/h.rank3.pickle")
        );
        assert_eq!(
            per_process(Path::new("h"), None, 9),
            PathBuf::from("h.pid9")
        );
    }

    #[test]
    fn a_history_that_is_not_a_file_of_ours_or_not_a_history_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_history(dir.path(), 1).is_err());
        std::fs::write(dir.path().join("history-2.json"), "{\"schema\": 1}").unwrap();
        assert!(read_history(dir.path(), 2).is_err());
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("history-3.json")).unwrap();
        let e = read_history(dir.path(), 3).unwrap_err();
        assert!(format!("{e:#}").contains("opening"), "{e:#}");
    }
}
