//! One pipeline run answered from key/value pairs, in the words and figures
//! `gpumem-agent estimate --diffusers` prints: the agent and the page's diffusion
//! module both answer through [`run`], so the page shows the command's own lines.
//!
//! The keys are the command's flags without their dashes (`height`, `width`,
//! `frames`, `images`, `cfg`, `offload`, `group-blocks`, `group-leaf`, `group-stream`,
//! `group-pipeline`,
//! `text-format`, `text-tokens`, `vae-tiling`,
//! `vae-slicing`, `layerwise-casting`, and the shared `compute-dtype`, `format`, `attention`,
//! `reserve-gib`, `card`, `wired-limit-mb`, `ram`), which are also the page's.

use crate::catalogue::{parse_capacity, resolve};
use crate::error::EstimateError;
use crate::format::{Dtype, StorageFormat};
use crate::headline::HostFit;
use crate::units::{Bytes, GIB};

use super::{Answer, Class, DiffusionEstimate, Offload, Pipeline, Workload, answer, estimate};

/// The keys [`run`] reads that only a pipeline takes, in the command's order.
pub const KEYS: [&str; 15] = [
    "height",
    "width",
    "frames",
    "images",
    "cfg",
    "offload",
    "group-blocks",
    "group-leaf",
    "group-stream",
    "group-pipeline",
    "text-format",
    "text-tokens",
    "vae-tiling",
    "vae-slicing",
    "layerwise-casting",
];

/// A pipeline run answered: the workload read, its estimate, the verdict on the card
/// (or the smallest catalogue card that holds it) and the host memory's.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The pipeline.
    pub pipeline: Pipeline,
    /// The workload as read from the pairs (defaults filled).
    pub workload: Workload,
    /// Its estimate.
    pub estimate: DiffusionEstimate,
    /// The verdict, `None` when no catalogue card holds it.
    pub answer: Option<Answer>,
    /// The host memory the offloaded weights take, judged against `ram`.
    pub host: Option<HostFit>,
    /// Whether the card judged is a Mac's (its RAM is the GPU's).
    pub mac: bool,
}

fn count(
    get: &dyn Fn(&str) -> Option<String>,
    key: &'static str,
) -> Result<Option<u64>, EstimateError> {
    get(key)
        .map(|v| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| EstimateError::invalid(key, format!("{v:?} is not a whole number")))
        })
        .transpose()
}

fn switch(get: &dyn Fn(&str) -> Option<String>, key: &'static str) -> Result<bool, EstimateError> {
    match get(key).as_deref().map(str::trim) {
        None | Some("" | "false" | "off" | "no" | "0") => Ok(false),
        Some("true" | "on" | "yes" | "1") => Ok(true),
        Some(v) => Err(EstimateError::invalid(key, format!("{v:?}: on or off"))),
    }
}

/// The workload the pairs ask for, the pipeline's defaults filled as the command
/// fills them (a Wan pipeline: 832×480, 81 frames; otherwise 1024×1024, one image).
pub fn workload(
    p: &Pipeline,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<Workload, EstimateError> {
    let is_wan = p.components.iter().any(|c| c.class == Class::Wan);
    let cfg = match get("cfg").as_deref().map(str::trim) {
        None | Some("") => None,
        Some("on") => Some(true),
        Some("off") => Some(false),
        Some(v) => return Err(EstimateError::invalid("cfg", format!("{v:?}: on or off"))),
    };
    let mut w = Workload {
        height: count(get, "height")?.unwrap_or(if is_wan { 480 } else { 1024 }),
        width: count(get, "width")?.unwrap_or(if is_wan { 832 } else { 1024 }),
        frames: count(get, "frames")?.unwrap_or(if is_wan { 81 } else { 1 }),
        batch: count(get, "images")?.unwrap_or(1),
        guidance: cfg,
        eager: get("attention").as_deref() == Some("eager"),
        text_tokens: count(get, "text-tokens")?,
        vae_tiling: switch(get, "vae-tiling")?,
        vae_slicing: switch(get, "vae-slicing")?,
        layerwise: switch(get, "layerwise-casting")?,
        ..Workload::default()
    };
    if let Some(d) = get("compute-dtype") {
        w.dtype = Dtype::parse("compute-dtype", &d)?;
    }
    if let Some(f) = get("format") {
        w.denoiser_format = Some(StorageFormat::parse("format", &f)?);
    }
    if let Some(f) = get("text-format") {
        w.text_format = Some(StorageFormat::parse("text-format", &f)?);
    }
    if let Some(o) = get("offload") {
        w.offload = Offload::parse(&o)?;
    }
    w.offload = w.offload.with_group(
        count(get, "group-blocks")?,
        switch(get, "group-leaf")?,
        switch(get, "group-stream")?,
        switch(get, "group-pipeline")?,
    )?;
    if let Some(g) = count(get, "reserve-gib")? {
        w.reserve = g
            .checked_mul(GIB)
            .ok_or_else(|| EstimateError::invalid("reserve-gib", "too large"))?;
    }
    Ok(w)
}

/// Answers a pipeline run: the workload the pairs ask for (`get` names a key's
/// value), its estimate, the verdict on `card` (with `wired-limit-mb` on a Mac) or on
/// the smallest catalogue card that holds it, and the host memory against `ram`.
pub fn run(pipeline: Pipeline, get: &dyn Fn(&str) -> Option<String>) -> Result<Run, EstimateError> {
    let w = workload(&pipeline, get)?;
    let est = estimate(&pipeline, &w)?;
    let mut card = get("card")
        .map(|c| resolve(&c))
        .transpose()
        .map_err(|e| EstimateError::invalid("card", e))?;
    if let Some(mib) = get("wired-limit-mb") {
        let mib: u64 = mib.trim().parse().map_err(|_| {
            EstimateError::invalid("wired-limit-mb", format!("{mib:?} is not a count of MiB"))
        })?;
        let mac = card.ok_or_else(|| {
            EstimateError::invalid("wired-limit-mb", "a Mac's: give --card naming one")
        })?;
        card = Some(
            mac.with_wired_limit(mib)
                .map_err(|e| EstimateError::invalid("wired-limit-mb", e))?,
        );
    }
    let ram = get("ram")
        .map(|t| match parse_capacity(&t) {
            Some(b) if b > 0 => Ok(b),
            _ => Err(EstimateError::invalid(
                "ram",
                format!("{t:?} is not a size: give one such as 64GiB or 128GB"),
            )),
        })
        .transpose()?;
    let answer = answer(&est, card.as_ref());
    // The offloaded weights live in the host's RAM; on a Mac that RAM is the GPU's too.
    let host = HostFit::judge(
        est.host_bytes,
        est.need(),
        ram,
        card.as_ref(),
        "the weights offloaded to the CPU",
    );
    Ok(Run {
        pipeline,
        workload: w,
        estimate: est,
        answer,
        host,
        mac: card.as_ref().is_some_and(|c| c.unified()),
    })
}

/// Bytes as `X GB (Y GiB)`.
pub fn both(b: u64) -> String {
    let b = Bytes(b);
    format!("{} GB ({} GiB)", b.gb_string(2), b.gib_string(2))
}

impl Run {
    /// The verdict line (the first the command prints).
    pub fn verdict_line(&self) -> String {
        let est = &self.estimate;
        match &self.answer {
            Some(a) => format!(
                "{} on {}{}: needs {} of {} ({}; headroom {} B)",
                a.verdict.word(),
                a.fit.name,
                if a.chosen {
                    " (the smallest catalogue card that holds it)"
                } else {
                    ""
                },
                both(est.need()),
                both(a.fit.capacity_bytes),
                self.workload.offload.call(),
                a.fit.headroom_bytes
            ),
            None => format!(
                "DOES NOT FIT on any catalogue card: needs {}",
                both(est.need())
            ),
        }
    }

    /// The host memory's line (`  host RAM   …`), when the run keeps weights there
    /// or `ram` was given.
    pub fn host_line(&self) -> Option<String> {
        self.host
            .as_ref()
            .map(|h| format!("  host RAM   {}", h.sentence(self.mac)))
    }

    /// Every line the command prints, in its order (blank lines included), the host
    /// memory's unwrapped.
    pub fn lines(&self) -> Vec<String> {
        let (p, w, est) = (&self.pipeline, &self.workload, &self.estimate);
        let mut out = vec![
            self.verdict_line(),
            format!(
                "{} · {}×{}{} · {} per prompt · latent {}×{}×{} · guidance: {} · {}",
                p.class_name,
                w.width,
                w.height,
                if est.latent.2 > 1 {
                    format!(" × {} frames", w.frames)
                } else {
                    String::new()
                },
                w.batch,
                est.latent.0,
                est.latent.1,
                est.latent.2,
                est.guidance.words(),
                w.dtype.name()
            ),
            String::new(),
            "weights (each component in its own format):".into(),
        ];
        for c in &est.components {
            out.push(format!(
                "  {:16} {:30} {:>16} params  {:8} {}",
                c.name,
                c.class_name,
                c.parameters,
                c.format,
                both(c.bytes)
            ));
        }
        out.push(String::new());
        out.push("peaks beyond the weights (computed from each forward's peak moment):".into());
        out.push(format!(
            "  denoiser call (batch {}, {} per step)  {}",
            est.call.batch,
            est.calls_per_step,
            both(est.denoiser_activations)
        ));
        if est.eager_scores > 0 {
            out.push(format!(
                "  eager attention scores (assumed)       {}",
                both(est.eager_scores)
            ));
        }
        out.push(format!(
            "  VAE decode                             {}",
            both(est.vae_decode)
        ));
        if est.vae_upcast > 0 {
            out.push(format!(
                "  VAE upcast to fp32 (weights)           {}",
                both(est.vae_upcast)
            ));
        }
        out.push(format!(
            "  text encoders' forward (assumed)       {}",
            both(est.text_encode)
        ));
        out.push(String::new());
        out.push(format!(
            "device peak by offload mode (without the reserve of {}):",
            both(est.reserve)
        ));
        for (i, name) in [
            "pipe.to(\"cuda\")",
            "enable_model_cpu_offload",
            "enable_sequential_cpu_offload",
        ]
        .iter()
        .enumerate()
        {
            out.push(format!(
                "  {:32} {}",
                name,
                est.by_mode[i].map_or_else(|| "not with layerwise casting".to_string(), both)
            ));
        }
        let g = est.group;
        let kind = format!(
            "{}{}",
            g.effective_blocks().map_or_else(
                || "leaf_level".to_string(),
                |n| format!("block_level, {n} block(s) per group")
            ),
            if g.stream { ", use_stream" } else { "" }
        );
        let whose = if g.pipeline {
            "every component offloaded; the denoiser's weights resident at once"
        } else {
            "the denoiser's weights resident at once"
        };
        out.push(format!(
            "  {:32} {}",
            "enable_group_offload",
            match (est.by_mode[3], est.group_resident) {
                (Some(b), Some(r)) => format!("{} ({kind}; {whose}: {})", both(b), both(r)),
                _ => format!("not with layerwise casting or a quantised denoiser ({kind})"),
            }
        ));
        if !est.group_components.is_empty() {
            out.push(format!(
                "  {:32} {}",
                "  resident while it runs",
                est.group_components
                    .iter()
                    .map(|(n, b)| format!("{n} {}", both(*b)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        out.extend(self.host_line());
        out.push(format!("peak phase: {}", est.peak_phase));
        for n in &est.notes {
            out.push(format!("note: {n}"));
        }
        out
    }

    /// The run's figures in bytes, named as the command's `--json` names them
    /// (a component's as `component.NAME`, an offload mode's as `by_offload_mode.MODE`,
    /// the group-offloaded denoiser's resident bytes as `group_offload.resident_bytes`,
    /// each component's under the pipeline's as `group_offload.component.NAME`).
    pub fn figures(&self) -> Vec<(String, u64)> {
        let est = &self.estimate;
        let mut out: Vec<(String, u64)> = [
            ("need_bytes", est.need()),
            ("device_bytes", est.device_bytes),
            ("reserve_bytes", est.reserve),
            ("host_bytes", est.host_bytes),
            ("denoiser_activations_bytes", est.denoiser_activations),
            ("eager_scores_bytes", est.eager_scores),
            ("layerwise_upcast_bytes", est.layerwise_upcast),
            ("int8_matmul_bytes", est.int8_matmul),
            ("vae_decode_bytes", est.vae_decode),
            ("vae_upcast_bytes", est.vae_upcast),
            ("text_encode_bytes", est.text_encode),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for (mode, b) in ["none", "model", "sequential", "group"]
            .iter()
            .zip(est.by_mode)
        {
            if let Some(b) = b {
                out.push((format!("by_offload_mode.{mode}"), b));
            }
        }
        if let Some(r) = est.group_resident {
            out.push(("group_offload.resident_bytes".into(), r));
        }
        for (n, b) in &est.group_components {
            out.push((format!("group_offload.component.{n}"), *b));
        }
        for c in &est.components {
            out.push((format!("component.{}", c.name), c.bytes));
        }
        if let Some(a) = &self.answer {
            out.push(("capacity_bytes".into(), a.fit.capacity_bytes));
        }
        out
    }

    /// The verdict's key (`yes`, `tight`, `no`) and the card's id, as `--json` gives them.
    pub fn verdict(&self) -> Option<(&'static str, String)> {
        self.answer
            .as_ref()
            .map(|a| (a.verdict.key(), a.fit.id.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::super::read;
    use super::*;

    fn sdxl() -> Pipeline {
        macro_rules! file {
            ($f:literal) => {
                include_str!(concat!(
                    "../../tests/diffusion/pipelines/stable-diffusion-xl-base-1.0/",
                    $f
                ))
            };
        }
        let configs: Vec<(String, String)> = [
            ("text_encoder", file!("text_encoder/config.json")),
            ("text_encoder_2", file!("text_encoder_2/config.json")),
            ("unet", file!("unet/config.json")),
            ("vae", file!("vae/config.json")),
        ]
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
        read(file!("model_index.json"), &configs).unwrap()
    }

    fn pairs<'a>(v: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            v.iter()
                .rev()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.to_string())
        }
    }

    /// The pairs are the command's flags: each one changes the workload as its flag
    /// does, defaults are the command's, and a value that is not one is refused
    /// naming its key (never a panic, never a silent default).
    #[test]
    fn the_pairs_read_as_the_flags() {
        let p = sdxl();
        let w = workload(&p, &pairs(&[])).unwrap();
        assert_eq!((w.height, w.width, w.frames, w.batch), (1024, 1024, 1, 1));
        assert_eq!(
            (w.guidance, w.offload, w.reserve),
            (None, Offload::None, 4 * GIB)
        );
        let w = workload(
            &p,
            &pairs(&[
                ("height", "768"),
                ("width", "1360"),
                ("images", "2"),
                ("cfg", "off"),
                ("offload", "model"),
                ("text-format", "int8"),
                ("text-tokens", "100"),
                ("vae-tiling", "true"),
                ("vae-slicing", "on"),
                ("compute-dtype", "fp16"),
                ("format", "nf4"),
                ("attention", "eager"),
                ("reserve-gib", "2"),
            ]),
        )
        .unwrap();
        assert_eq!((w.height, w.width, w.batch), (768, 1360, 2));
        assert_eq!(w.guidance, Some(false));
        assert_eq!(w.offload, Offload::Model);
        assert!(w.text_format.is_some() && w.denoiser_format.is_some());
        assert_eq!(w.text_tokens, Some(100));
        assert!(w.vae_tiling && w.vae_slicing && w.eager);
        assert_eq!((w.dtype, w.reserve), (Dtype::F16, 2 * GIB));
        for (k, v) in [
            ("height", "tall"),
            ("cfg", "maybe"),
            ("offload", "disk"),
            ("vae-tiling", "2"),
            ("reserve-gib", "99999999999999999"),
            ("format", "fp3"),
        ] {
            let e = workload(&p, &pairs(&[(k, v)])).unwrap_err().to_string();
            assert!(e.contains(k) || k == "format", "{k}={v}: {e}");
        }
    }

    /// Group offloading's pairs set the denoiser's `enable_group_offload` as diffusers
    /// takes it, and what diffusers refuses is refused: block level without a count, a
    /// count of 0, both levels at once, and the group settings beside model offload.
    #[test]
    fn group_offload_pairs_read_as_diffusers_takes_them() {
        use super::super::GroupOffload;
        let p = sdxl();
        let g = |v: &[(&str, &str)]| workload(&p, &pairs(v)).map(|w| w.offload);
        assert_eq!(
            g(&[("offload", "group"), ("group-blocks", "2")]).unwrap(),
            Offload::Group(GroupOffload {
                blocks: Some(2),
                stream: false,
                pipeline: false
            })
        );
        assert_eq!(
            g(&[
                ("offload", "group"),
                ("group-leaf", "true"),
                ("group-stream", "on")
            ])
            .unwrap(),
            Offload::Group(GroupOffload {
                blocks: None,
                stream: true,
                pipeline: false
            })
        );
        assert_eq!(
            g(&[
                ("offload", "group"),
                ("group-blocks", "1"),
                ("group-pipeline", "true")
            ])
            .unwrap(),
            Offload::Group(GroupOffload {
                blocks: Some(1),
                stream: false,
                pipeline: true
            })
        );
        for bad in [
            &[("offload", "group")][..],
            &[("offload", "group"), ("group-blocks", "0")],
            &[
                ("offload", "group"),
                ("group-blocks", "1"),
                ("group-leaf", "true"),
            ],
            &[("offload", "model"), ("group-blocks", "1")],
            &[("group-stream", "true")],
            &[("offload", "model"), ("group-pipeline", "true")],
        ] {
            assert!(g(bad).is_err(), "{bad:?}");
        }
        let r = run(
            p,
            &pairs(&[
                ("offload", "group"),
                ("group-blocks", "1"),
                ("compute-dtype", "fp16"),
            ]),
        )
        .unwrap();
        let est = &r.estimate;
        assert_eq!(Some(est.device_bytes), est.by_mode[3]);
        assert!(est.by_mode[3] < est.by_mode[1] && est.by_mode[3] > est.by_mode[2]);
        assert!(
            r.lines()
                .iter()
                .any(|l| l.contains("enable_group_offload") && l.contains("1 block(s) per group"))
        );
        let figures = r.figures();
        assert!(
            figures
                .iter()
                .any(|(k, v)| k == "group_offload.resident_bytes" && Some(*v) == est.group_resident)
        );
    }

    /// The lines are the estimate's figures in GB and GiB, the verdict first and only
    /// once; the figures are the estimate's bytes; a card that is not one, a RAM that
    /// is not a size, are refused.
    #[test]
    fn the_lines_and_figures_are_the_estimates() {
        let p = sdxl();
        let r = run(
            p.clone(),
            &pairs(&[
                ("card", "4090"),
                ("compute-dtype", "fp16"),
                ("offload", "model"),
            ]),
        )
        .unwrap();
        let lines = r.lines();
        let a = r.answer.as_ref().unwrap();
        assert!(!a.chosen);
        assert!(lines[0].starts_with(a.verdict.word()), "{}", lines[0]);
        assert!(lines[0].contains(&both(r.estimate.need())), "{}", lines[0]);
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.contains("FITS") || l.contains("DOES NOT FIT") || l.contains("TIGHT"))
                .count(),
            1
        );
        for c in &r.estimate.components {
            assert!(
                lines
                    .iter()
                    .any(|l| l.contains(&c.name) && l.ends_with(&both(c.bytes))),
                "{}",
                c.name
            );
        }
        assert_eq!(
            r.host_line().as_deref(),
            lines
                .iter()
                .find(|l| l.contains("host RAM"))
                .map(String::as_str)
        );
        let figures = r.figures();
        let get = |k: &str| figures.iter().find(|(n, _)| n == k).map(|(_, b)| *b);
        assert_eq!(get("need_bytes"), Some(r.estimate.need()));
        assert_eq!(get("host_bytes"), Some(r.estimate.host_bytes));
        assert!(r.estimate.host_bytes > 0);
        assert_eq!(get("by_offload_mode.model"), r.estimate.by_mode[1]);
        assert_eq!(get("component.unet"), Some(r.estimate.components[2].bytes));
        assert_eq!(r.verdict().map(|v| v.1), Some(a.fit.id.clone()));
        assert!(run(p.clone(), &pairs(&[("card", "no such card")])).is_err());
        assert!(run(p.clone(), &pairs(&[("ram", "lots")])).is_err());
        assert!(run(p, &pairs(&[("wired-limit-mb", "1000")])).is_err());
    }
}
