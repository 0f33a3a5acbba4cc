//! `gpumem-agent measure`: the phase protocol of method §7–§8 on real GPUs, written to a
//! versioned results file (`gpumem.results/v1`) and, with `--events jsonl`, streamed as
//! one JSON line per finished phase.
//!
//! Arguments are parsed in two steps: [`Args::validate`] checks every flag and the output
//! path without touching the system's GPU, and only then is the driver loaded. Without a
//! driver or a device the command stops with exit 2 before anything is written
//! ("no GPU, no number"). A failed phase (e.g. out of memory) still writes the result with
//! the failed phase, its error and the last values read, and exits 1.

pub mod output;
pub mod protocol;

use std::io::Write;
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use gpumem_core::network::{self, NetworkSpec};
use gpumem_proto::results::{
    Computed, ComputedPhase, Dimensions, Dtype, EVENTS_SCHEMA, Environment, Event,
    MeasurementResult, PhaseName, Protocol, RESULTS_SCHEMA, ResultsFile, Status,
};

use crate::device::Device;
use crate::device::{DeviceSel, parse_device};
use crate::exit::Exit;
use crate::gpu;
use protocol::RunConfig;

/// Largest number of elements in one tensor: 2^40 (4 TiB in float32), far beyond any
/// GPU today, and small enough that byte counts never overflow and the activation
/// kernel's 64-bit grid-stride loop is exact.
pub const MAX_ELEMENTS: u64 = 1 << 40;
/// Largest `batch × context` and `width`: cuBLAS takes matrix sizes as C `int`.
pub const MAX_MATRIX_DIM: u64 = i32::MAX as u64;
/// Largest number of layers (bounds the model's byte count and the run's length).
pub const MAX_LAYERS: u64 = 4096;
/// Largest warm-up iterations and repeats (bounds the run's length).
pub const MAX_PASSES: u32 = 100_000;

/// `--dtype` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DtypeArg {
    /// 4-byte IEEE float.
    Float32,
    /// 2-byte IEEE half.
    Float16,
    /// 2-byte bfloat16.
    Bfloat16,
}

impl From<DtypeArg> for Dtype {
    fn from(d: DtypeArg) -> Self {
        match d {
            DtypeArg::Float32 => Dtype::Float32,
            DtypeArg::Float16 => Dtype::Float16,
            DtypeArg::Bfloat16 => Dtype::Bfloat16,
        }
    }
}

/// `--events` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EventsFormat {
    /// One JSON object per line on stdout (`gpumem.events/v1`).
    Jsonl,
}

/// The network and protocol flags shared by `measure` and `bisect`.
#[derive(Debug, Clone, clap::Args)]
pub struct NetworkArgs {
    /// Device to measure: `cuda:N`, or `all` to measure each device in turn.
    #[arg(long, default_value = "cuda:0")]
    pub device: String,
    /// Batch size (≥ 1).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// Rows per batch item (≥ 1); a tensor dimension, not an LLM context.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..))]
    pub context: u64,
    /// Features per row; every layer is Linear(width, width) (≥ 1).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub width: u64,
    /// Number of Linear + ReLU layers (≥ 1).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    pub layers: u64,
    /// Element type of weights, input and activations.
    #[arg(long, value_enum, default_value = "float32")]
    pub dtype: DtypeArg,
    /// Forward passes in the `warmup` phase.
    #[arg(long, default_value_t = 3)]
    pub warmup: u32,
    /// Kept `warm_forward` repeats.
    #[arg(long, default_value_t = 5)]
    pub repeats: u32,
    /// Return the pool's unused memory to the device before each warm repeat (the pool
    /// analogue of `empty_cache`; recorded, since it changes the conditions).
    #[arg(long)]
    pub trim_between_repeats: bool,
    /// Seed of the synthetic weights and input.
    #[arg(long, default_value_t = 0x5EED)]
    pub seed: u64,
}

/// Arguments of `measure`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The network and protocol.
    #[command(flatten)]
    pub net: NetworkArgs,
    /// Results file to write; must not exist (the agent never overwrites a result).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Stream events on stdout as each phase is read.
    #[arg(long, value_enum)]
    pub events: Option<EventsFormat>,
    /// Prometheus export (textfile collector, Pushgateway).
    #[command(flatten)]
    pub export: crate::export::sink::ExportArgs,
}

/// A validated request: nothing in it can overflow or surprise the GPU code.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Devices to measure.
    pub devices: DeviceSel,
    /// `--device` as given.
    pub device_arg: String,
    /// The network.
    pub spec: NetworkSpec,
    /// Dimensions as recorded.
    pub dimensions: Dimensions,
    /// Warm-up policy and conditions.
    pub run: RunConfig,
    /// Where to write, checked not to exist.
    pub output: Option<PathBuf>,
    /// Event streaming.
    pub events: Option<EventsFormat>,
}

impl NetworkArgs {
    /// Checks every bound (step one of two; touches no GPU).
    pub fn validate(&self) -> Result<(DeviceSel, NetworkSpec, RunConfig)> {
        let devices = parse_device(&self.device)?;
        let spec = NetworkSpec {
            batch: self.batch,
            context: self.context,
            width: self.width,
            layers: self.layers,
            dtype: match self.dtype {
                DtypeArg::Float32 => network::Dtype::Float32,
                DtypeArg::Float16 => network::Dtype::Float16,
                DtypeArg::Bfloat16 => network::Dtype::Bfloat16,
            },
        };
        let sizes = spec.sizes().map_err(|e| anyhow::anyhow!("{e}"))?;
        if sizes.rows > MAX_MATRIX_DIM {
            bail!(
                "--batch × --context = {} exceeds {MAX_MATRIX_DIM} rows (cuBLAS's int limit)",
                sizes.rows
            );
        }
        if self.width > MAX_MATRIX_DIM {
            bail!(
                "--width {} exceeds {MAX_MATRIX_DIM} (cuBLAS's int limit)",
                self.width
            );
        }
        let width_sq = self.width.saturating_mul(self.width);
        if width_sq > MAX_ELEMENTS {
            bail!(
                "--width {}: a {0}×{0} weight exceeds 2^40 elements",
                self.width
            );
        }
        let act = sizes.rows.saturating_mul(self.width);
        if act > MAX_ELEMENTS {
            bail!("--batch × --context × --width = {act} elements exceeds 2^40 for one activation");
        }
        if self.layers > MAX_LAYERS {
            bail!("--layers {} exceeds {MAX_LAYERS}", self.layers);
        }
        if self.warmup > MAX_PASSES || self.repeats > MAX_PASSES {
            bail!("--warmup and --repeats must be at most {MAX_PASSES}");
        }
        network::predict(&spec, self.warmup).map_err(|e| anyhow::anyhow!("{e}"))?;
        let run = RunConfig {
            spec,
            warmup: self.warmup,
            repeats: self.repeats,
            trim_between_repeats: self.trim_between_repeats,
            seed: self.seed,
        };
        Ok((devices, spec, run))
    }

    /// The dimensions as they go into the results file.
    pub fn dimensions(&self) -> Dimensions {
        Dimensions {
            batch: self.batch,
            context: self.context,
            width: self.width,
            layers: self.layers,
            dtype: self.dtype.into(),
        }
    }
}

impl Args {
    /// Step one: every flag and the output path, before any GPU call.
    pub fn validate(&self) -> Result<Plan> {
        let (devices, spec, run) = self.net.validate()?;
        if let Some(path) = &self.output {
            crate::private::check_new_path(path)?;
        }
        self.export.validate()?;
        Ok(Plan {
            devices,
            device_arg: self.net.device.clone(),
            spec,
            dimensions: self.net.dimensions(),
            run,
            output: self.output.clone(),
            events: self.events,
        })
    }
}

/// Where event lines go.
pub struct Events {
    enabled: bool,
    /// The Prometheus exporter, fed each phase as it ends.
    export: Option<crate::export::sink::Live>,
}

impl Events {
    /// Writes one event as a JSON line on stdout, flushed, when enabled.
    pub fn emit(&self, event: &Event) {
        if !self.enabled {
            return;
        }
        if let Ok(line) = serde_json::to_string(event) {
            let mut out = std::io::stdout().lock();
            // A closed pipe must not stop the measurement; the file is the record.
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

/// Runs `measure`.
pub fn run(args: Args) -> Result<Exit> {
    let plan = args.validate()?;
    let synthetic = crate::device::synthetic_test_switch();
    let context = crate::sched::current(synthetic);
    let events = Events {
        enabled: plan.events.is_some(),
        export: crate::export::sink::Live::start(&args.export, &context, synthetic)?,
    };
    #[cfg(debug_assertions)]
    if synthetic {
        return synthetic_run(&plan, context, &events);
    }
    let fail = |device: Option<String>, e: anyhow::Error| {
        events.emit(&Event::Failed {
            device,
            error: format!("{e:#}"),
        });
        e
    };

    // Step two: the GPU. Every failure up to here writes nothing and exits 2.
    let driver = gpu::Driver::init().map_err(|e| fail(None, e))?;
    let indices: Vec<u32> = match plan.devices {
        DeviceSel::One(i) => vec![i],
        DeviceSel::All => (0..driver.device_count).collect(),
    };
    if indices.is_empty() {
        return Err(fail(
            None,
            anyhow::anyhow!(
                "no CUDA device visible (check CUDA_VISIBLE_DEVICES): cannot measure here"
            ),
        ));
    }
    // Open lazily, one device at a time, so devices are measured apart; a device that
    // cannot be opened stops the command before anything is written.
    let mut runs = Vec::new();
    for index in indices {
        let mut dev = driver
            .open(index, plan.dimensions.dtype)
            .map_err(|e| fail(Some(format!("cuda:{index}")), e))?;
        let env = dev.environment().clone();
        runs.push(measure_one(&plan, &mut dev, env, &events));
        drop(dev);
    }
    finish(&plan, runs, &events, Some(context), false)
}

/// The SYNTHETIC test run (debug builds, test switch on): the protocol on the recording
/// stand-in, a 1 GiB pool per selected device, everything labelled SYNTHETIC.
#[cfg(debug_assertions)]
fn synthetic_run(
    plan: &Plan,
    context: gpumem_proto::context::RunContext,
    events: &Events,
) -> Result<Exit> {
    let indices = match plan.devices {
        DeviceSel::One(i) => vec![i],
        DeviceSel::All => vec![0],
    };
    let mut runs = Vec::new();
    for index in indices {
        let mut dev = crate::device::standin::StandIn::new(SYNTHETIC_CAPACITY);
        let mut env = gpu::base_environment(index);
        env.gpu_name = gpumem_proto::results::Fact::unknown("SYNTHETIC: no GPU was used");
        env.uuid = gpumem_proto::results::Fact::unknown("SYNTHETIC: no GPU was used");
        runs.push(measure_one(plan, &mut dev, env, events));
    }
    finish(plan, runs, events, Some(context), true)
}

/// The stand-in's pool in a SYNTHETIC test run: 1 GiB (not any real card's).
#[cfg(debug_assertions)]
pub const SYNTHETIC_CAPACITY: u64 = 1 << 30;

/// The phase protocol (method §7) on one device, as a [`MeasurementResult`].
pub fn measure_one<D: Device>(
    plan: &Plan,
    dev: &mut D,
    environment: Environment,
    events: &Events,
) -> MeasurementResult {
    let device = environment.device.clone();
    events.emit(&Event::Started {
        schema: EVENTS_SCHEMA.to_owned(),
        device: device.clone(),
        dimensions: plan.dimensions,
        protocol: protocol_record(plan),
        environment: Box::new(environment.clone()),
    });
    let computed = computed(plan);
    let started = Instant::now();
    let outcome = protocol::run(dev, plan.run.clone(), &mut |p| {
        events.emit(&Event::Phase {
            device: device.clone(),
            result: Box::new(p.clone()),
        });
        if let Some(x) = &events.export {
            x.results_phase(&environment, p);
        }
    });
    let wall_time_ns = u64::try_from(started.elapsed().as_nanos()).ok();
    let result = match outcome {
        Ok(o) => MeasurementResult {
            device: device.clone(),
            status: o.status,
            failed_phase: o.failed_phase,
            error: o.error,
            environment,
            phases: o.phases,
            computed: computed.clone(),
            wall_time_ns,
        },
        Err(e) => MeasurementResult {
            device: device.clone(),
            status: Status::Failed,
            failed_phase: None,
            error: Some(format!("{e:#}")),
            environment,
            phases: Vec::new(),
            computed: computed.clone(),
            wall_time_ns,
        },
    };
    events.emit(&Event::Finished {
        device,
        status: result.status,
        failed_phase: result.failed_phase,
        error: result.error.clone(),
        computed,
        wall_time_ns,
    });
    result
}

/// Assembles, writes and reports; the exit code says whether any run failed.
pub fn finish(
    plan: &Plan,
    runs: Vec<MeasurementResult>,
    events: &Events,
    context: Option<gpumem_proto::context::RunContext>,
    synthetic: bool,
) -> Result<Exit> {
    let mut file = results_file(plan, runs);
    file.context = context;
    if synthetic {
        file.synthetic = true;
        file.note = Some(
            "SYNTHETIC — not a GPU measurement: the agent's test stand-in (a simulated 1 GiB pool with a 2 MiB granularity; device-level figures invented) ran the protocol; allocated figures equal gpumem-core's prediction by construction.".to_owned(),
        );
    }
    if let Some(x) = &events.export {
        x.finish(&crate::export::from_results(&file));
    }
    let report = output::human_report(&file);
    if events.enabled {
        crate::out::err!("{report}");
    } else {
        crate::out::out!("{report}");
    }
    if let Some(path) = &plan.output {
        let text = serde_json::to_string_pretty(&file).context("serialising the results")?;
        if let Err(e) = crate::private::write_new_atomically(path, text.as_bytes()) {
            events.emit(&Event::Failed {
                device: None,
                error: format!("{e:#}"),
            });
            return Err(e);
        }
        events.emit(&Event::Saved {
            path: path.display().to_string(),
            status: if file.any_failed() {
                Status::Failed
            } else {
                Status::Ok
            },
        });
        let note = format!("results written to {}\n", path.display());
        if events.enabled {
            crate::out::err!("{note}");
        } else {
            crate::out::out!("{note}");
        }
    }
    Ok(if file.any_failed() {
        Exit::MeasureFailed
    } else {
        Exit::Ok
    })
}

/// The results document for `runs`.
pub fn results_file(plan: &Plan, runs: Vec<MeasurementResult>) -> ResultsFile {
    ResultsFile {
        schema: RESULTS_SCHEMA.to_owned(),
        synthetic: false,
        note: None,
        agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        created_unix_s: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs()),
        requested_device: plan.device_arg.clone(),
        dimensions: plan.dimensions,
        protocol: protocol_record(plan),
        runs,
        context: None,
    }
}

/// Phase order and warm-up policy as recorded.
pub fn protocol_record(plan: &Plan) -> Protocol {
    Protocol {
        phase_order: protocol::phase_order(plan.run.repeats),
        warmup_iterations: plan.run.warmup,
        warm_repeats: plan.run.repeats,
        trim_between_repeats: plan.run.trim_between_repeats,
        seed: plan.run.seed,
        synchronisation: "cuCtxSynchronize on the measured device before the start read and after the run".to_owned(),
        process: "every phase and repeat in this one process; each device measured in turn with its own context and pool".to_owned(),
    }
}

/// gpumem-core's prediction for the same network.
pub fn computed(plan: &Plan) -> Option<Computed> {
    let predicted = network::predict(&plan.spec, plan.run.warmup).ok()?;
    let phases = predicted
        .iter()
        .map(|p| ComputedPhase {
            phase: match p.phase {
                network::Phase::ModelLoad => PhaseName::ModelLoad,
                network::Phase::Inputs => PhaseName::Inputs,
                network::Phase::ColdForward => PhaseName::ColdForward,
                network::Phase::Warmup => PhaseName::Warmup,
                network::Phase::WarmForward => PhaseName::WarmForward,
            },
            allocated_start_bytes: p.start.get(),
            allocated_peak_bytes: p.peak.get(),
            allocated_end_bytes: p.end.get(),
        })
        .collect();
    Some(Computed {
        source: "gpumem-core network::predict: requested bytes of the agent's own tensors"
            .to_owned(),
        phases,
        known_differences: network::KNOWN_DIFFERENCES
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
    })
}

#[cfg(test)]
mod tests;
