//! Runs the embedded trace probe (`agent/python/gpumem_trace.py`) in a Python with
//! torch and transformers, and reads its one JSON answer.
//!
//! The probe is written to a private folder of the agent's (`crate::private`: 0700 in
//! a per-user base no one else can write, so the script's folder, which Python puts
//! first on `sys.path`, holds nothing but the probe) and run as a script with the
//! request on standard input. It ends with the agent: killed when the agent's thread
//! that started it ends (`PR_SET_PDEATHSIG`), and on its own at the deadline or when
//! its parent is gone (the probe's watchdog). What it builds is bounded before Python
//! starts ([`check_cost`]). Its environment keeps it off the network and off any
//! GPU (`HF_HUB_OFFLINE`, `TRANSFORMERS_OFFLINE`, an empty `CUDA_VISIBLE_DEVICES`):
//! the model is built from the config alone, on PyTorch's `meta` device.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::private::PrivateDir;
use gpumem_core::estimate::{EstimateInput, Fsdp, Offload, TrainMode};
use gpumem_core::format::{Dtype, StorageFormat};
use gpumem_core::training::{CheckpointPolicy, Framework, LoraTargets, QloraKernel};
use gpumem_proto::trace::{TRACE_SCHEMA, TraceDocument, TraceRanks, TraceWorkload};
use serde_json::Value;

/// The probe's source, embedded in the binary.
pub const PROBE_SOURCE: &str = include_str!("../../python/gpumem_trace.py");

/// The snapshot-to-history converter the trace (and `run`'s probe) import.
pub const HISTORY_SOURCE: &str = include_str!("../../python/gpumem_history.py");
/// The probes' watchdog, written beside each probe (`gpumem_watchdog.py`).
pub const WATCHDOG_SOURCE: &str = include_str!("../../python/gpumem_watchdog.py");

/// A trace and, when the history was recorded, its snapshot pickle.
pub type Traced = (TraceDocument, Option<Vec<u8>>);

/// Largest snapshot pickle the agent copies out of the trace's folder.
pub const MAX_PICKLE_BYTES: u64 = 256 << 20;

/// Longest answer read from the probe (a trace is a few kilobytes; with its history
/// at most `MAX_HISTORY_BYTES` more).
const MAX_ANSWER_BYTES: u64 = 64 << 20;
/// Standard error kept to explain a failure (its end, where Python puts the error).
const MAX_STDERR_BYTES: u64 = 1 << 20;
/// A trace that takes longer than this is stopped (a 1B model takes seconds).
const DEADLINE: Duration = Duration::from_secs(900);

/// What to install when the probe cannot run.
pub const WHAT_TO_INSTALL: &str = "the trace needs Python 3 with torch, transformers and (for LoRA/QLoRA) peft: `pip install torch transformers peft` (no GPU needed), or pass --python PATH";

/// Why no trace came back.
#[derive(Debug)]
pub enum Failure {
    /// No usable Python, torch, transformers or peft: say what to install (exit 2).
    Unavailable(String),
    /// The probe ran and failed (an architecture it cannot build, an operator without a
    /// meta kernel, …).
    Failed(String),
    /// The workload is past what a trace may build here ([`check_cost`]); Python was
    /// not started (exit 2).
    Refused(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unavailable(why) => write!(f, "{why}; {WHAT_TO_INSTALL}"),
            Failure::Failed(why) => write!(f, "the trace failed: {why}"),
            Failure::Refused(why) => write!(f, "not traced: {why}"),
        }
    }
}

/// The workload the probe runs, from the estimator's input (one vocabulary for both).
pub fn workload_of(input: &EstimateInput, expandable_segments: bool) -> Result<TraceWorkload> {
    let Some(context) = input.context else {
        bail!("--context is needed: the tokens per sequence to trace");
    };
    let dtype = match input.compute_dtype {
        Dtype::Bf16 => "bfloat16",
        Dtype::F16 => "float16",
        Dtype::F32 => "float32",
        other => bail!(
            "--compute-dtype {}: the trace runs in bf16, fp16 or fp32",
            other.name()
        ),
    };
    let train = match input.train {
        TrainMode::None => "none",
        TrainMode::Full => "full",
        TrainMode::Lora => "lora",
        TrainMode::Qlora => "qlora",
    };
    // The probe runs PEFT's LoRA as PEFT builds it by default, and QLoRA's base as its
    // NF4 stand-in, which keeps what bitsandbytes 0.43.2 and later keep; what it cannot
    // follow is refused rather than traced as something else.
    // Autocast (what `estimate` accepts: LoRA or QLoRA, in the compute dtype) runs on
    // the meta device through the probe's stand-in for its cast policy, one GPU only.
    let autocast = match input.autocast {
        None => None,
        Some(t) if input.train.adapters() && t == input.compute_dtype && t.bytes() == 2 => {
            if input.gpus > 1 {
                bail!(
                    "a rank's step is traced without autocast: leave out --autocast or --gpus to trace"
                );
            }
            torch_dtype(t).map(String::from)
        }
        Some(t) => bail!(
            "--autocast {} is traced for LoRA and QLoRA in their 16-bit compute dtype ({})",
            t.name(),
            input.compute_dtype.name()
        ),
    };
    if input.train.adapters()
        && (input.lora_dtype != Dtype::F32
            || input.lora_dropout
            || input.qlora_kernel != QloraKernel::Bnb)
    {
        bail!(
            "the trace runs PEFT's LoRA (fp32 adapters, no dropout) and, for QLoRA, a 4-bit linear that keeps what bitsandbytes 0.43.2 and later keep: leave out --lora-dtype, --lora-dropout and --qlora-kernel to trace"
        );
    }
    // The probe runs transformers' decoder and loss with PEFT, under a whole-step
    // checkpointing or none: a framework's other paths are refused, not traced as
    // transformers'.
    let d = gpumem_core::estimate::EstimateInput::default();
    for (off, what) in [
        (
            input.loss != d.loss,
            "--loss (the trace runs transformers' ForCausalLMLoss)",
        ),
        (
            !matches!(
                input.framework,
                Framework::Unnamed | Framework::Transformers | Framework::Axolotl
            ),
            "--framework (the trace runs transformers and PEFT)",
        ),
        (input.offload_activations, "--offload-activations"),
        (input.optimizer_in_backward, "--optimizer-in-backward"),
        (input.checkpointing_every > 1, "--checkpointing-every"),
        (!input.modules_to_save.is_empty(), "--modules-to-save"),
    ] {
        if off {
            bail!("{what} is not traced: leave it out to trace the step");
        }
    }
    // PEFT's module names: `all` alone is its `all-linear` (the output projection
    // left out); anything else is named module by module, `lm_head` included.
    let targets: Vec<String> = if input.lora_targets.trim() == "all" {
        vec!["all".into()]
    } else {
        let t = LoraTargets::parse("lora-targets", &input.lora_targets)?;
        [
            (t.q, "q_proj"),
            (t.k, "k_proj"),
            (t.v, "v_proj"),
            (t.o, "o_proj"),
            (t.gate, "gate_proj"),
            (t.up, "up_proj"),
            (t.down, "down_proj"),
            (t.lm_head, "lm_head"),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| name.to_string())
        .collect()
    };
    Ok(TraceWorkload {
        train: train.into(),
        sequences: input.sequences,
        context,
        generate: input.generate,
        dtype: dtype.into(),
        attention: input.attention.name().into(),
        optimizer: input.optimizer.name().into(),
        master_weights: input.master_weights,
        checkpointing: input.checkpointing,
        checkpointing_policy: (input.checkpointing_policy != CheckpointPolicy::Layer)
            .then(|| input.checkpointing_policy.name().into()),
        lora_rank: input.lora_rank,
        autocast,
        lora_targets: targets,
        compile: false,
        // The estimate's QLoRA keeps the unquantised modules in fp32 as PEFT's
        // prepare_model_for_kbit_training casts them (`--keep-format fp32`, its
        // default); the probe runs that preparation itself.
        kbit_prepared: input.train == TrainMode::Qlora
            && input.keep_format == StorageFormat::Dense { dtype: Dtype::F32 }
            && input.compute_dtype != Dtype::F32,
        logits: input.logits.name().into(),
        expandable_segments: expandable_segments || input.expandable_segments,
        ranks: ranks_of(input)?,
    })
}

/// The dtype names the probe takes (torch's).
fn torch_dtype(d: Dtype) -> Option<&'static str> {
    match d {
        Dtype::Bf16 => Some("bfloat16"),
        Dtype::F16 => Some("float16"),
        Dtype::F32 => Some("float32"),
        _ => None,
    }
}

/// Rank 0 of a data-parallel training job of `--gpus` ranks, wrapped as the input says
/// (DDP, or FSDP2 `fully_shard`); `None` on one GPU or for inference. What the probe
/// cannot wrap is refused, never traced as something else.
fn ranks_of(input: &EstimateInput) -> Result<Option<TraceRanks>> {
    if input.gpus <= 1 || input.train == TrainMode::None {
        return Ok(None);
    }
    if input.tp > 1 || input.pp > 1 {
        bail!(
            "a rank's trace wraps data parallelism (DDP, FSDP2); tensor and pipeline parallelism (--tp, --pp) are not traced: leave them out to trace a data-parallel rank"
        );
    }
    if input.zero > 0 {
        if input.train != TrainMode::Full {
            bail!(
                "a DeepSpeed ZeRO rank is traced for full training (--train full): LoRA under ZeRO is computed by `estimate`"
            );
        }
        match input.compute_dtype {
            Dtype::Bf16 if !input.master_weights => bail!(
                "DeepSpeed's bf16 keeps an fp32 partition of the master weights: trace a ZeRO rank with --master-weights true"
            ),
            Dtype::Bf16 => {}
            d => bail!(
                "a DeepSpeed ZeRO rank is traced in bf16 with its fp32 master partition, not {} (fp16's loss scaling reads its gradients' values; fp32 is computed by `estimate`)",
                d.name()
            ),
        }
    }
    if input.offload_optimizer != Offload::None || input.offload_param != Offload::None {
        bail!(
            "offloading is not traced (what moves to the host is computed: `estimate` prints it per node)"
        );
    }
    if input.train == TrainMode::Qlora {
        bail!("a rank's QLoRA step is not traced (the 4-bit stand-in is not shardable by FSDP2)");
    }
    let reduce_dtype = match input.reduce_dtype {
        None => None,
        Some(d) => Some(
            torch_dtype(d)
                .with_context(|| format!("--reduce-dtype {}: bf16, fp16 or fp32", d.name()))?
                .to_string(),
        ),
    };
    Ok(Some(TraceRanks {
        world_size: input.gpus,
        rank: 0,
        nodes: input.nodes,
        scheme: if input.zero > 0 {
            "zero"
        } else if input.fsdp == Fsdp::None {
            "ddp"
        } else {
            "fsdp"
        }
        .into(),
        zero_stage: input.zero,
        reshard_after_forward: input.fsdp != Fsdp::GradOp,
        hybrid: input.fsdp == Fsdp::Hybrid,
        reduce_dtype,
        gradient_as_bucket_view: input.ddp_bucket_view,
    }))
}

/// QLoRA's double quantisation: from `--format nf4`/`nf4-dq` (default: on, as the
/// QLoRA recipes set `bnb_4bit_use_double_quant=True`).
pub fn double_quant(input: &EstimateInput) -> bool {
    match input.format {
        Some(StorageFormat::Bnb4 { double_quant, .. }) => double_quant,
        _ => true,
    }
}

/// Whether `PYTORCH_CUDA_ALLOC_CONF` turns expandable segments on.
pub fn expandable_from_env() -> bool {
    std::env::var("PYTORCH_CUDA_ALLOC_CONF").is_ok_and(|v| expandable_in(&v))
}

/// Whether an allocator setting (`PYTORCH_CUDA_ALLOC_CONF`'s syntax, `key:value,…`)
/// turns expandable segments on.
pub fn expandable_in(conf: &str) -> bool {
    conf.split(',').any(|kv| {
        let mut it = kv.splitn(2, ':');
        it.next().map(str::trim) == Some("expandable_segments")
            && it.next().map(str::trim) == Some("True")
    })
}

/// Most decoder layers a trace builds (the deepest published checkpoints have under
/// 200; each layer is Python objects and graph nodes on the CPU, about 0.1 MB).
pub const MAX_LAYERS: u64 = 1024;
/// Most expert blocks a trace builds, layers × experts per layer (Kimi K2: 60 × 384 =
/// 23 040; an expert module is a few Python objects each).
pub const MAX_EXPERT_BLOCKS: u64 = 65_536;
/// Largest LoRA rank traced (published recipes stay at or below 1 024; peft's
/// adapters are built on the meta device, but every rank is a real column of the
/// initialiser's work).
pub const MAX_LORA_RANK: u64 = 16_384;
/// Deepest nesting of a config read for these bounds (a multimodal config nests its
/// text model's one level down).
const MAX_CONFIG_DEPTH: usize = 4;

/// The config keys that count decoder layers, across families.
const LAYER_KEYS: &[&str] = &[
    "num_hidden_layers",
    "num_layers",
    "n_layer",
    "n_layers",
    "num_decoder_layers",
    "decoder_layers",
];
/// The config keys that count experts per MoE layer, across families.
const EXPERT_KEYS: &[&str] = &[
    "num_local_experts",
    "n_routed_experts",
    "num_experts",
    "moe_num_experts",
    "n_experts",
];

/// Refuses a workload whose model would cost more than the bounds above to build on
/// the CPU (time and memory), before Python starts: every layer and expert count in
/// the config (nested configs too), and the LoRA rank.
pub fn check_cost(config: &Value, workload: &TraceWorkload) -> std::result::Result<(), String> {
    if workload.train != "none" && workload.train != "full" && workload.lora_rank > MAX_LORA_RANK {
        return Err(format!(
            "--lora-rank {} is above the {MAX_LORA_RANK} a trace builds",
            workload.lora_rank
        ));
    }
    check_config_cost(config)
}

/// Most expert blocks the count probe builds (`crate::count`), layers × experts per
/// layer. It builds on the meta device (no memory), and transformers 5.23 keeps most
/// families' experts as one tensor per layer (`[experts, rows, cols]`), so its time
/// grows with the modules, not the experts: Doge's defaults (32 layers of 16 384
/// single-neuron experts, two embedding tables a layer: modeling_doge.py `DogeCDMoE`,
/// 524 288 blocks) build and run in under 20 s on two shared cores. A family with a
/// module per expert is stopped by the count's deadline instead.
pub const MAX_COUNT_EXPERT_BLOCKS: u64 = 1 << 22;

/// Refuses a config whose model would cost more than the bounds above to build on the
/// CPU: every layer and expert count in it, nested configs too.
pub fn check_config_cost(config: &Value) -> std::result::Result<(), String> {
    check_config_cost_within(config, MAX_EXPERT_BLOCKS, "a trace")
}

/// As [`check_config_cost`], with `max_expert_blocks` the bound on layers × experts,
/// for `who` (named in the refusal).
pub fn check_config_cost_within(
    config: &Value,
    max_expert_blocks: u64,
    who: &str,
) -> std::result::Result<(), String> {
    fn walk(
        v: &Value,
        depth: usize,
        max_expert_blocks: u64,
        who: &str,
    ) -> std::result::Result<(), String> {
        let Some(map) = v.as_object() else {
            return Ok(());
        };
        let count = |keys: &[&'static str]| {
            // A key set to null names no count (no experts).
            keys.iter()
                .filter_map(|k| map.get(*k).filter(|x| !x.is_null()).map(|x| (*k, x)))
                .map(|(k, x)| (k, x.as_u64().unwrap_or(u64::MAX)))
                .max_by_key(|(_, n)| *n)
        };
        let layers = count(LAYER_KEYS);
        if let Some((k, n)) = layers
            && n > MAX_LAYERS
        {
            return Err(format!(
                "config.json's {k} = {} is above the {MAX_LAYERS} layers {who} builds",
                map[k]
            ));
        }
        if let (Some((_, l)), Some((k, e))) = (layers, count(EXPERT_KEYS))
            && l.saturating_mul(e) > max_expert_blocks
        {
            return Err(format!(
                "config.json's {k} = {} over {l} layers is above the {max_expert_blocks} expert blocks {who} builds",
                map[k]
            ));
        }
        if depth < MAX_CONFIG_DEPTH {
            for x in map.values() {
                walk(x, depth + 1, max_expert_blocks, who)?;
            }
        }
        Ok(())
    }
    walk(config, 0, max_expert_blocks, who)
}

/// Runs the probe in `python` on `config` (the parsed config.json) and `workload`.
pub fn trace(
    python: &OsString,
    config: &Value,
    workload: &TraceWorkload,
    nf4_double_quant: bool,
) -> Result<std::result::Result<TraceDocument, Failure>> {
    Ok(trace_within(python, config, workload, nf4_double_quant, DEADLINE, false)?.map(|(d, _)| d))
}

/// As [`trace`], with the allocator's history recorded: the document holds it
/// (validated) and its attribution, and the snapshot pickle (PyTorch's shape) comes
/// back beside it.
pub fn trace_with_history(
    python: &OsString,
    config: &Value,
    workload: &TraceWorkload,
    nf4_double_quant: bool,
) -> Result<std::result::Result<Traced, Failure>> {
    trace_within(python, config, workload, nf4_double_quant, DEADLINE, true)
}

/// As [`trace`], stopped after `deadline`.
pub fn trace_within(
    python: &OsString,
    config: &Value,
    workload: &TraceWorkload,
    nf4_double_quant: bool,
    deadline: Duration,
    history: bool,
) -> Result<std::result::Result<Traced, Failure>> {
    if let Err(why) = check_cost(config, workload) {
        return Ok(Err(Failure::Refused(why)));
    }
    let dir = PrivateDir::in_env_base("trace").context("a folder for the trace probe")?;
    let script = dir.path().join("gpumem_trace.py");
    crate::private::write_new(&script, PROBE_SOURCE.as_bytes())?;
    crate::private::write_new(
        &dir.path().join("gpumem_history.py"),
        HISTORY_SOURCE.as_bytes(),
    )?;
    crate::private::write_new(
        &dir.path().join("gpumem_watchdog.py"),
        WATCHDOG_SOURCE.as_bytes(),
    )?;
    let pickle = dir.path().join("history.pickle");
    let mut request = serde_json::to_value(workload)?;
    if history {
        request["memory_history"] = serde_json::json!({
            "max_entries": gpumem_proto::history::MAX_EVENTS,
            "pickle_path": pickle.to_string_lossy(),
        });
    }
    request["config"] = config.clone();
    request["double_quant"] = Value::Bool(nf4_double_quant);
    // The probe's own bounds: it exits at the deadline (plus a grace the agent's kill
    // comes first in) or as soon as this process is gone.
    request["deadline_s"] = Value::from(deadline.as_secs().saturating_add(5));
    request["parent_pid"] = Value::from(std::process::id());
    let request = serde_json::to_vec(&request)?;
    let mut ok = match run_probe(
        python,
        &script,
        request,
        deadline,
        MAX_ANSWER_BYTES,
        "trace",
    )? {
        Ok(ok) => ok,
        Err(f) => return Ok(Err(f)),
    };
    ok["workload"] = serde_json::to_value(workload)?;
    let mut doc: TraceDocument =
        serde_json::from_value(ok).context("reading the trace probe's answer")?;
    let mut pickled = None;
    if history {
        let h = doc
            .history
            .as_ref()
            .context("the trace probe recorded no history")?;
        h.validate().context("the trace probe's history")?;
        doc.attribution = Some(gpumem_proto::history::attribute(h));
        pickled = Some(read_pickle(&pickle)?);
    } else {
        doc.history = None;
        doc.attribution = None;
    }
    if doc.schema != TRACE_SCHEMA {
        bail!(
            "the trace probe answered schema {:?}, not {TRACE_SCHEMA}",
            doc.schema
        );
    }
    Ok(Ok((doc, pickled)))
}

/// Runs an embedded probe (`script`, written by the caller into its private folder) in
/// `python` with `request` on standard input, bounded as the module doc says (its
/// environment off the network and any GPU, killed with the agent or at `deadline`, at
/// most `max_answer` bytes read), and returns the `ok` value of its one JSON answer;
/// `unavailable` and `error` answers become a [`Failure`], a missing answer a one-line
/// reason from the end of its standard error. `what` names the answer in messages.
pub(crate) fn run_probe(
    python: &OsString,
    script: &std::path::Path,
    request: Vec<u8>,
    deadline: Duration,
    max_answer: u64,
    what: &str,
) -> Result<std::result::Result<Value, Failure>> {
    let mut cmd = Command::new(python);
    crate::process::die_with_parent(&mut cmd);
    let spawned = cmd
        .arg("-u")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("CUDA_VISIBLE_DEVICES", "")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("TOKENIZERS_PARALLELISM", "false")
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Err(Failure::Unavailable(format!(
                "{} was not found",
                python.to_string_lossy()
            ))));
        }
        Err(e) => {
            return Err(e).with_context(|| format!("starting {}", python.to_string_lossy()));
        }
    };
    let mut stdin = child.stdin.take().context("the probe's stdin")?;
    let writer = std::thread::spawn(move || {
        // A probe that exits early closes its end: the error is the probe's to report.
        let _ = stdin.write_all(&request);
    });
    let stdout = child.stdout.take().context("the probe's stdout")?;
    let stderr = child.stderr.take().context("the probe's stderr")?;
    let out_reader = std::thread::spawn(move || read_bounded(stdout, max_answer));
    let err_reader = std::thread::spawn(move || read_bounded(stderr, MAX_STDERR_BYTES));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for the probe")? {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Err(Failure::Failed(format!(
                "no answer within {} s",
                deadline.as_secs()
            ))));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = writer.join();
    let out = out_reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    let tail = stderr_tail(&err);
    let answer: Value = match serde_json::from_slice(&out) {
        Ok(v) => v,
        Err(_) => {
            // No answer: Python itself is unusable (too old, a broken install).
            return Ok(Err(Failure::Unavailable(format!(
                "{} gave no {what} ({status}){}",
                python.to_string_lossy(),
                if tail.is_empty() {
                    String::new()
                } else {
                    format!(": {tail}")
                }
            ))));
        }
    };
    if let Some(why) = answer.get("unavailable").and_then(Value::as_str) {
        return Ok(Err(Failure::Unavailable(why.to_owned())));
    }
    if let Some(why) = answer.get("error").and_then(Value::as_str) {
        return Ok(Err(Failure::Failed(why.to_owned())));
    }
    match answer.get("ok") {
        Some(ok) => Ok(Ok(ok.clone())),
        None => Ok(Err(Failure::Failed(format!(
            "the probe's answer has no {what}"
        )))),
    }
}

/// The probe's pickle, bounded (a file the probe made in the agent's private folder).
fn read_pickle(path: &std::path::Path) -> Result<Vec<u8>> {
    let f = std::fs::File::open(path).context("the trace's snapshot pickle")?;
    let bytes = read_bounded(f, MAX_PICKLE_BYTES + 1);
    if bytes.len() as u64 > MAX_PICKLE_BYTES {
        bail!("the trace's snapshot is larger than {MAX_PICKLE_BYTES} bytes");
    }
    Ok(bytes)
}

fn read_bounded(r: impl Read, limit: u64) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut r = r.take(limit);
    let _ = r.read_to_end(&mut buf);
    // Drain the rest so the child never blocks on a full pipe.
    let mut rest = r.into_inner();
    let _ = std::io::copy(&mut rest, &mut std::io::sink());
    buf
}

/// The last lines of standard error, printable characters only.
fn stderr_tail(err: &[u8]) -> String {
    let text = String::from_utf8_lossy(err);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(3);
    lines[start..]
        .join(" | ")
        .chars()
        .filter(|c| !c.is_control())
        .take(600)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The converter's bounds are the history document's (gpumem_proto::history).
    #[test]
    fn the_history_converter_keeps_the_documents_bounds() {
        use gpumem_proto::history as h;
        for (name, value) in [
            ("MAX_EVENTS", h::MAX_EVENTS),
            ("MAX_FRAMES", h::MAX_FRAMES),
            ("MAX_STACKS", h::MAX_STACKS),
            ("MAX_STACK_DEPTH", h::MAX_STACK_DEPTH),
            ("MAX_NAMES", h::MAX_NAMES),
            ("MAX_NAME_CHARS", h::MAX_NAME_CHARS),
            ("MAX_BEFORE", h::MAX_BEFORE),
        ] {
            let line = format!("\n{name} = {value}\n");
            assert!(
                HISTORY_SOURCE.contains(&line),
                "gpumem_history.py: {name} is not {value}"
            );
        }
        assert!(HISTORY_SOURCE.contains(&format!("SCHEMA = \"{}\"", h::HISTORY_SCHEMA)));
    }

    #[test]
    fn a_missing_python_is_unavailable() {
        let got = trace(
            &OsString::from("/nonexistent/python3"),
            &serde_json::json!({"model_type": "llama"}),
            &workload_of(
                &gpumem_core::params::from_pairs([("context", "8")]).0,
                false,
            )
            .unwrap(),
            true,
        )
        .unwrap();
        match got {
            Err(Failure::Unavailable(why)) => assert!(why.contains("not found"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn costly_workloads_are_refused_before_python_starts() {
        let w = workload_of(
            &gpumem_core::params::from_pairs([("context", "8")]).0,
            false,
        )
        .unwrap();
        let cfg = |v: Value| check_cost(&v, &w);
        assert!(cfg(serde_json::json!({"num_hidden_layers": 126})).is_ok());
        let e = cfg(serde_json::json!({"num_hidden_layers": 1u64 << 40})).unwrap_err();
        assert!(e.contains("above the 1024 layers"), "{e}");
        // A layer count that is not a number is refused too (Python would read it).
        assert!(cfg(serde_json::json!({"n_layer": "1e12"})).is_err());
        // A count set to null is none.
        assert!(
            cfg(serde_json::json!({"num_hidden_layers": 62, "n_routed_experts": null})).is_ok()
        );
        // Nested (a multimodal config's text model).
        let e = cfg(serde_json::json!({"text_config": {"num_layers": 100000}})).unwrap_err();
        assert!(e.contains("num_layers"), "{e}");
        let e = cfg(serde_json::json!({"num_hidden_layers": 64, "num_local_experts": 2048}))
            .unwrap_err();
        assert!(e.contains("expert blocks"), "{e}");
        assert!(cfg(serde_json::json!({"num_hidden_layers": 61, "n_routed_experts": 256})).is_ok());
        let mut lora = w.clone();
        lora.train = "lora".into();
        lora.lora_rank = 1 << 40;
        let e = check_cost(&serde_json::json!({"num_hidden_layers": 2}), &lora).unwrap_err();
        assert!(e.contains("--lora-rank"), "{e}");
        // Python is never started: a missing interpreter would say so otherwise.
        let got = trace(
            &OsString::from("/nonexistent/python3"),
            &serde_json::json!({"num_hidden_layers": 1u64 << 40}),
            &w,
            true,
        )
        .unwrap();
        assert!(matches!(got, Err(Failure::Refused(_))), "{got:?}");
    }

    #[test]
    fn the_workload_follows_the_estimator_input() {
        let (input, errors) = gpumem_core::params::from_pairs([
            ("train", "lora"),
            ("context", "2048"),
            ("sequences", "4"),
            ("lora-targets", "q,v,down_proj"),
            ("attention", "flash"),
        ]);
        assert!(errors.is_empty(), "{errors:?}");
        let w = workload_of(&input, false).unwrap();
        assert_eq!(w.train, "lora");
        assert_eq!(w.lora_targets, ["q_proj", "v_proj", "down_proj"]);
        // The output projection under PEFT's own name; what the probe cannot run is
        // refused, not traced as PEFT's default.
        let with = |pairs: &[(&str, &str)]| {
            let mut all = vec![("train", "lora"), ("context", "64")];
            all.extend_from_slice(pairs);
            workload_of(&gpumem_core::params::from_pairs(all).0, false)
        };
        assert_eq!(
            with(&[("lora-targets", "all,lm_head")])
                .unwrap()
                .lora_targets,
            [
                "q_proj",
                "k_proj",
                "v_proj",
                "o_proj",
                "gate_proj",
                "up_proj",
                "down_proj",
                "lm_head"
            ]
        );
        assert!(with(&[("lora-dtype", "bf16")]).is_err());
        assert!(with(&[("lora-dropout", "true")]).is_err());
        let ac = with(&[("autocast", "bf16")]).unwrap();
        assert_eq!(ac.autocast.as_deref(), Some("bfloat16"));
        assert!(ac.words().contains("autocast bfloat16"), "{}", ac.words());
        let e = with(&[("autocast", "fp16")]).unwrap_err().to_string();
        assert!(e.contains("--autocast fp16"), "{e}");
        let e = with(&[("autocast", "bf16"), ("gpus", "2")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("without autocast"), "{e}");
        assert_eq!((w.sequences, w.context), (4, 2048));
        assert_eq!(w.dtype, "bfloat16");
        assert_eq!(w.attention, "flash");
        let no_context = workload_of(&EstimateInput::default(), false);
        assert!(no_context.is_err());
    }
}
