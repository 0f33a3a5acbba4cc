//! `gpumem-agent run -- COMMAND`: the user's own program measured phase by phase, beside
//! the estimate for the same workload — the answer to "why did my peak exceed the
//! estimate?".
//!
//! The command runs as a child ([`child`]: terminal and signals passed through) with the
//! Python probe ([`probe`]) first on its PYTHONPATH; every process that imports torch
//! connects to the probe channel ([`channel`], bounded against hostile input) and reports
//! phases and facts ([`messages`]). NVML samples the process tree's device memory
//! ([`sampler`]). The result (`gpumem.workload/v1`) keeps each rank apart and carries the
//! computed-vs-observed table ([`compare`]). With `--serve` the page is served as by
//! `gpumem-agent serve` and every phase and timeline sample is pushed to paired pages as
//! it happens (`crate::serve::live`); the command's output and exit code are unchanged.
//!
//! Exit codes: 0 measured and the command succeeded; 1 the command failed, ran out of
//! memory, crashed, was killed, or the probe never connected — recorded in the result;
//! 2 cannot measure here (no CUDA driver and no ROCm device), bad usage or an existing
//! `--output` — and then the command is **not started**.

pub mod channel;
pub mod child;
pub mod compare;
pub mod messages;
pub mod oom;
pub mod probe;
pub mod sampler;
pub mod traced;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use gpumem_core::units::{Bytes, group_digits};
use gpumem_proto::results::Status;
use gpumem_proto::workload::{
    AllocatorCounters, ChannelStats, Failure, FailureKind, GenerationFacts, InputShape, ModelFacts,
    OptimizerFacts, Outcome, Overhead, ProbeEnvironment, ProbeFacts, RankResult, Timeline,
    WORKLOAD_SCHEMA, WorkloadFile, WorkloadPhase,
};

use crate::exit::Exit;
use crate::measure::{self, EventsFormat};
use crate::serve::live::{Feed, WORKLOAD_RUN_ID};
use channel::{Channel, ChannelEvent};
use gpumem_proto::wire::AgentMessage;
use messages::ProbeMessage;

/// Environment variable that, in debug builds only, lets `run` proceed without a GPU and
/// labels everything SYNTHETIC: the switch the tests use to drive the whole pipeline on
/// CPU. Release builds do not contain it.
pub const SYNTHETIC_TEST_SWITCH: &str = "GPUMEM_RUN_SYNTHETIC_FOR_TESTS";
/// Most ranks kept (connections beyond are counted, not kept).
const MAX_RANKS: usize = 256;
/// Most phases kept per rank.
const MAX_PHASES: usize = 5_000;
/// Most generate calls kept per rank.
const MAX_GENERATIONS: usize = 1_000;
/// Bytes of probe lines kept for the result, all ranks together: what the collector
/// holds, what `--output` and `--serve` carry are bounded by it (a message past it is
/// counted as rejected). A real run keeps a few kB per rank.
pub const MAX_KEPT_BYTES: usize = 64 << 20;
/// Cost charged per kept message beside its line's bytes (the structure around it).
const KEPT_OVERHEAD: usize = 256;
/// Ranks printed in full in the stderr report; the file keeps every one.
const REPORT_RANKS: usize = 16;
/// Phases printed per rank in the stderr report (the first ones and the last one).
const REPORT_PHASES: usize = 40;
/// Failures printed in the stderr report.
const REPORT_FAILURES: usize = 20;
/// How long the channel stays open after the command exited, for the last lines.
const GRACE: Duration = Duration::from_secs(2);
/// With `--serve`, how long the paired pages get to receive the final document.
const FINAL_PUSH_GRACE: Duration = Duration::from_millis(500);

/// Arguments of `run`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Devices whose memory NVML samples: `cuda:N` or `all` (the command itself chooses
    /// its devices; this does not change CUDA_VISIBLE_DEVICES).
    #[arg(long, default_value = "all")]
    pub device: String,
    /// Workload results file to write (`gpumem.workload/v1`); must not exist.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Training steps (or generate calls) to instrument; then every hook is removed.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub steps: u32,
    /// NVML sampling interval in milliseconds.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub sample_ms: u64,
    /// Stream phases as JSON lines on stdout as they end (mixed with the command's own
    /// stdout: redirect one of them).
    #[arg(long, value_enum)]
    pub events: Option<EventsFormat>,
    /// Serve the page (as `gpumem-agent serve` does: loopback only, token pairing) and
    /// push each phase and timeline sample to paired pages as it happens. The pairing
    /// URL goes to stderr; stdout stays the command's.
    #[arg(long)]
    pub serve: bool,
    /// With `--serve`: port on 127.0.0.1 to listen on; 0 picks a free one.
    #[arg(long, default_value_t = 0, requires = "serve")]
    pub port: u16,
    /// With `--serve`: do not try to open the pairing URL in a browser.
    #[arg(long, requires = "serve")]
    pub no_open: bool,
    /// Do not trace the workload after the command (by default the same workload is
    /// traced on the CPU — the model's code on PyTorch's meta device, seconds for a 1B
    /// model — and its figures shown beside computed and observed).
    #[arg(long)]
    pub no_trace: bool,
    /// A workload key the trace cannot read from the run (`train=lora`, `lora-rank=16`,
    /// `lora-targets=q,v`, `attention=flash`, …), in `estimate`'s vocabulary; repeat it.
    #[arg(long, value_name = "KEY=VALUE", value_parser = traced::parse_override, conflicts_with = "no_trace")]
    pub trace_with: Vec<(String, String)>,
    /// Prometheus export (textfile collector, Pushgateway).
    #[command(flatten)]
    pub export: crate::export::sink::ExportArgs,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<OsString>,
}

/// Whether the debug-only test switch is on.
pub(crate) fn synthetic_test_switch() -> bool {
    #[cfg(debug_assertions)]
    {
        std::env::var_os(SYNTHETIC_TEST_SWITCH).is_some_and(|v| v == "1")
    }
    #[cfg(not(debug_assertions))]
    {
        false
    }
}

/// A ROCm device is present when the kernel's compute interface exists.
fn rocm_device_present() -> bool {
    std::path::Path::new("/dev/kfd").exists()
}

/// Runs `run`.
pub fn run(args: Args) -> Result<Exit> {
    // Step one: usage and the output path; nothing is started on an error here.
    let devices = measure::parse_device(&args.device)?;
    if let Some(path) = &args.output {
        measure::output::check_new_path(path)?;
    }
    let Some(program) = args.command.first() else {
        bail!("no command given: gpumem-agent run [OPTIONS] -- COMMAND [ARGS…]");
    };
    args.export.validate()?;
    traced::check_overrides(&args.trace_with).map_err(anyhow::Error::msg)?;
    let synthetic = synthetic_test_switch();
    let driver = crate::gpu::libraries().0;
    let rocm = rocm_device_present();
    if !synthetic && !driver && !rocm {
        bail!(
            "no CUDA driver library (libcuda.so) and no ROCm device (/dev/kfd): cannot measure here; the command was not started"
        );
    }

    let context = crate::sched::current(synthetic);
    let exporter =
        crate::export::sink::Live::start(&args.export, &context, synthetic)?.map(Arc::new);

    // The page, before the command starts: a port that cannot be bound starts nothing.
    let live = if args.serve {
        let feed = Feed::new(false);
        crate::serve::live::start_for_run(args.port, args.no_open, Arc::clone(&feed))?;
        Some(feed)
    } else {
        None
    };

    // Step two: the probe, the channel, the child.
    let dir = probe::ProbeDir::create(&probe::base_from_env()?)?;
    let socket = dir.socket();
    let (tx, rx) = mpsc::sync_channel(channel::EVENT_QUEUE);
    let channel = Channel::listen(&socket, tx)?;

    let mut command = Command::new(program);
    command
        .args(&args.command[1..])
        .env(
            "PYTHONPATH",
            probe::python_path(dir.path(), std::env::var_os("PYTHONPATH")),
        )
        .env(probe::ENV_SOCKET, &socket)
        .env(probe::ENV_STEPS, args.steps.to_string());
    let argv: Vec<String> = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let allocator_env: BTreeMap<String, String> = [
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_HIP_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
    ]
    .into_iter()
    .filter_map(|k| Some((k.to_owned(), std::env::var(k).ok()?)))
    .collect();

    if let Some(feed) = &live {
        feed.push(AgentMessage::WorkloadStarted {
            run_id: WORKLOAD_RUN_ID,
            command: argv.clone(),
            synthetic,
            steps_instrumented: args.steps,
        });
    }
    let created_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs());
    let started = Instant::now();
    let running = child::spawn(command).with_context(|| {
        format!(
            "cannot start {:?}; the command was not run",
            program.to_string_lossy()
        )
    })?;
    let sampler = if synthetic || !driver {
        Err(if synthetic {
            "SYNTHETIC test run: no device is sampled".to_owned()
        } else {
            "ROCm device: NVML samples NVIDIA devices only (rocm-smi sampling is not implemented)"
                .to_owned()
        })
    } else {
        let on_samples = live.clone().map(|feed| {
            Box::new(
                move |device: u32, samples: Vec<gpumem_proto::workload::Sample>| {
                    feed.push(AgentMessage::WorkloadSamples {
                        run_id: WORKLOAD_RUN_ID,
                        device,
                        samples,
                    });
                },
            ) as sampler::OnSamples
        });
        sampler::start(running.pid(), devices, args.sample_ms, started, on_samples)
    };

    let events = args.events.is_some();
    let open = Arc::new(AtomicI64::new(0));
    let collector = {
        let open = Arc::clone(&open);
        let live = live.clone();
        let exporter = exporter.clone();
        std::thread::Builder::new()
            .name("probe-collector".into())
            .spawn(move || {
                collect(
                    &rx,
                    started,
                    events,
                    live.as_deref(),
                    exporter.as_deref(),
                    &open,
                )
            })
            .context("starting the collector")?
    };
    let ended = running.wait();
    let wall_time_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    // Give the last lines (goodbyes, failures) a moment: until every connection closed
    // (a rank's process may outlive the command briefly), at most GRACE.
    std::thread::sleep(Duration::from_millis(50));
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline && open.load(Ordering::SeqCst) > 0 {
        std::thread::sleep(Duration::from_millis(20));
    }
    channel.close();
    let collected = collector
        .join()
        .map_err(|_| anyhow::anyhow!("the collector thread failed"))?;
    let timeline = match sampler {
        Ok(s) => s.finish(args.sample_ms),
        Err(reason) => Timeline {
            interval_ms: args.sample_ms,
            reason: Some(reason),
            devices: Vec::new(),
        },
    };
    let ended = ended?;
    drop(dir);

    let mut file = assemble(Assembly {
        synthetic,
        created_unix_s,
        requested_device: args.device.clone(),
        command: argv,
        allocator_env,
        steps: args.steps,
        ended,
        wall_time_ns,
        collected,
        timeline,
        still_running: child::still_running,
        context,
    });
    // After the command: the trace takes CPU only, never from the measured program.
    traced::trace_ranks(&mut file, &args.trace_with, args.no_trace);
    crate::out::err!("{}", report(&file));
    if let Some(x) = &exporter {
        x.finish(&crate::export::from_workload(&file));
    }
    if let Some(feed) = &live {
        feed.push(AgentMessage::WorkloadFinished {
            run_id: WORKLOAD_RUN_ID,
            ok: file.outcome.status == Status::Ok,
            result: serde_json::to_value(&file).unwrap_or_default(),
        });
        // The sessions write on threads of their own: give them a moment to send the
        // document before the process ends (the page keeps it after the agent goes).
        if feed.subscribers() > 0 {
            std::thread::sleep(FINAL_PUSH_GRACE);
        }
    }
    if let Some(path) = &args.output {
        let text = serde_json::to_string_pretty(&file).context("serialising the result")?;
        measure::output::write_new_atomically(path, text.as_bytes())?;
        crate::out::errln!("gpumem-agent run: result written to {}", path.display());
    }
    Ok(if file.outcome.status == Status::Ok {
        Exit::Ok
    } else {
        Exit::MeasureFailed
    })
}

/// One process's messages as they arrive.
#[derive(Debug, Default)]
struct RankState {
    hello: Option<ProbeMessage>,
    phases: Vec<(WorkloadPhase, u64)>,
    facts: ProbeFacts,
    failures: Vec<Failure>,
    overhead: Option<Overhead>,
    hooks_removed: Option<String>,
    bye: bool,
    /// Phases already pushed to the page (`--serve`).
    pushed: usize,
}

/// Everything the channel delivered.
#[derive(Debug, Default)]
struct Collected {
    ranks: BTreeMap<u64, RankState>,
    stats: ChannelStats,
    /// Bytes charged against [`MAX_KEPT_BYTES`].
    kept_bytes: usize,
}

fn emit(events: bool, value: &serde_json::Value) {
    if !events {
        return;
    }
    let mut out = std::io::stdout().lock();
    // A closed pipe must not stop the measurement; the file is the record. The probe's
    // texts may hold terminal escapes that JSON leaves raw (C1, bidi): escaped.
    let line = value.to_string();
    let _ = writeln!(out, "{}", crate::out::terminal_safe(&line));
    let _ = out.flush();
}

fn collect(
    rx: &mpsc::Receiver<ChannelEvent>,
    started: Instant,
    events: bool,
    live: Option<&Feed>,
    export: Option<&crate::export::sink::Live>,
    open: &AtomicI64,
) -> Collected {
    let mut c = Collected::default();
    while let Ok(event) = rx.recv() {
        match event {
            ChannelEvent::Connected(id) => {
                open.fetch_add(1, Ordering::SeqCst);
                c.stats.connections += 1;
                if c.ranks.len() < MAX_RANKS {
                    c.ranks.insert(id, RankState::default());
                }
            }
            ChannelEvent::ConnectionRefused => c.stats.connections_refused += 1,
            ChannelEvent::Rejected => c.stats.rejected += 1,
            ChannelEvent::Closed => {
                open.fetch_sub(1, Ordering::SeqCst);
            }
            ChannelEvent::Message(id, message, len) => {
                let cost = len.saturating_add(KEPT_OVERHEAD);
                let Some(rank) = c
                    .ranks
                    .get_mut(&id)
                    .filter(|_| c.kept_bytes.saturating_add(cost) <= MAX_KEPT_BYTES)
                else {
                    c.stats.rejected += 1;
                    continue;
                };
                c.kept_bytes = c.kept_bytes.saturating_add(cost);
                let at = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                let phases_before = rank.phases.len();
                if absorb(rank, *message, at, events, id) {
                    if let (Some(x), Some((phase, _))) = (export, rank.phases.last())
                        && rank.phases.len() > phases_before
                    {
                        x.workload_phase(hello_rank(rank), phase);
                    }
                    push_phase(live, rank, id);
                    c.stats.messages += 1;
                } else {
                    c.stats.rejected += 1;
                }
            }
        }
    }
    c
}

/// Folds one message into its rank; false when it was refused (e.g. a second hello).
fn absorb(rank: &mut RankState, message: ProbeMessage, at_ns: u64, events: bool, id: u64) -> bool {
    if rank.hello.is_none() && !matches!(message, ProbeMessage::Hello { .. }) {
        return false;
    }
    match message {
        ProbeMessage::Hello { .. } => {
            if rank.hello.is_some() {
                // The stand-in is swapped in after the first hello: keep the last reader.
                if let (
                    Some(ProbeMessage::Hello { reader: old, .. }),
                    ProbeMessage::Hello { reader, .. },
                ) = (&mut rank.hello, &message)
                {
                    old.clone_from(reader);
                }
                return true;
            }
            rank.hello = Some(message);
        }
        ProbeMessage::Phase {
            name,
            step,
            first_step,
            manual,
            device,
            wall_ns,
            allocated_start_bytes,
            allocated_peak_bytes,
            allocated_end_bytes,
            reserved_start_bytes,
            reserved_peak_bytes,
            reserved_end_bytes,
            device_free_bytes,
            device_total_bytes,
            error,
        } => {
            if rank.phases.len() >= MAX_PHASES {
                return false;
            }
            let phase = WorkloadPhase {
                name,
                step,
                first_step,
                manual,
                device,
                allocator: AllocatorCounters {
                    allocated_start_bytes,
                    allocated_peak_bytes,
                    allocated_end_bytes,
                    reserved_start_bytes,
                    reserved_peak_bytes,
                    reserved_end_bytes,
                },
                device_free_end_bytes: device_free_bytes,
                device_total_bytes,
                process_tree_peak_bytes: None,
                wall_time_ns: wall_ns,
                error,
            };
            emit(
                events,
                &serde_json::json!({"event": "phase", "connection": id, "phase": &phase}),
            );
            rank.phases.push((phase, at_ns));
        }
        ProbeMessage::Model {
            module,
            parameters_by_dtype,
            buffers_by_dtype,
            trainable_parameters,
            input_shapes,
            config,
            hf_config,
            gradient_checkpointing,
        } => {
            let conv = |m: BTreeMap<String, messages::DtypeCount>| {
                m.into_iter()
                    .map(|(k, v)| {
                        (
                            k,
                            gpumem_proto::workload::DtypeCount {
                                count: v.count,
                                bytes: v.bytes,
                            },
                        )
                    })
                    .collect()
            };
            rank.facts.model.get_or_insert(ModelFacts {
                module,
                parameters_by_dtype: conv(parameters_by_dtype),
                buffers_by_dtype: conv(buffers_by_dtype),
                trainable_parameters,
                input_shapes: input_shapes
                    .into_iter()
                    .map(|s| InputShape {
                        shape: s.shape,
                        dtype: s.dtype,
                    })
                    .collect(),
                config,
                hf_config,
                gradient_checkpointing,
            });
        }
        ProbeMessage::Optimizer {
            optimizer_class,
            state_bytes,
            state_by_dtype,
            parameters_covered,
        } => {
            rank.facts.optimizer.get_or_insert(OptimizerFacts {
                optimizer_class,
                state_bytes,
                state_by_dtype: state_by_dtype
                    .into_iter()
                    .map(|(k, v)| {
                        (
                            k,
                            gpumem_proto::workload::DtypeCount {
                                count: v.count,
                                bytes: v.bytes,
                            },
                        )
                    })
                    .collect(),
                parameters_covered,
            });
        }
        ProbeMessage::Generation {
            forwards,
            output_shape,
            kv_bytes,
            kv_tensors,
            ..
        } => {
            if rank.facts.generations.len() >= MAX_GENERATIONS {
                return false;
            }
            rank.facts.generations.push(GenerationFacts {
                forwards,
                output_shape,
                kv_bytes,
                kv_tensors,
            });
        }
        ProbeMessage::Failure {
            kind,
            phase,
            step,
            message,
            last,
            ..
        } => {
            if rank.failures.len() >= 16 {
                return false;
            }
            let oom = kind == "oom";
            let mut text = message.clone();
            if !last.is_empty() {
                let values: Vec<String> = last
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.map_or("null".into(), |b| b.to_string())))
                    .collect();
                let _ = write!(text, " [last read: {}]", values.join(", "));
            }
            rank.failures.push(Failure {
                kind: if oom {
                    FailureKind::OutOfMemory
                } else {
                    FailureKind::Exception
                },
                rank: None,
                phase,
                step,
                requested_bytes: if oom {
                    oom::requested_bytes(&message)
                } else {
                    None
                },
                message: text,
            });
        }
        ProbeMessage::HooksRemoved { reason, steps, .. } => {
            rank.hooks_removed = Some(format!("{reason} (steps done: {steps})"));
        }
        ProbeMessage::ProbeError { message } => {
            rank.hooks_removed = Some(format!("probe error, hooks removed: {message}"));
        }
        ProbeMessage::Truncated { .. } => return false,
        ProbeMessage::Bye {
            overhead_ns,
            hook_calls,
            instrumented_ns,
            ..
        } => {
            rank.overhead = Some(Overhead {
                overhead_ns,
                hook_calls,
                instrumented_ns,
            });
            rank.bye = true;
        }
    }
    true
}

/// The `RANK` a process reported in its hello.
fn hello_rank(rank: &RankState) -> Option<u32> {
    match &rank.hello {
        Some(ProbeMessage::Hello { rank, .. }) => *rank,
        _ => None,
    }
}

/// Pushes the phase `absorb` has just kept, if it kept one, to the paired pages.
fn push_phase(live: Option<&Feed>, rank: &mut RankState, id: u64) {
    let Some(feed) = live else { return };
    if rank.pushed >= rank.phases.len() {
        return;
    }
    rank.pushed = rank.phases.len();
    let Some((phase, _)) = rank.phases.last() else {
        return;
    };
    let rank_number = hello_rank(rank);
    feed.push(AgentMessage::WorkloadPhase {
        run_id: WORKLOAD_RUN_ID,
        process: id,
        rank: rank_number,
        phase: Box::new(phase.clone()),
    });
}

struct Assembly {
    synthetic: bool,
    created_unix_s: Option<u64>,
    requested_device: String,
    command: Vec<String>,
    allocator_env: BTreeMap<String, String>,
    steps: u32,
    ended: child::Ended,
    wall_time_ns: u64,
    collected: Collected,
    timeline: Timeline,
    context: gpumem_proto::context::RunContext,
    /// Whether a process is still running now (the command has ended).
    still_running: fn(u32) -> bool,
}

/// The processes that are helpers of another rather than ranks, by pid, with the pid
/// of the process that started them: a process whose parent also loaded the probe,
/// that carries its parent's `RANK`, `LOCAL_RANK` and `WORLD_SIZE` (inherited, as a
/// DataLoader worker's are) and ran no model step (at most the `model_load` phase
/// every process opens when it imports torch). A rank started by a launcher that
/// imports torch (torchrun's agent) has its own `RANK`; one started by `mp.spawn`
/// runs steps.
fn workers(ranks: &BTreeMap<u64, RankState>) -> BTreeMap<u32, u32> {
    type Identity = (Option<u32>, Option<u32>, Option<u32>);
    let identity = |state: &RankState| -> Option<(u32, Option<u32>, Identity)> {
        match &state.hello {
            Some(ProbeMessage::Hello {
                pid,
                ppid,
                rank,
                local_rank,
                world_size,
                ..
            }) => Some((*pid, *ppid, (*rank, *local_rank, *world_size))),
            _ => None,
        }
    };
    let by_pid: BTreeMap<u32, Identity> = ranks
        .values()
        .filter_map(identity)
        .map(|(pid, _, id)| (pid, id))
        .collect();
    ranks
        .values()
        .filter(|state| state.phases.iter().all(|(p, _)| p.name == "model_load"))
        .filter_map(identity)
        .filter_map(|(pid, ppid, id)| {
            let parent = ppid?;
            (parent != pid && by_pid.get(&parent) == Some(&id)).then_some((pid, parent))
        })
        .collect()
}

fn assemble(a: Assembly) -> WorkloadFile {
    let mut failures = Vec::new();
    let mut ranks = Vec::new();
    let mut stand_in = false;
    let workers = workers(&a.collected.ranks);
    for (_, state) in a.collected.ranks {
        let Some(ProbeMessage::Hello {
            pid,
            ppid: _,
            rank,
            local_rank,
            world_size,
            reader,
            backend,
            device_available,
            torch_version,
            cuda_version,
            hip_version,
            cudnn_version,
            allocator_backend,
            alloc_conf,
            python_executable,
            ..
        }) = state.hello
        else {
            continue;
        };
        stand_in |= reader != "torch.cuda";
        let phases: Vec<WorkloadPhase> = state
            .phases
            .into_iter()
            .map(|(mut p, at)| {
                p.process_tree_peak_bytes =
                    sampler::peak_between(&a.timeline, at.saturating_sub(p.wall_time_ns), at);
                p
            })
            .collect();
        let device = phases
            .iter()
            .find_map(|p| p.device)
            .map(|d| format!("cuda:{d}"));
        for mut f in state.failures {
            f.rank = rank;
            failures.push(f);
        }
        let worker_of = workers.get(&pid).copied();
        // A worker is ended by its rank when the loader is done (DataLoader terminates
        // the ones that do not exit in time): no goodbye is no failure there.
        if !state.bye && worker_of.is_none() {
            failures.push(Failure {
                kind: FailureKind::ProbeLost,
                rank,
                phase: phases.last().map(|p| p.name.clone()),
                step: phases.last().and_then(|p| p.step),
                requested_bytes: None,
                message: if (a.still_running)(pid) {
                    format!(
                        "process {pid} is still running after the command ended (started by it and left behind; not stopped by gpumem): its phases are those until the command ended"
                    )
                } else {
                    format!(
                        "process {pid} ended without the probe's goodbye (killed, crashed or exited abruptly)"
                    )
                },
            });
        }
        let comparison = compare::compare(&state.facts, &phases);
        ranks.push(RankResult {
            pid,
            rank,
            local_rank,
            world_size,
            worker_of,
            device,
            environment: ProbeEnvironment {
                reader,
                backend,
                device_available,
                torch_version,
                cuda_version,
                hip_version,
                cudnn_version,
                allocator_backend,
                alloc_conf,
                python_executable,
            },
            phases,
            facts: state.facts,
            overhead: state.overhead,
            hooks_removed: state.hooks_removed,
            ended_cleanly: state.bye,
            comparison,
        });
    }
    if ranks.is_empty() {
        failures.push(Failure {
            kind: FailureKind::ProbeNeverConnected,
            rank: None,
            phase: None,
            step: None,
            requested_bytes: None,
            message: "no process of the command imported torch with the probe loaded (not a Python/PyTorch program, or PYTHONPATH was reset): only the device-level timeline was measured".into(),
        });
    }
    if let Some(sig) = a.ended.signal {
        failures.push(Failure {
            kind: FailureKind::Signal,
            rank: None,
            phase: None,
            step: None,
            requested_bytes: None,
            message: format!("the command was ended by signal {sig}"),
        });
    } else if let Some(code) = a.ended.code.filter(|c| *c != 0) {
        failures.push(Failure {
            kind: FailureKind::ExitCode,
            rank: None,
            phase: None,
            step: None,
            requested_bytes: None,
            message: format!("the command exited with code {code}"),
        });
    }
    let synthetic = a.synthetic || stand_in;
    WorkloadFile {
        schema: WORKLOAD_SCHEMA.to_owned(),
        synthetic,
        note: synthetic.then(|| {
            "SYNTHETIC: the memory figures come from a test stand-in, not a GPU; they are not memory of anything".to_owned()
        }),
        agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        created_unix_s: a.created_unix_s,
        requested_device: a.requested_device,
        command: a.command,
        allocator_env: a.allocator_env,
        steps_instrumented: a.steps,
        outcome: Outcome {
            status: if failures.is_empty() {
                Status::Ok
            } else {
                Status::Failed
            },
            exit_code: a.ended.code,
            signal: a.ended.signal,
            forwarded_signals: a.ended.forwarded,
            wall_time_ns: a.wall_time_ns,
            failures,
        },
        ranks,
        timeline: a.timeline,
        channel: a.collected.stats,
        context: Some(a.context),
    }
}

/// "… n more" when a list was cut at `shown` in the report.
fn more(s: &mut String, total: usize, shown: usize, what: &str) {
    if total > shown {
        let _ = writeln!(
            s,
            "  … {} more {what} (every one is in --output)",
            total - shown
        );
    }
}

fn b(v: Option<u64>) -> String {
    v.map(group_digits).unwrap_or_else(|| "null".to_owned())
}

/// The human report (on stderr: stdout belongs to the command).
pub fn report(file: &WorkloadFile) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\ngpumem-agent run — {}", file.command.join(" "));
    if file.synthetic {
        let _ = writeln!(
            s,
            "SYNTHETIC — {}",
            file.note.as_deref().unwrap_or("not a GPU measurement")
        );
    }
    let o = &file.outcome;
    let _ = writeln!(
        s,
        "outcome: {:?} · exit code {} · signal {} · {} ms",
        o.status,
        o.exit_code.map_or("none".into(), |c| c.to_string()),
        o.signal.map_or("none".into(), |c| c.to_string()),
        o.wall_time_ns / 1_000_000
    );
    for f in o.failures.iter().take(REPORT_FAILURES) {
        let _ = writeln!(
            s,
            "  failure {:?}{}{}{}: {}",
            f.kind,
            f.rank.map_or(String::new(), |r| format!(" rank {r}")),
            f.phase
                .as_ref()
                .map_or(String::new(), |p| format!(" in {p}")),
            f.requested_bytes.map_or(String::new(), |r| format!(
                " (requested {})",
                Bytes(r).describe()
            )),
            f.message
        );
    }
    more(&mut s, o.failures.len(), REPORT_FAILURES, "failures");
    for r in file.ranks.iter().take(REPORT_RANKS) {
        if let Some(parent) = r.worker_of {
            let _ = writeln!(
                s,
                "\nworker process {} of pid {parent} (a DataLoader worker or another helper, not a rank) · {} phases",
                r.pid,
                r.phases.len()
            );
            continue;
        }
        let _ = writeln!(
            s,
            "\nrank {} · local rank {} · pid {} · {} · backend {} · reader {} · torch {}",
            r.rank.map_or("-".into(), |v| v.to_string()),
            r.local_rank.map_or("-".into(), |v| v.to_string()),
            r.pid,
            r.device.as_deref().unwrap_or("device not read"),
            r.environment.backend,
            r.environment.reader,
            r.environment.torch_version.as_deref().unwrap_or("?"),
        );
        let _ = writeln!(
            s,
            "  {:<16} {:>5} {:>16} {:>16} {:>16} {:>16} {:>16} {:>16} {:>10}",
            "phase",
            "step",
            "alloc start",
            "alloc peak",
            "alloc end",
            "resv start",
            "resv peak",
            "resv end",
            "wall ms"
        );
        // The first phases, then the last one (where a failing run stopped).
        let shown = r.phases.len().min(REPORT_PHASES);
        let last = r.phases.len().saturating_sub(1);
        for (i, p) in r.phases.iter().enumerate() {
            if i >= shown.saturating_sub(1) && i != last {
                if i == shown.saturating_sub(1) {
                    let _ = writeln!(
                        s,
                        "  … {} more phases (every one is in --output)",
                        r.phases.len() - shown
                    );
                }
                continue;
            }
            let a = &p.allocator;
            let _ = writeln!(
                s,
                "  {:<16} {:>5} {:>16} {:>16} {:>16} {:>16} {:>16} {:>16} {:>10.3}{}{}",
                p.name,
                p.step.map_or("-".into(), |v| v.to_string()),
                b(a.allocated_start_bytes),
                b(a.allocated_peak_bytes),
                b(a.allocated_end_bytes),
                b(a.reserved_start_bytes),
                b(a.reserved_peak_bytes),
                b(a.reserved_end_bytes),
                p.wall_time_ns as f64 / 1e6,
                if p.first_step { "  (first step)" } else { "" },
                p.error
                    .as_ref()
                    .map_or(String::new(), |e| format!("  FAILED: {e}")),
            );
        }
        if !r.comparison.lines.is_empty() {
            let traced = r.comparison.lines.iter().any(|l| l.traced_bytes.is_some());
            let _ = writeln!(
                s,
                "  computed vs observed{} (bytes):",
                if traced { " vs traced" } else { "" }
            );
            for l in &r.comparison.lines {
                let _ = writeln!(
                    s,
                    "    {:<18} {:>16} ({:?}) · observed {:>16}{} — {}{}",
                    l.item,
                    b(l.computed_bytes),
                    l.basis,
                    b(l.observed_bytes),
                    if traced {
                        format!(" · traced {:>16}", b(l.traced_bytes))
                    } else {
                        String::new()
                    },
                    l.observed_how,
                    l.why.as_ref().map_or(String::new(), |w| format!(" [{w}]")),
                );
            }
            for d in &r.comparison.differences {
                let _ = writeln!(
                    s,
                    "    difference {:?}: {} — {}",
                    d.kind,
                    d.bytes
                        .map_or("null".into(), |v| group_digits(v.unsigned_abs())
                            + if v < 0 { " (negative)" } else { "" }),
                    d.explanation
                );
            }
        }
        if let Some(t) = &r.comparison.trace {
            let _ = writeln!(s, "  {}", t.detail);
        }
        if let Some(ov) = r.overhead {
            let _ = writeln!(
                s,
                "  probe overhead: {:.3} ms in {} hook calls over {:.3} ms instrumented",
                ov.overhead_ns as f64 / 1e6,
                ov.hook_calls,
                ov.instrumented_ns as f64 / 1e6
            );
        }
    }
    more(&mut s, file.ranks.len(), REPORT_RANKS, "ranks");
    match &file.timeline.reason {
        Some(reason) => {
            let _ = writeln!(s, "\ndevice-level timeline: none ({reason})");
        }
        None => {
            for d in &file.timeline.devices {
                let _ = writeln!(
                    s,
                    "\ndevice-level (NVML, process tree) on device {}: peak {} in {} samples",
                    d.index,
                    d.peak_bytes.map_or("null".into(), |p| Bytes(p).describe()),
                    d.samples.len()
                );
            }
        }
    }
    s
}
