//! `gpumem-agent estimate --diffusers DIR|ORG/NAME`: a diffusers pipeline on the
//! command line.
//!
//! Reads the folder's `model_index.json` (or the file itself) and the config.json of
//! each component with weights (bounded reads, nothing else of the folder) — or the
//! same files of a Hub repository ([`crate::hub::pipeline`]), when no such folder
//! exists and the value is an `ORG/NAME` — hands
//! their text to [`gpumem_core::diffusion`], and prints one answer: the verdict on the
//! card (or the smallest catalogue card that holds the run), then each component's
//! weights, the denoiser's and the VAE decode's peaks and the offload modes.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Arg, ArgAction, ArgMatches, Command};
use gpumem_core::diffusion::{self, report};

use crate::exit::Exit;

/// The flags only a pipeline takes (the shared ones — `--compute-dtype`, `--format`,
/// `--attention`, `--card`, `--reserve-gib` — come from the field table).
pub fn augment(cmd: Command) -> Command {
    cmd.next_help_heading("Diffusion pipeline")
        .arg(Arg::new("diffusers").long("diffusers").value_name("DIR_OR_MODEL_INDEX_OR_ORG/NAME").value_parser(clap::value_parser!(PathBuf)).help("A diffusers pipeline: its folder (model_index.json and each component's config.json), its model_index.json, or its Hub id (ORG/NAME, when no such folder exists: those files read from the Hugging Face Hub, HF_ENDPOINT, HF_TOKEN; no weights)"))
        .arg(Arg::new("height").long("height").value_name("PX").value_parser(clap::value_parser!(u64)).requires("diffusers").help("Image height in pixels (default 1024)"))
        .arg(Arg::new("width").long("width").value_name("PX").value_parser(clap::value_parser!(u64)).requires("diffusers").help("Image width in pixels (default 1024)"))
        .arg(Arg::new("frames").long("frames").value_name("N").value_parser(clap::value_parser!(u64)).requires("diffusers").help("Video frames (default 1; Wan's default is 81)"))
        .arg(Arg::new("images").long("images").value_name("N").value_parser(clap::value_parser!(u64)).requires("diffusers").help("Images or videos per prompt (num_images_per_prompt; default 1)"))
        .arg(Arg::new("cfg").long("cfg").value_name("on|off").value_parser(["on", "off"]).requires("diffusers").help("Classifier-free guidance (default: the pipeline's: on, off for FLUX.1)"))
        .arg(Arg::new("offload").long("offload").value_name("MODE").value_parser(["none", "model", "sequential", "group"]).requires("diffusers").help("none (pipe.to(\"cuda\")), model (enable_model_cpu_offload), sequential (enable_sequential_cpu_offload), group (the denoiser's enable_group_offload, the other components on the device, or with --group-pipeline the pipeline's; with --group-blocks N or --group-leaf)"))
        .arg(Arg::new("group-blocks").long("group-blocks").value_name("N").value_parser(clap::value_parser!(u64)).requires("diffusers").conflicts_with("group-leaf").help("--offload group: offload_type=\"block_level\", num_blocks_per_group=N"))
        .arg(Arg::new("group-leaf").long("group-leaf").action(ArgAction::SetTrue).requires("diffusers").help("--offload group: offload_type=\"leaf_level\""))
        .arg(Arg::new("group-stream").long("group-stream").action(ArgAction::SetTrue).requires("diffusers").help("--offload group: use_stream=True (the next group onloaded while one runs; block level then takes one block per group)"))
        .arg(Arg::new("group-pipeline").long("group-pipeline").action(ArgAction::SetTrue).requires("diffusers").help("--offload group: pipe.enable_group_offload(...), every component group-offloaded (the text encoders and the VAE too), not the denoiser's alone"))
        .arg(Arg::new("text-format").long("text-format").value_name("FORMAT").requires("diffusers").help("The text encoders' weight format (default: the dtype)"))
        .arg(Arg::new("text-tokens").long("text-tokens").value_name("N").value_parser(clap::value_parser!(u64)).requires("diffusers").help("Text tokens (default: the pipeline's max_sequence_length)"))
        .arg(Arg::new("vae-tiling").long("vae-tiling").action(ArgAction::SetTrue).requires("diffusers").help("vae.enable_tiling()"))
        .arg(Arg::new("vae-slicing").long("vae-slicing").action(ArgAction::SetTrue).requires("diffusers").help("vae.enable_slicing()"))
        .arg(Arg::new("layerwise-casting").long("layerwise-casting").action(ArgAction::SetTrue).requires("diffusers").help("The denoiser's enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=the dtype)"))
}

/// The pipeline flags as given.
#[derive(Debug, Default, Clone)]
pub struct Flags {
    /// `--diffusers`.
    pub path: Option<PathBuf>,
    height: Option<u64>,
    width: Option<u64>,
    frames: Option<u64>,
    images: Option<u64>,
    cfg: Option<bool>,
    offload: Option<String>,
    group_blocks: Option<u64>,
    group_leaf: bool,
    group_stream: bool,
    group_pipeline: bool,
    text_format: Option<String>,
    text_tokens: Option<u64>,
    tiling: bool,
    slicing: bool,
    layerwise: bool,
}

/// Reads the flags.
pub fn collect(m: &ArgMatches) -> Flags {
    Flags {
        path: m.get_one::<PathBuf>("diffusers").cloned(),
        height: m.get_one::<u64>("height").copied(),
        width: m.get_one::<u64>("width").copied(),
        frames: m.get_one::<u64>("frames").copied(),
        images: m.get_one::<u64>("images").copied(),
        cfg: m.get_one::<String>("cfg").map(|v| v == "on"),
        offload: m.get_one::<String>("offload").cloned(),
        group_blocks: m.get_one::<u64>("group-blocks").copied(),
        group_leaf: m.get_flag("group-leaf"),
        group_stream: m.get_flag("group-stream"),
        group_pipeline: m.get_flag("group-pipeline"),
        text_format: m.get_one::<String>("text-format").cloned(),
        text_tokens: m.get_one::<u64>("text-tokens").copied(),
        tiling: m.get_flag("vae-tiling"),
        slicing: m.get_flag("vae-slicing"),
        layerwise: m.get_flag("layerwise-casting"),
    }
}

/// Runs the estimate of a pipeline; `pairs` are the shared flags given.
pub fn run(
    flags: &Flags,
    revision: Option<&str>,
    pairs: &[(String, String)],
    card: Option<&str>,
    wired_limit_mb: Option<&str>,
    json: bool,
) -> Result<Exit> {
    let path = flags.path.as_deref().context("--diffusers")?;
    let (index, configs) = match hub_id(path) {
        Some(repo) => {
            let files = crate::hub::pipeline(repo, revision.unwrap_or("main"))?;
            crate::out::errln!(
                "gpumem-agent: {}: model_index.json and {} config.json file(s), {} HTTP request(s)",
                files.source,
                files.configs.len(),
                files.requests
            );
            (files.index, files.configs)
        }
        None if revision.is_some() => {
            anyhow::bail!(
                "--revision is of a Hub id (ORG/NAME); {} is a local path",
                path.display()
            )
        }
        None => read_folder(path)?,
    };
    let pipeline = diffusion::read(&index, &configs)?;
    answer(flags, pipeline, pairs, card, wired_limit_mb, json)
}

/// `--diffusers`' value as a Hub id: `ORG/NAME` when no such file or folder exists
/// here (a path that exists is always read as one).
fn hub_id(path: &Path) -> Option<&str> {
    let text = path.to_str()?;
    (!path.exists()
        && text.split('/').count() == 2
        && gpumem_core::import::hub::check_repo_id(text).is_ok())
    .then_some(text)
}

/// A pipeline's folder (or its model_index.json): the index and each component's
/// config.json, bounded reads, nothing else of the folder.
fn read_folder(path: &Path) -> Result<(String, Vec<(String, String)>)> {
    if !path.exists() {
        anyhow::bail!(
            "--diffusers {}: no such folder or file (a Hub id is ORG/NAME)",
            path.display()
        );
    }
    let dir: &Path = if path.is_dir() {
        path
    } else {
        path.parent().unwrap_or(Path::new("."))
    };
    let index_path = if path.is_dir() {
        path.join("model_index.json")
    } else {
        path.to_path_buf()
    };
    let index =
        crate::private::read_to_string_bounded(&index_path, diffusion::MAX_CONFIG_BYTES as u64)
            .with_context(|| format!("reading {}", index_path.display()))?;
    let (_, named, _) = diffusion::components_of(&index)?;
    let mut configs = Vec::new();
    // The core refuses a component name that is not one plain folder name.
    for (name, _) in &named {
        let p = dir.join(name).join("config.json");
        if p.exists() {
            let text =
                crate::private::read_to_string_bounded(&p, diffusion::MAX_CONFIG_BYTES as u64)
                    .with_context(|| format!("reading {}", p.display()))?;
            configs.push((name.clone(), text));
        }
    }
    Ok((index, configs))
}

/// The answer for a pipeline read, with the run's flags.
fn answer(
    flags: &Flags,
    pipeline: diffusion::Pipeline,
    pairs: &[(String, String)],
    card: Option<&str>,
    wired_limit_mb: Option<&str>,
    json: bool,
) -> Result<Exit> {
    // The pipeline's flags and the shared ones as the pairs the core reads (the
    // page's diffusion module reads the same keys).
    let mut asked: Vec<(String, String)> = pairs.to_vec();
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            asked.push((k.to_string(), v));
        }
    };
    put("height", flags.height.map(|v| v.to_string()));
    put("width", flags.width.map(|v| v.to_string()));
    put("frames", flags.frames.map(|v| v.to_string()));
    put("images", flags.images.map(|v| v.to_string()));
    put(
        "cfg",
        flags
            .cfg
            .map(|on| if on { "on" } else { "off" }.to_string()),
    );
    put("offload", flags.offload.clone());
    put("group-blocks", flags.group_blocks.map(|v| v.to_string()));
    put("group-leaf", flags.group_leaf.then(|| "true".to_string()));
    put(
        "group-stream",
        flags.group_stream.then(|| "true".to_string()),
    );
    put(
        "group-pipeline",
        flags.group_pipeline.then(|| "true".to_string()),
    );
    put("text-format", flags.text_format.clone());
    put("text-tokens", flags.text_tokens.map(|v| v.to_string()));
    put("vae-tiling", flags.tiling.then(|| "true".to_string()));
    put("vae-slicing", flags.slicing.then(|| "true".to_string()));
    put(
        "layerwise-casting",
        flags.layerwise.then(|| "true".to_string()),
    );
    put("card", card.map(str::to_string));
    put("wired-limit-mb", wired_limit_mb.map(str::to_string));
    let get = |k: &str| {
        asked
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    let run = report::run(pipeline, &get)?;
    let (pipeline, w, est, host) = (
        &run.pipeline,
        &run.workload,
        &run.estimate,
        run.host.clone(),
    );
    let answer = run.answer.clone();
    if json {
        let doc = serde_json::json!({
            "schema": "gpumem.diffusion/v1",
            "pipeline": pipeline.class_name,
            "components": est.components.iter().map(|c| serde_json::json!({
                "name": c.name, "class": c.class_name, "role": c.role.word(), "parameters": c.parameters,
                "format": c.format, "bytes": c.bytes, "largest_module_bytes": c.largest_module_bytes})).collect::<Vec<_>>(),
            "latent": [est.latent.0, est.latent.1, est.latent.2],
            "denoiser_batch": est.call.batch, "calls_per_step": est.calls_per_step, "guidance": est.guidance.words(),
            "denoiser_activations_bytes": est.denoiser_activations, "eager_scores_bytes": est.eager_scores,
            "layerwise_upcast_bytes": est.layerwise_upcast, "int8_matmul_bytes": est.int8_matmul,
            "vae_decode_bytes": est.vae_decode, "vae_upcast_bytes": est.vae_upcast, "text_encode_bytes": est.text_encode,
            "offload": w.offload.call(), "device_bytes": est.device_bytes, "reserve_bytes": est.reserve,
            "need_bytes": est.need(), "host_bytes": est.host_bytes, "peak_phase": est.peak_phase,
            "peak_runs_convolutions": est.peak_runs_convolutions,
            "by_offload_mode_bytes": {"none": est.by_mode[0], "model": est.by_mode[1], "sequential": est.by_mode[2], "group": est.by_mode[3]},
            "group_offload": {"call": est.group.call(), "offload_type": if est.group.blocks.is_some() { "block_level" } else { "leaf_level" },
                "num_blocks_per_group": est.group.effective_blocks(), "use_stream": est.group.stream,
                "pipeline": est.group.pipeline,
                "components_resident_bytes": est.group_components.iter().map(|(n, b)| (n.clone(), serde_json::json!(b))).collect::<serde_json::Map<_, _>>(),
                "resident_bytes": est.group_resident},
            "verdict": answer.as_ref().map(|a| a.verdict.key()), "card": answer.as_ref().map(|a| a.fit.id.clone()),
            "host": host,
            "notes": est.notes,
        });
        crate::out::outln!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        // The core's lines; the host memory's is wrapped as the other answers wrap it.
        let host_line = run.host_line();
        for line in run.lines() {
            if Some(&line) == host_line.as_ref() {
                crate::out::out!("{}", crate::answer::wrap(&line, 4));
            } else {
                crate::out::outln!("{line}");
            }
        }
    }
    let host_short = host.is_some_and(|h| h.fits == Some(false));
    Ok(match answer.map(|a| a.verdict) {
        Some(gpumem_core::fit::Verdict::DoesNotFit) | None => Exit::MeasureFailed,
        _ if host_short => Exit::MeasureFailed,
        _ => Exit::Ok,
    })
}
