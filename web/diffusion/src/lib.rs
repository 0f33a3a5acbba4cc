//! gpumem-diffusion: the diffusion estimator the dimensioner loads when a diffusers
//! pipeline is first read — the pipeline's files from the Hub ([`read`]: its
//! `model_index.json`, then each component's `config.json`, through the lookup
//! module's HTTP client, linked here without its exports) or from a folder on the
//! user's disk ([`folder`]: the same files, picked or dropped) and the answer
//! `gpumem-agent estimate --diffusers` prints for them ([`answer`]).
//!
//! Built as a wasm-bindgen module of its own (`scripts/build-web.sh` →
//! `dist/diffusion-*/`), so the dimensioner's wasm carries none of the pipeline's
//! reader (its configs are JSON), its counts or its activations. Every figure and
//! every line is [`gpumem_core::diffusion`]'s ([`gpumem_core::diffusion::report`], the
//! command's own); this crate routes the page's text to the core and the answer back
//! as text ([`gpumem_proto::diffusion`]).

pub mod folder;

use gpumem_core::diffusion::{read, report};
use gpumem_proto::diffusion::{self as text, DiffusionAnswer};
use gpumem_proto::lookup::text::read_request;
use wasm_bindgen::prelude::*;

/// Reads a pipeline's files on the page's Hub (its `gpumem-hub` meta tag): `request`
/// is a [`gpumem_proto::lookup::LookupRequest`] as text (the repository id and
/// revision); `progress` hears a line of text as the reads go on. The files as a
/// [`text::PipelineFiles`] document, or an error in words.
#[wasm_bindgen]
pub async fn files(request: String, progress: js_sys::Function) -> Result<String, JsValue> {
    let request = read_request(&request).map_err(|e| JsValue::from(format!("bad request: {e}")))?;
    let endpoint = gpumem_lookup::hub_endpoint();
    gpumem_lookup::http::begin();
    let say = move |t: &str| {
        let _ = progress.call1(&JsValue::NULL, &JsValue::from(t));
    };
    let files = gpumem_lookup::pipeline::lookup(&endpoint, &request, &say)
        .await
        .map_err(JsValue::from)?;
    Ok(text::write_files(&files))
}

/// The answer for a pipeline (`files`: a [`text::PipelineFiles`] document) and a
/// workload (`pairs`: the command's flags without dashes, and the page's card, `ram`,
/// `wired-limit-mb`): a [`text::DiffusionAnswer`] document (the answer, or why there
/// is none).
#[wasm_bindgen]
pub fn answer(files: String, pairs: String) -> String {
    text::write_answer(&answer_of(&files, &pairs))
}

/// The answer, or why there is none, in words.
pub fn answer_of(files: &str, pairs: &str) -> Result<DiffusionAnswer, String> {
    let files = text::read_files(files)?;
    let pairs = text::read_pairs(pairs)?;
    let pipeline = read(&files.index, &files.configs).map_err(|e| e.to_string())?;
    // An empty value is a field left empty: the command's default, as a flag not given.
    let get = |k: &str| {
        pairs
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let run = report::run(pipeline, &get).map_err(|e| e.to_string())?;
    Ok(DiffusionAnswer {
        verdict: run.verdict().map(|(k, card)| (k.to_string(), card)),
        lines: run.lines(),
        figures: run.figures(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumem_core::diffusion::components_of;
    use gpumem_proto::diffusion::{PipelineFiles, read_answer, write_files, write_pairs};

    fn files(name: &str) -> PipelineFiles {
        let dir = format!(
            "{}/../../crates/gpumem-core/tests/diffusion/pipelines/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let index = std::fs::read_to_string(format!("{dir}/model_index.json")).unwrap();
        let (_, named, _) = components_of(&index).unwrap();
        PipelineFiles {
            source: name.into(),
            configs: named
                .iter()
                .map(|(n, _)| {
                    let t = std::fs::read_to_string(format!("{dir}/{n}/config.json")).unwrap();
                    (n.clone(), t)
                })
                .collect(),
            index,
        }
    }

    /// The answer crossing back is the core's run, line for line and byte for byte,
    /// with the pairs the page sends (an empty field is the command's default).
    #[test]
    fn the_answer_is_the_cores_run() {
        let f = files("FLUX.1-dev");
        let pairs = [
            ("height", "768"),
            ("width", "1360"),
            ("images", "2"),
            ("offload", "model"),
            ("text-tokens", ""),
            ("card", "h100-sxm-80gb"),
            ("ram", "16GiB"),
        ];
        let back = read_answer(&answer(write_files(&f), write_pairs(&pairs)))
            .unwrap()
            .unwrap();
        let p = read(&f.index, &f.configs).unwrap();
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(key, v)| *key == k && !v.is_empty())
                .map(|(_, v)| v.to_string())
        };
        let run = report::run(p, &get).unwrap();
        assert_eq!(back.lines, run.lines());
        assert_eq!(back.figures, run.figures());
        assert_eq!(back.verdict, Some(("yes".into(), "h100-sxm-80gb".into())));
        assert!(back.lines.iter().any(|l| l.contains("host RAM")));
        assert!(run.estimate.host_bytes > 0 && run.workload.batch == 2);
    }

    /// What cannot be answered says why: a bad pair, a missing config, not a document.
    #[test]
    fn refusals_are_words() {
        let f = files("stable-diffusion-xl-base-1.0");
        let bad = answer_of(&write_files(&f), &write_pairs(&[("height", "tall")]));
        assert!(bad.unwrap_err().contains("height"));
        let mut missing = f.clone();
        missing.configs.retain(|(n, _)| n != "unet");
        let e = answer_of(&write_files(&missing), &write_pairs::<&str, &str>(&[]));
        assert!(e.unwrap_err().contains("unet"));
        assert!(answer_of("nonsense", "").is_err());
        let refused = read_answer(&answer("x".into(), "y".into())).unwrap();
        assert!(refused.is_err());
    }
}
