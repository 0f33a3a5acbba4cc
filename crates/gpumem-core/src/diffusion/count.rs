//! Parameters of a diffusers pipeline's components, counted from their config.json
//! module by module as the classes build them (diffusers 0.42.1, transformers 5.23).
//!
//! Each class is one function that walks its constructor: every `nn.Linear` is kept
//! as its shape (a quantised format stores those, and only those, in its layout:
//! diffusers' and transformers' bitsandbytes, GGUF and torchao quantizers replace
//! `nn.Linear` modules), every other parameter (convolutions, norms, embeddings,
//! biases) as a count in the compute dtype, the modules a class keeps in fp32
//! (`_keep_in_fp32_modules`) apart, and the buffers it registers apart.
//! `tests/diffusion.rs` holds every count equal to the module built on PyTorch's meta
//! device by diffusers itself (`tests/diffusion/oracle.py`).

use serde_json::Value;

use crate::error::EstimateError;

/// One group of linear layers of the same shape: `count` × `nn.Linear(inp, out)`
/// (the bias, if any, is counted with the dense parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linear {
    /// Output features.
    pub out: u64,
    /// Input features.
    pub inp: u64,
    /// How many such layers.
    pub count: u64,
}

/// A component's parameters and buffers by how they are stored in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// `nn.Linear` weights (a quantised format's part).
    pub linears: Vec<Linear>,
    /// Every other parameter, in the compute dtype.
    pub dense: u64,
    /// Parameters the class keeps in fp32 whatever the dtype (`_keep_in_fp32_modules`).
    pub fp32: u64,
    /// Linear weights kept in fp32 only when the dtype is fp16 (transformers' T5 `wo`,
    /// `_keep_in_fp32_modules` applies to float16 only).
    pub fp32_if_fp16: Vec<Linear>,
    /// Floating buffers cast with the module (SD3's positional table).
    pub buffers: u64,
    /// Buffers of a fixed width, bytes (CLIP's int64 `position_ids`, Wan's fp32 RoPE).
    pub fixed_buffer_bytes: u64,
    /// What diffusers' layerwise casting leaves in the load dtype, where the class's
    /// skip patterns are mapped onto its modules (`None`: not mapped).
    pub layerwise: Option<Layerwise>,
    /// Normalisation layers' parameters (GroupNorm and LayerNorm weights and biases),
    /// where a class counts them apart (within `dense`).
    pub norms: u64,
    /// The largest single linear or convolution, weight and bias.
    pub widest: u64,
    /// The second largest (the same size as `widest` when two share it).
    pub second_widest: u64,
    /// Group offloading's layout of a denoiser ([`GroupLayout`]).
    pub group: GroupLayout,
}

/// What diffusers' group offloading (huggingface/diffusers v0.42.1,
/// `src/diffusers/hooks/group_offloading.py`) groups in a denoiser, counted as the
/// class builds it.
///
/// `_apply_group_offloading_block_level` walks the model's `named_children()`: each
/// `nn.ModuleList` / `nn.Sequential` child is cut into groups of `num_blocks_per_group`
/// consecutive elements, and every other child with the model's own parameters and
/// buffers forms the "unmatched" group, hooked on the model itself (onloaded in its
/// `pre_forward`, offloaded in its `post_forward`: resident through the whole call).
/// None of the denoisers counted here sets `_group_offload_block_modules`, so no child
/// is recursed into. `_apply_group_offloading_leaf_level` makes a group of every
/// `nn.Linear`, convolution and `nn.Embedding` (`_GO_LC_SUPPORTED_PYTORCH_LAYERS`), and
/// one of each other module's own parameters and buffers, hooked on that module: an
/// ancestor's own group stays resident while its children run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupLayout {
    /// The top level's `nn.ModuleList` children in forward order, one [`Counts`] per
    /// element (the unmatched group is the rest).
    pub lists: Vec<Vec<Counts>>,
    /// Leaf level: elements in the dtype held by the own groups of the modules around
    /// the largest leaf while it runs.
    pub held: u64,
    /// Of those, elements kept in fp32 (`_keep_in_fp32_modules`).
    pub held_fp32: u64,
    /// Leaf level: another moment's elements in the dtype (a module's own group with
    /// its largest child leaf), where it can exceed the largest leaf's.
    pub other: u64,
    /// Of that moment, elements kept in fp32.
    pub other_fp32: u64,
    /// Leaf level: bytes of fixed-width buffers held around the largest leaf (CLIP's
    /// int64 `position_ids`, a buffer of `CLIPTextEmbeddings`, whose group stays
    /// resident while its `token_embedding` runs).
    pub held_fixed_bytes: u64,
    /// Block level: the unmatched group of the module the pipeline calls, where that
    /// module is not the component itself. A VAE's class names its children in
    /// `_group_offload_block_modules` (`quant_conv`, `post_quant_conv`, `encoder`,
    /// `decoder`: diffusers 0.42.1 `autoencoders/autoencoder_kl.py`,
    /// `autoencoder_kl_wan.py`), so block level recurses into each
    /// (`_apply_group_offloading_block_level`): the decoder's `up_blocks` are its
    /// [`GroupLayout::lists`] and its other children (`conv_in`, `mid_block`, the
    /// output norm and convolution) this group, hooked on the decoder and resident
    /// through its call. `None`: the component's own remainder.
    pub unmatched: Option<Box<Counts>>,
}

/// `ModelMixin.enable_layerwise_casting` (diffusers 0.42.1 `models/modeling_utils.py`;
/// `hooks/layerwise_casting.py` `_apply_layerwise_casting`, `LayerwiseCastingHook`):
/// every `nn.Linear`, convolution and `nn.Embedding` (`hooks/_common.py`
/// `_GO_LC_SUPPORTED_PYTORCH_LAYERS`) whose dotted name matches none of the skip
/// patterns — `DEFAULT_SKIP_MODULES_PATTERN` (`pos_embed`, `patch_embed`, `norm`,
/// `^proj_in$`, `^proj_out$`), the class's `_keep_in_fp32_modules` and its
/// `_skip_layerwise_casting_patterns` — is stored in the storage dtype and cast to the
/// compute dtype around its own forward (`pre_forward`, then back in `post_forward`);
/// a skipped module keeps its whole subtree in the load dtype, and so does every
/// other parameter (norms' weights, tables set on a block).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Layerwise {
    /// Parameters left in the load dtype, the fp32 ones apart ([`Counts::fp32`]).
    pub kept: u64,
    /// The largest cast module's parameters (weight and bias): its copy in the compute
    /// dtype lives through that module's forward.
    pub largest: u64,
}

/// Parameters of a linear layer with its bias: `out × inp + out`.
fn biased(out: u64, inp: u64) -> u64 {
    out.saturating_mul(inp).saturating_add(out)
}

impl Counts {
    /// One leaf module of `n` parameters, `count` times: the two largest are kept.
    fn leaf(&mut self, n: u64, count: u64) {
        if count == 0 {
            return;
        }
        if n >= self.widest {
            self.second_widest = if count > 1 { n } else { self.widest };
            self.widest = n;
        } else if n > self.second_widest {
            self.second_widest = n;
        }
    }
    /// Adds `b`, one element of a top-level `nn.ModuleList` (the list `list` in
    /// forward order), counted apart.
    fn element(&mut self, list: usize, b: Counts) {
        self.merge(&b);
        while self.group.lists.len() <= list {
            self.group.lists.push(Vec::new());
        }
        self.group.lists[list].push(b);
    }
    /// Adds every parameter and buffer of `b` (its group layout aside).
    fn merge(&mut self, b: &Counts) {
        self.linears.extend(b.linears.iter().copied());
        self.fp32_if_fp16.extend(b.fp32_if_fp16.iter().copied());
        self.dense = self.dense.saturating_add(b.dense);
        self.fp32 = self.fp32.saturating_add(b.fp32);
        self.buffers = self.buffers.saturating_add(b.buffers);
        self.fixed_buffer_bytes = self.fixed_buffer_bytes.saturating_add(b.fixed_buffer_bytes);
        self.norms = self.norms.saturating_add(b.norms);
        self.leaf(b.widest, 1);
        self.leaf(b.second_widest, 1);
    }
    fn add(&mut self, n: u64) {
        self.dense = self.dense.saturating_add(n);
    }
    fn add_fp32(&mut self, n: u64) {
        self.fp32 = self.fp32.saturating_add(n);
    }
    fn lin(&mut self, out: u64, inp: u64, bias: bool) {
        self.lin_n(out, inp, bias, 1);
    }
    fn lin_n(&mut self, out: u64, inp: u64, bias: bool, count: u64) {
        if count == 0 {
            return;
        }
        self.linears.push(Linear { out, inp, count });
        if bias {
            self.add(out.saturating_mul(count));
        }
        self.leaf(
            if bias {
                biased(out, inp)
            } else {
                out.saturating_mul(inp)
            },
            count,
        );
    }
    /// A convolution of `k` kernel elements.
    fn conv(&mut self, out: u64, inp: u64, k: u64, bias: bool) {
        let n = out
            .saturating_mul(inp)
            .saturating_mul(k)
            .saturating_add(if bias { out } else { 0 });
        self.add(n);
        self.leaf(n, 1);
    }
    /// A normalisation layer's `n` parameters.
    fn norm(&mut self, n: u64) {
        self.add(n);
        self.norms = self.norms.saturating_add(n);
    }
    /// A linear kept in fp32 (weight and bias).
    fn lin_fp32(&mut self, out: u64, inp: u64) {
        self.add_fp32(out.saturating_mul(inp).saturating_add(out));
    }
    /// Every parameter, whatever its storage.
    pub fn parameters(&self) -> u64 {
        let lin: u64 = self
            .linears
            .iter()
            .chain(&self.fp32_if_fp16)
            .fold(0u64, |a, l| {
                a.saturating_add(l.out.saturating_mul(l.inp).saturating_mul(l.count))
            });
        lin.saturating_add(self.dense).saturating_add(self.fp32)
    }
    /// The largest single linear weight, in elements (sequential offload's unit).
    pub fn largest_linear(&self) -> u64 {
        self.linears
            .iter()
            .chain(&self.fp32_if_fp16)
            .map(|l| l.out.saturating_mul(l.inp))
            .max()
            .unwrap_or(0)
    }
}

/// The largest dimension a config may give (every width, count and size): with
/// [`MAX_LAYERS`] it keeps every product far below `u64::MAX`.
pub const MAX_DIM: u64 = 1 << 20;
/// The most layers (or blocks of a level) a config may give.
pub const MAX_LAYERS: u64 = 1024;

/// Reads a config's keys, with the class's defaults.
pub(crate) struct Cfg<'a> {
    v: &'a Value,
    class: &'a str,
}

impl<'a> Cfg<'a> {
    pub(crate) fn new(v: &'a Value, class: &'a str) -> Cfg<'a> {
        Cfg { v, class }
    }
    fn bad(&self, key: &str, why: &str) -> EstimateError {
        EstimateError::invalid("pipeline", format!("{}: `{key}` {why}", self.class))
    }
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.v.get(key).filter(|v| !v.is_null())
    }
    pub(crate) fn u(&self, key: &str, default: Option<u64>) -> Result<u64, EstimateError> {
        match self.get(key) {
            Some(v) => v
                .as_u64()
                .filter(|n| *n <= MAX_DIM)
                .ok_or_else(|| self.bad(key, "is not a whole number up to 1 048 576")),
            None => default.ok_or_else(|| self.bad(key, "is missing")),
        }
    }
    /// A count of layers or blocks, at most [`MAX_LAYERS`].
    pub(crate) fn layers(&self, key: &str, default: Option<u64>) -> Result<u64, EstimateError> {
        let n = self.u(key, default)?;
        if n > MAX_LAYERS {
            return Err(self.bad(key, "is more than 1 024 layers"));
        }
        Ok(n)
    }
    /// `a × b`, refused past [`MAX_DIM`] (a width built from two keys).
    pub(crate) fn times(&self, key: &str, a: u64, b: u64) -> Result<u64, EstimateError> {
        a.checked_mul(b)
            .filter(|n| *n <= MAX_DIM)
            .ok_or_else(|| self.bad(key, "gives a width over 1 048 576"))
    }
    pub(crate) fn b(&self, key: &str, default: bool) -> Result<bool, EstimateError> {
        match self.get(key) {
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.bad(key, "is not true or false")),
            None => Ok(default),
        }
    }
    pub(crate) fn s(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(Value::as_str)
    }
    /// A list of whole numbers, or one number repeated `n` times.
    pub(crate) fn list(
        &self,
        key: &str,
        n: usize,
        default: Option<u64>,
    ) -> Result<Vec<u64>, EstimateError> {
        match self.get(key) {
            Some(Value::Array(a)) => {
                if a.len() > 64 {
                    return Err(self.bad(key, "has more than 64 entries"));
                }
                let v: Option<Vec<u64>> = a
                    .iter()
                    .map(|x| x.as_u64().filter(|n| *n <= MAX_DIM))
                    .collect();
                let v = v.ok_or_else(|| self.bad(key, "is not a list of whole numbers"))?;
                if n != 0 && v.len() != n {
                    return Err(self.bad(key, &format!("has {} entries, not {n}", v.len())));
                }
                Ok(v)
            }
            Some(_) => Ok(vec![self.u(key, None)?; n]),
            None => Ok(vec![default.ok_or_else(|| self.bad(key, "is missing"))?; n]),
        }
    }
    pub(crate) fn strings(&self, key: &str) -> Result<Vec<&'a str>, EstimateError> {
        match self.get(key) {
            Some(Value::Array(a)) if a.len() <= 64 => a
                .iter()
                .map(|x| {
                    x.as_str()
                        .ok_or_else(|| self.bad(key, "is not a list of names"))
                })
                .collect(),
            _ => Err(self.bad(key, "is missing or not a list of names")),
        }
    }
    pub(crate) fn bools(&self, key: &str) -> Result<Vec<bool>, EstimateError> {
        match self.get(key) {
            Some(Value::Array(a)) if a.len() <= 64 => a
                .iter()
                .map(|x| {
                    x.as_bool()
                        .ok_or_else(|| self.bad(key, "is not a list of true/false"))
                })
                .collect(),
            _ => Err(self.bad(key, "is missing or not a list of true/false")),
        }
    }
}

/// diffusers' `ResnetBlock2D` (resnet.py): two GroupNorms, two 3×3 convolutions, the
/// time embedding's projection when the block takes one, a 1×1 shortcut when the
/// channels change.
fn resnet2d(c: &mut Counts, inp: u64, out: u64, temb: Option<u64>) {
    c.norm(2 * inp);
    c.conv(out, inp, 9, true);
    if let Some(t) = temb {
        c.lin(out, t, true);
    }
    c.norm(2 * out);
    c.conv(out, out, 9, true);
    if inp != out {
        c.conv(out, inp, 1, true);
    }
}

/// `Transformer2DModel` (transformers/transformer_2d.py) with `BasicTransformerBlock`s
/// (attention.py): GroupNorm, proj_in/out (linear or 1×1 conv), per layer self- and
/// cross-attention (q/k/v without bias, out with), three LayerNorms and a GEGLU
/// feed-forward of 4 × dim.
fn transformer2d(c: &mut Counts, dim: u64, layers: u64, cross: u64, linear_proj: bool) {
    c.norm(2 * dim);
    for _ in 0..2 {
        if linear_proj {
            c.lin(dim, dim, true);
        } else {
            c.conv(dim, dim, 1, true);
        }
    }
    let inner = 4 * dim;
    c.norm(layers * 6 * dim);
    c.lin_n(dim, dim, false, 3 * layers);
    c.lin_n(dim, dim, true, layers);
    c.lin_n(dim, dim, false, layers);
    c.lin_n(dim, cross, false, 2 * layers);
    c.lin_n(dim, dim, true, layers);
    c.lin_n(2 * inner, dim, true, layers);
    c.lin_n(dim, inner, true, layers);
}

/// `UNet2DConditionModel` (unets/unet_2d_condition.py) with the block types SD 1.x,
/// SD 2.x and SDXL use.
pub fn unet2d(v: &Value) -> Result<Counts, EstimateError> {
    let k = Cfg::new(v, "UNet2DConditionModel");
    let mut c = Counts::default();
    let down = k.strings("down_block_types")?;
    let up = k.strings("up_block_types")?;
    let n = down.len();
    let ch = k.list("block_out_channels", n, None)?;
    if n == 0 || up.len() != n {
        return Err(k.bad(
            "up_block_types",
            "must have as many entries as down_block_types",
        ));
    }
    for t in down.iter().chain(&up) {
        if !matches!(
            *t,
            "CrossAttnDownBlock2D" | "DownBlock2D" | "CrossAttnUpBlock2D" | "UpBlock2D"
        ) {
            return Err(k.bad(
                "down_block_types",
                &format!("names {t}, a block gpumem does not count"),
            ));
        }
    }
    let lpb = k.list("layers_per_block", n, Some(2))?;
    let tlpb = k.list("transformer_layers_per_block", n, Some(1))?;
    let cross = k.u("cross_attention_dim", Some(1280))?;
    let lin_proj = k.b("use_linear_projection", false)?;
    let kin = k.u("conv_in_kernel", Some(3))?.min(64);
    let kout = k.u("conv_out_kernel", Some(3))?.min(64);
    let inc = k.u("in_channels", Some(4))?;
    let outc = k.u("out_channels", Some(4))?;
    for key in [
        "class_embed_type",
        "encoder_hid_dim",
        "time_cond_proj_dim",
        "num_class_embeds",
    ] {
        if k.get(key).is_some() {
            return Err(k.bad(key, "is set: a UNet variant gpumem does not count"));
        }
    }
    if k.b("dual_cross_attention", false)? || k.b("only_cross_attention", false)? {
        return Err(k.bad(
            "dual_cross_attention",
            "is set: a UNet variant gpumem does not count",
        ));
    }
    if !matches!(
        k.s("mid_block_type").unwrap_or("UNetMidBlock2DCrossAttn"),
        "UNetMidBlock2DCrossAttn"
    ) {
        return Err(k.bad("mid_block_type", "names a mid block gpumem does not count"));
    }
    if !matches!(
        k.s("time_embedding_type").unwrap_or("positional"),
        "positional"
    ) {
        return Err(k.bad("time_embedding_type", "is not `positional`"));
    }
    let c0 = ch[0];
    let temb = k.u("time_embedding_dim", Some(4 * c0))?;
    c.conv(c0, inc, kin * kin, true);
    c.lin(temb, c0, true);
    c.lin(temb, temb, true);
    match k.s("addition_embed_type") {
        None => {}
        Some("text_time") => {
            let p = k.u("projection_class_embeddings_input_dim", None)?;
            c.lin(temb, p, true);
            c.lin(temb, temb, true);
        }
        Some(_) => return Err(k.bad("addition_embed_type", "is not `text_time`")),
    }
    // `down_blocks` and `up_blocks` are the top level's `nn.ModuleList`s; `mid_block`
    // (a `UNetMidBlock2DCrossAttn`) is in group offloading's unmatched group.
    let mut out = c0;
    for (i, t) in down.iter().enumerate() {
        let inp = out;
        out = ch[i];
        let mut e = Counts::default();
        for j in 0..lpb[i] {
            resnet2d(&mut e, if j == 0 { inp } else { out }, out, Some(temb));
        }
        if t.starts_with("CrossAttn") {
            for _ in 0..lpb[i] {
                transformer2d(&mut e, out, tlpb[i], cross, lin_proj);
            }
        }
        if i + 1 < n {
            e.conv(out, out, 9, true);
        }
        c.element(0, e);
    }
    let last = ch[n - 1];
    resnet2d(&mut c, last, last, Some(temb));
    resnet2d(&mut c, last, last, Some(temb));
    transformer2d(&mut c, last, tlpb[n - 1], cross, lin_proj);
    let rch: Vec<u64> = ch.iter().rev().copied().collect();
    let rlpb: Vec<u64> = lpb.iter().rev().copied().collect();
    let rt: Vec<u64> = match k.get("reverse_transformer_layers_per_block") {
        Some(_) => k.list("reverse_transformer_layers_per_block", n, None)?,
        None => tlpb.iter().rev().copied().collect(),
    };
    let mut out = rch[0];
    for (i, t) in up.iter().enumerate() {
        let prev = out;
        out = rch[i];
        let inp = rch[(i + 1).min(n - 1)];
        let layers = rlpb[i] + 1;
        let mut e = Counts::default();
        for j in 0..layers {
            let skip = if j + 1 == layers { inp } else { out };
            let rin = if j == 0 { prev } else { out };
            resnet2d(&mut e, rin + skip, out, Some(temb));
        }
        if t.starts_with("CrossAttn") {
            for _ in 0..layers {
                transformer2d(&mut e, out, rt[i], cross, lin_proj);
            }
        }
        if i + 1 < n {
            e.conv(out, out, 9, true);
        }
        c.element(1, e);
    }
    c.norm(2 * c0);
    c.conv(outc, c0, kout * kout, true);
    // Layerwise casting (`_skip_layerwise_casting_patterns`: `norm`): no castable
    // layer's name matches a pattern (`proj_in` and `proj_out` are nested), so what
    // stays in the load dtype is the GroupNorms and LayerNorms.
    c.layerwise = Some(Layerwise {
        kept: c.norms,
        largest: c.widest,
    });
    Ok(c)
}

/// The attention of diffusers' VAE mid block (`Attention` with a GroupNorm, biased
/// q/k/v/out).
fn vae_attention(c: &mut Counts, dim: u64) {
    c.add(2 * dim);
    c.lin_n(dim, dim, true, 4);
}

/// `AutoencoderKL` (autoencoders/autoencoder_kl.py, vae.py `Encoder` / `Decoder`).
pub fn autoencoder_kl(v: &Value) -> Result<Counts, EstimateError> {
    let k = Cfg::new(v, "AutoencoderKL");
    let mut c = Counts::default();
    let down = k.strings("down_block_types")?;
    let n = down.len();
    let ch = k.list("block_out_channels", n, None)?;
    if n == 0 || ch.is_empty() {
        return Err(k.bad("block_out_channels", "is empty"));
    }
    let lpb = k.layers("layers_per_block", Some(1))?;
    let lat = k.u("latent_channels", Some(4))?;
    let inc = k.u("in_channels", Some(3))?;
    let outc = k.u("out_channels", Some(3))?;
    let attn = k.b("mid_block_add_attention", true)?;
    // Encoder.
    c.conv(ch[0], inc, 9, true);
    let mut out = ch[0];
    for (i, &c_i) in ch.iter().enumerate() {
        let inp = out;
        out = c_i;
        for j in 0..lpb {
            resnet2d(&mut c, if j == 0 { inp } else { out }, out, None);
        }
        if i + 1 < n {
            c.conv(out, out, 9, true);
        }
    }
    let last = ch[n - 1];
    resnet2d(&mut c, last, last, None);
    resnet2d(&mut c, last, last, None);
    if attn {
        vae_attention(&mut c, last);
    }
    c.add(2 * last);
    c.conv(2 * lat, last, 9, true);
    if k.b("use_quant_conv", true)? {
        c.conv(2 * lat, 2 * lat, 1, true);
    }
    if k.b("use_post_quant_conv", true)? {
        c.conv(lat, lat, 1, true);
    }
    // Decoder: its `up_blocks` apart, the rest its unmatched group ([`GroupLayout`]).
    let mut rest = Counts::default();
    rest.conv(last, lat, 9, true);
    resnet2d(&mut rest, last, last, None);
    resnet2d(&mut rest, last, last, None);
    if attn {
        vae_attention(&mut rest, last);
    }
    let mut out = last;
    for i in 0..n {
        let prev = out;
        out = ch[n - 1 - i];
        let mut up = Counts::default();
        for j in 0..=lpb {
            resnet2d(&mut up, if j == 0 { prev } else { out }, out, None);
        }
        if i + 1 < n {
            up.conv(out, out, 9, true);
        }
        c.element(0, up);
    }
    rest.add(2 * ch[0]);
    rest.conv(outc, ch[0], 9, true);
    c.merge(&rest);
    c.group.unmatched = Some(Box::new(rest));
    Ok(c)
}

/// `TimestepEmbedding` / `PixArtAlphaTextProjection`: two biased linears.
fn mlp2(c: &mut Counts, inp: u64, dim: u64) {
    c.lin(dim, inp, true);
    c.lin(dim, dim, true);
}

/// `SD3Transformer2DModel` (transformers/transformer_sd3.py, attention.py
/// `JointTransformerBlock`): SD3, SD3.5 Medium (dual attention layers) and Large.
pub fn sd3(v: &Value) -> Result<Counts, EstimateError> {
    let k = Cfg::new(v, "SD3Transformer2DModel");
    let mut c = Counts::default();
    let heads = k.u("num_attention_heads", Some(18))?;
    let hd = k.u("attention_head_dim", Some(64))?;
    let d = k.times("attention_head_dim", heads, hd)?;
    let layers = k.layers("num_layers", Some(18))?;
    let p = k.u("patch_size", Some(2))?;
    let inc = k.u("in_channels", Some(16))?;
    let outc = k.u("out_channels", Some(16))?;
    let joint = k.u("joint_attention_dim", Some(4096))?;
    let cap = k.u("caption_projection_dim", Some(1152))?;
    let pooled = k.u("pooled_projection_dim", Some(2048))?;
    let qk = match k.s("qk_norm") {
        None => false,
        Some("rms_norm") => true,
        Some(_) => return Err(k.bad("qk_norm", "is not `rms_norm`")),
    };
    let dual: Vec<u64> = match k.get("dual_attention_layers") {
        Some(_) => k.list("dual_attention_layers", 0, None)?,
        None => Vec::new(),
    };
    if cap != d {
        return Err(k.bad("caption_projection_dim", "differs from heads × head dim"));
    }
    let pp = k.times("patch_size", p, p)?;
    c.conv(d, inc, pp, true);
    if let Some(max) = k.get("pos_embed_max_size") {
        let m = max
            .as_u64()
            .filter(|m| *m <= 4096)
            .ok_or_else(|| k.bad("pos_embed_max_size", "is not a whole number up to 4096"))?;
        c.buffers = c.buffers.saturating_add(m * m * d);
    } else {
        let s = k.u("sample_size", Some(128))? / p;
        c.buffers = c.buffers.saturating_add(s * s * d);
    }
    // Leaf level: `PatchEmbed` (`pos_embed`) has its positional table as its own
    // buffer group, resident while its child convolution runs.
    c.group.other = c.buffers.saturating_add(biased(d, inc.saturating_mul(pp)));
    mlp2(&mut c, 256, d);
    mlp2(&mut c, pooled, d);
    c.lin(d, joint, true);
    // `transformer_blocks` is the top level's one `nn.ModuleList`.
    for i in 0..layers {
        let pre_only = i + 1 == layers;
        let is_dual = dual.contains(&i);
        let mut e = Counts::default();
        e.lin(if is_dual { 9 * d } else { 6 * d }, d, true);
        e.lin(if pre_only { 2 * d } else { 6 * d }, d, true);
        e.lin_n(d, d, true, 8 - u64::from(pre_only));
        if qk {
            e.add(4 * hd);
        }
        if is_dual {
            e.lin_n(d, d, true, 4);
            if qk {
                e.add(2 * hd);
            }
        }
        e.lin(4 * d, d, true);
        e.lin(d, 4 * d, true);
        if !pre_only {
            e.lin(4 * d, d, true);
            e.lin(d, 4 * d, true);
        }
        c.element(0, e);
    }
    c.lin(2 * d, d, true);
    let out = k.times("patch_size", p * p, outc)?;
    c.lin(out, d, true);
    // Layerwise casting (`_skip_layerwise_casting_patterns`: `pos_embed`, `norm`): the
    // patch embedding's convolution (`pos_embed.proj`), each block's AdaLayerNorm
    // modulations (`norm1.linear`, `norm1_context.linear`), the q/k norms,
    // `norm_out.linear` and the top-level `proj_out` stay in the load dtype.
    let mut kept = d
        .saturating_mul(inc)
        .saturating_mul(pp)
        .saturating_add(d)
        .saturating_add(biased(2 * d, d))
        .saturating_add(biased(out, d));
    for i in 0..layers {
        let pre_only = i + 1 == layers;
        let is_dual = dual.contains(&i);
        kept = kept
            .saturating_add(biased(if is_dual { 9 * d } else { 6 * d }, d))
            .saturating_add(biased(if pre_only { 2 * d } else { 6 * d }, d));
        if qk {
            kept = kept.saturating_add(if is_dual { 6 * hd } else { 4 * hd });
        }
    }
    c.layerwise = Some(Layerwise {
        kept,
        largest: [
            biased(4 * d, d),
            biased(d, 4 * d),
            biased(d, joint),
            biased(d, pooled),
        ]
        .into_iter()
        .max()
        .unwrap_or(0),
    });
    Ok(c)
}

/// `FluxTransformer2DModel` (transformers/transformer_flux.py): the double-stream and
/// single-stream blocks.
pub fn flux(v: &Value) -> Result<Counts, EstimateError> {
    let k = Cfg::new(v, "FluxTransformer2DModel");
    let mut c = Counts::default();
    let heads = k.u("num_attention_heads", Some(24))?;
    let hd = k.u("attention_head_dim", Some(128))?;
    let d = k.times("attention_head_dim", heads, hd)?;
    let p = k.u("patch_size", Some(1))?;
    let inc = k.u("in_channels", Some(64))?;
    let outc = k.u("out_channels", Some(inc))?;
    let joint = k.u("joint_attention_dim", Some(4096))?;
    let pooled = k.u("pooled_projection_dim", Some(768))?;
    k.times("patch_size", k.times("patch_size", p, p)?, outc)?;
    let double = k.layers("num_layers", Some(19))?;
    let single = k.layers("num_single_layers", Some(38))?;
    mlp2(&mut c, 256, d);
    if k.b("guidance_embeds", false)? {
        mlp2(&mut c, 256, d);
    }
    mlp2(&mut c, pooled, d);
    c.lin(d, joint, true);
    c.lin(d, inc, true);
    // `transformer_blocks` (double-stream) and `single_transformer_blocks`, the top
    // level's two `nn.ModuleList`s, in the order the forward runs them.
    for _ in 0..double {
        let mut e = Counts::default();
        e.lin_n(6 * d, d, true, 2);
        e.lin_n(d, d, true, 8);
        e.add(4 * hd);
        e.lin_n(4 * d, d, true, 2);
        e.lin_n(d, 4 * d, true, 2);
        c.element(0, e);
    }
    for _ in 0..single {
        let mut e = Counts::default();
        e.lin(3 * d, d, true);
        e.lin(4 * d, d, true);
        e.lin(d, 5 * d, true);
        e.lin_n(d, d, true, 3);
        e.add(2 * hd);
        c.element(1, e);
    }
    c.lin(2 * d, d, true);
    let out = k.times("patch_size", p * p, outc)?;
    c.lin(out, d, true);
    // Layerwise casting (`_skip_layerwise_casting_patterns`: `pos_embed`, `norm`): the
    // AdaLayerNorm modulations (`norm1.linear`, `norm1_context.linear`, `norm.linear`,
    // `norm_out.linear`), the top-level `proj_out` and the q/k RMSNorms stay; a single
    // block's `proj_out` (d × 5d) is the largest module cast.
    c.layerwise = Some(Layerwise {
        kept: [
            biased(6 * d, d).saturating_mul(2 * double),
            biased(3 * d, d).saturating_mul(single),
            biased(2 * d, d),
            biased(out, d),
            double * 4 * hd + single * 2 * hd,
        ]
        .iter()
        .fold(0, |a, n| a.saturating_add(*n)),
        largest: [
            biased(d, 5 * d),
            biased(4 * d, d),
            biased(d, 4 * d),
            biased(d, joint),
        ]
        .into_iter()
        .max()
        .unwrap_or(0),
    });
    Ok(c)
}

/// `WanTransformer3DModel` (transformers/transformer_wan.py), text-to-video and, with
/// `image_dim` / `added_kv_proj_dim`, image-to-video. `_keep_in_fp32_modules`:
/// `time_embedder`, `scale_shift_table`, `norm1`–`norm3` and the RoPE tables.
pub fn wan(v: &Value) -> Result<Counts, EstimateError> {
    let k = Cfg::new(v, "WanTransformer3DModel");
    let mut c = Counts::default();
    let heads = k.u("num_attention_heads", Some(40))?;
    let hd = k.u("attention_head_dim", Some(128))?;
    let d = k.times("attention_head_dim", heads, hd)?;
    let ps = k.list("patch_size", 3, None)?;
    let inc = k.u("in_channels", Some(16))?;
    let outc = k.u("out_channels", Some(16))?;
    let text = k.u("text_dim", Some(4096))?;
    let freq = k.u("freq_dim", Some(256))?;
    let ffn = k.u("ffn_dim", Some(13824))?;
    let layers = k.layers("num_layers", Some(40))?;
    let cross_norm = k.b("cross_attn_norm", true)?;
    let rope_len = k.u("rope_max_seq_len", Some(1024))?;
    let added = k
        .get("added_kv_proj_dim")
        .map(|_| k.u("added_kv_proj_dim", None))
        .transpose()?;
    let qk = match k.s("qk_norm") {
        None => false,
        Some("rms_norm_across_heads") => true,
        Some(_) => return Err(k.bad("qk_norm", "is not `rms_norm_across_heads`")),
    };
    if k.get("pos_embed_seq_len").is_some() {
        return Err(k.bad(
            "pos_embed_seq_len",
            "is set: a Wan variant gpumem does not count",
        ));
    }
    let patch = k.times("patch_size", k.times("patch_size", ps[0], ps[1])?, ps[2])?;
    // Layerwise casting (`_skip_layerwise_casting_patterns`: `patch_embedding`,
    // `condition_embedder`, `norm`; `_keep_in_fp32_modules` stay fp32): the patch
    // embedding, the condition embedder's linears, the q/k norms and the top-level
    // `proj_out` stay in the load dtype.
    let mut kept = d
        .saturating_mul(inc)
        .saturating_mul(patch)
        .saturating_add(d);
    c.conv(d, inc, patch, true);
    c.lin_fp32(d, freq);
    c.lin_fp32(d, d);
    c.lin(6 * d, d, true);
    mlp2(&mut c, text, d);
    kept = kept
        .saturating_add(biased(6 * d, d))
        .saturating_add(biased(d, text))
        .saturating_add(biased(d, d));
    if k.get("image_dim").is_some() {
        let img = k.u("image_dim", None)?;
        c.add_fp32(2 * img);
        c.lin(img, img, true);
        c.lin(d, img, true);
        c.add_fp32(2 * d);
        kept = kept
            .saturating_add(biased(img, img))
            .saturating_add(biased(d, img));
    }
    // Leaf level: the model's own `scale_shift_table` (fp32) is its own group, resident
    // through the call (the largest leaf, `condition_embedder.time_proj`, runs beside
    // it); each block's own `scale_shift_table` (fp32) through the block, around the
    // block's largest leaf (a feed-forward linear).
    c.group.held_fp32 = 2 * d;
    // The block's widest linear: a feed-forward one, an attention projection or the
    // text's added projection.
    let widest = [
        biased(ffn, d),
        biased(d, ffn),
        biased(d, d),
        biased(d, added.unwrap_or(0)),
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    c.group.other = widest;
    c.group.other_fp32 = 8 * d;
    // `blocks` is the top level's one `nn.ModuleList`.
    for _ in 0..layers {
        let mut e = Counts::default();
        e.lin_n(d, d, true, 8);
        if qk {
            e.add(4 * d);
        }
        if let Some(a) = added {
            e.lin_n(d, a, true, 2);
            if qk {
                e.add(d);
            }
        }
        if cross_norm {
            e.add_fp32(2 * d);
        }
        e.lin(ffn, d, true);
        e.lin(d, ffn, true);
        e.add_fp32(6 * d);
        c.element(0, e);
    }
    let norms = match (qk, added) {
        (false, _) => 0,
        (true, None) => 4 * d,
        (true, Some(_)) => 5 * d,
    };
    let out = k.times("patch_size", outc, patch)?;
    c.lin(out, d, true);
    c.add_fp32(2 * d);
    c.layerwise = Some(Layerwise {
        kept: kept
            .saturating_add(norms.saturating_mul(layers))
            .saturating_add(biased(out, d)),
        largest: widest,
    });
    c.fixed_buffer_bytes = c.fixed_buffer_bytes.saturating_add(2 * rope_len * hd * 4);
    Ok(c)
}

/// `AutoencoderKLWan` (autoencoders/autoencoder_kl_wan.py): causal 3-D convolutions,
/// RMS norms with a gamma per channel, a mid block with one attention.
pub fn autoencoder_kl_wan(v: &Value) -> Result<Counts, EstimateError> {
    let k = Cfg::new(v, "AutoencoderKLWan");
    let mut c = Counts::default();
    let base = k.u("base_dim", Some(96))?;
    let dec_base = k.u("decoder_base_dim", Some(base))?;
    let z = k.u("z_dim", Some(16))?;
    let mult = k.list("dim_mult", 0, None)?;
    let nres = k.layers("num_res_blocks", Some(2))?;
    let tdown = k
        .bools("temperal_downsample")
        .unwrap_or_else(|_| vec![false, true, true]);
    let inc = k.u("in_channels", Some(3))?;
    let outc = k.u("out_channels", Some(3))?;
    if k.b("is_residual", false)? || k.get("patch_size").is_some() {
        return Err(k.bad(
            "is_residual",
            "is set: the Wan 2.2 VAE, which gpumem does not count yet",
        ));
    }
    if !matches!(k.get("attn_scales"), None | Some(Value::Array(_)))
        || k.get("attn_scales")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
    {
        return Err(k.bad(
            "attn_scales",
            "is not empty: a Wan VAE gpumem does not count",
        ));
    }
    if mult.is_empty() || tdown.len() + 1 != mult.len() {
        return Err(k.bad(
            "temperal_downsample",
            "must have one entry fewer than dim_mult",
        ));
    }
    let res = |c: &mut Counts, i: u64, o: u64| {
        c.add(i);
        c.conv(o, i, 27, true);
        c.add(o);
        c.conv(o, o, 27, true);
        if i != o {
            c.conv(o, i, 1, true);
        }
    };
    let mid = |c: &mut Counts, d: u64| {
        res(c, d, d);
        c.add(d);
        c.conv(3 * d, d, 1, true);
        c.conv(d, d, 1, true);
        res(c, d, d);
    };
    // Encoder: dims = base × [1] + dim_mult.
    let dims: Vec<u64> = std::iter::once(1)
        .chain(mult.iter().copied())
        .map(|m| k.times("dim_mult", base, m))
        .collect::<Result<_, _>>()?;
    c.conv(dims[0], inc, 27, true);
    let levels = mult.len();
    for i in 0..levels {
        let (mut a, b) = (dims[i], dims[i + 1]);
        for _ in 0..nres {
            res(&mut c, a, b);
            a = b;
        }
        if i + 1 < levels {
            c.conv(b, b, 9, true);
            if tdown[i] {
                c.conv(b, b, 3, true);
            }
        }
    }
    let top = dims[levels];
    mid(&mut c, top);
    c.add(top);
    c.conv(2 * z, top, 27, true);
    c.conv(2 * z, 2 * z, 1, true);
    c.conv(z, z, 1, true);
    // Decoder: dims = dec_base × [dim_mult[-1]] + reversed(dim_mult).
    let dd: Vec<u64> = std::iter::once(mult[levels - 1])
        .chain(mult.iter().rev().copied())
        .map(|m| k.times("dim_mult", dec_base, m))
        .collect::<Result<_, _>>()?;
    // Its `up_blocks` apart, the rest its unmatched group ([`GroupLayout`]).
    let mut rest = Counts::default();
    rest.conv(dd[0], z, 27, true);
    mid(&mut rest, dd[0]);
    let tup: Vec<bool> = tdown.iter().rev().copied().collect();
    for i in 0..levels {
        let mut up = Counts::default();
        let mut a = if i == 0 { dd[i] } else { dd[i] / 2 };
        let b = dd[i + 1];
        for _ in 0..=nres {
            res(&mut up, a, b);
            a = b;
        }
        if i + 1 < levels {
            up.conv(b / 2, b, 9, true);
            if tup[i] {
                up.conv(2 * b, b, 3, true);
            }
        }
        c.element(0, up);
    }
    let last = dd[levels];
    rest.add(last);
    rest.conv(outc, last, 27, true);
    c.merge(&rest);
    c.group.unmatched = Some(Box::new(rest));
    Ok(c)
}

/// One CLIP encoder layer stack (transformers' `CLIPEncoder`): biased q/k/v/out,
/// two LayerNorms, fc1/fc2.
fn clip_layers(c: &mut Counts, h: u64, inter: u64, layers: u64) {
    c.lin_n(h, h, true, 4 * layers);
    c.add(layers * 4 * h);
    c.lin_n(inter, h, true, layers);
    c.lin_n(h, inter, true, layers);
}

/// transformers' `CLIPTextModel` / `CLIPTextModelWithProjection` (models/clip).
pub fn clip_text(v: &Value, projection: bool) -> Result<Counts, EstimateError> {
    let k = Cfg::new(v, "CLIPTextModel");
    let mut c = Counts::default();
    let h = k.u("hidden_size", Some(512))?;
    let inter = k.u("intermediate_size", Some(2048))?;
    let layers = k.layers("num_hidden_layers", Some(12))?;
    let vocab = k.u("vocab_size", Some(49408))?;
    let pos = k.u("max_position_embeddings", Some(77))?;
    c.add(vocab * h + pos * h);
    // Leaf-level group offloading makes a group of each `nn.Embedding`; the embeddings'
    // parent holds `position_ids` beside them.
    c.leaf(vocab * h, 1);
    c.leaf(pos * h, 1);
    c.group.held_fixed_bytes = 8 * pos;
    clip_layers(&mut c, h, inter, layers);
    c.add(2 * h);
    if projection {
        c.lin(k.u("projection_dim", Some(512))?, h, false);
    }
    c.fixed_buffer_bytes = c.fixed_buffer_bytes.saturating_add(8 * pos);
    Ok(c)
}

/// transformers' `T5EncoderModel` / `UMT5EncoderModel` (models/t5, models/umt5): the
/// shared embedding, per layer q/k/v/o without bias, the relative position bias (in
/// the first layer for T5, in every layer for UMT5), the (gated) feed-forward and
/// RMS norms; `wo` kept in fp32 when loaded in float16.
pub fn t5_encoder(v: &Value, umt5: bool) -> Result<Counts, EstimateError> {
    let k = Cfg::new(
        v,
        if umt5 {
            "UMT5EncoderModel"
        } else {
            "T5EncoderModel"
        },
    );
    let mut c = Counts::default();
    let d = k.u("d_model", Some(512))?;
    let kv = k.u("d_kv", Some(64))?;
    let ff = k.u("d_ff", Some(2048))?;
    let layers = k.layers("num_layers", Some(6))?;
    let heads = k.u("num_heads", Some(8))?;
    let vocab = k.u("vocab_size", Some(32128))?;
    let buckets = k.u("relative_attention_num_buckets", Some(32))?;
    let gated = k
        .s("feed_forward_proj")
        .unwrap_or("relu")
        .starts_with("gated-");
    let inner = heads * kv;
    c.add(vocab * d);
    // The shared embedding is a leaf of its own under leaf-level group offloading.
    c.leaf(vocab * d, 1);
    c.lin_n(inner, d, false, 3 * layers);
    c.lin_n(d, inner, false, layers);
    c.add(buckets * heads * if umt5 { layers } else { 1 });
    c.add(2 * layers * d + d);
    c.lin_n(ff, d, false, layers * if gated { 2 } else { 1 });
    c.fp32_if_fp16.push(Linear {
        out: d,
        inp: ff,
        count: layers,
    });
    Ok(c)
}

/// diffusers' `StableDiffusionSafetyChecker` (pipelines/stable_diffusion/
/// safety_checker.py): a CLIP vision tower (transformers' `CLIPVisionModel` of the
/// config's `vision_config`), its projection and the concept embeddings.
pub fn safety_checker(v: &Value) -> Result<Counts, EstimateError> {
    let empty = Value::Object(serde_json::Map::new());
    let vc = v.get("vision_config").unwrap_or(&empty);
    let k = Cfg::new(vc, "StableDiffusionSafetyChecker");
    let mut c = Counts::default();
    let h = k.u("hidden_size", Some(768))?;
    let inter = k.u("intermediate_size", Some(3072))?;
    let layers = k.layers("num_hidden_layers", Some(12))?;
    let image = k.u("image_size", Some(224))?;
    let patch = k.u("patch_size", Some(32))?;
    let chans = k.u("num_channels", Some(3))?;
    let proj = Cfg::new(v, "StableDiffusionSafetyChecker").u("projection_dim", Some(512))?;
    if patch == 0 {
        return Err(k.bad("patch_size", "is 0"));
    }
    let positions = (image / patch) * (image / patch) + 1;
    c.add(h + h * chans * patch * patch + positions * h + 2 * h);
    clip_layers(&mut c, h, inter, layers);
    c.add(2 * h);
    c.lin(proj, h, false);
    c.add(17 * proj + 3 * proj + 17 + 3);
    c.fixed_buffer_bytes = c.fixed_buffer_bytes.saturating_add(8 * positions);
    Ok(c)
}
