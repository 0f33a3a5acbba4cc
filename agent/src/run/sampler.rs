//! Device-level memory of the command's whole process tree, sampled with NVML every
//! `--sample-ms`: for each selected device, the sum of NVML's per-process used memory
//! over the processes descending from the command. Any program is covered (PyTorch or
//! not). This is a device-level column, never added to the allocator's figures.
//!
//! NVML is loaded at run time (`nvml-wrapper`); without it, or in a container whose PID
//! namespace hides the host PIDs NVML reports, the timeline stays empty with the reason.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gpumem_proto::workload::{DeviceTimeline, Sample, Timeline};
use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;

use crate::device::DeviceSel;
use crate::process::process_tree;

/// Most samples kept per device (≈ 67 minutes at 20 ms); later ones only move the peak.
pub const MAX_SAMPLES: usize = 200_000;
/// The process tree is re-read every this many samples (a /proc scan costs more than a
/// sample).
const TREE_EVERY: u64 = 10;

/// Receives new samples of one device (NVML index) as they are taken, in batches
/// (`run --serve` pushes them to the page).
pub type OnSamples = Box<dyn Fn(u32, Vec<Sample>) + Send>;

/// Samples are handed to [`OnSamples`] at most this often.
const PUSH_EVERY: Duration = Duration::from_millis(250);

/// A running sampler.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Timeline>,
}

/// Starts sampling the tree of `root` on the selected devices; `Err` says why not.
pub fn start(
    root: u32,
    devices: DeviceSel,
    interval_ms: u64,
    started: Instant,
    on_samples: Option<OnSamples>,
) -> Result<Sampler, String> {
    let nvml = Nvml::init().map_err(|e| format!("NVML unavailable (libnvidia-ml): {e}"))?;
    let count = nvml
        .device_count()
        .map_err(|e| format!("NVML device count: {e}"))?;
    let indices: Vec<u32> = match devices {
        DeviceSel::All => (0..count).collect(),
        DeviceSel::One(i) if i < count => vec![i],
        DeviceSel::One(i) => return Err(format!("NVML sees {count} devices; cuda:{i} is not one")),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = Arc::clone(&stop);
    let handle = std::thread::Builder::new()
        .name("nvml-sampler".into())
        .spawn(move || {
            sample_loop(
                &nvml,
                &indices,
                root,
                interval_ms,
                started,
                &thread_stop,
                on_samples.as_ref(),
            )
        })
        .map_err(|e| format!("starting the sampler: {e}"))?;
    Ok(Sampler { stop, handle })
}

impl Sampler {
    /// Stops and returns the timeline.
    pub fn finish(self, interval_ms: u64) -> Timeline {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap_or_else(|_| Timeline {
            interval_ms,
            reason: Some("the sampler thread failed".into()),
            devices: Vec::new(),
        })
    }
}

fn sample_loop(
    nvml: &Nvml,
    indices: &[u32],
    root: u32,
    interval_ms: u64,
    started: Instant,
    stop: &AtomicBool,
    on_samples: Option<&OnSamples>,
) -> Timeline {
    let mut series: Vec<DeviceTimeline> = indices
        .iter()
        .map(|&i| DeviceTimeline {
            index: i,
            uuid: nvml.device_by_index(i).and_then(|d| d.uuid()).ok(),
            ..DeviceTimeline::default()
        })
        .collect();
    let mut tree = vec![root];
    let mut n = 0u64;
    let mut last_error = None;
    let mut seen_any = false;
    // Per device, the samples not yet handed to `on_samples`.
    let mut unsent: Vec<Vec<Sample>> = vec![Vec::new(); series.len()];
    let mut last_push = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        if n.is_multiple_of(TREE_EVERY) {
            tree = process_tree(root);
        }
        n += 1;
        let t_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        for (s, unsent) in series.iter_mut().zip(unsent.iter_mut()) {
            let used = nvml.device_by_index(s.index).and_then(|d| {
                let mut procs = d.running_compute_processes()?;
                procs.extend(d.running_graphics_processes().unwrap_or_default());
                Ok(procs)
            });
            match used {
                Ok(procs) => {
                    let mut total = 0u64;
                    for p in procs.iter().filter(|p| tree.contains(&p.pid)) {
                        seen_any = true;
                        if let UsedGpuMemory::Used(b) = p.used_gpu_memory {
                            total = total.saturating_add(b);
                        }
                    }
                    s.peak_bytes = Some(s.peak_bytes.map_or(total, |p| p.max(total)));
                    if on_samples.is_some() && unsent.len() < MAX_SAMPLES {
                        unsent.push(Sample {
                            t_ns,
                            used_bytes: total,
                        });
                    }
                    if s.samples.len() < MAX_SAMPLES {
                        s.samples.push(Sample {
                            t_ns,
                            used_bytes: total,
                        });
                    } else {
                        s.truncated = true;
                    }
                }
                Err(e) => last_error = Some(format!("NVML running processes: {e}")),
            }
        }
        if let Some(push) = on_samples.filter(|_| last_push.elapsed() >= PUSH_EVERY) {
            last_push = Instant::now();
            for (s, unsent) in series.iter().zip(unsent.iter_mut()) {
                if !unsent.is_empty() {
                    push(s.index, std::mem::take(unsent));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(interval_ms));
    }
    let reason = if seen_any {
        None
    } else {
        Some(last_error.unwrap_or_else(|| {
            "NVML never listed a process of the command's tree on the selected devices (it used none, or a container's PID namespace hides it)".into()
        }))
    };
    Timeline {
        interval_ms,
        reason,
        devices: series,
    }
}

/// The largest sample of any device between `from_ns` and `to_ns` (inclusive).
pub fn peak_between(timeline: &Timeline, from_ns: u64, to_ns: u64) -> Option<u64> {
    timeline
        .devices
        .iter()
        .flat_map(|d| d.samples.iter())
        .filter(|s| s.t_ns >= from_ns && s.t_ns <= to_ns)
        .map(|s| s.used_bytes)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_are_read_inside_the_window_only() {
        let t = Timeline {
            interval_ms: 20,
            reason: None,
            devices: vec![DeviceTimeline {
                index: 0,
                uuid: None,
                samples: [(0, 5), (10, 50), (20, 7), (30, 90)]
                    .into_iter()
                    .map(|(t_ns, used_bytes)| Sample { t_ns, used_bytes })
                    .collect(),
                peak_bytes: Some(90),
                truncated: false,
            }],
        };
        assert_eq!(peak_between(&t, 5, 25), Some(50));
        assert_eq!(peak_between(&t, 31, 99), None);
    }
}
