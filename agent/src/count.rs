//! A model family the config reader does not know, counted by its own code:
//! `estimate` runs the embedded probe (`agent/python/gpumem_count.py`) in a Python with
//! torch and transformers, which builds the model from config.json on PyTorch's `meta`
//! device (no weight read, no remote code unless `--trust-remote-code`) and reads every
//! parameter and buffer from the modules and the KV cache from the cache object the
//! model's own forward returns. The counts go to the estimator as its input's
//! `counted` ([`to_counted`]), whose weights and KV lines (kind `traced`) then replace
//! the reader's in every figure made from the input. The probe runs bounded as the trace does (`crate::trace::python`): a
//! private folder, off the network and any GPU, killed with the agent or at a deadline,
//! and refused before Python starts when the config asks for more layers or experts
//! than a build on the CPU may make.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use gpumem_core::estimate::{
    Counted, CountedCross, CountedLayer, CountedMatrices, CountedMeasured, CountedVectors,
};
use gpumem_core::format::Dtype;
use serde::Deserialize;
use serde_json::Value;

use crate::private::PrivateDir;
use crate::trace::python::{Failure, MAX_COUNT_EXPERT_BLOCKS, check_config_cost_within, run_probe};

/// The probe's source, embedded in the binary.
pub const PROBE_SOURCE: &str = include_str!("../python/gpumem_count.py");

/// The probe's answer's schema name.
pub const COUNT_SCHEMA: &str = "gpumem.count/v1";

/// A count that takes longer than this is stopped (a 671B MoE builds in seconds).
const DEADLINE: Duration = Duration::from_secs(300);
/// Longest answer read (one row per layer of the cache: kilobytes).
const MAX_ANSWER_BYTES: u64 = 4 << 20;

/// `--count-with`: who counts a model from its config.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CountWith {
    /// transformers for a family the reader does not know, when a Python with it is
    /// at hand; the reader otherwise.
    #[default]
    Auto,
    /// transformers, whatever the family (an error when it cannot run).
    Transformers,
    /// The config reader alone.
    Reader,
}

impl CountWith {
    /// The flag's values.
    pub const NAMES: [&'static str; 3] = ["auto", "transformers", "reader"];

    /// From the flag's value (one of [`CountWith::NAMES`]).
    pub fn parse(name: &str) -> Option<CountWith> {
        match name {
            "auto" => Some(CountWith::Auto),
            "transformers" => Some(CountWith::Transformers),
            "reader" => Some(CountWith::Reader),
            _ => None,
        }
    }
}

/// Weight matrices of one kind and shape.
#[derive(Debug, Clone, Deserialize)]
pub struct MatrixRow {
    /// `embeddings`, `attention`, `mlp`, `norms`, `lm_head` or `other`.
    pub kind: String,
    /// Matrices of this shape (an expert bank counts its experts).
    pub banks: u64,
    /// Rows.
    pub rows: u64,
    /// Columns.
    pub cols: u64,
    /// Held by a module other than an `nn.Linear` or `Conv1D` (an MoE's expert bank, a
    /// convolution's kernel): transformers' bitsandbytes quantizer leaves it.
    #[serde(default)]
    pub outside_linear: bool,
}

/// Vectors (biases, norms' scales) of one kind.
#[derive(Debug, Clone, Deserialize)]
pub struct VectorRow {
    /// As [`MatrixRow::kind`].
    pub kind: String,
    /// Tensors.
    pub tensors: u64,
    /// Elements.
    pub elements: u64,
}

/// Buffers of one dtype.
#[derive(Debug, Clone, Deserialize)]
pub struct BufferRow {
    /// Tensors.
    pub tensors: u64,
    /// Bytes.
    pub bytes: u64,
}

/// One layer of the model's own cache, each figure `[elements, bytes]`.
#[derive(Debug, Clone, Deserialize)]
pub struct CacheLayer {
    /// Keys and values one more token adds.
    pub kv_per_token: [u64; 2],
    /// Keys and values there before the first token (none in a plain cache).
    pub kv_fixed: [u64; 2],
    /// Other tensors one more token adds (a sparse-attention indexer's keys).
    pub state_per_token: [u64; 2],
    /// Other state, constant in the tokens (a linear-attention or SSM layer's).
    pub state: [u64; 2],
    /// Tokens after which the layer stops growing (a sliding window), when it does.
    pub window: Option<u64>,
}

/// An encoder-decoder's cross-attention cache and encoder output, as its forward holds
/// them.
#[derive(Debug, Clone, Deserialize)]
pub struct CrossCache {
    /// Cross-attention keys and values per encoder position, every decoder layer
    /// together, `[elements, bytes]`.
    pub per_source_token: [u64; 2],
    /// Values of the encoder's output per position.
    pub hidden: u64,
    /// The encoder's own length (an audio encoder's frames; the positions of the clip
    /// `--audio-seconds` gave); `None`: the source's.
    pub source_length: Option<u64>,
    /// An encoder that reads audio of any length: how the clip was made into its input.
    #[serde(default)]
    pub audio: Option<AudioInput>,
    /// Decoder layers with a cross-attention cache.
    pub layers: u64,
}

/// The torch and transformers that built the model.
#[derive(Debug, Clone, Deserialize)]
pub struct AudioInput {
    /// `input_features` (filter banks) or `input_values` (samples).
    pub input: String,
    /// transformers' feature extractor class, e.g. `Speech2TextFeatureExtractor`.
    pub feature_extractor: Option<String>,
    /// Its sampling rate, Hz.
    pub sampling_rate: Option<u64>,
    /// The clip asked for (`--audio-seconds`).
    pub seconds: Option<f64>,
    /// The encoder's input for it, e.g. `[1, 2998, 80]`.
    pub input_shape: Option<Vec<u64>>,
    /// The encoder positions its output holds.
    pub positions: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Versions {
    /// torch's version.
    pub torch: String,
    /// transformers' version.
    pub transformers: String,
}

/// The model's own cache after one forward of a length the estimate needs, one
/// sequence, each figure `[elements, bytes]` over every layer.
#[derive(Debug, Clone, Deserialize)]
pub struct MeasuredLength {
    /// Tokens of the forward.
    pub tokens: u64,
    /// Keys and values (a window layer's at its window, as while decoding).
    pub kv: [u64; 2],
    /// Other tensors (compressed entries, compressor buffers, an indexer's keys).
    pub other: [u64; 2],
}

/// A cache that does not grow by the same elements each token, measured at the
/// lengths asked instead.
#[derive(Debug, Clone, Deserialize)]
pub struct Measured {
    /// Why it is not per token (what the check at a few hundred tokens found).
    pub why: String,
    /// One forward per length.
    pub lengths: Vec<MeasuredLength>,
}

/// The probe's answer.
#[derive(Debug, Clone, Deserialize)]
pub struct Count {
    /// [`COUNT_SCHEMA`].
    pub schema: String,
    /// Who built it.
    pub versions: Versions,
    /// transformers' class, e.g. `JetMoeForCausalLM`.
    pub model_class: String,
    /// `AutoModelForCausalLM`, `AutoModel`, `AutoModelForSeq2SeqLM`, …
    pub auto_class: String,
    /// `decoder`, `encoder` (built bare, no cache) or `encdec` (an encoder-decoder).
    #[serde(default)]
    pub kind: Option<String>,
    /// Every parameter once (tied ones once).
    pub parameters: u64,
    /// Parameter matrices by kind and shape.
    pub matrices: Vec<MatrixRow>,
    /// Parameter vectors by kind.
    pub vectors: Vec<VectorRow>,
    /// Buffers by dtype.
    pub buffers: Vec<BufferRow>,
    /// The output projection is the embedding table.
    pub tied_embeddings: bool,
    /// The cache per layer; `None` when the model returned none. An encoder-decoder's:
    /// its decoder's self-attention cache.
    pub cache_layers: Option<Vec<CacheLayer>>,
    /// An encoder-decoder's cross-attention cache and encoder output.
    #[serde(default)]
    pub cross_cache: Option<CrossCache>,
    /// A cache that is not per token, measured at the lengths the estimate needs
    /// (`cache_layers` is then `None`).
    #[serde(default)]
    pub cache_measured: Option<Measured>,
    /// Why the cache was not read, when its forward failed.
    pub cache_error: Option<String>,
    /// What the forward on meta tensors answered for itself.
    pub notes: Vec<String>,
    /// The probe's time, ms.
    pub wall_time_ms: u64,
}

impl Count {
    /// "transformers 5.23.0".
    pub fn by(&self) -> String {
        format!("transformers {}", self.versions.transformers)
    }
}

/// The dtype names the probe takes (torch's); the count is built in the compute dtype
/// so that states the model keeps in it are its size.
fn torch_dtype(d: Dtype) -> &'static str {
    match d {
        Dtype::F16 => "float16",
        Dtype::F32 => "float32",
        _ => "bfloat16",
    }
}

/// The lengths a count reads its caches at, beside its own.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lengths {
    /// The clip an audio encoder reads (`--audio-seconds`).
    pub audio_seconds: Option<f64>,
    /// The prompt, and the prompt with the generated tokens: where a cache that is not
    /// per token is measured.
    pub measure_tokens: Option<[u64; 2]>,
}

/// Runs the probe in `python` on `config` (the parsed config.json).
pub fn count(
    python: &OsString,
    config: &Value,
    text: &str,
    compute: Dtype,
    trust_remote_code: bool,
    config_dir: Option<&Path>,
    lengths: Lengths,
) -> Result<std::result::Result<Count, Failure>> {
    let Lengths {
        audio_seconds,
        measure_tokens,
    } = lengths;
    if let Err(why) = check_config_cost_within(config, MAX_COUNT_EXPERT_BLOCKS, "the count") {
        return Ok(Err(Failure::Refused(why)));
    }
    let dir = PrivateDir::in_env_base("count").context("a folder for the count probe")?;
    let script = dir.path().join("gpumem_count.py");
    crate::private::write_new(&script, PROBE_SOURCE.as_bytes())?;
    crate::private::write_new(
        &dir.path().join("gpumem_watchdog.py"),
        crate::trace::python::WATCHDOG_SOURCE.as_bytes(),
    )?;
    let mut request = serde_json::json!({
        // The file's own text: Python's json module reads the bare `Infinity` and
        // `NaN` it writes as floats (`config` has them as strings).
        "config_text": text,
        "dtype": torch_dtype(compute),
        "trust_remote_code": trust_remote_code,
        // The probe's own bounds: its deadline a little after the agent's.
        "deadline_s": DEADLINE.as_secs().saturating_add(5),
        "parent_pid": std::process::id(),
    });
    if let (true, Some(d)) = (trust_remote_code, config_dir) {
        request["config_dir"] = Value::from(d.to_string_lossy().into_owned());
    }
    if let Some(s) = audio_seconds {
        request["audio_seconds"] = Value::from(s);
    }
    // A cache that does not grow by the same elements each token is read at these
    // lengths (the prompt; the prompt and the generated tokens) instead.
    if let Some([context, end]) = measure_tokens {
        request["measure_tokens"] = serde_json::json!([context, end]);
    }
    // The repository's preprocessor_config.json beside config.json: the feature
    // extractor's own settings (sampling rate, hop, mel bins) for an audio encoder.
    if let Some(pre) = config_dir.and_then(read_preprocessor) {
        request["preprocessor"] = pre;
    }
    let request = serde_json::to_vec(&request)?;
    let ok = match run_probe(
        python,
        &script,
        request,
        DEADLINE,
        MAX_ANSWER_BYTES,
        "count",
    )? {
        Ok(ok) => ok,
        Err(f) => return Ok(Err(f)),
    };
    let count: Count = serde_json::from_value(ok).context("reading the count probe's answer")?;
    if count.schema != COUNT_SCHEMA {
        bail!(
            "the count probe answered schema {:?}, not {COUNT_SCHEMA}",
            count.schema
        );
    }
    let mut sum = 0u64;
    for m in &count.matrices {
        let n = m
            .banks
            .checked_mul(m.rows)
            .and_then(|x| x.checked_mul(m.cols))
            .context("the counted parameters overflow")?;
        sum = sum
            .checked_add(n)
            .context("the counted parameters overflow")?;
    }
    for v in &count.vectors {
        sum = sum
            .checked_add(v.elements)
            .context("the counted parameters overflow")?;
    }
    if sum != count.parameters {
        bail!(
            "the count probe's rows add up to {sum} parameters, not the {} it counted",
            count.parameters
        );
    }
    Ok(Ok(count))
}

/// The preprocessor_config.json in `dir`, when it is there, small and a JSON object
/// (a feature extractor's settings: plain values, no code).
fn read_preprocessor(dir: &Path) -> Option<Value> {
    let path = dir.join("preprocessor_config.json");
    let meta = std::fs::metadata(&path).ok()?;
    if !meta.is_file() || meta.len() > 1 << 20 {
        return None;
    }
    let v: Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    v.is_object().then_some(v)
}

impl Count {
    /// An encoder, built bare: no cache.
    pub fn is_encoder(&self) -> bool {
        self.kind.as_deref() == Some("encoder")
    }

    /// The cache was read: per token, or measured at the lengths asked.
    pub fn cache_read(&self) -> bool {
        self.cache_layers.is_some() || self.cache_measured.is_some()
    }
}

/// The count as the estimator takes it ([`gpumem_core::estimate::Counted`]): its
/// weights and, when the cache was read, its KV lines replace the reader's.
/// `source_length`: the encoder-decoder's source as the user gave it (an audio
/// encoder's own length wins).
pub fn to_counted(c: &Count, source_length: Option<u64>) -> Result<Counted> {
    let cache = c.cache_layers.as_ref().map(|layers| {
        layers
            .iter()
            .map(|l| CountedLayer {
                kv_per_token: l.kv_per_token[0],
                kv_fixed: l.kv_fixed[0],
                state_bytes: l.state[1],
                window: l.window,
                // Other tensors that grow with the tokens (a sparse-attention indexer's
                // keys, transformers' DynamicIndexedLayer), in the dtype the model
                // keeps them.
                other_per_token_bytes: l.state_per_token[1],
            })
            .collect::<Vec<_>>()
    });
    Ok(Counted {
        by: c.by(),
        parameters: c.parameters,
        matrices: c
            .matrices
            .iter()
            .map(|m| CountedMatrices {
                kind: m.kind.clone(),
                banks: m.banks,
                rows: m.rows,
                cols: m.cols,
                outside_linear: m.outside_linear,
            })
            .collect(),
        vectors: c
            .vectors
            .iter()
            .map(|v| CountedVectors {
                kind: v.kind.clone(),
                tensors: v.tensors,
                elements: v.elements,
            })
            .collect(),
        buffer_bytes: c
            .buffers
            .iter()
            .try_fold(0u64, |a, b| a.checked_add(b.bytes))
            .context("the counted buffers overflow")?,
        buffers: c.buffers.iter().map(|b| b.tensors).sum(),
        // Read only with the cache: an encoder-decoder whose self-attention cache was not
        // read has its cross-attention cache unread too.
        encoder: c.is_encoder() && cache.is_some(),
        cross: c
            .cross_cache
            .as_ref()
            .filter(|_| cache.is_some())
            .map(|x| CountedCross {
                per_source_token: x.per_source_token[0],
                hidden: x.hidden,
                layers: x.layers,
                source_length: x.source_length.or(source_length),
            }),
        measured: c
            .cache_measured
            .as_ref()
            .filter(|_| cache.is_none())
            .map(|m| {
                m.lengths
                    .iter()
                    .map(|l| CountedMeasured {
                        tokens: l.tokens,
                        kv_elements: l.kv[0],
                        other_bytes: l.other[1],
                    })
                    .collect()
            }),
        cache,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_with_names_parse() {
        for n in CountWith::NAMES {
            assert!(CountWith::parse(n).is_some());
        }
        assert_eq!(
            CountWith::parse("transformers"),
            Some(CountWith::Transformers)
        );
        assert!(CountWith::parse("vllm").is_none());
    }

    #[test]
    fn a_missing_python_is_unavailable_and_a_costly_config_refused_first() {
        let got = count(
            &OsString::from("/nonexistent/python3"),
            &serde_json::json!({"model_type": "jetmoe", "num_hidden_layers": 2}),
            "{}",
            Dtype::Bf16,
            false,
            None,
            Lengths::default(),
        )
        .unwrap();
        assert!(
            matches!(got, Err(Failure::Unavailable(ref w)) if w.contains("not found")),
            "{got:?}"
        );
        let got = count(
            &OsString::from("/nonexistent/python3"),
            &serde_json::json!({"model_type": "jetmoe", "num_hidden_layers": 1u64 << 40}),
            "{}",
            Dtype::Bf16,
            false,
            None,
            Lengths::default(),
        )
        .unwrap();
        assert!(matches!(got, Err(Failure::Refused(_))), "{got:?}");
        // Doge's defaults (32 layers × 16 384 experts held in two tables a layer) are
        // within the count's bound, not the trace's; sixteen times the experts are not.
        let doge = serde_json::json!({"model_type": "doge", "num_hidden_layers": 32, "num_experts": 16384});
        assert!(crate::trace::python::check_config_cost(&doge).is_err());
        assert!(check_config_cost_within(&doge, MAX_COUNT_EXPERT_BLOCKS, "the count").is_ok());
        let more = serde_json::json!({"model_type": "doge", "num_hidden_layers": 32, "num_experts": 16384 * 16});
        let why =
            check_config_cost_within(&more, MAX_COUNT_EXPERT_BLOCKS, "the count").unwrap_err();
        assert!(why.contains("expert blocks the count builds"), "{why}");
    }
}
