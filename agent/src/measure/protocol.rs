//! The phase protocol of method §7–§8, written once over the [`Device`] trait.
//!
//! Per phase: synchronise; read the start allocated/reserved (and the device-level
//! figures); reset both peaks; run; synchronise; read both peaks and both end levels (and
//! the device-level figures again); record ok/failed with the error text. A failed phase
//! stops the run: what was read is kept, what was not is `None` (never 0).
//!
//! The network it drives is the one `gpumem_core::network` predicts, allocation for
//! allocation (same tensors, same order, same sizes), so computed and observed can be
//! compared line by line. The real device lives in `crate::gpu`; a recording stand-in
//! lives in `crate::device::standin`.

use std::time::Instant;

use anyhow::Result;
use gpumem_core::network::{NetworkSpec, TensorSizes};

use crate::device::{Device, DeviceReading};
use gpumem_proto::results::{
    DeviceLevel, PhaseName, PhaseResult, PoolCounters, Status, TraceEntry, TraceOp,
};

/// What to run: the network and the warm-up policy.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The network's shape (validated).
    pub spec: NetworkSpec,
    /// Forward passes in the `warmup` phase.
    pub warmup: u32,
    /// Kept `warm_forward` repeats.
    pub repeats: u32,
    /// Trim the pool before each `warm_forward` repeat.
    pub trim_between_repeats: bool,
    /// Seed of the synthetic weights and input.
    pub seed: u64,
}

/// The outcome of a run on one device.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// Every phase started, in order.
    pub phases: Vec<PhaseResult>,
    /// `Ok` if every phase passed.
    pub status: Status,
    /// The phase that failed.
    pub failed_phase: Option<PhaseName>,
    /// Its error text.
    pub error: Option<String>,
}

/// The phase order for a warm-up policy: warm_forward once per repeat.
pub fn phase_order(repeats: u32) -> Vec<PhaseName> {
    let mut order = vec![
        PhaseName::ModelLoad,
        PhaseName::Inputs,
        PhaseName::ColdForward,
        PhaseName::Warmup,
    ];
    order.extend(std::iter::repeat_n(
        PhaseName::WarmForward,
        repeats as usize,
    ));
    order
}

/// A named buffer, so frees can be traced by name.
struct Tensor<B> {
    name: String,
    bytes: u64,
    buf: B,
}

/// The network's live tensors between phases.
struct Net<B> {
    layers: Vec<(Tensor<B>, Tensor<B>)>,
    input: Option<Tensor<B>>,
    output: Option<Tensor<B>>,
}

struct Runner<'d, D: Device> {
    dev: &'d mut D,
    cfg: RunConfig,
    sizes: TensorSizes,
    seq: u64,
    trace: Vec<TraceEntry>,
    net: Net<D::Buffer>,
}

/// Runs every phase on `dev`, calling `on_phase` as soon as each phase is read.
pub fn run<D: Device>(
    dev: &mut D,
    cfg: RunConfig,
    on_phase: &mut dyn FnMut(&PhaseResult),
) -> Result<RunOutcome> {
    let sizes = cfg
        .spec
        .sizes()
        .map_err(|e| anyhow::anyhow!("invalid network: {e}"))?;
    let mut r = Runner {
        dev,
        cfg,
        sizes,
        seq: 0,
        trace: Vec::new(),
        net: Net {
            layers: Vec::new(),
            input: None,
            output: None,
        },
    };
    let mut phases = Vec::new();
    let spec = r.cfg.spec;
    let dtype = format!("{:?}", spec.dtype).to_lowercase();
    let rows = r.sizes.rows;
    let width = spec.width;
    let seed = r.cfg.seed;

    let mut plan: Vec<(PhaseName, Option<u32>, u32, String)> = vec![
        (
            PhaseName::ModelLoad,
            None,
            0,
            format!(
                "{} × (weight [{width}, {width}] + bias [{width}]) {dtype}, seeded uniform ±1/√{width}, seed {seed}",
                spec.layers
            ),
        ),
        (
            PhaseName::Inputs,
            None,
            0,
            format!(
                "input [{rows}, {width}] {dtype} (batch {} × context {}), seeded uniform ±1, seed {seed}",
                spec.batch, spec.context
            ),
        ),
        (
            PhaseName::ColdForward,
            None,
            1,
            format!(
                "input [{rows}, {width}] through {} × Linear({width}, {width}) + ReLU; first pass",
                spec.layers
            ),
        ),
        (
            PhaseName::Warmup,
            None,
            r.cfg.warmup,
            format!(
                "{} forward passes on the same input; each output kept until the next replaces it",
                r.cfg.warmup
            ),
        ),
    ];
    for i in 0..r.cfg.repeats {
        plan.push((
            PhaseName::WarmForward,
            Some(i),
            1,
            format!(
                "one forward pass on the same input (repeat {} of {})",
                i + 1,
                r.cfg.repeats
            ),
        ));
    }

    for (name, repeat, iterations, input) in plan {
        let mut trimmed = false;
        if name == PhaseName::WarmForward && r.cfg.trim_between_repeats {
            // The trim is a change of conditions before the phase, outside its window.
            let trim = r.dev.sync().and_then(|()| r.dev.trim());
            if let Err(e) = trim {
                let mut p = empty_phase(name, repeat, iterations, input, true);
                p.status = Status::Failed;
                p.error = Some(format!("trimming the pool failed: {e:#}"));
                on_phase(&p);
                let error = p.error.clone();
                phases.push(p);
                return Ok(failed(phases, name, error));
            }
            trimmed = true;
        }
        let p = r.phase(name, repeat, iterations, input, trimmed);
        on_phase(&p);
        let status = p.status;
        let error = p.error.clone();
        phases.push(p);
        if status == Status::Failed {
            return Ok(failed(phases, name, error));
        }
    }
    Ok(RunOutcome {
        phases,
        status: Status::Ok,
        failed_phase: None,
        error: None,
    })
}

fn failed(phases: Vec<PhaseResult>, name: PhaseName, error: Option<String>) -> RunOutcome {
    RunOutcome {
        phases,
        status: Status::Failed,
        failed_phase: Some(name),
        error,
    }
}

fn empty_phase(
    phase: PhaseName,
    repeat: Option<u32>,
    iterations: u32,
    input: String,
    trimmed_before: bool,
) -> PhaseResult {
    PhaseResult {
        phase,
        repeat,
        iterations,
        input,
        status: Status::Ok,
        error: None,
        trimmed_before,
        pool: PoolCounters::default(),
        device_level: DeviceLevel::default(),
        wall_time_ns: None,
        protocol_overhead_ns: None,
        trace: Vec::new(),
    }
}

impl<D: Device> Runner<'_, D> {
    /// One phase, method §7 steps 2–5.
    fn phase(
        &mut self,
        name: PhaseName,
        repeat: Option<u32>,
        iterations: u32,
        input: String,
        trimmed_before: bool,
    ) -> PhaseResult {
        let mut p = empty_phase(name, repeat, iterations, input, trimmed_before);
        let fail = |p: &mut PhaseResult, what: &str, e: anyhow::Error| {
            p.status = Status::Failed;
            p.error = Some(format!("{what}: {e:#}"));
        };

        // Step 2: finish earlier work, then read the start levels.
        let opened = Instant::now();
        if let Err(e) = self.dev.sync() {
            fail(&mut p, "synchronising before the phase", e);
            return p;
        }
        match self.dev.read_pool() {
            Ok(start) => {
                p.pool.allocated_start_bytes = Some(start.used);
                p.pool.reserved_start_bytes = Some(start.reserved);
            }
            Err(e) => {
                fail(&mut p, "reading the pool at the start", e);
                return p;
            }
        }
        let dl_start = self.dev.device_level();
        p.device_level.total_bytes = dl_start.total;
        p.device_level.free_start_bytes = dl_start.free;
        p.device_level.used_start_bytes = used(&dl_start);
        p.device_level.process_used_start_bytes = dl_start.process_used;
        p.device_level.process_used_reason = dl_start.process_reason;

        // Step 3: restart peak tracking from here.
        if let Err(e) = self.dev.reset_peaks() {
            fail(&mut p, "resetting the pool's peaks", e);
            return p;
        }

        let opening = opened.elapsed();

        // Step 4: run. Buffers a failed body still held are dropped (returned to the
        // pool) before the end read, so the end levels are what remains afterwards.
        self.trace.clear();
        let started = Instant::now();
        let ran = self.body(name, iterations);
        // Step 5: wait for the phase's work; asynchronous errors surface here.
        let synced = self.dev.sync();
        p.wall_time_ns = u64::try_from(started.elapsed().as_nanos()).ok();
        p.trace = std::mem::take(&mut self.trace);
        if let Err(e) = ran {
            fail(&mut p, "running the phase", e);
        } else if let Err(e) = synced {
            fail(&mut p, "synchronising after the phase", e);
        }

        // Read both peaks and both end levels even after a failure: the last values read.
        let closing = Instant::now();
        match self.dev.read_pool() {
            Ok(end) => {
                // The driver's watermark reset sets it to zero, and it may only rise at
                // the next allocation; a peak counter is absolute and includes what was
                // present at the start (method §5), hence the max with both current levels.
                let start_used = p.pool.allocated_start_bytes.unwrap_or(0);
                let start_reserved = p.pool.reserved_start_bytes.unwrap_or(0);
                p.pool.allocated_peak_bytes = Some(end.used_high.max(start_used).max(end.used));
                p.pool.reserved_peak_bytes =
                    Some(end.reserved_high.max(start_reserved).max(end.reserved));
                p.pool.allocated_end_bytes = Some(end.used);
                p.pool.reserved_end_bytes = Some(end.reserved);
            }
            Err(e) => {
                if p.status == Status::Ok {
                    fail(&mut p, "reading the pool at the end", e);
                }
            }
        }
        let dl_end = self.dev.device_level();
        p.device_level.free_end_bytes = dl_end.free;
        p.device_level.used_end_bytes = used(&dl_end);
        p.device_level.process_used_end_bytes = dl_end.process_used;
        if p.device_level.process_used_reason.is_none() {
            p.device_level.process_used_reason = dl_end.process_reason;
        }
        p.protocol_overhead_ns = u64::try_from((opening + closing.elapsed()).as_nanos()).ok();
        p
    }

    fn body(&mut self, name: PhaseName, iterations: u32) -> Result<()> {
        match name {
            PhaseName::ModelLoad => self.model_load(),
            PhaseName::Inputs => self.inputs(),
            PhaseName::ColdForward | PhaseName::Warmup | PhaseName::WarmForward => {
                for _ in 0..iterations {
                    self.forward()?;
                }
                Ok(())
            }
        }
    }

    fn alloc(&mut self, name: String, bytes: u64) -> Result<Tensor<D::Buffer>> {
        let seq = self.next_seq();
        match self.dev.alloc(bytes) {
            Ok(buf) => {
                self.trace.push(TraceEntry {
                    seq,
                    op: TraceOp::Alloc,
                    tensor: name.clone(),
                    bytes,
                });
                Ok(Tensor { name, bytes, buf })
            }
            Err(e) => {
                self.trace.push(TraceEntry {
                    seq,
                    op: TraceOp::AllocFailed,
                    tensor: name.clone(),
                    bytes,
                });
                Err(e.context(format!("allocating {name} ({bytes} bytes)")))
            }
        }
    }

    fn free(&mut self, t: Tensor<D::Buffer>) -> Result<()> {
        let seq = self.next_seq();
        self.dev.free(t.buf)?;
        self.trace.push(TraceEntry {
            seq,
            op: TraceOp::Free,
            tensor: t.name,
            bytes: t.bytes,
        });
        Ok(())
    }

    fn next_seq(&mut self) -> u64 {
        let s = self.seq;
        self.seq += 1;
        s
    }

    fn model_load(&mut self) -> Result<()> {
        let width = self.cfg.spec.width;
        // Kaiming-like scale keeps activations finite in float16 for any depth.
        let scale = 1.0 / (width as f32).sqrt();
        for l in 0..self.cfg.spec.layers {
            let mut w = self.alloc(format!("layer{l}.weight"), self.sizes.weight.get())?;
            self.dev
                .fill(&mut w.buf, self.cfg.seed ^ (2 * l + 1), scale)?;
            // On failure `w` is dropped here, which returns it to the pool.
            let mut b = self.alloc(format!("layer{l}.bias"), self.sizes.bias.get())?;
            self.dev
                .fill(&mut b.buf, self.cfg.seed ^ (2 * l + 2), scale)?;
            self.net.layers.push((w, b));
        }
        Ok(())
    }

    fn inputs(&mut self) -> Result<()> {
        let mut x = self.alloc("input".to_owned(), self.sizes.activation.get())?;
        self.dev.fill(&mut x.buf, self.cfg.seed, 1.0)?;
        self.net.input = Some(x);
        Ok(())
    }

    /// One pass: `act{l}` allocated, computed, then `act{l-1}` freed; the last
    /// activation replaces the previous pass's output, which is freed after.
    fn forward(&mut self) -> Result<()> {
        let rows = self.sizes.rows;
        let width = self.cfg.spec.width;
        let mut prev: Option<Tensor<D::Buffer>> = None;
        for l in 0..self.net.layers.len() {
            let mut y = self.alloc(format!("act{l}"), self.sizes.activation.get())?;
            let x = match (&prev, &self.net.input) {
                (Some(p), _) => &p.buf,
                (None, Some(input)) => &input.buf,
                (None, None) => anyhow::bail!("forward pass without an input"),
            };
            let (w, b) = &self.net.layers[l];
            self.dev
                .linear_relu(x, &w.buf, &b.buf, &mut y.buf, rows, width)?;
            if let Some(p) = prev.take() {
                self.free(p)?;
            }
            prev = Some(y);
        }
        if let Some(old) = self.net.output.take() {
            self.free(old)?;
        }
        self.net.output = prev;
        Ok(())
    }
}

fn used(r: &DeviceReading) -> Option<u64> {
    match (r.total, r.free) {
        (Some(t), Some(f)) => t.checked_sub(f),
        _ => None,
    }
}
