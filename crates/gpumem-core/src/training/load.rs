//! The loading transient: what building and loading a model holds on the device,
//! allocation by allocation, through [`crate::allocator::Allocator`] — the peak of
//! `model_load` beside the training step's, and the segments it leaves cached for the
//! step to reuse.
//!
//! Each path follows its framework's code, named at the function. The sequences are
//! the allocations and frees those lines of Python make on a CUDA device, in order
//! (CPython frees a list's items last first and a module's tensors in the order they
//! were registered); small host-side details (a 16-entry code table) are left out.

// Checked arithmetic only: every dimension is user input (products saturate; no real
// model reaches u64::MAX bytes).
#![deny(clippy::arithmetic_side_effects)]

use crate::allocator::{Allocator, Handle};

/// The product of `xs`, saturating.
fn mul(xs: &[u64]) -> u64 {
    xs.iter().fold(1u64, |a, x| a.saturating_mul(*x))
}

/// A torchao `NF4Tensor` on the device: its inner tensors in the order its
/// `__init__` sets them (the order they are freed with it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Nf4 {
    scalers: Handle,
    factor: Handle,
    mean: Handle,
    data: Handle,
}

impl Nf4 {
    fn free(self, a: &mut Allocator) {
        for h in [self.scalers, self.factor, self.mean, self.data] {
            a.free(h);
        }
    }
}

/// Which torchao quantises (`to_nf4`): 0.1 compares every value with the 16 NF4
/// levels at once; from 0.2 on in chunks of 2^20 values (torchao PR 196, "perform in
/// chunks", `CHUNK_SIZE = 1024**2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Torchao {
    /// torchao 0.1 (torchtune 0.1).
    V01,
    /// torchao 0.2 and later (torchtune 0.2 on).
    Chunked,
}

/// Values per chunk of torchao's chunked quantisation (`CHUNK_SIZE`).
const TORCHAO_CHUNK: u64 = 1 << 20;

/// torchao's `to_nf4` of a 16-bit tensor of `n` values already on the device
/// (`NF4Tensor.from_tensor`, torchao/dtypes/nf4tensor.py v0.1): double quantisation of
/// the block scalers (`double_quantize_scalers`: blocks of 64, scaler blocks of 256),
/// then `convert_to_norm_float_weight` — the block absmax, the scaled values, and
/// `quantize_tensor_nearest`'s `(value.unsqueeze(-1) - nf4).abs()`: two tensors of
/// 16 bf16 per value (32·n B each), then `min(dim=-1)`'s values and int64 indices,
/// packed two per byte through int64 shifts. Checked against a meta-device trace of
/// torchao 0.1's own code (the sequence of sizes, allocation by allocation).
pub(crate) fn torchao_to_nf4(a: &mut Allocator, n: u64, version: Torchao) -> Nf4 {
    let nb = n.div_ceil(64);
    let ns = nb.div_ceil(256);
    // double_quantize_scalers: get_block_absmax(x, 64) = blocks.abs().max(dim=1).values
    let abs = a.malloc(mul(&[2, n]));
    let values = a.malloc(mul(&[2, nb]));
    let idx = a.malloc(mul(&[8, nb]));
    a.free(abs);
    a.free(idx);
    let mean = a.malloc(2);
    let centred = a.malloc(mul(&[2, nb]));
    a.free(values);
    let abs = a.malloc(mul(&[2, nb]));
    let absmax = a.malloc(mul(&[2, ns]));
    let idx = a.malloc(mul(&[8, ns]));
    a.free(abs);
    a.free(idx);
    // quantization_factor = 256 / (2 * scaler_absmax): the expanded view is made whole
    // by the product, then reciprocal and product (`__rtruediv__`); `[:, 0]` keeps that
    // whole tensor's storage.
    let twice = a.malloc(mul(&[2, nb]));
    let recip = a.malloc(mul(&[2, nb]));
    let factor = a.malloc(mul(&[2, nb]));
    a.free(recip);
    a.free(twice);
    let scaled = a.malloc(mul(&[2, nb]));
    let rounded = a.malloc(mul(&[2, nb]));
    a.free(scaled);
    let clamped = a.malloc(mul(&[2, nb]));
    a.free(rounded);
    let scalers = a.malloc(nb);
    a.free(centred);
    a.free(absmax);
    a.free(clamped);
    // convert_to_norm_float_weight
    let abs = a.malloc(mul(&[2, n]));
    let block_max = a.malloc(mul(&[2, nb]));
    let idx = a.malloc(mul(&[8, nb]));
    a.free(abs);
    a.free(idx);
    let scaled_blocks = a.malloc(mul(&[2, n]));
    let data = match version {
        Torchao::V01 => {
            let sub = a.malloc(mul(&[32, n]));
            let diff = a.malloc(mul(&[32, n]));
            a.free(sub);
            let min_values = a.malloc(mul(&[2, n]));
            let indices = a.malloc(mul(&[8, n]));
            a.free(min_values);
            a.free(diff);
            // quantized_blocks[::2] << 4 | quantized_blocks[1::2], on int64 halves.
            let shifted = a.malloc(mul(&[4, n]));
            let or = a.malloc(mul(&[4, n]));
            a.free(shifted);
            let data = a.malloc(n.div_ceil(2));
            a.free(block_max);
            a.free(scaled_blocks);
            a.free(indices);
            a.free(or);
            data
        }
        Torchao::Chunked => {
            let quantized = a.malloc(n);
            let mut start = 0u64;
            while start < n {
                let c = (n.saturating_sub(start)).min(TORCHAO_CHUNK);
                let sub = a.malloc(mul(&[32, c]));
                let diff = a.malloc(mul(&[32, c]));
                a.free(sub);
                let min_values = a.malloc(mul(&[2, c]));
                let indices = a.malloc(mul(&[8, c]));
                a.free(min_values);
                a.free(diff);
                let bytes = a.malloc(c);
                a.free(indices);
                a.free(bytes);
                start = start.saturating_add(TORCHAO_CHUNK);
            }
            // On uint8 halves now; the final `.to(torch.uint8)` is a no-op.
            let shifted = a.malloc(n.div_ceil(2));
            let data = a.malloc(n.div_ceil(2));
            a.free(shifted);
            a.free(block_max);
            a.free(scaled_blocks);
            a.free(quantized);
            data
        }
    };
    Nf4 {
        scalers,
        factor,
        mean,
        data,
    }
}

/// torchao's `NF4Tensor.get_original_weight` (the 16-bit weight back, as torchtune's
/// `clone` of an NF4 tensor runs it): the two nibbles as int64, looked up in the
/// code, the scalers dequantised, each half scaled by the repeated scalers, then
/// stacked. Returns the 16-bit tensor (2·n B).
pub(crate) fn torchao_dequantize(a: &mut Allocator, n: u64) -> Handle {
    let nb = n.div_ceil(64);
    let half = n.div_ceil(2);
    let nibbles = a.malloc(half);
    let first = a.malloc(mul(&[8, half]));
    a.free(nibbles);
    let nibbles = a.malloc(half);
    let second = a.malloc(mul(&[8, half]));
    a.free(nibbles);
    let deq_first = a.malloc(mul(&[2, half]));
    let deq_second = a.malloc(mul(&[2, half]));
    let s1 = a.malloc(mul(&[2, nb]));
    let scalers = a.malloc(mul(&[2, nb]));
    a.free(s1);
    let repeated = a.malloc(mul(&[2, half]));
    let scaled_first = a.malloc(mul(&[2, half]));
    a.free(repeated);
    let repeated = a.malloc(mul(&[2, half]));
    let scaled_second = a.malloc(mul(&[2, half]));
    a.free(repeated);
    let out = a.malloc(mul(&[2, n]));
    for h in [
        first,
        second,
        deq_first,
        deq_second,
        scalers,
        scaled_first,
        scaled_second,
    ] {
        a.free(h);
    }
    out
}

/// One linear layer of a torchtune decoder: `[out, in]`, with a LoRA adapter or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TtLinear {
    pub out: u64,
    pub inp: u64,
    pub lora: bool,
}

/// A torchtune decoder's shape as its builders make it (`lora_llama2`, `lora_llama3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TtModel {
    pub vocab: u64,
    pub hidden: u64,
    pub layers: u64,
    /// q, k, v and the output projection, in construction order.
    pub attention: [TtLinear; 4],
    /// w1 (gate), w2 (down), w3 (up), in construction order.
    pub mlp: [TtLinear; 3],
    /// LoRA on the output projection (`apply_lora_to_output`).
    pub output_lora: bool,
    pub rank: u64,
    /// The base's LoRA linears are NF4 (`quantize_base`).
    pub quantize: bool,
    /// RoPE's cache: `max_seq_len` × head_dim / 2 × (cos, sin) in fp32 per attention.
    pub rope: (u64, u64),
}

/// A torchtune module's tensors, in registration order.
enum TtTensor {
    Dense(Handle, u64),
    Nf4(Nf4, u64),
}

fn tt_free(a: &mut Allocator, ts: Vec<TtTensor>) {
    for t in ts {
        match t {
            TtTensor::Dense(h, _) => a.free(h),
            TtTensor::Nf4(q, _) => q.free(a),
        }
    }
}

/// torchtune's `LoRALinear.__init__` (torchtune/modules/peft/lora.py, 0.1): an
/// `nn.Linear` built on the device in bf16 (the default dtype), quantised by
/// `to_nf4` when the base is (the bf16 weight dies with `_create_weight_and_bias`),
/// then `lora_a` and `lora_b`; a plain `nn.Linear` without LoRA.
fn tt_linear(a: &mut Allocator, l: TtLinear, m: &TtModel, torchao: Torchao) -> Vec<TtTensor> {
    let n = mul(&[l.out, l.inp]);
    let w = a.malloc(mul(&[2, n]));
    let mut out = Vec::with_capacity(3);
    if m.quantize && l.lora {
        let q = torchao_to_nf4(a, n, torchao);
        a.free(w);
        out.push(TtTensor::Nf4(q, n));
    } else {
        out.push(TtTensor::Dense(w, mul(&[2, n])));
    }
    if l.lora {
        for bytes in [mul(&[2, m.rank, l.inp]), mul(&[2, l.out, m.rank])] {
            out.push(TtTensor::Dense(a.malloc(bytes), bytes));
        }
    }
    out
}

/// torchtune's `RotaryPositionalEmbeddings._rope_init` (fp32 `theta` and a cache of
/// cos and sin per position).
fn tt_rope(a: &mut Allocator, (positions, head_dim): (u64, u64)) -> Vec<TtTensor> {
    let half = head_dim.div_ceil(2);
    let theta = a.malloc(mul(&[4, half]));
    let seq = a.malloc(mul(&[4, positions]));
    let angles = a.malloc(mul(&[4, positions, half]));
    let cos = a.malloc(mul(&[4, positions, half]));
    let sin = a.malloc(mul(&[4, positions, half]));
    let cache = a.malloc(mul(&[8, positions, half]));
    // `torch.stack([cos, sin])`: the list frees its items last first.
    a.free(sin);
    a.free(cos);
    a.free(seq);
    a.free(angles);
    vec![
        TtTensor::Dense(theta, mul(&[4, half])),
        TtTensor::Dense(cache, mul(&[8, positions, half])),
    ]
}

/// A deep copy of a module's tensors: a dense tensor cloned; an NF4 tensor through
/// torchtune's `clone` (torchtune/utils/_register_nf4_dispatch_ops.py:
/// `to_nf4(args[0][0].get_original_weight())`), dequantised and quantised again.
fn tt_clone(a: &mut Allocator, ts: &[TtTensor], torchao: Torchao) -> Vec<TtTensor> {
    ts.iter()
        .map(|t| match *t {
            TtTensor::Dense(_, bytes) => TtTensor::Dense(a.malloc(bytes), bytes),
            TtTensor::Nf4(_, n) => {
                let w = torchao_dequantize(a, n);
                let q = torchao_to_nf4(a, n, torchao);
                a.free(w);
                TtTensor::Nf4(q, n)
            }
        })
        .collect()
}

/// How torchtune builds and loads a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TtPath {
    /// torchtune up to 0.5 builds one layer and deep-copies it (`_get_clones` in
    /// `TransformerDecoder`); 0.6 builds each layer (`nn.ModuleList`).
    pub clones: bool,
    pub torchao: Torchao,
    /// torchtune 0.1 and 0.2 copy a checkpoint tensor into an NF4 weight by moving it
    /// to the device and quantising it there (`inplace_copy`:
    /// `to_nf4(args[0][1].to(dest_tensor.device))`); from 0.3 torchao's `copy_`
    /// quantises it where it is (the CPU) and copies the result in.
    pub copy_on_device: bool,
    /// The checkpoint is not bf16 (Llama-2's fp16 files): `to_nf4`'s
    /// `tensor.to(torch.bfloat16)` makes a copy on the device.
    pub convert: bool,
}

/// torchtune's single-device recipes' model setup (`_setup_model`: the model
/// instantiated on the device under the bf16 default dtype, then
/// `load_state_dict`), allocation by allocation. The model's tensors stay in `a`.
pub(crate) fn torchtune(a: &mut Allocator, m: &TtModel, p: TtPath) {
    let layer = |a: &mut Allocator| {
        let attention: Vec<Vec<TtTensor>> = m
            .attention
            .iter()
            .map(|l| tt_linear(a, *l, m, p.torchao))
            .collect();
        let rope = tt_rope(a, m.rope);
        let mlp: Vec<Vec<TtTensor>> = m
            .mlp
            .iter()
            .map(|l| tt_linear(a, *l, m, p.torchao))
            .collect();
        let sa_norm = TtTensor::Dense(a.malloc(mul(&[2, m.hidden])), mul(&[2, m.hidden]));
        let mlp_norm = TtTensor::Dense(a.malloc(mul(&[2, m.hidden])), mul(&[2, m.hidden]));
        // A layer's modules as `TransformerDecoderLayer` registers them: sa_norm,
        // attn (q, k, v, output_proj, pos_embeddings), mlp_norm, mlp (w1, w2, w3).
        let mut modules = vec![vec![sa_norm]];
        modules.extend(attention);
        modules.push(rope);
        modules.push(vec![mlp_norm]);
        modules.extend(mlp);
        modules
    };
    let vocab = mul(&[2, m.vocab, m.hidden]);
    let mut layers: Vec<Vec<Vec<TtTensor>>> = Vec::new();
    if p.clones {
        let original = layer(a);
        let _embeddings = a.malloc(vocab);
        let _output = tt_output(a, m);
        let _norm = a.malloc(mul(&[2, m.hidden]));
        for _ in 0..m.layers {
            layers.push(original.iter().map(|t| tt_clone(a, t, p.torchao)).collect());
        }
        // The builder's `layer` dies with it.
        for module in original {
            tt_free(a, module);
        }
    } else {
        let _embeddings = a.malloc(vocab);
        for _ in 0..m.layers {
            layers.push(layer(a));
        }
        let _norm = a.malloc(mul(&[2, m.hidden]));
        let _output = tt_output(a, m);
    }
    if m.quantize && p.copy_on_device {
        // load_state_dict, module by module: each NF4 weight replaced by the
        // checkpoint's tensor quantised on the device.
        for layer in &mut layers {
            for module in layer.iter_mut() {
                for t in module.iter_mut() {
                    if let TtTensor::Nf4(old, n) = *t {
                        let on_device = a.malloc(mul(&[2, n]));
                        let bf16 = p.convert.then(|| a.malloc(mul(&[2, n])));
                        let q = torchao_to_nf4(a, n, p.torchao);
                        if let Some(h) = bf16 {
                            a.free(h);
                        }
                        a.free(on_device);
                        old.free(a);
                        *t = TtTensor::Nf4(q, n);
                    }
                }
            }
        }
    }
}

/// The output projection: `nn.Linear(embed_dim, vocab)` or a bf16 `LoRALinear`.
fn tt_output(a: &mut Allocator, m: &TtModel) -> Vec<Handle> {
    let mut out = vec![a.malloc(mul(&[2, m.vocab, m.hidden]))];
    if m.output_lora {
        out.push(a.malloc(mul(&[2, m.rank, m.hidden])));
        out.push(a.malloc(mul(&[2, m.vocab, m.rank])));
    }
    out
}

/// One stored tensor as a loader puts it on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    /// A plain tensor of this many bytes.
    Dense(u64),
    /// A bitsandbytes 4-bit weight of `n` values (`dq`: double quantisation), loaded in
    /// 16 bits and quantised on the device.
    Bnb4 { n: u64, dq: bool },
}

/// bitsandbytes' `quantize_4bit` of a 16-bit tensor of `n` values on the device
/// (bitsandbytes/functional.py, 0.4x): the packed values and an fp32 absmax per block
/// of 64 from the kernel; with double quantisation the absmax less its mean is
/// quantised in blocks of 256 (`quantize_blockwise`: uint8 values, an fp32 absmax per
/// block, the 256-entry code) and the fp32 absmax freed.
pub(crate) fn bnb_quantize_4bit(a: &mut Allocator, n: u64, dq: bool) -> Vec<Handle> {
    let nb = n.div_ceil(64);
    let packed = a.malloc(n.div_ceil(2));
    let absmax = a.malloc(mul(&[4, nb]));
    let code = a.malloc(mul(&[4, 16]));
    if !dq {
        return vec![packed, absmax, code];
    }
    let offset = a.malloc(4);
    let centred = a.malloc(mul(&[4, nb]));
    let qmap = a.malloc(mul(&[4, 256]));
    let qabsmax = a.malloc(nb);
    let absmax2 = a.malloc(mul(&[4, nb.div_ceil(256)]));
    a.free(centred);
    a.free(absmax);
    vec![packed, code, offset, qmap, qabsmax, absmax2]
}

/// transformers' `from_pretrained` on one device (transformers 5.23,
/// modeling_utils.py): `caching_allocator_warmup` allocates one fp16 tensor of the
/// bytes the device will hold (`get_total_byte_count`: 0.5 B per value of a 4-bit
/// weight, `quantized_element_size`) and frees it, so the cache holds one segment of
/// that size; then every tensor is materialised in checkpoint order, a 4-bit weight as
/// its 16-bit value on the device quantised by `Params4bit` (`bnb_quantize_4bit`).
/// A tensor marked `upcast` is one PEFT's `prepare_model_for_kbit_training` casts to
/// fp32 afterwards, one by one (`param.data = param.data.to(torch.float32)`,
/// peft/utils/other.py 0.21: the fp32 copy made, then the 16-bit one released),
/// followed by `torch.cuda.empty_cache()`.
pub(crate) fn transformers(a: &mut Allocator, tensors: &[(Stored, u64, bool)]) {
    let warm: u64 = tensors
        .iter()
        .map(|(s, count, _)| {
            mul(&[
                *count,
                match *s {
                    Stored::Dense(b) => b,
                    Stored::Bnb4 { n, .. } => n.div_ceil(2),
                },
            ])
        })
        .fold(0u64, u64::saturating_add);
    if warm > 0 {
        let h = a.malloc(warm.div_ceil(2).saturating_mul(2));
        a.free(h);
    }
    let mut upcast = Vec::new();
    for (s, count, cast) in tensors {
        for _ in 0..*count {
            match *s {
                Stored::Dense(b) => {
                    let h = a.malloc(b);
                    if *cast {
                        upcast.push((h, b));
                    }
                }
                Stored::Bnb4 { n, dq } => {
                    let w = a.malloc(mul(&[2, n]));
                    bnb_quantize_4bit(a, n, dq);
                    a.free(w);
                }
            }
        }
    }
    if !upcast.is_empty() {
        for (h, bytes) in upcast {
            a.malloc(bytes.saturating_mul(2));
            a.free(h);
        }
        a.empty_cache();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama2_7b(quantize: bool) -> TtModel {
        let (h, i) = (4096, 11008);
        let lin = |out, inp, lora| TtLinear { out, inp, lora };
        let lora_kv = quantize;
        TtModel {
            vocab: 32000,
            hidden: h,
            layers: 32,
            attention: [
                lin(h, h, true),
                lin(h, h, lora_kv),
                lin(h, h, true),
                lin(h, h, lora_kv),
            ],
            mlp: [
                lin(i, h, quantize),
                lin(h, i, quantize),
                lin(i, h, quantize),
            ],
            output_lora: false,
            rank: 8,
            quantize,
            rope: (4096, 128),
        }
    }

    /// torchtune 0.1's Llama-2-7B QLoRA and LoRA (q, v) model setups. The figures are
    /// those of a meta-device trace of the same Python — torchao 0.1's
    /// `nf4tensor.py` and torchtune's `clone` registration run on `meta` tensors under
    /// `gpumem_trace`'s allocator — and torchtune's tutorials printed "Peak memory
    /// reserved, model init" 9.13 GB (QLoRA) and 13.98 GB (LoRA).
    #[test]
    fn torchtune_01_model_init_reserves_what_its_tutorials_printed() {
        let path = TtPath {
            clones: true,
            torchao: Torchao::V01,
            copy_on_device: true,
            convert: true,
        };
        let mut a = Allocator::new(false);
        torchtune(&mut a, &llama2_7b(true), path);
        assert_eq!(a.peak_reserved(), 9_133_096_960);
        let mut a = Allocator::new(false);
        torchtune(&mut a, &llama2_7b(false), path);
        assert_eq!(a.peak_reserved(), 13_975_420_928);
    }
}
