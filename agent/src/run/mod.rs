//! `gpumem-agent run -- COMMAND`: the user's own program measured phase by phase, beside
//! the estimate for the same workload — the answer to "why did my peak exceed the
//! estimate?".
//!
//! The command runs as a child ([`crate::process`]: terminal and signals passed through) with the
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

mod assemble;
pub mod channel;
mod collect;
pub mod compare;
pub mod history;
pub mod messages;
pub mod oom;
pub mod probe;
mod report;
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
use crate::measure::EventsFormat;
use crate::serve::live::{Feed, WORKLOAD_RUN_ID};
use channel::{Channel, ChannelEvent};
use gpumem_proto::wire::AgentMessage;
use messages::ProbeMessage;

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
    /// Record PyTorch's allocator history in each process of the command
    /// (`torch.cuda.memory._record_memory_history`, Python stacks, at most 200 000 events
    /// and 8 MiB converted per process) and split each phase's peak into the estimate's
    /// lines: the document keeps it (`memory_history` per rank) and the table names the
    /// line that exceeded its estimate. PATH (default: --output's name with `.pickle`) is
    /// a new file with the raw snapshot, which pytorch.org/memory_viz reads.
    #[arg(long, value_name = "PATH", num_args = 0..=1)]
    pub memory_history: Option<Option<PathBuf>>,
    /// Prometheus export (textfile collector, Pushgateway).
    #[command(flatten)]
    pub export: crate::export::sink::ExportArgs,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<OsString>,
}

/// A ROCm device is present when the kernel's compute interface exists.
fn rocm_device_present() -> bool {
    std::path::Path::new("/dev/kfd").exists()
}

/// Runs `run`.
pub fn run(args: Args) -> Result<Exit> {
    // Step one: usage and the output path; nothing is started on an error here.
    let devices = crate::device::parse_device(&args.device)?;
    if let Some(path) = &args.output {
        crate::private::check_new_path(path)?;
    }
    let pickle = args
        .memory_history
        .as_ref()
        .and_then(|explicit| history::pickle_target(explicit.as_deref(), args.output.as_deref()));
    if let Some(path) = &pickle {
        crate::private::check_new_path(path)?;
    }
    let Some(program) = args.command.first() else {
        bail!("no command given: gpumem-agent run [OPTIONS] -- COMMAND [ARGS…]");
    };
    args.export.validate()?;
    traced::check_overrides(&args.trace_with).map_err(anyhow::Error::msg)?;
    let synthetic = crate::device::synthetic_test_switch();
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
    if args.memory_history.is_some() {
        command
            .env(history::ENV_ENTRIES, history::ENTRIES.to_string())
            .env(history::ENV_BYTES, history::BYTES_PER_PROCESS.to_string());
    }
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
    let running = crate::process::spawn(command).with_context(|| {
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
    let said: BTreeMap<u32, history::Said> = collected
        .ranks
        .values()
        .filter_map(|r| Some((collect::hello_pid(r)?, r.history.clone()?)))
        .collect();

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
        still_running: crate::process::still_running,
        context,
    });
    if args.memory_history.is_some() {
        // While the probe's folder (where each process wrote its history) still exists.
        history::attach(&mut file, dir.path(), &said, pickle.as_deref());
    }
    drop(dir);
    // After the command: the trace takes CPU only, never from the measured program.
    traced::trace_ranks(&mut file, &args.trace_with, args.no_trace);
    crate::out::err!("{}", report(&file));
    if let Some(x) = &exporter {
        x.finish(&crate::export::from_workload(&file));
    }
    if let Some(feed) = &live {
        // The page is sent the document without the histories' events (it draws their
        // attribution); --output keeps them.
        let mut result = serde_json::to_value(&file).unwrap_or_default();
        gpumem_proto::workload::strip_history_events(&mut result);
        feed.push(AgentMessage::WorkloadFinished {
            run_id: WORKLOAD_RUN_ID,
            ok: file.outcome.status == Status::Ok,
            result,
        });
        // The sessions write on threads of their own: give them a moment to send the
        // document before the process ends (the page keeps it after the agent goes).
        if feed.subscribers() > 0 {
            std::thread::sleep(FINAL_PUSH_GRACE);
        }
    }
    if let Some(path) = &args.output {
        let text = serde_json::to_string_pretty(&file).context("serialising the result")?;
        crate::private::write_new_atomically(path, text.as_bytes())?;
        crate::out::errln!("gpumem-agent run: result written to {}", path.display());
    }
    Ok(if file.outcome.status == Status::Ok {
        Exit::Ok
    } else {
        Exit::MeasureFailed
    })
}

use assemble::{Assembly, assemble};
use collect::{Collected, RankState, collect};
pub use report::report;
