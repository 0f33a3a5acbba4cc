//! Diffusion pipelines: a diffusers `model_index.json` and its components' configs →
//! each component's weights in its own format, the denoiser's activations by
//! resolution, frames, batch and classifier-free guidance, the VAE decode's peak,
//! and what diffusers' offload modes leave on the device and need on the host.
//!
//! Pure like the rest of the core: the caller reads the files (the agent from a
//! folder; a test from its fixtures) and hands over their text. Parameters are
//! counted module by module (`count`), activations from each forward's peak moment
//! (`activations`); `tests/diffusion.rs` holds both against diffusers' own modules
//! built on PyTorch's meta device.

pub mod activations;
pub mod count;
pub mod report;
pub mod workspace;

use serde_json::Value;

use crate::catalogue::{CATALOGUE, GpuCard};
use crate::error::EstimateError;
use crate::fit::{CardFit, Verdict, fit_card_reserve};
use crate::format::{Dtype, StorageFormat};
use crate::units::{GIB, group_digits};

pub use count::{Counts, Layerwise};

/// What a component does in the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The UNet or transformer run at every step.
    Denoiser,
    /// The VAE (its decoder turns latents into pixels once, at the end).
    Vae,
    /// A text encoder (run once per prompt).
    TextEncoder,
    /// The SD 1.x safety checker (run once on the decoded images).
    SafetyChecker,
}

impl Role {
    /// The role in words.
    pub fn word(self) -> &'static str {
        match self {
            Role::Denoiser => "denoiser",
            Role::Vae => "VAE",
            Role::TextEncoder => "text encoder",
            Role::SafetyChecker => "safety checker",
        }
    }
}

/// The classes gpumem counts, by their `_class_name` / `architectures` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// diffusers `UNet2DConditionModel`.
    Unet2d,
    /// diffusers `SD3Transformer2DModel`.
    Sd3,
    /// diffusers `FluxTransformer2DModel`.
    Flux,
    /// diffusers `WanTransformer3DModel`.
    Wan,
    /// diffusers `AutoencoderKL`.
    AutoencoderKl,
    /// diffusers `AutoencoderKLWan`.
    AutoencoderKlWan,
    /// transformers `CLIPTextModel`.
    ClipText,
    /// transformers `CLIPTextModelWithProjection`.
    ClipTextProjection,
    /// transformers `T5EncoderModel`.
    T5Encoder,
    /// transformers `UMT5EncoderModel`.
    Umt5Encoder,
    /// diffusers `StableDiffusionSafetyChecker`.
    SafetyChecker,
}

impl Class {
    /// The class of a `model_index.json` entry, if gpumem counts it.
    pub fn of(name: &str) -> Option<Class> {
        Some(match name {
            "UNet2DConditionModel" => Class::Unet2d,
            "SD3Transformer2DModel" => Class::Sd3,
            "FluxTransformer2DModel" => Class::Flux,
            "WanTransformer3DModel" => Class::Wan,
            "AutoencoderKL" => Class::AutoencoderKl,
            "AutoencoderKLWan" => Class::AutoencoderKlWan,
            "CLIPTextModel" => Class::ClipText,
            "CLIPTextModelWithProjection" => Class::ClipTextProjection,
            "T5EncoderModel" => Class::T5Encoder,
            "UMT5EncoderModel" => Class::Umt5Encoder,
            "StableDiffusionSafetyChecker" => Class::SafetyChecker,
            _ => return None,
        })
    }
    /// The role of a component of this class.
    pub fn role(self) -> Role {
        match self {
            Class::Unet2d | Class::Sd3 | Class::Flux | Class::Wan => Role::Denoiser,
            Class::AutoencoderKl | Class::AutoencoderKlWan => Role::Vae,
            Class::SafetyChecker => Role::SafetyChecker,
            _ => Role::TextEncoder,
        }
    }
    fn count(self, cfg: &Value) -> Result<Counts, EstimateError> {
        match self {
            Class::Unet2d => count::unet2d(cfg),
            Class::Sd3 => count::sd3(cfg),
            Class::Flux => count::flux(cfg),
            Class::Wan => count::wan(cfg),
            Class::AutoencoderKl => count::autoencoder_kl(cfg),
            Class::AutoencoderKlWan => count::autoencoder_kl_wan(cfg),
            Class::ClipText => count::clip_text(cfg, false),
            Class::ClipTextProjection => count::clip_text(cfg, true),
            Class::T5Encoder => count::t5_encoder(cfg, false),
            Class::Umt5Encoder => count::t5_encoder(cfg, true),
            Class::SafetyChecker => count::safety_checker(cfg),
        }
    }
}

/// One component of a pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    /// Its folder / `model_index.json` key (`unet`, `text_encoder_2`, …).
    pub name: String,
    /// Its class name as the index gives it.
    pub class_name: String,
    /// The class gpumem counts it as.
    pub class: Class,
    /// Its parameters and buffers.
    pub counts: Counts,
    /// Its config.json.
    pub config: Value,
}

/// A pipeline read from its `model_index.json` and components' configs.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    /// The pipeline class (`FluxPipeline`, …).
    pub class_name: String,
    /// The components gpumem counts, in the index's order.
    pub components: Vec<Component>,
    /// Components of the index that hold no weights (scheduler, tokenizers,
    /// processors) or are absent (`[null, null]`), by name.
    pub without_weights: Vec<String>,
}

/// The most bytes a `model_index.json` or component config may have.
pub const MAX_CONFIG_BYTES: usize = 16 << 20;

/// The most components a pipeline may list.
pub const MAX_COMPONENTS: usize = 32;

/// Classes of a `model_index.json` that hold no weights.
fn weightless(class: &str) -> bool {
    class.ends_with("Scheduler")
        || class.contains("Tokenizer")
        || class.ends_with("ImageProcessor")
        || class.ends_with("FeatureExtractor")
        || class.ends_with("Processor")
}

/// A `model_index.json` read: the pipeline class, its components with weights as
/// `(name, class)`, and the names of those without.
pub type Index = (String, Vec<(String, String)>, Vec<String>);

/// The components a `model_index.json` names that have weights, as `(name, class)`,
/// in the index's order: the folders whose config.json the caller reads next (each
/// name one plain folder name, else refused).
pub fn components_of(index: &str) -> Result<Index, EstimateError> {
    let bad = |why: String| EstimateError::invalid("pipeline", why);
    if index.len() > MAX_CONFIG_BYTES {
        return Err(bad("model_index.json is over 16 MiB".into()));
    }
    // From bytes, as the config reader reads (`import::config`): the page's lookup
    // module then carries one JSON reader for both, not a second one for `&str`.
    let v: Value = serde_json::from_slice(index.as_bytes())
        .map_err(|e| bad(format!("model_index.json is not JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad("model_index.json is not a JSON object".into()))?;
    let class = obj
        .get("_class_name")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            bad("model_index.json has no `_class_name`: not a diffusers pipeline".into())
        })?
        .to_string();
    let mut named = Vec::new();
    let mut without = Vec::new();
    for (k, e) in obj {
        let Some(pair) = e.as_array() else { continue };
        if pair.len() != 2 || k.starts_with('_') {
            continue;
        }
        // The caller reads `{name}/config.json` next: a name is one plain folder.
        if k.is_empty() || k.contains(['/', '\\']) || k == ".." || k == "." {
            return Err(bad(format!(
                "model_index.json names a component `{k}` that is not a folder name"
            )));
        }
        let cls = pair[1].as_str();
        match cls {
            None => without.push(k.clone()),
            Some(c) if weightless(c) => without.push(k.clone()),
            Some(c) => named.push((k.clone(), c.to_string())),
        }
        if named.len() > MAX_COMPONENTS {
            return Err(bad(format!(
                "model_index.json lists more than {MAX_COMPONENTS} components"
            )));
        }
    }
    if !named
        .iter()
        .any(|(_, c)| Class::of(c).is_some_and(|c| c.role() == Role::Denoiser))
    {
        let names: Vec<&str> = named.iter().map(|(_, c)| c.as_str()).collect();
        return Err(bad(format!(
            "{class}: no denoiser gpumem counts among {} (it counts UNet2DConditionModel, SD3Transformer2DModel, FluxTransformer2DModel, WanTransformer3DModel)",
            names.join(", ")
        )));
    }
    Ok((class, named, without))
}

/// Reads a pipeline: its `model_index.json` text and, for each component with
/// weights ([`components_of`]), its config.json text. A component of a class gpumem
/// does not count is refused, naming it (never left out silently).
pub fn read(index: &str, configs: &[(String, String)]) -> Result<Pipeline, EstimateError> {
    let bad = |why: String| EstimateError::invalid("pipeline", why);
    let (class_name, named, without) = components_of(index)?;
    let mut components = Vec::new();
    for (name, cls) in named {
        let class = Class::of(&cls).ok_or_else(|| {
            bad(format!("component `{name}` is a {cls}, a class gpumem does not count yet: its weights cannot be left out silently"))
        })?;
        let text = configs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| t)
            .ok_or_else(|| {
                bad(format!(
                    "component `{name}` ({cls}): its config.json was not given"
                ))
            })?;
        if text.len() > MAX_CONFIG_BYTES {
            return Err(bad(format!("{name}/config.json is over 16 MiB")));
        }
        let config: Value = serde_json::from_slice(text.as_bytes())
            .map_err(|e| bad(format!("{name}/config.json is not JSON: {e}")))?;
        let counts = class.count(&config)?;
        components.push(Component {
            name,
            class_name: cls,
            class,
            counts,
            config,
        });
    }
    Ok(Pipeline {
        class_name,
        components,
        without_weights: without,
    })
}

/// How classifier-free guidance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guidance {
    /// No unconditional pass (guidance-distilled: FLUX.1-dev's default).
    Off,
    /// The latents concatenated with themselves: one call of twice the batch
    /// (`torch.cat([latents] * 2)` in the SD, SDXL and SD3 pipelines).
    Batched,
    /// Two calls of the batch, conditional then unconditional (WanPipeline; FLUX's
    /// `true_cfg_scale` > 1 with a negative prompt).
    TwoPasses,
}

impl Guidance {
    /// The default of a pipeline class with guidance on, read in its `__call__`
    /// (diffusers 0.42.1).
    pub fn of_pipeline(class: &str, denoiser: Class) -> Guidance {
        match (class, denoiser) {
            (_, Class::Flux) => Guidance::TwoPasses,
            (_, Class::Wan) => Guidance::TwoPasses,
            _ => Guidance::Batched,
        }
    }
    /// In words, with the code it follows.
    pub fn words(self) -> &'static str {
        match self {
            Guidance::Off => "no unconditional pass",
            Guidance::Batched => "batch doubled: torch.cat([latents] * 2), one call",
            Guidance::TwoPasses => "two calls of the batch: conditional, then unconditional",
        }
    }
}

/// Where diffusers keeps the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offload {
    /// Every component on the device (`pipe.to("cuda")`).
    None,
    /// `enable_model_cpu_offload`: one component on the device at a time.
    Model,
    /// `enable_sequential_cpu_offload`: one leaf module at a time.
    Sequential,
    /// Group offloading: the denoiser's `enable_group_offload`, the other components on
    /// the device (`pipe.to("cuda")` leaves a group-offloaded component where it is),
    /// or the pipeline's, every component offloaded ([`GroupOffload::pipeline`]).
    Group(GroupOffload),
}

/// `ModelMixin.enable_group_offload` on the denoiser, or
/// `DiffusionPipeline.enable_group_offload` on every component (diffusers 0.42.1
/// `hooks/group_offloading.py` `apply_group_offloading`,
/// `pipelines/pipeline_utils.py`), onloading to the GPU and offloading to the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupOffload {
    /// `offload_type="block_level"` with `num_blocks_per_group`; `None`:
    /// `offload_type="leaf_level"`.
    pub blocks: Option<u64>,
    /// `use_stream=True`: the next group is onloaded while one runs.
    pub stream: bool,
    /// `pipe.enable_group_offload(...)`: every `torch.nn.Module` component (none in
    /// `exclude_modules`) group-offloaded with the same settings, through its own
    /// `enable_group_offload` (diffusers' models) or `apply_group_offloading`
    /// (transformers' text encoders); `false`: the denoiser's alone.
    pub pipeline: bool,
}

impl GroupOffload {
    /// The groups per `nn.ModuleList` element a stream leaves: block level with a
    /// stream runs one block per group (`_apply_group_offloading_block_level` warns and
    /// sets `num_blocks_per_group = 1`).
    pub fn effective_blocks(self) -> Option<u64> {
        self.blocks.map(|n| if self.stream { 1 } else { n })
    }
    /// The diffusers call.
    pub fn call(self) -> String {
        let kind = match self.effective_blocks() {
            Some(n) => format!("offload_type=\"block_level\", num_blocks_per_group={n}"),
            None => "offload_type=\"leaf_level\"".to_string(),
        };
        format!(
            "{}.enable_group_offload(onload_device=\"cuda\", {kind}{})",
            if self.pipeline { "pipe" } else { "denoiser" },
            if self.stream { ", use_stream=True" } else { "" }
        )
    }
}

impl Offload {
    /// Parses `none`, `model`, `sequential` or `group` (group offloading's block level,
    /// one block per group; [`Offload::with_group`] sets the rest).
    pub fn parse(text: &str) -> Result<Offload, EstimateError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "none" | "off" | "" => Ok(Offload::None),
            "model" | "model-cpu" | "enable_model_cpu_offload" => Ok(Offload::Model),
            "sequential" | "sequential-cpu" | "enable_sequential_cpu_offload" => {
                Ok(Offload::Sequential)
            }
            "group" | "enable_group_offload" => Ok(Offload::Group(GroupOffload {
                blocks: Some(1),
                stream: false,
                pipeline: false,
            })),
            _ => Err(EstimateError::invalid(
                "offload",
                format!("{text:?}: none, model, sequential or group"),
            )),
        }
    }
    /// Group offloading's settings applied: `blocks` (`num_blocks_per_group`), `leaf`
    /// (`offload_type="leaf_level"`), `stream` (`use_stream=True`), `pipeline`
    /// (`pipe.enable_group_offload`: every component). Refused as diffusers
    /// refuses them: block level without a count, a count of 0; and refused when the
    /// mode is not `group` (diffusers' model and sequential CPU offload raise when a
    /// component has group offloading: `DiffusionPipeline.
    /// _maybe_raise_error_if_group_offload_active`, pipelines/pipeline_utils.py).
    pub fn with_group(
        self,
        blocks: Option<u64>,
        leaf: bool,
        stream: bool,
        pipeline: bool,
    ) -> Result<Offload, EstimateError> {
        let Offload::Group(_) = self else {
            if blocks.is_some() || leaf || stream || pipeline {
                return Err(EstimateError::invalid(
                    "offload",
                    "group-blocks, group-leaf, group-stream and group-pipeline go with offload group",
                ));
            }
            return Ok(self);
        };
        let blocks = match (blocks, leaf) {
            (Some(_), true) => {
                return Err(EstimateError::invalid(
                    "group-blocks",
                    "group-blocks (block_level) or group-leaf (leaf_level), not both",
                ));
            }
            (Some(0), false) => {
                return Err(EstimateError::invalid(
                    "group-blocks",
                    "0: at least 1 block per group",
                ));
            }
            (Some(n), false) => Some(n.min(count::MAX_LAYERS)),
            (None, true) => None,
            (None, false) => {
                return Err(EstimateError::invalid(
                    "group-blocks",
                    "block_level needs num_blocks_per_group: group-blocks N, or group-leaf",
                ));
            }
        };
        Ok(Offload::Group(GroupOffload {
            blocks,
            stream,
            pipeline,
        }))
    }
    /// The diffusers call.
    pub fn call(self) -> String {
        match self {
            Offload::None => "pipe.to(\"cuda\")".to_string(),
            Offload::Model => "pipe.enable_model_cpu_offload()".to_string(),
            Offload::Sequential => "pipe.enable_sequential_cpu_offload()".to_string(),
            Offload::Group(g) => g.call(),
        }
    }
}

/// The denoiser's parameters and buffers resident at once under group offloading
/// (huggingface/diffusers v0.42.1, `src/diffusers/hooks/group_offloading.py`), bytes;
/// `None` where it is not modelled (a quantised format, layerwise casting, a class
/// with no layout).
///
/// Block level (`_apply_group_offloading_block_level`): the unmatched group (every
/// child not in a top-level `nn.ModuleList`, and the model's own tensors) is onloaded
/// by the hook on the model itself (`GroupOffloadingHook.pre_forward`) and offloaded
/// in its `post_forward`, so it is resident through the call; each block group is
/// onloaded by its first module's `pre_forward` and offloaded by its last module's
/// `post_forward`, before the next group onloads: the unmatched group and the largest
/// group. With a stream, `LazyPrefetchGroupOffloadingHook` records the execution order
/// in the first call and chains `next_group`; from the second call each group's
/// `pre_forward` onloads the next group (`self.next_group.onload_()`) before its own
/// `post_forward` offloads it: the unmatched group and the largest two groups adjacent
/// in the forward's order.
///
/// Leaf level (`_apply_group_offloading_leaf_level`): every linear and convolution is a
/// group hooked on itself; every other module's own parameters and buffers a group
/// hooked on that module, resident while its children run: the largest leaf with the
/// own groups around it ([`count::GroupLayout`]). With a stream the next group in the
/// execution order is onloaded too; the order of the leaves is not counted, so the
/// largest two leaves stand for the adjacent pair (at most that).
pub fn group_resident(c: &Counts, g: GroupOffload, dtype: Dtype) -> Option<u64> {
    let elt = dtype.bytes();
    let l = &c.group;
    match g.effective_blocks() {
        Some(n) => {
            if l.lists.is_empty() {
                return None;
            }
            let total = bytes_of(c, dtype, None).ok()?;
            let mut groups: Vec<u64> = Vec::new();
            for list in &l.lists {
                for chunk in list.chunks(usize::try_from(n).ok()?.max(1)) {
                    let mut b = 0u64;
                    for e in chunk {
                        b = b.checked_add(bytes_of(e, dtype, None).ok()?)?;
                    }
                    groups.push(b);
                }
            }
            let unmatched = match &l.unmatched {
                Some(u) => bytes_of(u, dtype, None).ok()?,
                None => {
                    let matched = groups.iter().try_fold(0u64, |a, b| a.checked_add(*b))?;
                    total.checked_sub(matched)?
                }
            };
            let largest = if g.stream {
                groups
                    .windows(2)
                    .map(|w| w[0].saturating_add(w[1]))
                    .max()
                    .or_else(|| groups.first().copied())
            } else {
                groups.iter().copied().max()
            };
            Some(unmatched.saturating_add(largest.unwrap_or(0)))
        }
        None => {
            let held = l
                .held
                .saturating_mul(elt)
                .saturating_add(l.held_fp32.saturating_mul(4));
            let leaves = if g.stream {
                c.widest.saturating_add(c.second_widest)
            } else {
                c.widest
            };
            let next = if g.stream { c.widest } else { 0 };
            let other = l
                .other
                .saturating_add(next)
                .saturating_mul(elt)
                .saturating_add(l.other_fp32.saturating_mul(4));
            Some(held.saturating_add(leaves.saturating_mul(elt)).max(other))
        }
    }
}

/// A component's parameters and buffers resident at once under group offloading
/// while the pipeline calls it (it holds none outside its call: each group is
/// offloaded when its hook is applied, `GroupOffloadingHook.initialize_hook`, and
/// again after each call), bytes; `None` where it is not modelled (see
/// [`group_resident`] for the denoiser).
///
/// - The denoiser: [`group_resident`].
/// - The VAE: the pipeline calls `vae.decode`, not its `forward`. Block level recurses
///   into the children its class names in `_group_offload_block_modules`, so the
///   decoder's unmatched group and its largest group of `up_blocks` (with a stream the
///   largest two adjacent: the decoder's own `LazyPrefetchGroupOffloadingHook` chains
///   them) are resident ([`count::GroupLayout::unmatched`]; `post_quant_conv` alone
///   before it). Leaf level: the largest convolution; the prefetching hook of a stream
///   sits on the model's `forward`, which `decode` never calls, so nothing is
///   prefetched and a stream holds the same.
/// - A text encoder (transformers' `CLIPTextModel`, `T5EncoderModel`, …) has no
///   `nn.ModuleList` among its top-level children (`text_model`; `shared`,
///   `encoder`), so block level puts the whole model in its unmatched group, resident
///   through its call. Leaf level: its largest leaf (the token embedding) with the
///   buffers of the module around it; with a stream the next leaf too, the two
///   largest standing for it (at most that).
/// - The safety checker (`vision_model`, `visual_projection`: no `nn.ModuleList`):
///   whole at block level; leaf level is not traced and is counted whole too.
pub fn component_resident(c: &Component, g: GroupOffload, dtype: Dtype) -> Option<u64> {
    let elt = dtype.bytes();
    match c.class.role() {
        Role::Denoiser => group_resident(&c.counts, g, dtype),
        Role::Vae => group_resident(
            &c.counts,
            GroupOffload {
                stream: g.stream && g.blocks.is_some(),
                ..g
            },
            dtype,
        ),
        Role::TextEncoder if g.blocks.is_none() => {
            let leaves = if g.stream {
                c.counts.widest.checked_add(c.counts.second_widest)?
            } else {
                c.counts.widest
            };
            // T5's `wo` in fp32 under float16 can outweigh a leaf in the dtype.
            let fp32 = c
                .counts
                .fp32_if_fp16
                .iter()
                .map(|l| l.out.saturating_mul(l.inp))
                .max()
                .unwrap_or(0)
                .checked_mul(fp32_if_fp16_bytes(dtype, None))?;
            leaves
                .checked_mul(elt)?
                .max(fp32)
                .checked_add(c.counts.group.held_fixed_bytes)
        }
        _ => bytes_of(&c.counts, dtype, None).ok(),
    }
}

/// What the user asks the pipeline to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Image height and width, pixels.
    pub height: u64,
    /// Width.
    pub width: u64,
    /// Video frames (1 for images).
    pub frames: u64,
    /// Images (or videos) per prompt.
    pub batch: u64,
    /// Classifier-free guidance on (`None`: the pipeline's default).
    pub guidance: Option<bool>,
    /// `true`: eager attention (the score matrix); `false`: SDPA / flash.
    pub eager: bool,
    /// The compute dtype every component is loaded in (`torch_dtype`).
    pub dtype: Dtype,
    /// The denoiser's weight format (`None`: the dtype).
    pub denoiser_format: Option<StorageFormat>,
    /// The text encoders' weight format (`None`: the dtype).
    pub text_format: Option<StorageFormat>,
    /// Text tokens (`None`: the pipeline's default `max_sequence_length`).
    pub text_tokens: Option<u64>,
    /// Offload mode.
    pub offload: Offload,
    /// `vae.enable_tiling()`.
    pub vae_tiling: bool,
    /// `vae.enable_slicing()`.
    pub vae_slicing: bool,
    /// The denoiser's `enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn,
    /// compute_dtype=<dtype>)`.
    pub layerwise: bool,
    /// Reserve for the CUDA context and allocator slack, bytes.
    pub reserve: u64,
}

impl Default for Workload {
    fn default() -> Workload {
        Workload {
            height: 1024,
            width: 1024,
            frames: 1,
            batch: 1,
            guidance: None,
            eager: false,
            dtype: Dtype::Bf16,
            denoiser_format: None,
            text_format: None,
            text_tokens: None,
            offload: Offload::None,
            vae_tiling: false,
            vae_slicing: false,
            layerwise: false,
            reserve: 4 * GIB,
        }
    }
}

/// One component's weights on the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentLine {
    /// Folder name.
    pub name: String,
    /// Class name.
    pub class_name: String,
    /// Its role.
    pub role: Role,
    /// Parameters.
    pub parameters: u64,
    /// Bytes of its parameters and buffers as loaded.
    pub bytes: u64,
    /// The format its linear layers are stored in, in words.
    pub format: String,
    /// The largest single module's weights (sequential offload's unit), bytes.
    pub largest_module_bytes: u64,
}

/// The estimate of a pipeline run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffusionEstimate {
    /// Each component's weights.
    pub components: Vec<ComponentLine>,
    /// The denoiser call's shape.
    pub call: activations::Call,
    /// Denoiser calls per step (2 with two-pass guidance).
    pub calls_per_step: u64,
    /// How guidance runs.
    pub guidance: Guidance,
    /// The denoiser call's peak beyond its weights (inputs included), bytes.
    pub denoiser_activations: u64,
    /// Of which the eager attention's score matrices (assumed), bytes.
    pub eager_scores: u64,
    /// Of which, under layerwise casting, the largest cast module's copy in the
    /// compute dtype (assumed: at most that at the peak), bytes.
    pub layerwise_upcast: u64,
    /// Of which, in bitsandbytes' int8, the widest linear's int8 input and int32
    /// accumulator over the call's rows (assumed: at most that at the peak), bytes.
    pub int8_matmul: u64,
    /// The VAE decode's peak beyond its weights, bytes.
    pub vae_decode: u64,
    /// Extra VAE weight bytes when the pipeline upcasts an fp16 VAE to fp32 for the
    /// decode (SDXL's `force_upcast`).
    pub vae_upcast: u64,
    /// The text encoders' forward (assumed: a layer's feed-forward), bytes.
    pub text_encode: u64,
    /// Latent height, width and frames.
    pub latent: (u64, u64, u64),
    /// The device's peak under the workload's offload mode (weights resident +
    /// the largest phase), without the reserve.
    pub device_bytes: u64,
    /// The reserve.
    pub reserve: u64,
    /// The host memory the offload mode needs for the weights it keeps there.
    pub host_bytes: u64,
    /// Which phase sets the peak.
    pub peak_phase: String,
    /// Each offload mode's device peak (none, model, sequential, group), without
    /// reserve; `None` for a mode the workload's other settings do not combine with.
    /// The group figure is under the workload's group settings, or block level with one
    /// block per group when it asks for another mode.
    pub by_mode: [Option<u64>; 4],
    /// The group offloading settings `by_mode`'s last figure is for.
    pub group: GroupOffload,
    /// Under those settings, the denoiser's parameters and buffers resident at once
    /// ([`group_resident`]), bytes.
    pub group_resident: Option<u64>,
    /// Under `pipe.enable_group_offload` ([`GroupOffload::pipeline`]), each
    /// component's resident bytes while it runs ([`component_resident`]), by name, in
    /// the index's order; empty otherwise.
    pub group_components: Vec<(String, u64)>,
    /// Whether the phase that sets the peak runs convolutions, whose cuDNN workspace
    /// is not in the need: a reading on a card with room can exceed the need by it,
    /// up to the card ([`workspace`]).
    pub peak_runs_convolutions: bool,
    /// Notes: defaults taken, what is assumed.
    pub notes: Vec<String>,
}

impl DiffusionEstimate {
    /// What the device needs: the peak plus the reserve.
    pub fn need(&self) -> u64 {
        self.device_bytes.saturating_add(self.reserve)
    }
    /// The assumed bytes (eager scores, text encoders' forward), half of which is
    /// the verdict's margin, as for language models.
    pub fn assumed(&self) -> u64 {
        self.eager_scores.saturating_add(self.text_encode)
    }
}

/// The bytes per element of a class's `_keep_in_fp32_modules` linears (T5's `wo`):
/// fp32 under float16, as the dtype otherwise. Under a quantizer transformers never
/// converts them (`HfQuantizer.get_modules_to_not_convert` adds
/// `keep_in_fp32_modules` to the skipped modules, quantizers/base.py), and keeps them
/// in fp32 whatever the dtype when the quantizer says `use_keep_in_fp32_modules =
/// True` (bitsandbytes' 4-bit and 8-bit: quantizer_bnb_4bit.py, quantizer_bnb_8bit.py;
/// the test is in `PreTrainedModel.from_pretrained`, modeling_utils.py). Other
/// quantizers leave them in the dtype; `int8` names both bitsandbytes' LLM.int8 and
/// torchao's int8 weight-only, and is counted as bitsandbytes' (the larger).
fn fp32_if_fp16_bytes(dtype: Dtype, format: Option<StorageFormat>) -> u64 {
    let bnb = matches!(
        format,
        Some(StorageFormat::Bnb4 { .. } | StorageFormat::Int8)
    );
    if matches!(dtype, Dtype::F16) || bnb {
        4
    } else {
        dtype.bytes()
    }
}

fn bytes_of(c: &Counts, dtype: Dtype, format: Option<StorageFormat>) -> Result<u64, EstimateError> {
    let elt = dtype.bytes();
    let mut total: u64 = 0;
    let add = |t: &mut u64, n: u64| -> Result<(), EstimateError> {
        *t = t
            .checked_add(n)
            .ok_or_else(|| EstimateError::invalid("pipeline", "weights overflow".to_string()))?;
        Ok(())
    };
    for l in &c.linears {
        let one = match format {
            None => l.out.saturating_mul(l.inp).saturating_mul(elt),
            Some(f) => f.matrix_bytes(l.out, l.inp)?.bytes,
        };
        add(&mut total, one.saturating_mul(l.count))?;
    }
    let e = fp32_if_fp16_bytes(dtype, format);
    for l in &c.fp32_if_fp16 {
        let one = l.out.saturating_mul(l.inp).saturating_mul(e);
        add(&mut total, one.saturating_mul(l.count))?;
    }
    add(&mut total, c.dense.saturating_mul(elt))?;
    add(&mut total, c.fp32.saturating_mul(4))?;
    add(&mut total, c.buffers.saturating_mul(elt))?;
    add(&mut total, c.fixed_buffer_bytes)?;
    Ok(total)
}

/// Bytes of a component under layerwise casting ([`count::Layerwise`]): the cast
/// modules in fp8 (one byte), what it skips in `dtype`, the fp32 modules and the
/// buffers as loaded.
fn layerwise_bytes(c: &Counts, l: Layerwise, dtype: Dtype) -> u64 {
    let cast = c.parameters().saturating_sub(c.fp32).saturating_sub(l.kept);
    [
        cast,
        l.kept.saturating_mul(dtype.bytes()),
        c.fp32.saturating_mul(4),
        c.buffers.saturating_mul(dtype.bytes()),
        c.fixed_buffer_bytes,
    ]
    .iter()
    .fold(0, |a, n| a.saturating_add(*n))
}

fn cfg_u(v: &Value, key: &str, default: u64) -> u64 {
    v.get(key)
        .and_then(Value::as_u64)
        .unwrap_or(default)
        .min(count::MAX_DIM)
}

/// Estimates a pipeline run.
pub fn estimate(p: &Pipeline, w: &Workload) -> Result<DiffusionEstimate, EstimateError> {
    let bad = |f: &'static str, why: String| EstimateError::invalid(f, why);
    for (f, v, max) in [
        ("height", w.height, 16384),
        ("width", w.width, 16384),
        ("frames", w.frames, 4096),
        ("batch", w.batch, 256),
    ] {
        if v == 0 || v > max {
            return Err(bad(f, format!("{v}: from 1 to {max}")));
        }
    }
    let mut notes = Vec::new();
    let elt = w.dtype.bytes();
    let denoisers: Vec<&Component> = p
        .components
        .iter()
        .filter(|c| c.class.role() == Role::Denoiser)
        .collect();
    let den = denoisers[0];
    let vae = p.components.iter().find(|c| c.class.role() == Role::Vae);
    // The VAE's spatial and temporal scale factors (the pipelines' `vae_scale_factor`).
    let (scale, tscale) = match vae {
        Some(v) if v.class == Class::AutoencoderKl => {
            let n = v
                .config
                .get("block_out_channels")
                .and_then(Value::as_array)
                .map_or(4, Vec::len);
            (1u64 << (n.saturating_sub(1)).min(6), 1)
        }
        Some(v) => {
            let t = v
                .config
                .get("temperal_downsample")
                .and_then(Value::as_array)
                .map_or(2, |a| {
                    a.iter().filter(|x| x.as_bool() == Some(true)).count()
                });
            let n = v
                .config
                .get("dim_mult")
                .and_then(Value::as_array)
                .map_or(4, Vec::len);
            (1u64 << n.saturating_sub(1).min(6), 1u64 << t.min(6))
        }
        None => (8, 1),
    };
    let lat_h = w.height / scale;
    let lat_w = w.width / scale;
    if lat_h == 0 || lat_w == 0 {
        return Err(bad(
            "height",
            format!(
                "{}×{} is smaller than the VAE's factor {scale}",
                w.height, w.width
            ),
        ));
    }
    let lat_f = if den.class == Class::Wan {
        (w.frames - 1) / tscale + 1
    } else {
        1
    };
    if den.class != Class::Wan && w.frames > 1 {
        notes.push(format!("{} makes images: frames ignored", p.class_name));
    }
    // Text tokens: each pipeline's default `max_sequence_length` (diffusers 0.42.1
    // __call__ signatures), CLIP's 77.
    let text = w.text_tokens.unwrap_or(match den.class {
        Class::Sd3 => 77 + 256,
        Class::Flux => 512,
        Class::Wan => 512,
        _ => 77,
    });
    let cfg_default = !matches!(den.class, Class::Flux);
    let guidance = match w.guidance.unwrap_or(cfg_default) {
        false => Guidance::Off,
        true => Guidance::of_pipeline(&p.class_name, den.class),
    };
    if w.guidance.is_none() {
        notes.push(match den.class {
            Class::Flux => "guidance: off by default (FLUX.1's guidance is distilled; --cfg on stands for true_cfg_scale > 1 with a negative prompt: two calls)".into(),
            _ => format!("guidance: on by default ({})", guidance.words()),
        });
    }
    let (batch, calls) = match guidance {
        Guidance::Off => (w.batch, 1),
        Guidance::Batched => (w.batch.saturating_mul(2), 1),
        Guidance::TwoPasses => (w.batch, 2),
    };
    let call = activations::Call {
        batch,
        lat_h,
        lat_w,
        lat_f,
        text,
        elt,
    };
    let dc = &den.config;
    // Inputs of the call: latents and text states (and pooled / ids: small, within the
    // trace's count of the inputs but a few kilobytes).
    let lat_c = match den.class {
        Class::Flux => cfg_u(dc, "in_channels", 64) / 4,
        _ => cfg_u(dc, "in_channels", 4),
    };
    let text_dim = match den.class {
        Class::Unet2d => cfg_u(dc, "cross_attention_dim", 768),
        Class::Wan => cfg_u(dc, "text_dim", 4096),
        _ => cfg_u(dc, "joint_attention_dim", 4096),
    };
    let inputs = batch.saturating_mul(elt).saturating_mul(
        lat_c
            .saturating_mul(lat_h)
            .saturating_mul(lat_w)
            .saturating_mul(lat_f)
            .saturating_add(text.saturating_mul(text_dim)),
    );
    let heads = cfg_u(dc, "num_attention_heads", 1).max(1);
    let hd = cfg_u(dc, "attention_head_dim", 64);
    let (act, scores) = match den.class {
        Class::Unet2d => {
            let ch: Vec<u64> = dc
                .get("block_out_channels")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default();
            let n = ch.len();
            let lpb =
                count::Cfg::new(dc, "UNet2DConditionModel").list("layers_per_block", n, Some(2))?;
            let kinds: Vec<bool> = dc
                .get("down_block_types")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|t| t.as_str().is_some_and(|t| t.starts_with("CrossAttn")))
                        .collect()
                })
                .unwrap_or_default();
            let a = activations::unet(&call, &ch, &lpb, &kinds, inputs);
            // Eager: the highest-resolution self-attention's scores (heads from
            // `attention_head_dim`, which these configs use as the head count).
            let level = kinds.iter().position(|k| *k).unwrap_or(0) as u32;
            let q = (lat_h >> level)
                .max(1)
                .saturating_mul((lat_w >> level).max(1));
            let h = count::Cfg::new(dc, "UNet2DConditionModel").list(
                "attention_head_dim",
                n,
                Some(8),
            )?[level as usize];
            (a, activations::eager_scores(batch, h, q, q, elt))
        }
        Class::Sd3 => {
            let p2 = cfg_u(dc, "patch_size", 2);
            let dual = dc
                .get("dual_attention_layers")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
            let a = activations::sd3(&call, heads.saturating_mul(hd), p2, dual, inputs);
            let s = (lat_h / p2.max(1))
                .saturating_mul(lat_w / p2.max(1))
                .saturating_add(text);
            (a, activations::eager_scores(batch, heads, s, s, elt))
        }
        Class::Flux => {
            let a = activations::flux(&call, heads.saturating_mul(hd), hd, inputs);
            let s = (lat_h / 2).saturating_mul(lat_w / 2).saturating_add(text);
            (a, activations::eager_scores(batch, heads, s, s, elt))
        }
        Class::Wan => {
            let ps = count::Cfg::new(dc, "WanTransformer3DModel").list("patch_size", 3, None)?;
            let a = activations::wan(
                &call,
                heads.saturating_mul(hd),
                cfg_u(dc, "ffn_dim", 13824),
                hd,
                [ps[0], ps[1], ps[2]],
                inputs,
            );
            let s = lat_f
                .div_ceil(ps[0].max(1))
                .saturating_mul(lat_h / ps[1].max(1))
                .saturating_mul(lat_w / ps[2].max(1));
            (a, activations::eager_scores(batch, heads, s, s, elt))
        }
        _ => (inputs, 0),
    };
    let scores = if w.eager { scores } else { 0 };
    // Layerwise casting: the denoiser's castable modules stored in fp8, each cast to
    // the dtype around its own forward, so the largest one's copy adds to the call.
    let layerwise = if w.layerwise {
        if w.denoiser_format.is_some() {
            return Err(bad(
                "layerwise-casting",
                "casts the denoiser's own dtype to fp8: it does not combine with --format".into(),
            ));
        }
        if w.offload == Offload::Sequential {
            return Err(bad(
                "layerwise-casting",
                "with sequential offload is not modelled (model offload is)".into(),
            ));
        }
        let l = den.counts.layerwise.ok_or_else(|| {
            bad(
                "layerwise-casting",
                format!(
                    "{}: the modules its layerwise casting skips are not mapped",
                    den.class_name
                ),
            )
        })?;
        notes.push(format!(
            "layerwise casting: the denoiser's linear and convolution layers stored in fp8, {} parameters it skips by name (norms, modulations, embedders, proj_out) kept in {}; the largest layer's copy in the dtype while it runs ({} parameters) is added to the call (assumed: at most that at the peak)",
            group_digits(l.kept),
            w.dtype.name(),
            group_digits(l.largest)
        ));
        Some(l)
    } else {
        None
    };
    let upcast = layerwise.map_or(0, |l| l.largest.saturating_mul(elt));
    // bitsandbytes' LLM.int8 linear at inference (bitsandbytes 0.46.0 to 0.50.1
    // `autograd/_functions.py` `MatMul8bitLt.forward`, `backends/cuda/ops.py`
    // `int8_vectorwise_quant`, `int8_mm_dequant`, `backends/default/ops.py`
    // `int8_mixed_scaled_mm` / `int8_scaled_mm`), where a 16-bit linear holds its
    // output alone: first the input quantised — its fp16 copy (none in fp16), the int8
    // rows, an fp32 scale a row and the outlier search's fp16 and bool copies
    // (`A.abs() >= threshold`), `q × in + 4` bytes a row, q = 6 (4 in fp16) —, then the
    // int8 rows and scales beside the int32 product (four bytes an output) and its
    // fp16 dequantisation while it is cast to the dtype (none in fp16), `in + 4 + q ×
    // out`: the larger, at the widest linear over every row of the call (assumed: an
    // upper bound, whichever linear runs at the peak; outlier columns not counted). The
    // transformers' rows are uniform (FLUX's joint sequence, SD3's image or text
    // stream, Wan's video tokens); a UNet's linears see a row count per level, which
    // is not carried.
    let int8_matmul = if matches!(w.denoiser_format, Some(StorageFormat::Int8)) {
        let rows = match den.class {
            Class::Flux => Some((lat_h / 2).saturating_mul(lat_w / 2).saturating_add(text)),
            Class::Sd3 => {
                let p2 = cfg_u(dc, "patch_size", 2).max(1);
                Some((lat_h / p2).saturating_mul(lat_w / p2).max(text))
            }
            Class::Wan => {
                let ps =
                    count::Cfg::new(dc, "WanTransformer3DModel").list("patch_size", 3, None)?;
                Some(
                    lat_f
                        .div_ceil(ps[0].max(1))
                        .saturating_mul(lat_h / ps[1].max(1))
                        .saturating_mul(lat_w / ps[2].max(1)),
                )
            }
            _ => None,
        };
        let widest = den
            .counts
            .linears
            .iter()
            .map(|l| {
                let q = if w.dtype == Dtype::F16 { 4 } else { 6 };
                let quantise = l.inp.saturating_mul(q).saturating_add(4);
                let product = l
                    .inp
                    .saturating_add(4)
                    .saturating_add(l.out.saturating_mul(q));
                quantise.max(product)
            })
            .max()
            .unwrap_or(0);
        match rows {
            Some(r) => {
                let b = r.saturating_mul(batch).saturating_mul(widest);
                notes.push(format!(
                    "int8 (bitsandbytes' LLM.int8): each linear's quantised input (int8 rows, row scales, the outlier search's copies), then its int32 product and fp16 dequantisation beside its output, {} bytes at the widest over the call's rows, added to the call (assumed: at most that at the peak; outlier columns not counted)",
                    group_digits(b)
                ));
                b
            }
            None => {
                notes.push(format!(
                    "int8 (bitsandbytes' LLM.int8): {}'s linears' int32 accumulators are not counted (its rows change from level to level)",
                    den.class_name
                ));
                0
            }
        }
    } else {
        0
    };
    let act = act.saturating_add(upcast).saturating_add(int8_matmul);
    // Weights per component.
    let mut lines = Vec::new();
    for c in &p.components {
        let fmt = match c.class.role() {
            Role::Denoiser => w.denoiser_format,
            Role::TextEncoder => w.text_format,
            _ => None,
        };
        let cast = layerwise.filter(|_| c.class.role() == Role::Denoiser);
        let bytes = match cast {
            Some(l) => layerwise_bytes(&c.counts, l, w.dtype),
            None => bytes_of(&c.counts, w.dtype, fmt)?,
        };
        let largest = match fmt {
            Some(f) => c
                .counts
                .linears
                .iter()
                .map(|l| f.matrix_bytes(l.out, l.inp).map(|t| t.bytes))
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .max()
                .unwrap_or(0),
            None => c
                .counts
                .linears
                .iter()
                .map(|l| l.out.saturating_mul(l.inp).saturating_mul(elt))
                .max()
                .unwrap_or(0),
        }
        .max(
            c.counts
                .fp32_if_fp16
                .iter()
                .map(|l| {
                    l.out
                        .saturating_mul(l.inp)
                        .saturating_mul(fp32_if_fp16_bytes(w.dtype, fmt))
                })
                .max()
                .unwrap_or(0),
        );
        lines.push(ComponentLine {
            name: c.name.clone(),
            class_name: c.class_name.clone(),
            role: c.class.role(),
            parameters: c.counts.parameters(),
            bytes,
            format: match cast {
                Some(_) => format!("fp8 layerwise ({} compute)", w.dtype.name()),
                None => fmt.map_or_else(|| w.dtype.name().to_string(), |f| f.name()),
            },
            largest_module_bytes: cast.map_or(largest, |l| l.largest),
        });
    }
    // The VAE decode.
    let (vae_decode, vae_upcast) = match vae {
        Some(v) => {
            let vcfg = &v.config;
            let upcast = matches!(w.dtype, Dtype::F16)
                && vcfg
                    .get("force_upcast")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
                && p.class_name.starts_with("StableDiffusionXL");
            let velt = if upcast { 4 } else { elt };
            let vb = if w.vae_slicing { 1 } else { w.batch };
            let peak = if v.class == Class::AutoencoderKl {
                let ch: Vec<u64> = vcfg
                    .get("block_out_channels")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_u64).collect())
                    .unwrap_or_default();
                let sample = cfg_u(vcfg, "sample_size", 512);
                let tiled = w.vae_tiling && (w.height > sample || w.width > sample);
                if tiled {
                    notes.push(format!("VAE tiling: tiles of {sample}×{sample} pixels decoded one at a time (assumed: one tile's peak plus every decoded tile and the output)"));
                    let stride = sample - sample / 4;
                    let tiles = w
                        .height
                        .div_ceil(stride)
                        .saturating_mul(w.width.div_ceil(stride));
                    activations::vae_kl(vb, sample, sample, &ch, velt)
                        .saturating_add(
                            tiles
                                .saturating_mul(3 * sample * sample)
                                .saturating_mul(vb)
                                .saturating_mul(velt),
                        )
                        .saturating_add(
                            3u64.saturating_mul(w.height)
                                .saturating_mul(w.width)
                                .saturating_mul(w.batch)
                                .saturating_mul(velt),
                        )
                } else {
                    activations::vae_kl(vb, w.height, w.width, &ch, velt)
                }
            } else {
                if w.vae_tiling {
                    notes.push("VAE tiling of the Wan VAE is not modelled: the untiled decode is counted (the safe side)".into());
                }
                let base = cfg_u(vcfg, "decoder_base_dim", cfg_u(vcfg, "base_dim", 96));
                let k = count::Cfg::new(vcfg, "AutoencoderKLWan");
                let mult = k.list("dim_mult", 0, None)?;
                let nres = cfg_u(vcfg, "num_res_blocks", 2);
                let z = cfg_u(vcfg, "z_dim", 16);
                // `WanDecoder3d`'s dims: dim_mult's last, then dim_mult reversed.
                let dd: Vec<u64> = mult
                    .last()
                    .into_iter()
                    .chain(mult.iter().rev())
                    .map(|m| base.saturating_mul(*m))
                    .collect();
                let tup: Vec<bool> = k
                    .bools("temperal_downsample")
                    .unwrap_or_else(|_| vec![false, true, true])
                    .into_iter()
                    .rev()
                    .collect();
                let frames = (lat_f - 1) * tscale + 1;
                activations::vae_wan(vb, (w.height, w.width, frames), z, &dd, &tup, nres, velt)
            };
            let weights = bytes_of(&v.counts, w.dtype, None)?;
            let extra = if upcast {
                notes.push("the fp16 VAE is upcast to fp32 for the decode (force_upcast in StableDiffusionXLPipeline)".into());
                bytes_of(&v.counts, Dtype::F32, None)?.saturating_sub(weights)
            } else {
                0
            };
            (peak, extra)
        }
        None => (0, 0),
    };
    // Text encoders' forward: one layer's feed-forward over the prompt (assumed).
    let text_encode = p
        .components
        .iter()
        .filter(|c| c.class.role() == Role::TextEncoder)
        .map(|c| {
            let d = cfg_u(&c.config, "hidden_size", cfg_u(&c.config, "d_model", 768));
            let ff = cfg_u(
                &c.config,
                "intermediate_size",
                cfg_u(&c.config, "d_ff", 3072),
            );
            let t = if matches!(c.class, Class::T5Encoder | Class::Umt5Encoder) {
                text.min(512)
            } else {
                77
            };
            let b = if guidance == Guidance::Off {
                w.batch
            } else {
                w.batch.saturating_mul(2)
            };
            b.saturating_mul(t)
                .saturating_mul(d.saturating_mul(4).saturating_add(ff.saturating_mul(3)))
                .saturating_mul(elt)
        })
        .max()
        .unwrap_or(0);
    // Phases: (name, the component on the device in it, bytes beyond weights).
    let all: u64 = lines.iter().map(|l| l.bytes).fold(0, u64::saturating_add);
    let den_act = act.saturating_add(scores);
    let phases: Vec<(&str, u64, u64, u64)> = {
        let mut v = Vec::new();
        for l in &lines {
            let (phase, extra, extra_w) = match l.role {
                Role::Denoiser => ("denoising steps", den_act, 0),
                Role::Vae => ("VAE decode", vae_decode, vae_upcast),
                Role::TextEncoder => ("prompt encoding", text_encode, 0),
                Role::SafetyChecker => ("safety check", 0, 0),
            };
            v.push((
                phase,
                l.bytes.saturating_add(extra_w),
                extra,
                l.largest_module_bytes,
            ));
        }
        v
    };
    // Every component resident: the phase with the most beyond the weights sets the
    // peak (the VAE's fp32 copy, when it is upcast, counted with its decode).
    let none_peak = all.saturating_add(
        den_act
            .max(vae_decode.saturating_add(vae_upcast))
            .max(text_encode),
    );
    let model_phases = phases
        .iter()
        .map(|(_, wb, extra, _)| wb.saturating_add(*extra))
        .max()
        .unwrap_or(0);
    let seq_phases = phases
        .iter()
        .map(|(_, _, extra, largest)| largest.saturating_add(*extra))
        .max()
        .unwrap_or(0);
    // Loading: bitsandbytes' quantizers place the model they quantize on the current
    // device when no device_map is given (diffusers 0.42.1
    // `quantizers/bitsandbytes/bnb_quantizer.py` and transformers 5.23
    // `quantizers/quantizer_bnb_4bit.py`, `quantizer_bnb_8bit.py`:
    // `update_device_map`), so every such component is resident at once until the
    // offload moves it out: under offload, a peak of its own.
    let bnb = |f: Option<StorageFormat>| {
        matches!(f, Some(StorageFormat::Bnb4 { .. } | StorageFormat::Int8))
    };
    let loading: u64 = lines
        .iter()
        .filter(|l| match l.role {
            Role::Denoiser => bnb(w.denoiser_format),
            Role::TextEncoder => bnb(w.text_format),
            _ => false,
        })
        .map(|l| l.bytes)
        .fold(0, u64::saturating_add);
    if loading > 0 && w.offload != Offload::None {
        notes.push(format!(
            "loading: bitsandbytes puts each component it quantizes on the GPU (no device_map), so they are resident together until the offload moves them out: {} GiB",
            crate::units::Bytes(loading).gib_string(2)
        ));
    }
    let model_peak = model_phases.max(loading);
    let seq_peak = seq_phases.max(loading);
    // Group offloading of every denoiser (each is called on its own steps): outside its
    // call a denoiser holds nothing on the device (`GroupOffloadingHook.initialize_hook`
    // offloads every group when applied, each call's `post_forward` offloads them), the
    // other components stay resident. Not modelled under a quantised format or
    // layerwise casting.
    let group = match w.offload {
        Offload::Group(g) => g,
        _ => GroupOffload {
            blocks: Some(1),
            stream: false,
            pipeline: false,
        },
    };
    let group_resident = if layerwise.is_none() && w.denoiser_format.is_none() {
        denoisers
            .iter()
            .map(|d| group_resident(&d.counts, group, w.dtype))
            .try_fold(0u64, |a, r| r.map(|r| a.max(r)))
    } else {
        None
    };
    let den_all: u64 = lines
        .iter()
        .filter(|l| l.role == Role::Denoiser)
        .map(|l| l.bytes)
        .fold(0, u64::saturating_add);
    let rest_phase = vae_decode.saturating_add(vae_upcast).max(text_encode);
    // `pipe.enable_group_offload`: every component holds only what it holds while it
    // runs (`component_resident`), so each phase is its component's resident bytes
    // with the phase's activations, and the peak the largest phase. The VAE upcast to
    // fp32 (`force_upcast`) is resident in fp32. Not modelled with the text encoders
    // quantised.
    let mut group_components = Vec::new();
    let group_phases: Option<Vec<(&str, u64)>> = if group.pipeline {
        let mut v = Vec::new();
        let mut ok = group_resident.is_some() && w.text_format.is_none();
        if let Some(r) = group_resident {
            v.push(("denoising steps", r.saturating_add(den_act)));
        }
        for c in &p.components {
            let (phase, dtype, extra) = match c.class.role() {
                Role::Denoiser => {
                    if let Some(r) = component_resident(c, group, w.dtype) {
                        group_components.push((c.name.clone(), r));
                    }
                    continue;
                }
                Role::TextEncoder => ("prompt encoding", w.dtype, text_encode),
                Role::Vae if vae_upcast > 0 => ("VAE decode", Dtype::F32, vae_decode),
                Role::Vae => ("VAE decode", w.dtype, vae_decode),
                Role::SafetyChecker => ("safety check", w.dtype, 0),
            };
            match component_resident(c, group, dtype) {
                Some(r) => {
                    group_components.push((c.name.clone(), r));
                    v.push((phase, r.saturating_add(extra)));
                }
                None => ok = false,
            }
        }
        ok.then_some(v)
    } else {
        None
    };
    let group_peak = if group.pipeline {
        group_phases
            .as_ref()
            .map(|v| v.iter().map(|(_, b)| *b).max().unwrap_or(0))
    } else {
        group_resident.map(|r| {
            all.saturating_sub(den_all)
                .saturating_add(r.saturating_add(den_act).max(rest_phase))
        })
    };
    if let (Offload::Group(g), None) = (w.offload, group_peak) {
        return Err(bad(
            "offload",
            format!(
                "{}: not modelled with layerwise casting or a quantised denoiser{}",
                g.call(),
                if g.pipeline { " or text encoders" } else { "" }
            ),
        ));
    }
    if let Offload::Group(g) = w.offload {
        if g.stream && g.blocks.is_some_and(|n| n > 1) {
            notes.push("group offloading: with a stream, block level runs one block per group (diffusers warns and sets num_blocks_per_group=1)".into());
        }
        if g.stream {
            notes.push("group offloading with a stream: record_stream=False assumed (record_stream=True holds a freed group until the compute stream passes it: not bounded)".into());
        }
        if g.stream && g.blocks.is_some() {
            notes.push("host: block-level group offloading with a stream pins a copy of every group before releasing the loaded weights (low_cpu_mem_usage=False): twice the denoiser while it applies".into());
        }
        if g.stream && g.blocks.is_none() {
            notes.push("group offloading, leaf level with a stream: the two largest leaves stand for the running one and the next (at most that)".into());
        }
        if g.pipeline && g.stream && w.vae_tiling {
            notes.push("group offloading of the VAE with a stream and tiling: diffusers warns that the first decode must run untiled or small (ModelMixin.enable_group_offload); the bytes are the same".into());
        }
        if g.pipeline {
            notes.push("pipe.enable_group_offload: every component group-offloaded, each resident only while it runs (a text encoder has no nn.ModuleList at its top level: block level holds it whole; the VAE's decode holds its decoder's unmatched group and up_blocks)".into());
        }
        if denoisers.len() > 1 {
            notes.push(format!(
                "group offloading applied to each denoiser ({}), run one at a time",
                denoisers
                    .iter()
                    .map(|d| d.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    let by_mode = [
        Some(none_peak),
        Some(model_peak),
        Some(seq_peak).filter(|_| layerwise.is_none()),
        group_peak,
    ];
    // The host keeps the group-offloaded denoisers. With a stream and
    // `low_cpu_mem_usage=False` (the default) `ModuleGroup._init_cpu_param_dict` makes
    // a pinned copy of every tensor of a group when the group is built, and block level
    // builds every block group before any hook offloads one
    // (`_apply_group_offloading_block_level`): the loaded weights and their pinned
    // copies are both held while it applies.
    // Under `pipe.enable_group_offload` the host keeps every component, and the pinned
    // copies of the denoiser's and the VAE's block groups (a text encoder's one group
    // is its unmatched group, built without a stream: no pinned copy).
    let vae_all: u64 = lines
        .iter()
        .filter(|l| l.role == Role::Vae)
        .map(|l| l.bytes)
        .fold(0, u64::saturating_add);
    let group_host = match group {
        GroupOffload {
            blocks: Some(_),
            stream: true,
            pipeline: true,
        } => all.saturating_add(den_all).saturating_add(vae_all),
        GroupOffload {
            blocks: Some(_),
            stream: true,
            pipeline: false,
        } => den_all.saturating_mul(2),
        GroupOffload { pipeline: true, .. } => all,
        _ => den_all,
    };
    let (device_bytes, host_bytes) = match w.offload {
        Offload::None => (none_peak, 0),
        Offload::Model => (model_peak, all),
        Offload::Sequential => (seq_peak, all),
        Offload::Group(_) => (group_peak.unwrap_or(none_peak), group_host),
    };
    let loading_sets = loading > 0
        && match w.offload {
            Offload::None | Offload::Group(_) => false,
            Offload::Model => loading >= model_phases,
            Offload::Sequential => loading >= seq_phases,
        };
    let peak_phase = match w.offload {
        _ if loading_sets => "loading",
        Offload::None => {
            if vae_decode.saturating_add(vae_upcast) > den_act {
                "VAE decode"
            } else {
                "denoising steps"
            }
        }
        Offload::Model => phases
            .iter()
            .max_by_key(|(_, wb, extra, _)| wb.saturating_add(*extra))
            .map_or("", |p| p.0),
        Offload::Sequential => phases
            .iter()
            .max_by_key(|(_, _, extra, l)| l.saturating_add(*extra))
            .map_or("", |p| p.0),
        Offload::Group(_) if group.pipeline => group_phases
            .as_ref()
            .and_then(|v| v.iter().max_by_key(|(_, b)| *b))
            .map_or("denoising steps", |p| p.0),
        Offload::Group(_) => {
            if group_resident.unwrap_or(0).saturating_add(den_act) >= rest_phase {
                "denoising steps"
            } else if vae_decode.saturating_add(vae_upcast) >= text_encode {
                "VAE decode"
            } else {
                "prompt encoding"
            }
        }
    }
    .to_string();
    if denoisers.len() > 1 {
        notes.push(format!(
            "{} denoisers ({}): without offload all are resident; model offload holds one at a time",
            denoisers.len(),
            denoisers.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    // The peak phase's convolutions: cuDNN's workspace follows the card (workspace.rs).
    let peak_runs_convolutions = p
        .components
        .iter()
        .filter(|c| match peak_phase.as_str() {
            "VAE decode" => c.class.role() == Role::Vae,
            "denoising steps" => c.class.role() == Role::Denoiser,
            "prompt encoding" => c.class.role() == Role::TextEncoder,
            "safety check" => c.class.role() == Role::SafetyChecker,
            _ => false,
        })
        .any(|c| workspace::runs_convolutions(c.class));
    if peak_runs_convolutions {
        notes.push(workspace::note(&peak_phase));
    }
    if w.eager {
        notes.push("eager attention: the scores and their softmax (batch × heads × tokens²) are added at the denoiser's peak (assumed)".into());
    }
    if !p.without_weights.is_empty() {
        notes.push(format!("no weights: {}", p.without_weights.join(", ")));
    }
    Ok(DiffusionEstimate {
        components: lines,
        call,
        calls_per_step: calls,
        guidance,
        denoiser_activations: act,
        eager_scores: scores,
        layerwise_upcast: upcast,
        int8_matmul,
        vae_decode,
        vae_upcast,
        text_encode,
        latent: (lat_h, lat_w, lat_f),
        device_bytes,
        reserve: w.reserve,
        host_bytes,
        peak_phase,
        by_mode,
        group,
        group_resident,
        group_components,
        peak_runs_convolutions,
        notes,
    })
}

/// The verdict on a card, or on the smallest catalogue card that holds the need.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The card judged.
    pub fit: CardFit,
    /// Its verdict.
    pub verdict: Verdict,
    /// Whether the card was chosen (the smallest that fits) rather than given.
    pub chosen: bool,
}

/// One answer, judged as for language models (`fit::fit_card_reserve`: the margin is
/// half the assumed bytes; an assumed reserve widens the short side only).
pub fn answer(est: &DiffusionEstimate, card: Option<&GpuCard>) -> Option<Answer> {
    let need = est.need();
    let assumed = est.assumed() / 2;
    let judge = |c: &GpuCard| fit_card_reserve(c, need, assumed, est.reserve);
    match card {
        Some(c) => {
            let fit = judge(c);
            let verdict = Verdict::of_fit(&fit);
            Some(Answer {
                fit,
                verdict,
                chosen: false,
            })
        }
        // A Mac is judged when named, never picked (as in the headline).
        None => CATALOGUE
            .iter()
            .filter(|c| !c.unified())
            .map(judge)
            .filter(|f| Verdict::of_fit(f) == Verdict::Fits)
            .min_by_key(|f| f.capacity_bytes)
            .map(|fit| Answer {
                verdict: Verdict::of_fit(&fit),
                fit,
                chosen: true,
            }),
    }
}
