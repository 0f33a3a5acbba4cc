//! `gpumem-agent trace`: a training step or a generation traced without a GPU.
//!
//! The workload is given with the estimator's own flags (`--config`/`--model`,
//! `--train`, `--sequences`, `--context`, …; one vocabulary, one parser: the core's
//! `params::from_pairs`), and the embedded probe (`python`) runs the model's own code
//! from transformers on PyTorch's `meta` device. The answer is a
//! `gpumem_proto::trace::TraceDocument`: allocated bytes phase by phase, reserved bytes
//! from a model of the CUDA caching allocator, and what was live at each peak, by
//! category. `estimate --trace` puts the traced figures in place of the estimate's
//! assumed activation, logits and prefill lines ([`traced_lines`]).

pub mod python;
pub mod shape;

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Arg, ArgAction, ArgMatches, Command, FromArgMatches};
use gpumem_core::estimate::{EstimateInput, LineKey, TracedLine, TrainMode};
use gpumem_core::import::config as hf_config;
use gpumem_core::params::{self, field};
use gpumem_core::units::{Bytes, group_digits};
use gpumem_proto::trace::{CategoryBytes, TraceDocument, TracePhase};
use serde_json::Value;

use crate::exit::Exit;

/// The estimator's keys that describe a workload the probe can run.
pub const WORKLOAD_KEYS: &[&str] = &[
    "train",
    "sequences",
    "context",
    "generate",
    "format",
    "compute-dtype",
    "attention",
    "logits",
    "optimizer",
    "master-weights",
    "checkpointing",
    "checkpointing-policy",
    "lora-rank",
    "lora-targets",
    "autocast",
    "gpus",
    "nodes",
    "fsdp",
    "zero",
    "reduce-dtype",
    "ddp-bucket-view",
    "tp",
    "pp",
];

/// Arguments of `trace`.
#[derive(Debug, Default)]
pub struct Args {
    pairs: Vec<(String, String)>,
    config: Option<PathBuf>,
    model: Option<String>,
    revision: Option<String>,
    python: Option<OsString>,
    expandable_segments: Option<bool>,
    memory_history: Option<PathBuf>,
    compile: bool,
    rank: u64,
    json: bool,
}

/// `--python`: the interpreter that runs the probe (default `python3` on PATH, as
/// `run` finds the user's).
pub fn python_arg() -> Arg {
    Arg::new("python")
        .long("python")
        .value_name("PATH")
        .value_parser(clap::value_parser!(OsString))
        .help("Python with torch and transformers (peft for LoRA/QLoRA) that runs the trace and the count of a model the config reader does not know [default: python3]")
}

impl clap::Args for Args {
    fn augment_args(cmd: Command) -> Command {
        let mut cmd = cmd
            .arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("Print the trace as JSON (gpumem.trace/v1)"))
            .arg(Arg::new("config").long("config").value_name("CONFIG_JSON").value_parser(clap::value_parser!(PathBuf)).help("The model's Hugging Face config.json (no weights are read)"))
            .arg(Arg::new("model").long("model").value_name("ORG/NAME").conflicts_with("config").help("Take config.json from the bundled catalogue (`gpumem-agent models`), else from the Hugging Face Hub (HF_ENDPOINT, HF_TOKEN)"))
            .arg(Arg::new("revision").long("revision").value_name("REV").requires("model").help("Branch, tag or commit of --model (default: main); given, even a bundled model's config.json is read from the Hub"))
            .arg(python_arg())
            .arg(
                Arg::new("rank")
                    .long("rank")
                    .value_name("N")
                    .value_parser(clap::value_parser!(u64))
                    .help("With --gpus: the data-parallel rank to trace, alone under torch.distributed's fake process group [default: 0]"),
            )
            .arg(
                Arg::new("memory-history")
                    .long("memory-history")
                    .value_name("PATH")
                    .value_parser(clap::value_parser!(PathBuf))
                    .help("Record every allocation and free as PyTorch's allocator history would (a new file PATH, the pickle pytorch.org/memory_viz reads) and attribute each phase's peak to the estimate's lines"),
            )
            .arg(
                Arg::new("compile")
                    .long("compile")
                    .action(ArgAction::SetTrue)
                    .help("Trace the training step with each decoder block under torch.compile, as torchtitan compiles them: what AOTAutograd and Inductor's partitioner (min_cut_rematerialization_partition) save for the backward, each graph run without Inductor's code generation (its fused kernels' buffers and memory planning are not counted). Full or LoRA training on one GPU, without checkpointing, autocast or --memory-history"),
            )
            .arg(
                Arg::new("expandable-segments")
                    .long("expandable-segments")
                    .value_name("BOOL")
                    .value_parser(clap::value_parser!(bool))
                    .help("Model the allocator with expandable segments [default: as PYTORCH_CUDA_ALLOC_CONF says]"),
            );
        for key in WORKLOAD_KEYS {
            if let Some(f) = field(key) {
                cmd = cmd.arg(crate::flags::flag_of(f));
            }
        }
        cmd
    }
    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for Args {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(Args {
            pairs: crate::flags::typed_pairs(m, WORKLOAD_KEYS.iter().copied()),
            config: m.get_one::<PathBuf>("config").cloned(),
            model: m.get_one::<String>("model").cloned(),
            revision: m.get_one::<String>("revision").cloned(),
            python: m.get_one::<OsString>("python").cloned(),
            expandable_segments: m.get_one::<bool>("expandable-segments").copied(),
            memory_history: m.get_one::<PathBuf>("memory-history").cloned(),
            compile: m.get_flag("compile"),
            rank: m.get_one::<u64>("rank").copied().unwrap_or(0),
            json: m.get_flag("json"),
        })
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

/// Runs `trace`.
pub fn run(args: Args) -> Result<Exit> {
    // Step 1: the config and the workload, validated before Python starts.
    let text = match (&args.config, &args.model) {
        (Some(path), _) => {
            crate::private::read_to_string_bounded(path, hf_config::MAX_CONFIG_BYTES)?
        }
        (None, Some(model)) => match crate::hub::bundled_for(model, args.revision.as_deref(), None)
        {
            Some(b) => {
                crate::out::errln!(
                    "gpumem-agent: config.json: {}; --revision main reads the Hub",
                    crate::hub::bundled::provenance(b)
                );
                b.config.clone()
            }
            None => crate::hub::lookup_or_hint(model, args.revision.as_deref(), None)?
                .config
                .with_context(|| format!("{model} has no config.json"))?,
        },
        (None, None) => {
            crate::out::errln!(
                "gpumem-agent: trace needs --config CONFIG_JSON or --model ORG/NAME"
            );
            return Ok(Exit::Unavailable);
        }
    };
    let config: Value = serde_json::from_str(&text).context("reading config.json")?;
    let imported = hf_config::parse_config(&text).context("reading config.json")?;
    let mut pairs: Vec<(String, String)> = imported
        .pairs()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    pairs.extend(args.pairs.iter().cloned());
    let (input, errors) = params::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if !errors.is_empty() {
        for e in &errors {
            crate::out::errln!("gpumem-agent: invalid input: --{e}");
        }
        return Ok(Exit::Unavailable);
    }
    let expandable = args
        .expandable_segments
        .unwrap_or_else(python::expandable_from_env);
    let workload = match python::workload_of(&input, expandable) {
        Ok(mut w) => {
            if args.compile {
                let allowed = if args.memory_history.is_some() {
                    Err("the compiled step is traced without --memory-history")
                } else {
                    compile_allowed(&w)
                };
                if let Err(why) = allowed {
                    crate::out::errln!("gpumem-agent: invalid input: --compile: {why}");
                    return Ok(Exit::Unavailable);
                }
                w.compile = true;
            }
            match (&mut w.ranks, args.rank) {
                (Some(r), rank) if rank < r.world_size => r.rank = rank,
                (Some(r), rank) => {
                    crate::out::errln!(
                        "gpumem-agent: invalid input: --rank {rank}: the ranks are 0 to {} (--gpus {})",
                        r.world_size.saturating_sub(1),
                        r.world_size
                    );
                    return Ok(Exit::Unavailable);
                }
                (None, 0) => {}
                (None, _) => {
                    crate::out::errln!(
                        "gpumem-agent: invalid input: --rank needs a training run on --gpus 2 or more"
                    );
                    return Ok(Exit::Unavailable);
                }
            }
            w
        }
        Err(e) => {
            crate::out::errln!("gpumem-agent: invalid input: {e:#}");
            return Ok(Exit::Unavailable);
        }
    };
    if let Some(path) = &args.memory_history {
        // Refused before the trace runs, not after.
        crate::private::check_new_path(path)?;
    }
    // Step 2: run the probe.
    let python = args.python.unwrap_or_else(|| OsString::from("python3"));
    let dq = python::double_quant(&input);
    let answer = if args.memory_history.is_some() {
        python::trace_with_history(&python, &config, &workload, dq)?
    } else {
        python::trace(&python, &config, &workload, dq)?.map(|d| (d, None))
    };
    let doc = match answer {
        Ok((doc, pickle)) => {
            if let (Some(path), Some(bytes)) = (&args.memory_history, pickle) {
                crate::private::write_new_atomically(path, &bytes)
                    .with_context(|| format!("writing {}", path.display()))?;
                crate::out::errln!(
                    "gpumem-agent: allocator history written to {} ({} bytes; pytorch.org/memory_viz reads it)",
                    path.display(),
                    group_digits(bytes.len() as u64)
                );
            }
            doc
        }
        Err(f @ (python::Failure::Unavailable(_) | python::Failure::Refused(_))) => {
            crate::out::errln!("gpumem-agent: cannot trace here: {f}");
            return Ok(Exit::Unavailable);
        }
        Err(f) => anyhow::bail!("{f}"),
    };
    if args.json {
        crate::out::outln!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        crate::out::out!("{}", render(&doc));
    }
    Ok(Exit::Ok)
}

/// Traces the estimate's workload for `estimate --trace`: the same config text and
/// input the estimate used.
pub fn trace_for_estimate(
    python: Option<OsString>,
    config_text: &str,
    input: &EstimateInput,
) -> Result<std::result::Result<TraceDocument, python::Failure>> {
    let config: Value = serde_json::from_str(config_text).context("reading config.json")?;
    let workload = python::workload_of(input, python::expandable_from_env())?;
    let python = python.unwrap_or_else(|| OsString::from("python3"));
    python::trace(&python, &config, &workload, python::double_quant(input))
}

fn gb_gib(b: u64) -> String {
    format!(
        "{} GB {} GiB",
        Bytes(b).gb_string(2),
        Bytes(b).gib_string(2)
    )
}

/// The estimate's lines that a trace replaces, with the traced figures: for training,
/// what was live at the trace's highest peak besides parameters, gradients, optimizer
/// state and master weights (activations kept for the backward and temporaries) and
/// the logits; for inference, the prefill's temporaries and logits at its peak.
pub fn traced_lines(doc: &TraceDocument, train: TrainMode) -> Vec<TracedLine> {
    let where_ = |p: &TracePhase| match p.step {
        Some(s) => format!("{} of step {s}", p.name),
        None => p.name.clone(),
    };
    let short = |p: &TracePhase| match p.step {
        Some(s) => format!("{}[{s}]", p.name),
        None => p.name.clone(),
    };
    if train != TrainMode::None {
        let Some(peak) = doc.peak_phase() else {
            return Vec::new();
        };
        let c = peak.at_peak;
        let transient = c.activations.saturating_add(c.temporaries);
        let mut lines = vec![
            TracedLine {
                key: LineKey::Activations,
                label: format!("Activations + temporaries at the peak ({})", short(peak)),
                bytes: transient,
                formula: format!(
                    "traced at the peak of {}: kept for backward {} B + temporaries {} B (the model's code on the meta device, allocator rounding){}",
                    where_(peak),
                    group_digits(c.activations),
                    group_digits(c.temporaries),
                    if doc.workload.compile {
                        "; each decoder block under torch.compile, kept as Inductor's partition saves (min_cut_rematerialization_partition), its graphs run without Inductor's code generation: the fused kernels' buffers and its memory planning are not counted"
                    } else {
                        ""
                    }
                ),
            },
            TracedLine {
                key: LineKey::Logits,
                label: format!("Logits and their gradients at the peak ({})", short(peak)),
                bytes: c.logits,
                formula: format!(
                    "traced at the peak of {}: every tensor whose last dimension is the vocabulary ({})",
                    where_(peak),
                    doc.vocab
                ),
            },
            TracedLine {
                key: LineKey::OptimizerStep,
                label: format!("Optimizer step (within the peak of {})", short(peak)),
                bytes: 0,
                formula: format!(
                    "traced: the step's highest peak is {}, and its temporaries are in the line above",
                    where_(peak)
                ),
            },
        ];
        // A rank's trace: the framework's buffers live at the peak replace the
        // computed collectives (DDP's buckets; FSDP's gathered parameters and
        // reduce-scatter buffers, one line).
        if let Some(r) = &doc.workload.ranks {
            let formula = format!(
                "traced at the peak of {}: the data-parallel framework's own allocations (rank {} of {})",
                where_(peak),
                r.rank,
                r.world_size
            );
            if r.scheme == "ddp" || r.scheme == "zero" {
                lines.push(TracedLine {
                    key: LineKey::TrainingGradBuckets,
                    label: format!(
                        "{} gradient buckets at the peak ({})",
                        if r.scheme == "ddp" {
                            "DDP".to_string()
                        } else if r.zero_stage == 3 {
                            "ZeRO-3's gathered parameters, reduce-scatter buffers and".to_string()
                        } else {
                            format!("ZeRO-{}", r.zero_stage)
                        },
                        short(peak)
                    ),
                    bytes: c.collectives,
                    formula,
                });
                if r.zero_stage == 3 {
                    lines.push(TracedLine {
                        key: LineKey::CollectivesAllGather,
                        label: "Gathered parameters (in the buckets line)".into(),
                        bytes: 0,
                        formula: "traced: ZeRO-3's buffers at the peak are in the buckets line"
                            .into(),
                    });
                }
            } else {
                lines.push(TracedLine {
                    key: LineKey::CollectivesAllGather,
                    label: format!(
                        "FSDP's gathered parameters and reduce-scatter buffers at the peak ({})",
                        short(peak)
                    ),
                    bytes: c.collectives,
                    formula,
                });
                lines.push(TracedLine {
                    key: LineKey::CollectivesReduceScatter,
                    label: "Reduce-scatter buffers (in the line above)".into(),
                    bytes: 0,
                    formula: "traced: FSDP's buffers at the peak are one line above".into(),
                });
            }
        }
        lines
    } else {
        let Some(prefill) = doc.phase("prefill", None) else {
            return Vec::new();
        };
        let c = prefill.at_peak;
        vec![
            TracedLine {
                key: LineKey::PrefillMlp,
                label: "Prefill intermediates at its peak".into(),
                bytes: c.activations.saturating_add(c.temporaries),
                formula: "traced: every intermediate live at the prefill's peak (MLP, attention, norms), allocator rounding".into(),
            },
            TracedLine {
                key: LineKey::PrefillAttentionScores,
                label: "Attention scores (in the traced intermediates)".into(),
                bytes: 0,
                formula: "traced: the attention kernel's outputs are among the prefill intermediates".into(),
            },
            TracedLine {
                key: LineKey::PrefillLogits,
                label: "Logits at the prefill's peak".into(),
                bytes: c.logits,
                formula: "traced: the logits kept and generate()'s fp32 copy of the last position".into(),
            },
        ]
    }
}

/// Whether the probe traces `--compile` for this workload: a single-device full or
/// LoRA step without checkpointing or autocast (what it is checked against);
/// anything else is refused, not traced as something else.
pub fn compile_allowed(w: &gpumem_proto::trace::TraceWorkload) -> Result<(), &'static str> {
    if w.train != "full" && w.train != "lora" {
        return Err("the compiled step is traced for --train full or lora");
    }
    if w.ranks.is_some() {
        return Err("the compiled step is traced on one GPU: leave out --gpus");
    }
    if w.checkpointing {
        return Err("the compiled step is traced without checkpointing");
    }
    if w.autocast.is_some() {
        return Err("the compiled step is traced without autocast");
    }
    Ok(())
}

/// The human report: phases, what was live at each peak, and where the activations
/// come from.
pub fn render(doc: &TraceDocument) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let w = &doc.workload;
    let what = match w.train.as_str() {
        "none" => format!(
            "inference, {} × {} prompt tokens + {} generated",
            w.sequences, w.context, w.generate
        ),
        t => {
            format!(
                "{t} training, {} × {} tokens, {}, master weights {}, checkpointing {}{}",
                w.sequences,
                w.context,
                w.optimizer,
                if w.master_weights && t == "full" {
                    "on"
                } else {
                    "off"
                },
                match (w.checkpointing, w.checkpointing_policy.as_deref()) {
                    (true, Some(p)) => format!("on ({p} policy)"),
                    (true, None) => "on".into(),
                    (false, _) => "off".into(),
                },
                w.autocast
                    .as_deref()
                    .map(|d| format!(", under autocast ({d})"))
                    .unwrap_or_default()
            ) + if w.compile {
                ", each decoder block under torch.compile (Inductor's partition, without its code generation)"
            } else {
                ""
            }
        }
    };
    let _ = writeln!(
        s,
        "trace of {} ({}, {} attention): {what}",
        doc.model_type, w.dtype, w.attention
    );
    if let Some(r) = &w.ranks {
        let _ = writeln!(s, "{}", ranks_words(r));
    }
    let _ = writeln!(
        s,
        "parameters {} (trainable {}); torch {}, transformers {}{}",
        group_digits(doc.parameters),
        group_digits(doc.trainable_parameters),
        doc.versions.torch,
        doc.versions.transformers,
        doc.versions
            .peft
            .as_ref()
            .map(|p| format!(", peft {p}"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        s,
        "\n{:<16} {:>4} {:>17} {:>17} {:>17}",
        "phase", "step", "allocated end", "allocated peak", "reserved peak"
    );
    for p in &doc.phases {
        let _ = writeln!(
            s,
            "{:<16} {:>4} {:>17} {:>17} {:>17}",
            p.name,
            p.step.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
            group_digits(p.allocated_end_bytes),
            group_digits(p.allocated_peak_bytes),
            group_digits(p.reserved_peak_bytes)
        );
    }
    let _ = writeln!(s, "\nlive at each peak, GiB:");
    // A rank's trace has one more category: the framework's own buffers.
    let ranked = w.ranks.is_some();
    let names = [
        "params", "master", "grads", "optim", "activ", "logits", "kv", "collect", "temp",
    ];
    let _ = write!(s, "{:<16} {:>4}", "phase", "step");
    for (i, n) in names.iter().enumerate() {
        if ranked || i != 7 {
            let _ = write!(s, " {n:>8}");
        }
    }
    s.push('\n');
    for p in &doc.phases {
        let _ = write!(
            s,
            "{:<16} {:>4}",
            p.name,
            p.step.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
        );
        for (i, v) in values(&p.at_peak).into_iter().enumerate() {
            if ranked || i != 7 {
                let _ = write!(s, " {:>8}", Bytes(v).gib_string(2));
            }
        }
        s.push('\n');
    }
    if ranked {
        let _ = writeln!(
            s,
            "\nthe framework's buffers at their highest in each phase, bytes:"
        );
        for p in doc
            .phases
            .iter()
            .filter(|p| !p.collectives_peak_bytes.is_empty())
        {
            let what: Vec<String> = p
                .collectives_peak_bytes
                .iter()
                .map(|(k, v)| format!("{k} {}", group_digits(*v)))
                .collect();
            let _ = writeln!(
                s,
                "  {:<16} {:>4}  {}",
                p.name,
                p.step.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
                what.join(", ")
            );
        }
    }
    if let Some(peak) = doc.peak_phase() {
        let _ = writeln!(
            s,
            "\npeak: {} B ({}) in {}{}; reserved {} B ({})",
            group_digits(peak.allocated_peak_bytes),
            gb_gib(peak.allocated_peak_bytes),
            peak.name,
            peak.step
                .map(|x| format!(" of step {x}"))
                .unwrap_or_default(),
            group_digits(peak.reserved_peak_bytes),
            gb_gib(peak.reserved_peak_bytes)
        );
    }
    if !doc.activations_by_op.is_empty() {
        if w.compile {
            let _ = writeln!(
                s,
                "\nkept for the backward (last step) as Inductor's partition saves it, by operator \
                 (its code generation not run: the fused kernels' buffers and its memory planning are not counted):"
            );
        } else {
            let _ = writeln!(s, "\nkept for the backward (last step), by operator:");
        }
        for o in doc.activations_by_op.iter().take(12) {
            let _ = writeln!(
                s,
                "  {:<44} {:>5} tensors {:>17} B",
                o.op,
                o.tensors,
                group_digits(o.bytes)
            );
        }
    }
    if let Some(a) = &doc.attribution {
        s.push_str(&render_attribution(a));
    }
    for n in &doc.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let _ = writeln!(
        s,
        "traced in {:.1} s on the CPU: the model's code on PyTorch's meta device, not a GPU measurement",
        doc.wall_time_ms as f64 / 1000.0
    );
    s
}

fn values(c: &CategoryBytes) -> [u64; 9] {
    [
        c.parameters,
        c.master_weights,
        c.gradients,
        c.optimizer_state,
        c.activations,
        c.logits,
        c.kv_cache,
        c.collectives,
        c.temporaries,
    ]
}

/// The rank a trace followed and how its model was wrapped, in words.
pub fn ranks_words(r: &gpumem_proto::trace::TraceRanks) -> String {
    let wrap = match (r.scheme.as_str(), r.hybrid, r.reshard_after_forward) {
        ("zero", ..) => format!(
            "DeepSpeed ZeRO stage {} (deepspeed.initialize on an accelerator whose device is meta)",
            r.zero_stage
        ),
        ("ddp", ..) => format!(
            "DistributedDataParallel (gradient_as_bucket_view={})",
            if r.gradient_as_bucket_view {
                "True"
            } else {
                "False"
            }
        ),
        (_, true, _) => format!(
            "FSDP2 fully_shard on a {} × {} mesh (hybrid: sharded within a node)",
            r.nodes,
            r.world_size.checked_div(r.nodes).unwrap_or(r.world_size)
        ),
        (_, _, true) => "FSDP2 fully_shard per decoder block and root".into(),
        _ => "FSDP2 fully_shard per decoder block and root, reshard_after_forward=False".into(),
    };
    format!(
        "rank {} of {} ({} node(s)), alone under torch.distributed's fake process group: {wrap}{}",
        r.rank,
        r.world_size,
        r.nodes,
        r.reduce_dtype
            .as_ref()
            .map(|d| format!(", reduce_dtype {d}"))
            .unwrap_or_default()
    )
}

/// The allocator history's attribution: each phase's peak by line (GiB), the slack,
/// and the largest blocks of the highest peak with where they were made.
pub fn render_attribution(a: &gpumem_proto::history::Attribution) -> String {
    use gpumem_proto::history::HistoryLine;
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nfrom the allocator history (lifetimes and stacks only), GiB at each peak:"
    );
    let short = [
        "weights", "master", "grads", "optim", "activ", "logits", "kv", "wkspace", "temp",
    ];
    let _ = write!(s, "{:<16} {:>4}", "phase", "step");
    for n in short {
        let _ = write!(s, " {n:>8}");
    }
    let _ = writeln!(s, " {:>8}", "slack");
    for p in &a.peaks {
        let _ = write!(
            s,
            "{:<16} {:>4}",
            p.phase,
            p.step.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
        );
        for line in HistoryLine::ALL {
            let _ = write!(s, " {:>8}", Bytes(p.bytes(line)).gib_string(2));
        }
        let _ = writeln!(s, " {:>8}", Bytes(p.slack_bytes).gib_string(2));
    }
    if let Some(top) = a.peaks.iter().max_by_key(|p| p.allocated_bytes) {
        let mut largest: Vec<_> = top.largest.iter().collect();
        largest.sort_by_key(|b| std::cmp::Reverse(b.bytes));
        let _ = writeln!(
            s,
            "largest blocks at the peak of {}{}:",
            top.phase,
            top.step
                .map(|x| format!(" of step {x}"))
                .unwrap_or_default()
        );
        for b in largest.iter().take(6) {
            let _ = writeln!(
                s,
                "  {:>17} B  {:<16} {}{}",
                group_digits(b.bytes),
                b.line.label(),
                b.site,
                if b.scope.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", b.scope)
                }
            );
        }
    }
    for n in &a.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}
