//! gpumem-training: the training estimator the dimensioner loads when a training run
//! is first asked about — a training run's estimate ([`estimate`]) and its answer
//! without an engine ([`answer`]).
//!
//! Built as a wasm-bindgen module of its own (`scripts/build-web.sh` →
//! `dist/training-*/`), so the dimensioner's wasm carries none of the training stages
//! (the training state, the ranks' plan, the caching allocator's model): the engine
//! module (`web/engine`) estimates inference for it and this module training runs,
//! with [`gpumem_core::estimate::estimate_training`] — every stage a training run
//! takes, the same figures as `gpumem-agent estimate`, and none of inference's (the
//! prefill, the towers, decompression). Every figure is [`gpumem_core`]'s; this crate routes
//! the page's text to the core and the estimate back as text
//! ([`gpumem_proto::training`], [`gpumem_proto::rules`]).

use gpumem_core::engine;
use gpumem_core::estimate::{Estimate, EstimateInput, estimate_training};
use gpumem_core::headline::{ByTraining, Headline, headline};
use gpumem_core::inputs;
use gpumem_proto::rules::{self, RulesRequest};
use gpumem_proto::training::write_estimate;
use wasm_bindgen::prelude::*;

/// The estimate of one workload: a [`gpumem_proto::training`] estimate document (the
/// estimate, or why there is none).
#[wasm_bindgen]
pub fn estimate(request: String) -> String {
    match rules::read_request(&request) {
        Ok(r) => write_estimate(&estimate_training(&input_of(&r).0)),
        Err(e) => write_estimate(&Err(gpumem_core::EstimateError::invalid("input", e))),
    }
}

/// The answer for one workload on the page's card (or the smallest that fits): a
/// [`gpumem_proto::rules`] answer document (the headline, or why there is none).
#[wasm_bindgen]
pub fn answer(request: String) -> String {
    rules::write_answer(
        &rules::read_request(&request).and_then(|r| answer_of(&r).map(rules::Answer::from)),
    )
}

/// The workload's input as the page reads it: its pairs (a refused pair leaves its
/// default, as on the page, and is reported beside), with the imported tensors.
///
/// The page's engine and card decide what they decide for the command: both are read
/// by the core's one reader (`inputs::read`), as `gpumem-agent estimate` reads them.
fn input_of(r: &RulesRequest) -> (EstimateInput, bool) {
    let mut read = inputs::read(
        r.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        r.page.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    read.input.tensors = r.tensors.as_ref().map(|t| t.summary.clone());
    (read.input, read.errors.is_empty())
}

/// The estimate and headline by the estimate (every stage) on the page's card, as
/// `gpumem-agent estimate` computes it.
pub fn answer_of(r: &RulesRequest) -> Result<Headline, String> {
    let (input, read) = input_of(r);
    if !read {
        return Err("the inputs do not describe a workload yet".into());
    }
    let est: Estimate = estimate_training(&input).map_err(|e| e.to_string())?;
    let (settings, _) =
        engine::from_pairs_among(r.page.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    headline(&input, &est, settings.card.as_ref(), &ByTraining).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumem_core::catalogue::resolve;
    use gpumem_core::estimate::estimate as estimate_all;
    use gpumem_core::headline::ByEstimate;
    use gpumem_proto::training::read_estimate;

    fn request(pairs: &[(&str, &str)], page: &[(&str, &str)]) -> RulesRequest {
        let own = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        RulesRequest {
            pairs: own(pairs),
            page: own(page),
            tensors: None,
        }
    }

    const LLAMA_8B_LORA: [(&str, &str); 9] = [
        ("layers", "32"),
        ("hidden", "4096"),
        ("heads", "32"),
        ("kv-heads", "8"),
        ("head-dim", "128"),
        ("intermediate", "14336"),
        ("vocab", "128256"),
        ("context", "2048"),
        ("train", "lora"),
    ];

    /// The estimate crossing back is the core's, every line of it (the training lines
    /// and the allocator's among them); a refused pair is left at its default as the
    /// page leaves it; a request that is not one is refused, not answered.
    #[test]
    fn the_estimate_is_the_cores() {
        let r = request(&LLAMA_8B_LORA, &[]);
        let (input, read) = input_of(&r);
        assert!(read);
        let core = estimate_all(&input).unwrap();
        assert!(core.training_bytes > 0);
        let back = read_estimate(&estimate(rules::write_request(&r))).unwrap();
        assert_eq!(back, Ok(core));
        let mut bad = LLAMA_8B_LORA.to_vec();
        bad.push(("lora-rank", "x"));
        let r = request(&bad, &[]);
        assert!(!input_of(&r).1);
        let back = read_estimate(&estimate(rules::write_request(&r))).unwrap();
        assert_eq!(back, Ok(estimate_all(&input).unwrap()));
        let refused = read_estimate(&estimate("not a request".into())).unwrap();
        assert!(refused.is_err());
    }

    /// The page's card decides a training step's cuBLAS workspaces as `--card` does for
    /// `gpumem-agent estimate` (the core's one reader): a Mamba on an L4 (sm_89) keeps
    /// two of 8 519 680 B, not sm_90's 32 MiB.
    #[test]
    fn the_pages_card_settles_the_estimate_as_the_commands() {
        use gpumem_core::estimate::LineKey;
        let text = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../crates/gpumem-core/tests/cases/configs/mamba-2.8b.json"
        ));
        let mut pairs = gpumem_core::import::config::parse_config(text)
            .unwrap()
            .pairs();
        pairs.extend([("context", "1024".into()), ("train", "lora".into())]);
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let page = [("card", "l4"), ("model", "state-spaces/mamba-2.8b-hf")];
        let command = estimate_all(&inputs::read(pairs.clone(), page).input).unwrap();
        let back = read_estimate(&estimate(rules::write_request(&request(&pairs, &page))))
            .unwrap()
            .unwrap();
        assert_eq!(back, command);
        let workspaces = |e: &Estimate| {
            e.lines
                .iter()
                .filter(|l| l.key == LineKey::CublasWorkspace)
                .map(|l| l.bytes)
                .sum::<u64>()
        };
        assert_eq!(workspaces(&back), 17_039_360);
        let alone = read_estimate(&estimate(rules::write_request(&request(&pairs, &[]))))
            .unwrap()
            .unwrap();
        assert_eq!(workspaces(&alone), 64 << 20);
    }

    /// The answer is the core's headline on the page's card, or on the smallest that
    /// fits; a refused pair gives no answer.
    #[test]
    fn the_answer_is_the_cores_headline() {
        let (input, _) = input_of(&request(&LLAMA_8B_LORA, &[]));
        let est = estimate_all(&input).unwrap();
        let card = resolve("l4").unwrap();
        // The page's card decides what `--card` decides for the command: an L4 (not
        // sm_90) keeps torch's smaller cuBLAS workspaces; no card, the larger.
        let (on_l4, _) = input_of(&request(&LLAMA_8B_LORA, &[("card", "l4")]));
        assert_eq!(on_l4.card_sm90(), Some(false));
        let est_l4 = estimate_all(&on_l4).unwrap();
        assert!(est_l4.total_bytes < est.total_bytes, "{est_l4:?}");
        let want = headline(&on_l4, &est_l4, Some(&card), &ByEstimate).unwrap();
        let r = request(&LLAMA_8B_LORA, &[("card", "l4")]);
        let back = rules::read_answer(&answer(rules::write_request(&r))).unwrap();
        assert_eq!(back, Ok(want.into()));
        let alone = answer_of(&request(&LLAMA_8B_LORA, &[])).unwrap();
        assert!(!alone.card_given);
        assert_eq!(
            Ok(alone),
            headline(&input, &est, None, &ByEstimate).map_err(|e| e.to_string())
        );
        let mut bad = LLAMA_8B_LORA.to_vec();
        bad.push(("lora-rank", "x"));
        assert!(answer_of(&request(&bad, &[])).is_err());
    }
}
