//! `gpumem-agent estimate`: the estimator on the command line.
//!
//! Every estimator flag is generated from the field table
//! ([`gpumem_core::params::FIELDS`]: help, value name, possible values), so the flags
//! are exactly the page's URL keys with two dashes in front, and values are
//! validated by the same parser the page uses. Model files are read here (the core
//! does no I/O) and only their headers: a safetensors header or a GGUF header is
//! enough, the weights are never read.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Arg, ArgAction, ArgMatches, Command, FromArgMatches};
use gpumem_core::EstimateError;
use gpumem_core::catalogue::{GpuCard, resolve};
use gpumem_core::engine;
use gpumem_core::estimate::{Estimate, EstimateInput, estimate};
use gpumem_core::fit::{CardFit, MARGIN_RULE, Verdict, fit_table};
use gpumem_core::headline::{Basis, FORMAT_LADDER, compare_formats, headline, inputs_line};
use gpumem_core::import::read_policy::{Header, HeaderFormat, HeaderRead, Step};
use gpumem_core::import::{TensorSummary, config, gguf};
use gpumem_core::inputs::field;
use gpumem_core::params::{self, FIELDS, keys};
use gpumem_core::units::{Bytes, group_digits, signed_gib_string, signed_group_digits};
use gpumem_proto::estimate::{ESTIMATE_SCHEMA, EstimateDocument};

use crate::exit::Exit;

/// Examples under `estimate -h` and `--help` (the flags it shows first: `-h`; every
/// flag: `--help`).
pub const EXAMPLES: &str = "Examples:
  gpumem-agent estimate --config config.json --context 8192 --sequences 4 --card l40s
  gpumem-agent estimate --model Qwen/Qwen2.5-7B-Instruct --context 32768 --sequences 16 --engine vllm --card l40s
  gpumem-agent estimate --config config.json --train qlora --context 2048 --sequences 4 --card 4090
  gpumem-agent estimate --diffusers ./FLUX.1-dev --height 1024 --width 1024 --offload model --card 4090
  gpumem-agent estimate --parameters 70B --format awq-4-g128 --context 8192 --tp 2 --gpus 2 --card a100-80gb

-h shows the common flags; --help shows every flag (the architecture's too).
Exit status: 0 fits or borderline, 1 does not fit (on the card, or in --ram), 2 bad input or no answer.";

/// Arguments of `estimate`: the shared keys as flags, plus files and output mode.
#[derive(Debug, Default)]
pub struct Args {
    /// `key=value` pairs from the flags, in command-line order.
    pairs: Vec<(String, String)>,
    /// Print JSON instead of the answer.
    json: bool,
    /// Print every line with its formula, every card and the engine's lines too.
    verbose: bool,
    /// `--formats a,b,c` (or `--compare-formats`: the headline's ladder).
    formats: Option<Vec<String>>,
    /// A Hugging Face config.json.
    config: Option<PathBuf>,
    /// safetensors files (shards).
    safetensors: Vec<PathBuf>,
    /// A GGUF file.
    gguf: Option<PathBuf>,
    /// A model on the Hugging Face Hub (`--model ORG/NAME`), its revision and an
    /// optional weight file (a `.gguf`) to read instead of the safetensors checkpoint.
    model: Option<String>,
    revision: Option<String>,
    model_file: Option<String>,
    /// Engine flags (`--engine`, `--card`, …) as `key=value` pairs.
    engine: Vec<(String, String)>,
    /// `--trace`: replace the assumed activation, logits and prefill lines with a trace
    /// run by `--python` (see `crate::trace`).
    trace: bool,
    python: Option<std::ffi::OsString>,
    /// `--count-with`: who counts a model from its config.json (see `crate::count`).
    count_with: crate::count::CountWith,
    /// `--trust-remote-code`: the count may run the repository's own code.
    trust_remote_code: bool,
    /// `--audio-seconds`: the clip an audio encoder-decoder's encoder reads (its
    /// positions are counted by the model's own feature extractor and subsampling).
    audio_seconds: Option<f64>,
    /// `--diffusers` and the pipeline's own flags.
    diffusers: crate::diffusion_cli::Flags,
}

impl clap::Args for Args {
    fn augment_args(cmd: Command) -> Command {
        let mut cmd = cmd
            .next_help_heading("Model and output")
            .arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("Print JSON (weights_bytes, kv_cache_bytes, reserve_bytes, total_bytes, lines, fit, verdict; schemas/estimate.v1.schema.json)"))
            .arg(Arg::new("verbose").long("verbose").short('v').action(ArgAction::SetTrue).help("After the answer, every line with its formula, every catalogue card and the engine's lines with their sources"))
            .arg(
                Arg::new("formats")
                    .long("formats")
                    .value_name("FORMAT,…")
                    .value_delimiter(',')
                    .action(ArgAction::Append)
                    .help("Weight formats side by side on the card, e.g. bf16,fp8,awq-4,q4_k_m"),
            )
            .arg(Arg::new("compare-formats").long("compare-formats").action(ArgAction::SetTrue).conflicts_with("formats").help("Side by side: bf16, fp8, int8, awq-4-g128, q3_k, q2_k"))
            .arg(Arg::new("config").long("config").value_name("CONFIG_JSON").value_parser(clap::value_parser!(PathBuf)).help("Read the architecture from a Hugging Face config.json (flags override it)"))
            .arg(
                Arg::new("safetensors")
                    .long("safetensors")
                    .value_name("PATH")
                    .action(ArgAction::Append)
                    .value_parser(clap::value_parser!(PathBuf))
                    .help("Count every tensor of a .safetensors file from its header (repeat for shards)"),
            )
            .arg(Arg::new("gguf").long("gguf").value_name("PATH").value_parser(clap::value_parser!(PathBuf)).help("Count every tensor of a GGUF file from its header"))
            .arg(Arg::new("model").long("model").value_name("ORG/NAME").help("A model by its Hub id: a bundled one (`gpumem-agent models`) from its bundled config.json, with no request; any other from the Hugging Face Hub (HF_ENDPOINT, HF_TOKEN): config.json and every weight file's header, by ranged reads"))
            .arg(Arg::new("revision").long("revision").value_name("REV").requires("hub-source").help("Branch, tag or commit of --model or of a --diffusers Hub id (default: main); given, even a bundled model is read from the Hub"))
            .arg(Arg::new("model-file").long("model-file").value_name("FILE").requires("model").help("Read this weight file of --model (e.g. a .gguf) instead of model.safetensors[.index.json]"))
            .arg(Arg::new("trace").long("trace").action(ArgAction::SetTrue).help("Trace the workload (the model's code on PyTorch's meta device, no GPU) and use the traced activations, logits and prefill figures instead of the assumed ones; needs --config or --model"))
            .arg(
                Arg::new("count-with")
                    .long("count-with")
                    .value_name("WHO")
                    .value_parser(crate::count::CountWith::NAMES)
                    .default_value("auto")
                    .help("Who counts the model of --config/--model: transformers builds it on PyTorch's meta device (no weights, no GPU) and its parameters, buffers and KV cache are read from its modules and its own cache; auto: transformers for a model_type the config reader does not know or a tower it leaves out, when --python has it; reader: the config reader alone"),
            )
            .arg(Arg::new("trust-remote-code").long("trust-remote-code").action(ArgAction::SetTrue).requires("config").help("Let the count run the code of the model's own repository (config.json's auto_map, the .py files beside --config); off, a family transformers does not ship is not counted"))
            .arg(
                Arg::new("audio-seconds")
                    .long("audio-seconds")
                    .value_name("SECONDS")
                    .value_parser(parse_audio_seconds)
                    .conflicts_with("encoder-length")
                    .help("Seconds of audio an encoder-decoder's audio encoder reads (Speech2Text, SpeechT5, Moonshine, Canary): the count makes the clip into the encoder's input with the model's own feature extractor at its sampling rate and reads the encoder positions (after the model's own subsampling) the cross-attention cache spans; --encoder-length gives those positions directly"),
            )
            .arg(crate::trace::python_arg());
        for f in FIELDS {
            cmd = cmd.arg(crate::flags::flag_of(f));
        }
        let mut cmd = crate::engine_cli::augment(cmd);
        cmd = crate::diffusion_cli::augment(cmd);
        // What `--revision` is of: a model or a pipeline on the Hub.
        cmd = cmd.group(
            clap::ArgGroup::new("hub-source")
                .args(["model", "diffusers"])
                .multiple(true),
        );
        // `-h`: the common questions; these in `--help`.
        for name in [
            "safetensors",
            "gguf",
            "revision",
            "model-file",
            "trace",
            "python",
            "count-with",
            "trust-remote-code",
            "audio-seconds",
            "draft-config",
            "formats",
        ] {
            cmd = cmd.mut_arg(name, |a| a.hide_short_help(true));
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
            pairs: crate::flags::typed_pairs(m, keys()),
            json: m.get_flag("json"),
            verbose: m.get_flag("verbose"),
            formats: if m.get_flag("compare-formats") {
                Some(FORMAT_LADDER.iter().map(|f| f.to_string()).collect())
            } else {
                m.get_many::<String>("formats")
                    .map(|v| v.map(|f| f.trim().to_string()).collect())
            },
            config: m.get_one::<PathBuf>("config").cloned(),
            safetensors: m
                .get_many::<PathBuf>("safetensors")
                .map(|v| v.cloned().collect())
                .unwrap_or_default(),
            gguf: m.get_one::<PathBuf>("gguf").cloned(),
            model: m.get_one::<String>("model").cloned(),
            revision: m.get_one::<String>("revision").cloned(),
            model_file: m.get_one::<String>("model-file").cloned(),
            engine: crate::engine_cli::collect(m),
            trace: m.get_flag("trace"),
            python: m.get_one::<std::ffi::OsString>("python").cloned(),
            count_with: m
                .get_one::<String>("count-with")
                .and_then(|n| crate::count::CountWith::parse(n))
                .unwrap_or_default(),
            trust_remote_code: m.get_flag("trust-remote-code"),
            audio_seconds: m.get_one::<f64>("audio-seconds").copied(),
            diffusers: crate::diffusion_cli::collect(m),
        })
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

/// The longest clip `--audio-seconds` takes: the count probe makes it into the
/// encoder's input with the feature extractor (`MAX_AUDIO_SECONDS` in
/// gpumem_count.py), within its deadline.
const MAX_AUDIO_SECONDS: f64 = 3600.0;

/// `--audio-seconds`: more than 0, at most an hour.
fn parse_audio_seconds(v: &str) -> std::result::Result<f64, String> {
    match v.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s <= MAX_AUDIO_SECONDS => Ok(s),
        _ => Err(format!(
            "{v:?}: seconds of audio, more than 0 and at most {MAX_AUDIO_SECONDS}"
        )),
    }
}

/// Runs `estimate`.
pub fn run(args: Args) -> Result<Exit> {
    if args.diffusers.path.is_some() {
        let engine = |key: &str| {
            args.engine
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        return crate::diffusion_cli::run(
            &args.diffusers,
            args.revision.as_deref(),
            &args.pairs,
            engine("card"),
            engine("wired-limit-mb"),
            args.json,
        );
    }
    // Step 1: gather every input (files are read, headers only), then validate once.
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut imported: Option<config::ImportedConfig> = None;
    // The config reader's refusal of a config that names a model_type, kept for the
    // count with transformers to answer instead (`--count-with`).
    let mut refused: Option<String> = None;
    // config.json's text, for `--trace`.
    let mut config_text: Option<String> = None;
    // --model: the Hub gives the config text and the tensors; both then take the
    // same path as --config and --safetensors/--gguf.
    let mut hub_tensors: Option<TensorSummary> = None;
    let mut args = args;
    crate::engine_cli::read_draft_config(&mut args.engine)?;
    read_mmproj(&mut args.engine)?;
    let mut hub_gguf_shape = None;
    // --model of the bundled catalogue, without --revision, --model-file or --config:
    // its bundled config.json, as --config would read it, and no request.
    let bundled = match (&args.model, &args.config) {
        (Some(model), None) => {
            crate::hub::bundled_for(model, args.revision.as_deref(), args.model_file.as_deref())
        }
        _ => None,
    };
    if let Some(model) = &args.model {
        if !args.safetensors.is_empty() || args.gguf.is_some() {
            anyhow::bail!("give either --model or --safetensors/--gguf, not both");
        }
        if let Some(b) = bundled {
            crate::out::errln!(
                "gpumem-agent: {}: the bundled config.json (read {}), no request; --revision main reads the Hub",
                b.id,
                b.read
            );
            let c = config::parse_config(&b.config)
                .with_context(|| format!("reading the bundled config.json of {}", b.id))?;
            pairs.extend(c.pairs().into_iter().map(|(k, v)| (k.to_string(), v)));
            imported = Some(c);
            config_text = Some(b.config.clone());
        } else {
            let found = crate::hub::lookup_or_hint(
                model,
                args.revision.as_deref(),
                args.model_file.as_deref(),
            )?;
            crate::out::errln!(
                "gpumem-agent: {model}@{}: {} weight file(s), {} HTTP request(s)",
                found.key,
                found.files.len(),
                found.requests
            );
            if let (Some(text), None) = (&found.config, &args.config) {
                match read_config(
                    text,
                    &format!("reading {model}'s config.json"),
                    args.count_with,
                )? {
                    Ok(c) => {
                        pairs.extend(c.pairs().into_iter().map(|(k, v)| (k.to_string(), v)));
                        imported = Some(c);
                    }
                    Err(why) => refused = Some(why),
                }
                config_text = Some(text.clone());
            }
            hub_tensors = Some(found.tensors);
            hub_gguf_shape = found.gguf_shape;
        }
    }
    if let Some(path) = &args.config {
        let text = crate::private::read_to_string_bounded(path, config::MAX_CONFIG_BYTES)?;
        match read_config(
            &text,
            &format!("reading {}", path.display()),
            args.count_with,
        )? {
            Ok(c) => {
                pairs.extend(c.pairs().into_iter().map(|(k, v)| (k.to_string(), v)));
                imported = Some(c);
            }
            Err(why) => refused = Some(why),
        }
        config_text = Some(text);
    }
    // A GGUF file alone gives the KV line its shape from the header's metadata (the
    // weights are its tensors); a config.json, or flags given after, take precedence.
    let gguf_header = match &args.gguf {
        Some(path) => Some(read_gguf(path)?),
        None => None,
    };
    let gguf_shape = gguf_header
        .as_ref()
        .and_then(|h| h.shape())
        .or(hub_gguf_shape)
        .filter(|_| imported.is_none());
    if let Some(shape) = &gguf_shape {
        pairs.extend(shape.pairs.iter().map(|(k, v)| (k.to_string(), v.clone())));
    }
    // A config the reader refused (an encoder-decoder it does not count) has no shape
    // for the encoder's length to belong to: it is kept for the count's cross-attention
    // cache.
    let mut source_length: Option<u64> = None;
    let mut given = args.pairs.clone();
    if imported.is_none() && refused.is_some() {
        given.retain(|(k, v)| {
            if k == "encoder-length" {
                source_length = v.parse().ok();
                return false;
            }
            true
        });
    }
    pairs.extend(given);
    // The one reader: the estimate's pairs, and what the engine flags decide of the
    // estimate (the named engine's cache layout for the recurrent-state and indexer
    // lines, transformers' own without one; the cards' generation for a training
    // step's cuBLAS workspaces, the larger without one) settled on it. The engine
    // flags' own errors are reported with their rules below.
    let (mut input, errors) = read_input(
        pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        args.engine.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    if !errors.is_empty() {
        for e in &errors {
            crate::out::errln!("gpumem-agent: invalid input: --{e}");
        }
        return Ok(Exit::Unavailable);
    }
    let shards = args
        .safetensors
        .iter()
        .map(|path| read_safetensors(path))
        .collect::<Result<Vec<_>>>()?;
    let mut summary = TensorSummary::merge_all(hub_tensors.into_iter().chain(shards))
        .context("merging safetensors shards")?;
    if let Some(header) = gguf_header {
        if summary.is_some() {
            anyhow::bail!("give either --safetensors or --gguf, not both");
        }
        summary = Some(header.tensors);
    }
    input.tensors = summary;
    // A family the reader does not know (or any, when asked): counted by transformers,
    // whose figures the estimator then takes for the reader's.
    let mut confidence: Option<String> = None;
    let counted = match (imported.as_mut(), &config_text, &refused) {
        (Some(c), Some(text), _) => match count_family(&args, c, text, &input)? {
            Ok(counted) => counted,
            Err(exit) => return Ok(exit),
        },
        // The reader refused it: the count answers, or the refusal stands.
        (None, Some(text), Some(why)) => match run_count(&args, text, &input)? {
            // Without the model's cache the count answers only half (an encoder, an
            // encoder-decoder whose forward needs more than tokens): the refusal stands.
            Ok(counted) if !counted.cache_read() && input.context.is_some() => {
                anyhow::bail!(
                    "{why}; {} built it but read no KV cache from it{}",
                    counted.by(),
                    counted
                        .cache_error
                        .as_deref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                )
            }
            Ok(counted) => {
                confidence = Some(format!(
                    "counted by {} (model built on the meta device); the config reader cannot read it ({why})",
                    counted.by()
                ));
                Some(counted)
            }
            Err((reason, true)) => anyhow::bail!(
                "{why}; given --python PATH to a Python with torch and transformers, gpumem-agent tries to count it with transformers' own code (here: {reason})"
            ),
            Err((reason, false)) => {
                anyhow::bail!("{why}; and transformers could not count it: {reason}")
            }
        },
        _ => None,
    };
    // `--audio-seconds` is a clip for an encoder that reads audio of any length; the
    // count read its positions, or the flag is refused.
    if let Some(seconds) = args.audio_seconds {
        let audio = counted
            .as_ref()
            .and_then(|c| c.cross_cache.as_ref())
            .and_then(|x| x.audio.as_ref());
        if audio.is_none_or(|a| a.positions.is_none()) {
            crate::out::errln!(
                "gpumem-agent: invalid input: --audio-seconds {seconds}: {}",
                match &counted {
                    None =>
                        "read by transformers' count of an encoder-decoder whose encoder reads audio of any length (--config of such a model, with --python), which did not run here",
                    Some(c) if c.cross_cache.is_none() =>
                        "the counted model is not an encoder-decoder whose cross-attention cache was read",
                    Some(_) =>
                        "this model's encoder does not read audio of any length (its source is tokens, or one fixed clip): give --encoder-length",
                }
            );
            return Ok(Exit::Unavailable);
        }
    }
    if let Some(c) = &counted {
        // A config the reader read (generically) keeps `--encoder-length` in its shape:
        // the count's cross-attention cache spans it too.
        let source_length = source_length.or_else(|| {
            input
                .arch
                .as_ref()
                .map(|a| a.encoder_length)
                .filter(|n| *n > 0)
        });
        input.counted = Some(crate::count::to_counted(c, source_length)?);
    }
    // Step 2: compute.
    let mut est = match estimate(&input) {
        Ok(e) => e,
        Err(e) => {
            crate::out::errln!("gpumem-agent: invalid input: {}", flagify(&e));
            return Ok(Exit::Unavailable);
        }
    };
    if let Some(shape) = &gguf_shape {
        est.assumptions.push(format!(
            "GGUF header: {}{}",
            shape
                .pairs
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            shape
                .vocab
                .map(|v| format!(", vocabulary {v} tokens"))
                .unwrap_or_default()
        ));
        est.assumptions
            .extend(shape.notes.iter().map(|n| format!("GGUF header: {n}")));
        est.warnings
            .extend(shape.warnings.iter().map(|w| format!("GGUF header: {w}")));
    }
    if let Some(b) = bundled {
        est.assumptions.push(crate::hub::bundled::assumption(b));
    }
    if let Some(c) = &counted {
        describe_count(&args, c, &input, &mut est);
    }
    if let Some(c) = &confidence {
        est.assumptions
            .push(format!("config.json: confidence: {c}"));
    }
    // What the config reader assumed and could not model belongs with the figures.
    if let Some(c) = &imported {
        est.assumptions.push(format!(
            "config.json: model_type {}, confidence: {}",
            c.model_type, c.confidence
        ));
        est.assumptions
            .extend(c.notes.iter().map(|n| format!("config.json: {n}")));
        est.warnings
            .extend(c.warnings.iter().map(|w| format!("config.json: {w}")));
    }
    if args.trace {
        let Some(text) = &config_text else {
            crate::out::errln!(
                "gpumem-agent: --trace needs the model's config.json: give --config or --model"
            );
            return Ok(Exit::Unavailable);
        };
        match crate::trace::trace_for_estimate(args.python.clone(), text, &input)? {
            Ok(doc) => {
                est = est
                    .with_traced(&crate::trace::traced_lines(&doc, input.train))
                    .context("applying the trace")?;
                est.assumptions.push(format!(
                    "traced lines: the model's code run by torch {} and transformers {} on the meta device in {:.1} s (not a GPU measurement; kernels' private workspaces are not in it)",
                    doc.versions.torch,
                    doc.versions.transformers,
                    doc.wall_time_ms as f64 / 1000.0
                ));
                est.assumptions
                    .extend(doc.notes.iter().map(|n| format!("trace: {n}")));
            }
            Err(
                f @ (crate::trace::python::Failure::Unavailable(_)
                | crate::trace::python::Failure::Refused(_)),
            ) => {
                crate::out::errln!("gpumem-agent: cannot trace here: {f}");
                return Ok(Exit::Unavailable);
            }
            Err(f) => anyhow::bail!("{f}"),
        }
    }
    let fit = fit_table(&est);
    let engine = match crate::engine_cli::compute(&args.engine, &input, &est) {
        Ok(e) => e,
        Err(errors) => {
            for e in &errors {
                crate::out::errln!("gpumem-agent: invalid input: {e}");
            }
            return Ok(Exit::Unavailable);
        }
    };
    // Step 3: the answer — on the engine's budget whenever an engine is named (on the
    // card given, else on each catalogue card for the smallest that serves it).
    let (params, _) = engine::from_pairs(args.engine.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let basis = match params.engine {
        Some(_) => Basis::Engine(Box::new(params.clone())),
        None => Basis::Estimate,
    };
    let answer = match headline(&input, &est, params.card.as_ref(), &basis) {
        Ok(h) => h,
        Err(e) => {
            crate::out::errln!("gpumem-agent: invalid input: {}", flagify(&e));
            return Ok(Exit::Unavailable);
        }
    };
    let formats = match &args.formats {
        Some(names) => {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let card = resolve(&answer.card.id)
                .unwrap_or_else(|_| GpuCard::custom(answer.card.capacity_bytes));
            match compare_formats(&input, &card, &basis, &names) {
                Ok(rows) => Some(rows),
                Err(e) => {
                    crate::out::errln!("gpumem-agent: invalid input: --{e}");
                    return Ok(Exit::Unavailable);
                }
            }
        }
        None => None,
    };
    if args.json {
        let out = EstimateDocument {
            schema: ESTIMATE_SCHEMA.into(),
            input: params::to_pairs(&input)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            estimate: est,
            confidence: imported
                .as_ref()
                .map(|c| c.confidence.clone())
                .or(confidence),
            fit,
            engine: engine.engine,
            engine_per_card: engine.engine_per_card,
            largest: engine.largest,
            placement: engine.placement,
            device_map: engine.device_map,
            cpu_offload: engine.cpu_offload,
            verdict: answer,
            formats,
        };
        let exit = verdict_exit(&out.verdict);
        emit(&(serde_json::to_string_pretty(&out)? + "\n"))?;
        return Ok(exit);
    }
    let model = model_name(&args, bundled);
    let inputs = inputs_line(&input, &est, model.as_deref());
    let mut text = crate::answer::render(
        &inputs,
        &answer,
        &est,
        &engine,
        formats.as_deref(),
        input.tensors.is_some(),
        gpumem_core::estimate::rank_summary(&input).is_some(),
    );
    if args.verbose {
        text.push('\n');
        text.push_str(&render_table(&est, &fit, input.gpus > 1));
        text.push_str(&crate::engine_cli::render(&engine));
    }
    emit(&text)?;
    Ok(verdict_exit(&answer))
}

/// The config reader's reading of config.json; a refusal of a config that names a
/// model_type comes back as its reason when the count may answer instead
/// (`--count-with` other than `reader`), else as the error it was.
/// The estimate's input from its pairs and the engine flags (`engine`), through the
/// core's one reader (`inputs::read`), as every other path that answers from the same
/// inputs reads them: the input, and the estimate pairs' errors.
pub(crate) fn read_input<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    engine: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> (EstimateInput, Vec<EstimateError>) {
    let read = gpumem_core::inputs::read(pairs, engine);
    (read.input, read.errors)
}

fn read_config(
    text: &str,
    what: &str,
    count_with: crate::count::CountWith,
) -> Result<std::result::Result<config::ImportedConfig, String>> {
    match config::parse_config(text) {
        Ok(c) => Ok(Ok(c)),
        Err(e) => {
            // A refusal of a config naming its model_type goes to the count (an
            // encoder-decoder too: the probe builds it whole and reads both caches).
            let named = config::config_json(text)
                .ok()
                .is_some_and(|v| v.get("model_type").is_some_and(|m| m.is_string()));
            if named && count_with != crate::count::CountWith::Reader {
                Ok(Err(format!("{what}: {e}")))
            } else {
                Err(anyhow::Error::new(e).context(what.to_string()))
            }
        }
    }
}

/// Runs the count of config.json in `--python`; a failure comes back as a one-line
/// reason, and whether it is that no Python could count here.
fn run_count(
    args: &Args,
    text: &str,
    input: &gpumem_core::estimate::EstimateInput,
) -> Result<std::result::Result<crate::count::Count, (String, bool)>> {
    use crate::trace::python::Failure;
    let config = config::config_json(text).context("reading config.json for the count")?;
    let python = args
        .python
        .clone()
        .unwrap_or_else(|| std::ffi::OsString::from("python3"));
    let config_dir = args
        .config
        .as_deref()
        .map(|p| p.parent().unwrap_or(Path::new(".")).to_path_buf());
    let got = crate::count::count(
        &python,
        &config,
        text,
        input.compute_dtype,
        args.trust_remote_code,
        config_dir.as_deref(),
        crate::count::Lengths {
            audio_seconds: args.audio_seconds,
            // The prompt, and the prompt with the generated tokens: where a cache that
            // is not per token is measured.
            measure_tokens: input
                .context
                .and_then(|c| Some([c, c.checked_add(input.generate)?])),
        },
    )?;
    Ok(got.map_err(|f| match f {
        Failure::Unavailable(why) => (why, true),
        Failure::Failed(why) => (format!("the count failed: {why}"), false),
        Failure::Refused(why) => (format!("not counted: {why}"), false),
    }))
}

/// How the config reader says a vision or audio tower's weights are left out.
const TOWER_NOT_COUNTED: &str = "tower is not counted; its weights add to the total";

/// Counts the model of config.json with transformers when `--count-with` asks for it
/// (or, by default, when the reader does not know its family); the estimator then
/// takes its weights and KV figures (`EstimateInput::counted`). Without a Python that
/// can count, the answer is the reader's with a warning saying how to count it
/// exactly; `--count-with transformers` then ends with exit 2.
fn count_family(
    args: &Args,
    c: &mut config::ImportedConfig,
    text: &str,
    input: &gpumem_core::estimate::EstimateInput,
) -> Result<std::result::Result<Option<crate::count::Count>, Exit>> {
    use crate::count::CountWith;
    // A family the reader does not know, or knows by name only and reads with its
    // generic rules (GPT-J, OPT, BLOOM, …): tensors beyond those rules go uncounted.
    // Likewise a vision or audio tower the reader does not count (a model whose text
    // config it knows, under a root it does not: MOSS's transcriber over Qwen3).
    let generic = c.confidence == "unknown family"
        || c.warnings.iter().any(|w| {
            w.contains("is read with the generic decoder rules") || w.contains(TOWER_NOT_COUNTED)
        });
    let asked = args.count_with == CountWith::Transformers;
    if !(asked || args.count_with == CountWith::Auto && generic) {
        return Ok(Ok(None));
    }
    let counted = match run_count(args, text, input)? {
        Ok(counted) => counted,
        Err((why, unavailable)) => {
            if asked {
                crate::out::errln!("gpumem-agent: cannot count with transformers here: {why}");
                return Ok(Err(Exit::Unavailable));
            }
            c.warnings.push(if unavailable {
                format!(
                    "model_type {} is not counted exactly here ({why}): gpumem-agent counts it exactly with transformers' own code, given --python PATH to a Python with torch and transformers",
                    c.model_type
                )
            } else {
                format!(
                    "model_type {} is not counted exactly: transformers could not count it ({why})",
                    c.model_type
                )
            });
            return Ok(Ok(None));
        }
    };
    let by = counted.by();
    let mut kept = Vec::new();
    if input.tensors.is_some() {
        kept.push("weights from the file headers".to_string());
    }
    if !counted.cache_read() && counted.kind.as_deref() == Some("encdec") {
        // The reader read it as a decoder: its KV lines have no cross-attention cache.
        c.warnings.push(format!(
            "model_type {} is an encoder-decoder whose caches the count could not read ({}): the KV lines are the config reader's decoder reading and are not counted exactly (no cross-attention cache, no encoder output)",
            c.model_type,
            counted.cache_error.as_deref().unwrap_or("no cache returned")
        ));
    }
    if !counted.cache_read() {
        kept.push(match &counted.cache_error {
            Some(why) => {
                format!("KV cache by the config reader (the forward on meta failed: {why})")
            }
            None => "KV cache by the config reader (the model returned no cache)".into(),
        });
    }
    c.confidence = if kept.is_empty() {
        format!("counted by {by} (model built on the meta device)")
    } else {
        format!(
            "counted by {by} (model built on the meta device); {}",
            kept.join("; ")
        )
    };
    // transformers read every key: the reader's doubts about its own reading (the
    // generic rules, the keys it could not place) no longer concern the figures.
    let mt = c.model_type.clone();
    // An encoder-decoder whose caches the count read: its encoder is counted.
    let encdec = counted.cross_cache.is_some() && counted.cache_layers.is_some();
    c.warnings.retain(|w| {
        !(w.contains("generic decoder rules")
            || w.contains(TOWER_NOT_COUNTED)
            || w.contains(&format!("is not read: the {mt} reader does not know"))
            || encdec && w.contains("is not modelled: the encoder is not counted"))
    });
    Ok(Ok(Some(counted)))
}

/// What the count did, among the answer's assumptions and warnings.
fn describe_count(
    args: &Args,
    counted: &crate::count::Count,
    input: &gpumem_core::estimate::EstimateInput,
    est: &mut Estimate,
) {
    let kv = counted.cache_read() && input.context.is_some();
    let how_kv = match &counted.cache_measured {
        Some(m) => format!(
            ", the KV cache measured at {} tokens by the model's own cache after one forward on meta tensors each (not per token: {}; one sequence, two checked to hold twice it)",
            {
                let mut t: Vec<u64> = m.lengths.iter().map(|l| l.tokens).collect();
                t.dedup();
                t.iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" and ")
            },
            m.why
        ),
        None => ", the KV cache from the model's own cache after a forward on meta tensors".into(),
    };
    est.assumptions.push(format!(
        "counted lines: {} ({}) built by {} and torch {} on the meta device in {:.1} s from config.json alone (no weights read): {} parameters{}, every parameter and buffer read from its modules{}",
        counted.model_class,
        counted.auto_class,
        counted.by(),
        counted.versions.torch,
        counted.wall_time_ms as f64 / 1000.0,
        group_digits(counted.parameters),
        if counted.tied_embeddings { ", the output projection tied to the embeddings" } else { "" },
        if kv { how_kv.as_str() } else { "" },
    ));
    est.assumptions
        .extend(counted.notes.iter().map(|n| format!("count: {n}")));
    if let Some(audio) = counted.cross_cache.as_ref().and_then(|x| x.audio.as_ref()) {
        let given = args.pairs.iter().any(|(k, _)| k == "encoder-length");
        describe_audio(audio, given, est);
    }
    if input.arch.is_none() && input.train == gpumem_core::estimate::TrainMode::None {
        // A config the reader refused: no shape for the forward's activations.
        est.warnings.push(
            "the forward's activations are not counted (the config reader has no shape for this model; the count reads tensors and caches, not activations): add them to --reserve-gib".into(),
        );
    }
    if input.train != gpumem_core::estimate::TrainMode::None {
        est.warnings.push(format!(
            "gradients and optimizer states are of the {} parameters counted; the activations (and LoRA's adapters) follow the config reader's shape of this model",
            group_digits(counted.parameters)
        ));
    }
    if args.engine.iter().any(|(k, _)| k == "engine") && counted.cache_measured.is_some() {
        est.warnings.push(
            "the counted KV cache was measured at the lengths asked, not per token: no engine's pool (blocks of bytes per token) is derived from it; the serving engine's own lines follow the config reader's shape of this model"
                .into(),
        );
    } else if args.engine.iter().any(|(k, _)| k == "engine") {
        est.warnings.push(
            "the serving engine's own lines follow the config reader's shape of this model; the weights and KV lines are the counted ones"
                .into(),
        );
    }
}

/// What the count made of the clip an audio encoder reads, or how to give it.
fn describe_audio(audio: &crate::count::AudioInput, length_given: bool, est: &mut Estimate) {
    let extractor = audio
        .feature_extractor
        .as_deref()
        .unwrap_or("its feature extractor");
    let rate = audio
        .sampling_rate
        .map(|r| format!(" at {} Hz", group_digits(r)))
        .unwrap_or_default();
    match (audio.seconds, &audio.input_shape, audio.positions) {
        (Some(seconds), Some(shape), Some(positions)) => est.assumptions.push(format!(
            "encoder-decoder: the encoder reads {seconds} s of audio{rate}, made by {extractor} into its {} of shape [{}], which the model's own subsampling turns into {} encoder positions; the cross-attention cache and the encoder output span them",
            audio.input,
            shape.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", "),
            group_digits(positions)
        )),
        _ if length_given => est.assumptions.push(format!(
            "encoder-decoder: the encoder reads audio ({} made by {extractor}{rate}); --encoder-length is its positions after the model's own subsampling (--audio-seconds gives the clip's seconds instead)",
            audio.input
        )),
        _ => est.warnings.push(format!(
            "encoder-decoder: the encoder reads audio ({} made by {extractor}{rate}) and no clip length was given: give --audio-seconds (the longest clip) or --encoder-length (its encoder positions); the figures take the encoder length said in the assumptions",
            audio.input
        )),
    }
}

/// The exit status of an answer: 0 when it fits or is borderline, 1 when it does not
/// fit on the card or in the host's RAM (2, bad input, is returned before any answer).
fn verdict_exit(h: &gpumem_core::headline::Headline) -> Exit {
    let host_short = h.host.as_ref().is_some_and(|f| f.fits == Some(false));
    match h.verdict() {
        gpumem_core::fit::Verdict::DoesNotFit => Exit::MeasureFailed,
        _ if host_short => Exit::MeasureFailed,
        _ => Exit::Ok,
    }
}

/// What the model is called: the Hub id (the bundled catalogue's spelling, saying so,
/// for a bundled config), else the file the shape or tensors came from.
fn model_name(args: &Args, bundled: Option<&crate::hub::bundled::Bundled>) -> Option<String> {
    let file = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    bundled
        .map(|b| format!("{} (bundled)", b.id))
        .or_else(|| args.model.clone())
        .or_else(|| args.config.as_deref().and_then(file))
        .or_else(|| args.gguf.as_deref().and_then(file))
        .or_else(|| args.safetensors.first().and_then(|p| file(p)))
}

/// Writes to stdout, escaped as every terminal line is (`crate::out::terminal_safe`: a
/// Hub's config fields reach the table's warnings); a closed pipe (`… | head`) ends
/// the output quietly instead of panicking as `print!` would.
fn emit(text: &str) -> Result<()> {
    use std::io::Write;
    let text = crate::out::terminal_safe(text);
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout"),
    }
}

/// `field: reason` → `--field: reason` so the message names the flag to fix.
fn flagify(e: &EstimateError) -> String {
    match e {
        EstimateError::Invalid { field: f, .. } if field(f).is_some() => format!("--{e}"),
        _ => e.to_string(),
    }
}

/// Reads only a file's header, as [`gpumem_core::import::read_policy`] asks: the same bounds and growth
/// as the page's import, and the weights are never read.
pub fn read_header(path: &Path, format: HeaderFormat) -> Result<Header> {
    let what = || format!("reading {}", path.display());
    let mut file = File::open(path).with_context(what)?;
    let size = file.metadata().with_context(what)?.len();
    let policy = HeaderRead::new(format, size);
    let mut prefix = Vec::new();
    loop {
        match policy.next_read(&prefix).with_context(what)? {
            Step::Done(header) => return Ok(header),
            // The file is read from its start in order, so its position is always
            // `prefix.len()` = `range.start`.
            Step::Need(range) => {
                let got = (&mut file)
                    .take(range.end.saturating_sub(range.start))
                    .read_to_end(&mut prefix)
                    .with_context(what)?;
                if got == 0 {
                    anyhow::bail!(
                        "{}: the file ended inside its header (it changed while being read?)",
                        path.display()
                    );
                }
            }
        }
    }
}

/// Reads only the safetensors header: 8 bytes, then the JSON they announce.
pub fn read_safetensors(path: &Path) -> Result<TensorSummary> {
    read_header(path, HeaderFormat::Safetensors).map(Header::into_tensors)
}

/// Reads `--mmproj FILE` (llama.cpp's multimodal projector): the file's GGUF header
/// only, its tensors counted as the model file's are, and replaces the path with the
/// projector's `key=value` pairs, the value the page's URL keeps too. A value with
/// `=` is taken as those pairs already.
pub fn read_mmproj(pairs: &mut [(String, String)]) -> anyhow::Result<()> {
    use anyhow::Context;
    use gpumem_core::engine::mmproj::Projector;
    for (_, v) in pairs.iter_mut().filter(|(k, _)| k == "mmproj") {
        if v.contains('=') {
            continue;
        }
        let path = std::path::Path::new(v.as_str());
        let header = read_gguf(path).with_context(|| format!("--mmproj {}", path.display()))?;
        let p = Projector::from_header(&header)
            .with_context(|| format!("--mmproj {}", path.display()))?;
        *v = p.to_text();
    }
    Ok(())
}

/// Reads a GGUF header, fetching more of the file only while the parser asks for it.
pub fn read_gguf(path: &Path) -> Result<gguf::GgufHeader> {
    match read_header(path, HeaderFormat::Gguf)? {
        Header::Gguf(h) => Ok(*h),
        Header::Safetensors(_) => anyhow::bail!("{}: not a GGUF header", path.display()),
    }
}

/// The human table: every line with bytes, GB and GiB, then the per-card fit.
pub fn render_table(est: &Estimate, fit: &[CardFit], per_device: bool) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let row = |s: &mut String, label: &str, kind: &str, b: u64| {
        let _ = writeln!(
            s,
            "{label:<58} {kind:<9} {:>22} {:>10} {:>10}",
            group_digits(b),
            Bytes(b).gb_string(2),
            Bytes(b).gib_string(2)
        );
    };
    let _ = writeln!(
        s,
        "{:<58} {:<9} {:>22} {:>10} {:>10}",
        "line", "kind", "bytes", "GB", "GiB"
    );
    for l in &est.lines {
        let kind = l.kind.name();
        let mut label = if l.in_total {
            l.label.to_string()
        } else {
            format!("({})", l.label)
        };
        // A traced line keeps the figure it replaced beside it.
        if let Some(r) = l.replaced_bytes {
            label.push_str(&format!(" [was {} GB]", Bytes(r).gb_string(2)));
        }
        row(&mut s, &label, kind, l.bytes);
        if !l.formula.is_empty() {
            s.push_str(&crate::answer::wrap(&format!("    = {}", l.formula), 6));
        }
    }
    row(&mut s, "Total", "", est.total_bytes);
    if per_device {
        row(
            &mut s,
            "Per device (most loaded, reserve included)",
            "",
            est.per_device_bytes,
        );
    }
    if let Some(p) = est.parameters {
        let _ = writeln!(s, "\nparameters: {}", group_digits(p));
        if let Some(a) = est.active_parameters.filter(|a| *a != p) {
            let _ = writeln!(s, "active parameters per token: {}", group_digits(a));
        }
    }
    for a in &est.assumptions {
        let _ = writeln!(s, "assumed: {a}");
    }
    for w in &est.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    let _ = writeln!(
        s,
        "\nfit per device ({} B each), smallest card first; {MARGIN_RULE}:",
        group_digits(est.per_device_bytes)
    );
    // Verdict and signed headroom come from the core's shared helpers, so this table
    // and the page's fit table print the same words and digits for the same need.
    // Columns as wide as the longest verdict and card name, so every row lines up.
    let verdict_width = fit
        .iter()
        .map(|f| Verdict::of_fit(f).text().chars().count())
        .max()
        .unwrap_or(0);
    let name_width = fit
        .iter()
        .map(|f| f.name.chars().count())
        .max()
        .unwrap_or(0);
    // Smallest capacity first, so the first "Fits" is the smallest card that does.
    let mut fit: Vec<&CardFit> = fit.iter().collect();
    fit.sort_by_key(|f| f.capacity_bytes);
    for f in fit {
        let _ = writeln!(
            s,
            "  {:<verdict_width$} {:<name_width$} {:>22} B ({:<8}) headroom {:>23} B  {:>8} GiB",
            Verdict::of_fit(f).text(),
            f.name,
            group_digits(f.capacity_bytes),
            f.capacity_kind,
            signed_group_digits(f.headroom_bytes),
            signed_gib_string(f.headroom_bytes, 2)
        );
    }
    s
}
