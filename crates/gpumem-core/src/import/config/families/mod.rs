//! The registry: one row per family file, found by `model_type`. A family's rules
//! live in its own file — its records, their hooks, the list `FAMILIES` of its
//! records — so adding a record to a family is an edit of its file alone, and a new
//! family is a new file and one row here (with a config fixture and its oracle file in
//! `tests/cases`).

use super::family::Family;

mod afmoe;
mod apertus;
mod arcee;
mod bamba;
mod bert;
mod bitnet;
mod bloom;
mod chatglm;
mod cohere;
mod ctrl;
mod deepseek;
mod diffllama;
mod ernie;
mod exaone;
mod falcon;
mod falcon_h1;
mod gemma;
mod git;
mod glm;
mod got_ocr2;
mod gpt;
mod gpt_oss;
mod granite;
mod helium;
mod hunyuan;
mod hyperclovax;
mod internlm;
mod jamba;
mod jetmoe;
mod kimi;
mod lfm2;
mod llama;
mod llava;
mod mamba;
mod mellum;
mod minicpm;
mod minimax;
mod mllama;
mod nanochat;
mod nemotron;
mod olmo;
mod openai_gpt;
mod opt;
mod paligemma;
mod persimmon;
mod phi;
mod phimoe;
mod qwen;
mod qwen1;
mod recurrent_gemma;
mod rwkv;
mod seed;
mod smollm;
mod solar;
mod stablelm;
mod starcoder;
mod zamba;

/// Every family file's records (the `model_type`s of one record never appear in
/// another's).
pub(crate) const REGISTRY: &[&[&Family]] = &[
    llama::FAMILIES,
    qwen::FAMILIES,
    qwen1::FAMILIES,
    gemma::FAMILIES,
    deepseek::FAMILIES,
    kimi::FAMILIES,
    glm::FAMILIES,
    chatglm::FAMILIES,
    gpt_oss::FAMILIES,
    minimax::FAMILIES,
    cohere::FAMILIES,
    exaone::FAMILIES,
    phimoe::FAMILIES,
    apertus::FAMILIES,
    ernie::FAMILIES,
    olmo::FAMILIES,
    phi::FAMILIES,
    falcon::FAMILIES,
    gpt::FAMILIES,
    starcoder::FAMILIES,
    seed::FAMILIES,
    smollm::FAMILIES,
    granite::FAMILIES,
    hunyuan::FAMILIES,
    helium::FAMILIES,
    internlm::FAMILIES,
    arcee::FAMILIES,
    solar::FAMILIES,
    hyperclovax::FAMILIES,
    mellum::FAMILIES,
    stablelm::FAMILIES,
    minicpm::FAMILIES,
    nanochat::FAMILIES,
    afmoe::FAMILIES,
    diffllama::FAMILIES,
    opt::FAMILIES,
    bloom::FAMILIES,
    persimmon::FAMILIES,
    bitnet::FAMILIES,
    mamba::FAMILIES,
    jamba::FAMILIES,
    nemotron::FAMILIES,
    falcon_h1::FAMILIES,
    bamba::FAMILIES,
    bert::FAMILIES,
    llava::FAMILIES,
    paligemma::FAMILIES,
    lfm2::FAMILIES,
    mllama::FAMILIES,
    zamba::FAMILIES,
    got_ocr2::FAMILIES,
    git::FAMILIES,
    recurrent_gemma::FAMILIES,
    rwkv::FAMILIES,
    jetmoe::FAMILIES,
    openai_gpt::FAMILIES,
    ctrl::FAMILIES,
];

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
