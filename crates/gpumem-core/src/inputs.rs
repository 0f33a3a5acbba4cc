//! Every input key as one table: the estimate's ([`crate::fields::FIELDS`]) then the
//! serving engines' ([`crate::engine::FIELDS`], read from the engines' registry), in
//! the order the agent's `estimate --help` and the page's form show them. The agent's
//! flags and the page's form, URL keys and hints are generated from it. (Two slices
//! read as one, not a joined copy: the page's wasm carries each row once.)
//!
//! [`read`] reads both groups' values into what an estimate is computed from: every
//! caller that answers from user inputs (the agent's commands, its tracer, the page's
//! modules) reads them through it, so the engine flags decide the same of the
//! estimate wherever it is computed.

use crate::engine::EngineParams;
use crate::error::EstimateError;
use crate::estimate::EstimateInput;
use crate::fields::{Field, FieldGroup};

/// The table a group's fields are in: the engine group's, or the estimate's.
pub fn table(group: FieldGroup) -> &'static [Field] {
    if group == FieldGroup::Engine {
        crate::engine::FIELDS
    } else {
        crate::fields::FIELDS
    }
}

/// Every field, the estimate's then the engine's.
pub fn fields() -> impl Iterator<Item = &'static Field> + Clone {
    crate::fields::FIELDS.iter().chain(crate::engine::FIELDS)
}

/// The field of a key, if it is one.
pub fn field(key: &str) -> Option<&'static Field> {
    crate::fields::field(key).or_else(|| crate::engine::field_of(key))
}

/// An estimate's input and the engine flags, read together by [`read`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The estimate's input, with what the engine flags decide of it settled on it
    /// (`EngineParams::settle`: whose cache layout its recurrent-state and indexer
    /// lines follow, the card generation a training step's cuBLAS workspaces follow).
    pub input: EstimateInput,
    /// One error per refused estimate pair (the others are applied).
    pub errors: Vec<EstimateError>,
    /// The engine flags.
    pub engine: EngineParams,
    /// One error per refused engine pair (the others are applied).
    pub engine_errors: Vec<EstimateError>,
}

/// Reads the estimate's `pairs` (`params::from_pairs`: an engine key among them is an
/// error) and the engine flags among `engine` (`engine::from_pairs_among`: any other
/// key is skipped, so a page's whole list may be given), and settles on the input what
/// the engine flags decide of the estimate. The one way to an input a named engine or
/// card decides anything of: `EstimateInput`'s fields for those are the core's own.
pub fn read<'a, I, J>(pairs: I, engine: J) -> Read
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
    J: IntoIterator<Item = (&'a str, &'a str)>,
{
    let (input, errors) = crate::params::from_pairs(pairs);
    let (engine, engine_errors) = crate::engine::from_pairs_among(engine);
    settled(input, errors, engine, engine_errors)
}

/// [`read`]'s one non-generic step (the page calls it with several iterator types).
#[inline(never)]
fn settled(
    mut input: EstimateInput,
    errors: Vec<EstimateError>,
    engine: EngineParams,
    engine_errors: Vec<EstimateError>,
) -> Read {
    engine.settle(&mut input);
    Read {
        input,
        errors,
        engine,
        engine_errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::sample;
    use crate::fields::FieldKind;

    /// A config of the test cases as pairs, with `extra`.
    fn config_pairs(file: &str, extra: &[(&str, &str)]) -> Vec<(&'static str, String)> {
        let path = format!(
            "{}/tests/cases/configs/{file}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        #[allow(clippy::disallowed_methods)] // a test's fixture, not the core's I/O
        let text = std::fs::read_to_string(path).expect("config");
        let mut pairs = crate::import::config::parse_config(&text)
            .expect("config")
            .pairs();
        for (k, v) in extra {
            let key = crate::params::keys().find(|p| p == k).expect("a key");
            pairs.push((key, (*v).to_owned()));
        }
        pairs
    }

    /// The one reader settles what the engine flags decide, from the engine's pairs
    /// among any others (a page's list), and nothing without them: a hybrid model's
    /// state line follows the named engine's layout (Qwen3-Next under vLLM: smaller
    /// than transformers' own), and a training step's cuBLAS workspaces the named
    /// card's generation (an L4, sm_89: smaller than sm_90's, counted without a card).
    #[test]
    fn the_one_reader_settles_the_engine_and_the_card() {
        use crate::arch::CacheRuntime;
        use crate::estimate::{LineKey, estimate};
        let line = |e: &crate::estimate::Estimate, key: LineKey| {
            e.lines
                .iter()
                .filter(|l| l.key == key)
                .map(|l| l.bytes)
                .sum::<u64>()
        };
        let pairs = config_pairs("qwen3-next-80b-a3b", &[("context", "4096")]);
        let pairs = || pairs.iter().map(|(k, v)| (*k, v.as_str()));
        let page = [("engine", "vllm"), ("card", "l4"), ("model", "page-only")];
        let bare = read(pairs(), []);
        let (alone, errors) = crate::params::from_pairs(pairs());
        assert!(errors.is_empty() && bare.errors.is_empty(), "{errors:?}");
        assert_eq!(bare.input, alone, "no engine pair: the input as read alone");
        assert_eq!(bare.input.runtime(), CacheRuntime::Transformers);
        assert_eq!(bare.input.card_sm90(), None);
        let served = read(pairs(), page);
        assert!(
            served.engine_errors.is_empty(),
            "{:?}",
            served.engine_errors
        );
        assert_eq!(served.engine.engine.map(|e| e.name()), Some("vllm"));
        assert_eq!(served.input.runtime(), CacheRuntime::Serving);
        assert_eq!(served.input.card_sm90(), Some(false));
        let (own, served) = (
            estimate(&bare.input).unwrap(),
            estimate(&served.input).unwrap(),
        );
        let (s0, s1) = (
            line(&own, LineKey::KvCacheState),
            line(&served, LineKey::KvCacheState),
        );
        assert!(s1 > 0 && s1 < s0, "transformers' {s0} B, vLLM's {s1} B");
        assert_eq!(
            line(&own, LineKey::KvCache),
            line(&served, LineKey::KvCache)
        );
        // Training on an L4 against no card: two workspaces of 8 519 680 B, not 32 MiB.
        let pairs = config_pairs("mamba-2.8b", &[("context", "1024"), ("train", "lora")]);
        let pairs = || pairs.iter().map(|(k, v)| (*k, v.as_str()));
        let any = estimate(&read(pairs(), []).input).unwrap();
        let l4 = estimate(&read(pairs(), [("card", "l4")]).input).unwrap();
        assert_eq!(line(&any, LineKey::CublasWorkspace), 64 << 20);
        assert_eq!(line(&l4, LineKey::CublasWorkspace), 17_039_360);
        assert!(l4.total_bytes < any.total_bytes);
    }

    /// Beam search over bart-base (1 sequence, a source of 1 024 tokens, 256 generated,
    /// 4 beams): the cross-attention cache and the encoder's output four times the
    /// one-beam figures, the self-attention cache four times plus one layer's K that
    /// `reorder_cache`'s `index_select` copies (the widest layer: a cross-attention one,
    /// 4 × 2 × 12 × 64 × 1 024 × 2 B ÷ 2); an engine refuses the beams.
    #[test]
    fn beams_multiply_an_encoder_decoders_caches() {
        use crate::estimate::{LineKey, estimate};
        let run = |beams: &str| {
            let pairs = config_pairs(
                "bart-base",
                &[
                    ("context", "1"),
                    ("encoder-length", "1024"),
                    ("generate", "256"),
                    ("beams", beams),
                ],
            );
            let r = read(pairs.iter().map(|(k, v)| (*k, v.as_str())), []);
            assert!(r.errors.is_empty(), "{:?}", r.errors);
            let e = estimate(&r.input).expect("estimate");
            let line = |key: LineKey| {
                e.lines
                    .iter()
                    .find(|l| l.key == key)
                    .map(|l| (l.bytes, l.formula.clone()))
                    .expect("line")
            };
            (
                line(LineKey::KvCache),
                line(LineKey::KvCacheCross),
                line(LineKey::KvCacheEncoderOutput),
                line(LineKey::KvCachePrefill).0,
                e.total_bytes,
            )
        };
        let (one_self, one_cross, one_out, one_pre, one_total) = run("1");
        let (four_self, four_cross, four_out, four_pre, four_total) = run("4");
        // 6 layers × 2 × 12 × 64 × 257 tokens × 2 B (bf16, the compute dtype).
        assert_eq!(one_self.0, 6 * 1536 * 257 * 2);
        let copy = 4 * 1536 * 1024 * 2 / 2;
        assert_eq!(four_self.0, 4 * one_self.0 + copy);
        assert_eq!(four_cross.0, 4 * one_cross.0);
        assert_eq!(four_out.0, 4 * one_out.0);
        assert_eq!(four_pre, 4 * one_pre);
        assert!(four_total > one_total);
        assert!(four_self.1.contains("beams") && four_self.1.contains("reorder_cache"));
        assert!(four_cross.1.contains("beams") && four_out.1.contains("beams"));
        assert!(!one_self.1.contains("beams") && !one_out.1.contains("beams"));
        // A decoder: its cache and its prefill's logits once per beam, the cache's end
        // line with one layer's K more (32 layers × 2 × 8 × 128 values, 1 124 tokens).
        let decoder = |beams: &str| {
            let pairs = config_pairs(
                "llama-3.1-8b",
                &[("context", "1024"), ("generate", "100"), ("beams", beams)],
            );
            let r = read(pairs.iter().map(|(k, v)| (*k, v.as_str())), []);
            let e = estimate(&r.input).expect("estimate");
            let line = |key: LineKey| e.lines.iter().find(|l| l.key == key).map(|l| l.bytes);
            (line(LineKey::KvCache), line(LineKey::PrefillLogits))
        };
        let ((Some(kv1), Some(lg1)), (Some(kv4), Some(lg4))) = (decoder("1"), decoder("4")) else {
            panic!("lines");
        };
        assert_eq!(kv1, 32 * 2 * 8 * 128 * 1124 * 2);
        assert_eq!(kv4, 4 * kv1 + 4 * 8 * 128 * 1124 * 2);
        assert_eq!(lg4, 4 * lg1);
        // Bounded as sequences are, and refused where no beams are modelled.
        let pairs = config_pairs("bart-base", &[("context", "1"), ("beams", "0")]);
        let r = read(pairs.iter().map(|(k, v)| (*k, v.as_str())), []);
        assert!(estimate(&r.input).is_err() || !r.errors.is_empty());
        let pairs = config_pairs("llama-3.1-8b", &[("context", "1024"), ("beams", "4")]);
        let r = read(
            pairs.iter().map(|(k, v)| (*k, v.as_str())),
            [("engine", "vllm")],
        );
        let e = estimate(&r.input).expect("transformers' beams");
        let refused = crate::engine::budget(&r.input, &e, &r.engine)
            .expect_err("an engine's beams are refused");
        assert!(
            refused
                .to_string()
                .contains("beam search under --engine vllm is not modelled")
        );
    }

    /// The errors of `key=value` beside a Mac's card (which `wired-limit-mb` needs and
    /// every other key leaves alone; `card` itself replaces it).
    fn engine_errors(key: &str, value: &str) -> Vec<String> {
        crate::engine::from_pairs([("card", "m3-max-128gb"), (key, value)])
            .1
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    /// Every key once across both tables; every engine field described, its sample,
    /// its choices and the default of a switch read by the engine's parser, and a value
    /// not of its kind refused naming the key. (The estimate's fields are checked the
    /// same way in `fields`.)
    #[test]
    fn one_table_every_engine_field_parses() {
        for f in fields() {
            assert!(table(f.group).iter().any(|g| g.key == f.key), "{}", f.key);
        }
        let all: Vec<&Field> = fields().collect();
        for (i, f) in all.iter().enumerate() {
            assert!(all[..i].iter().all(|g| g.key != f.key), "{} twice", f.key);
            assert_eq!(field(f.key).map(|g| g.key), Some(f.key));
        }
        assert_eq!(
            all.len(),
            crate::fields::FIELDS.len() + crate::engine::FIELDS.len()
        );
        for f in crate::engine::FIELDS {
            assert!(f.is_engine(), "{}", f.key);
            assert!(!f.label.trim().is_empty() && !f.help.trim().is_empty());
            let v = sample(f);
            assert!(!v.is_empty(), "{}: no sample value", f.key);
            assert_eq!(
                engine_errors(f.key, v),
                Vec::<String>::new(),
                "{}={v}",
                f.key
            );
            for (value, label) in f.choices {
                assert!(!label.is_empty(), "{}: a choice without a label", f.key);
                if !value.is_empty() {
                    assert_eq!(engine_errors(f.key, value), Vec::<String>::new());
                }
            }
            match f.kind {
                FieldKind::Choice => assert!(
                    f.choices.iter().any(|c| c.0.is_empty()) && f.choices.len() > 1,
                    "{}",
                    f.key
                ),
                FieldKind::Count | FieldKind::Bool(_) | FieldKind::Fraction | FieldKind::Card => {
                    assert!(f.choices.is_empty(), "{}", f.key)
                }
                FieldKind::Text => {}
            }
            if !matches!(f.kind, FieldKind::Text) {
                let bad = engine_errors(f.key, "x?");
                assert!(
                    bad.iter().any(|e| e.starts_with(&format!("{}:", f.key))),
                    "{}: {bad:?}",
                    f.key
                );
            }
            // An engine's switches are off unless given, and a switch's default written
            // back is what an absent key means.
            if let FieldKind::Bool(d) = f.kind {
                assert!(!d, "{}: an engine switch is off by default", f.key);
                let (p, errors) = crate::engine::from_pairs([(f.key, "false")]);
                assert!(errors.is_empty() && p.is_empty(), "{}: {errors:?}", f.key);
            }
        }
    }
}
