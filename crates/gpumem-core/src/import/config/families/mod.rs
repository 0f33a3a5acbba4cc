//! The registry: one row per family file, found by `model_type`. A family's rules
//! live in its own file — its records, their hooks, the list `FAMILIES` of its
//! records — so adding a record to a family is an edit of its file alone, and a new
//! family is a new file alone (with a config fixture and its oracle file in
//! `tests/cases`): the build script lists this folder's files into `REGISTRY`.

use super::family::Family;

// One `mod` item per family file of this folder and `REGISTRY`, one row per file,
// written by the crate's build script from the folder's listing.
include!(concat!(env!("OUT_DIR"), "/families.rs"));

/// Every record, file by file.
pub(crate) fn all() -> impl Iterator<Item = &'static Family> {
    REGISTRY.iter().flat_map(|f| f.iter().copied())
}

/// Families whose layers keep a constant state instead of (some) KV in a way no
/// record reads yet: refused with a reason rather than counted as attention (none at
/// present: Zamba, Zamba2, LFM2, RWKV, RecurrentGemma and MiniMax have their records).
const REFUSED: &[&str] = &[];

/// Encoder-only families (transformers' model types): embedding, reranking and
/// classification models. They keep no KV cache and generate nothing, so a decoder's
/// estimate would be wrong (a KV cache of gigabytes where there is none).
/// (BERT, RoBERTa, XLM-R and ModernBERT are counted: `bert.rs`.)
const ENCODERS: &[&str] = &[
    "distilbert",
    "albert",
    "electra",
    "deberta",
    "deberta-v2",
    "nomic_bert",
    "camembert",
    "mpnet",
    "ernie",
    "jina_bert",
    // Encoders transformers can also build as a causal LM head (is_decoder), whose
    // published configs are encoders.
    "bert-generation",
    "big_bird",
    "data2vec-text",
    "megatron-bert",
    "rembert",
    "roberta-prelayernorm",
    "roc_bert",
    "roformer",
    "xlm-roberta-xl",
    "xmod",
];

/// Encoder-decoder families (an encoder's states cross-attended by a decoder: two KV
/// shapes the decoder reader does not count).
const ENCODER_DECODERS: &[&str] = &[
    "t5",
    "mt5",
    "umt5",
    "bart",
    "mbart",
    "pegasus",
    "marian",
    "whisper",
    "m2m_100",
    "nllb-moe",
    "longt5",
    "switch_transformers",
    "blenderbot",
    "blenderbot-small",
    "bigbird_pegasus",
    "mvp",
    "plbart",
    "prophetnet",
    // The text decoder of a VisionEncoderDecoderModel (TrOCR's image encoder beside it).
    "trocr",
];

/// Why `model_type` is refused, if it is.
pub(crate) fn refused(model_type: &str) -> Option<&'static str> {
    if ENCODERS.contains(&model_type) {
        return Some(
            "an encoder-only model (embeddings, reranking, classification) whose layers are not counted here (BERT, RoBERTa, XLM-R and ModernBERT are): it keeps no KV cache; give --parameters for the weights alone",
        );
    }
    if ENCODER_DECODERS.contains(&model_type) {
        return Some(
            "an encoder-decoder model this reader does not count (T5, mT5, UMT5, BART, mBART and Whisper are, from a config naming their sizes and the decoder's heads): its decoder's self-attention cache and its cross-attention cache over the encoder's length are not estimated; give --parameters for the weights alone",
        );
    }
    REFUSED.contains(&model_type).then_some(
        "state-space / linear-attention layers keep a constant per-sequence state instead of a KV cache, and their tensors differ from attention layers; the config reader does not count them yet: give parameters, the attention layers' KV shape and state-layers / state-bytes by hand",
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    /// The registry is the folder's files in name order, and lookups take the first
    /// record naming a `model_type` or GGUF architecture: that is only order-free while
    /// no two records name the same one.
    #[test]
    fn no_two_records_share_a_model_type_or_gguf_architecture() {
        let mut seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for (i, f) in super::all().enumerate() {
            for t in f.types.split(' ').filter(|t| !t.is_empty()) {
                if let Some(j) = seen.insert(("model_type", t), i) {
                    panic!("model_type {t} is named by records {j} and {i}");
                }
            }
            for g in f.gguf.split(' ').filter(|g| !g.is_empty()) {
                if let Some(j) = seen.insert(("gguf", g), i) {
                    panic!("GGUF architecture {g} is named by records {j} and {i}");
                }
            }
        }
        assert!(
            seen.len() > 100,
            "the registry lists every family file: {}",
            seen.len()
        );
    }
}
