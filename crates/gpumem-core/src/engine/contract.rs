//! The contract every serving engine keeps: who it is ([`Info`]: its name, releases,
//! flags, the formats it loads) and its budget for a request ([`Engine::budget`]).
//! An engine is a folder of `engine/` with one type that implements [`Engine`], and one
//! line of the registry (`registry.rs`); nothing else in gpumem names it.

use super::flags::Flag;
use super::pool::{Batch, Draft};
use super::request::Ctx;
use crate::error::EstimateError;

/// A serving engine's rule: how it sizes its KV-cache pool, read in its source.
pub trait Engine {
    /// Who it is. Data only, so whatever parses the flags or lists the engines (the
    /// page's first module) links no rule.
    const INFO: Info;

    /// Its budget for one request on one card: its share of the card first, then every
    /// line it takes from that share or shows beside it, and how its pool is cut into
    /// blocks ([`Draft`]). The common ending turns it into tokens, sequences and an
    /// outcome. `c` holds the workload, the card, the flags (read back through the
    /// rows of [`Info::flags`]) and the estimate's figures.
    fn budget(c: &Ctx) -> Result<Draft, EstimateError>;

    /// Whether it serves an encoder-only model (BERT, RoBERTa, XLM-R, ModernBERT: no
    /// KV cache, one batch's forward at a time) by [`Engine::batch_budget`]; otherwise
    /// the budget refuses one, naming the engines that do.
    const ENCODERS: bool = false;

    /// Whether its rule sizes a model split over several different cards
    /// (`--card a,b`: llama.cpp's `--tensor-split`, vLLM's pipeline stages), each
    /// device by what it holds; otherwise the budget refuses a list of cards.
    const SEVERAL_CARDS: bool = false;

    /// Whose cache layout its recurrent states and indexer keys follow: a serving
    /// engine's own pool (vLLM's layout) unless it runs transformers' own cache.
    const CACHE_RUNTIME: crate::arch::CacheRuntime = crate::arch::CacheRuntime::Serving;

    /// How it lays out a model's cross-attention layers (Llama 3.2 Vision's), read in
    /// its source: what a token of its pool costs and what a request holds beside its
    /// text. An engine whose handling was not read refuses the model, saying so.
    fn cross_attention(
        _x: &super::cross::CrossLayers,
        _params: &super::flags::EngineParams,
    ) -> Result<super::cross::Cross, EstimateError> {
        Err(super::cross::CrossLayers::not_read(Self::INFO.name))
    }

    /// How it lays out an encoder-decoder's caches (Whisper's decoder: a
    /// self-attention and a cross-attention layer each), read in its source: what a
    /// token of its pool costs and the encoder positions a request holds beside its
    /// text. An engine whose handling was not read refuses the model, saying so.
    fn encoder_decoder(
        _x: &super::cross::CrossLayers,
        _params: &super::flags::EngineParams,
    ) -> Result<super::cross::Cross, EstimateError> {
        Err(super::cross::CrossLayers::encoder_decoder_not_read(
            Self::INFO.name,
        ))
    }

    /// Its budget for an encoder-only model: every line it takes from the card at its
    /// largest batch, and that batch. The common ending turns it into the room left
    /// and the sequences a batch holds. Only read where [`Engine::ENCODERS`] is set.
    fn batch_budget(_c: &Ctx) -> Result<(Draft, Batch), EstimateError> {
        Err(EstimateError::invalid(
            "engine",
            "this engine does not serve an encoder-only model",
        ))
    }
}

/// Reads the text after `@` in `--engine name@release` into the release's place in
/// [`Info::releases`].
pub type ReleaseParser = fn(&str) -> Result<usize, EstimateError>;

/// Who an engine is: what `--engine` takes, what `--help`, the page and `--json` say
/// about it, and the flags it reads.
#[derive(Debug, Clone, Copy)]
pub struct Info {
    /// Its name on the command line, in the URL and in `--json` (`vllm`).
    pub name: &'static str,
    /// Other spellings `--engine` takes (`llamacpp`), lower case.
    pub aliases: &'static [&'static str],
    /// One sentence naming it (the schema's description of its name).
    pub summary: &'static str,
    /// Its releases as `--engine` values with their labels, newest (the rules `name`
    /// alone picks) first: `("vllm", "vLLM 0.29"), ("vllm@0.27", "vLLM 0.27")…`.
    pub releases: &'static [(&'static str, &'static str)],
    /// Reads the text after `@` into a release's place in `releases`; `None` when one
    /// release is carried.
    pub release: Option<ReleaseParser>,
    /// How an unknown `--engine` lists it (`tgi (tgi@3, @2.0, @0.9)`).
    pub hint: &'static str,
    /// The flags it reads, the shared rows ([`super::flags::CARD`] aside) included,
    /// in the order `--help` and the page show them.
    pub flags: &'static [&'static Flag],
    /// The weight formats it loads, widest first: the ladder the headline offers.
    pub formats: &'static [&'static str],
    /// Whether its rule sizes sliding-window layers by their window; otherwise the
    /// budget says they are counted at the full length.
    pub windows: bool,
    /// Whether `max-model-len` is the context of all its sequences together
    /// (llama-server's `-c`, split among its slots), so its default is the workload's
    /// length × sequences.
    pub shared_context: bool,
    /// Whether it runs on Apple silicon's GPU (Metal, or torch's MPS device); otherwise
    /// a budget on a Mac says the engine does not run there.
    pub metal: bool,
    /// What the budget says when nothing is left for the pool; `None`: the common words.
    pub refusal: Option<&'static str>,
}
