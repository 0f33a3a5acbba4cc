//! cuDNN's convolution workspace: what a `torch.cuda.max_memory_allocated` (or
//! `max_memory_reserved`) reading of a phase that runs convolutions holds beyond the
//! tensors gpumem counts, and why it follows the card rather than the run.
//!
//! Read in PyTorch's `aten/src/ATen/native/cudnn/Conv_v8.cpp` (pytorch/pytorch at
//! 06ca69ca4e9b0fd02bf42f134440d33076bd1464, a 2023 tree: after 2.0.0, it carries
//! the cuDNN 8.6 `libnvrtc` workaround of
//! https://github.com/pytorch/pytorch/issues/97041):
//!
//! - With `torch.backends.cudnn.benchmark` off (the default; neither diffusers'
//!   pipelines nor its offload hooks turn it on), `run_single_conv` asks cuDNN's
//!   heuristics for an ordered list of engine configurations
//!   (`get_configs_from_heuristics`) and `try_configs` runs the first one that works:
//!   `run_conv_plan` takes `plan.getWorkspaceSize()` bytes from the caching allocator
//!   (so both counters include it), and a `c10::OutOfMemoryError` there sends it on to
//!   the next configuration, then to cuDNN's fallback list. The workspace a run gets is
//!   therefore cuDNN's preferred configuration's (closed heuristics: the shape, the
//!   dtype, the GPU, the cuDNN release) if the card can give it, a later one's if not —
//!   bounded by the card's free memory, not by what the run needs. The chosen plan is
//!   cached per shape for the rest of the process (`benchmark_cache.update`).
//! - With `benchmark` on, `generate_and_filter_plans` keeps the plans whose workspace
//!   fits `get_available_workspace()` — `CUDACachingAllocator::cacheInfo`'s largest
//!   block, which starts from `cudaMemGetInfo`'s free bytes — and allocates the
//!   largest of them before timing them: the workspace is then sized by what is free.
//! - The v7 path (`Conv_v7.cpp`, `AlgoIterator::try_all`) does the same as the first:
//!   the algorithms in cuDNN's order, the next one on `OutOfMemoryError`.
//!
//! So a peak read on a card with room can exceed gpumem's need by a workspace gpumem
//! cannot size (cuDNN's heuristics are not public), and the same run on a card with
//! less room takes a configuration that fits: the need does not follow the card, the
//! reading does. gpumem keeps the need (the tensors), and says when the phase that
//! sets the peak runs such convolutions; a published reading of such a phase lies
//! between that need and the card.

use super::Class;

/// Whether a class's forward runs convolutions on activations (through cuDNN on
/// NVIDIA cards): the UNet's and the VAEs' convolutions (`nn.Conv2d`, the Wan VAE's
/// `WanCausalConv3d`), the patch embeddings of SD3 (`PatchEmbed.proj`, `nn.Conv2d`)
/// and Wan (`patch_embedding`, `nn.Conv3d`), and the safety checker's CLIP vision
/// tower (`patch_embedding`, `nn.Conv2d`). FLUX's transformer embeds its packed
/// latents with a linear layer; the text encoders run none.
pub fn runs_convolutions(class: Class) -> bool {
    match class {
        Class::Unet2d
        | Class::Sd3
        | Class::Wan
        | Class::AutoencoderKl
        | Class::AutoencoderKlWan
        | Class::SafetyChecker => true,
        Class::Flux
        | Class::ClipText
        | Class::ClipTextProjection
        | Class::T5Encoder
        | Class::Umt5Encoder => false,
    }
}

/// The note an estimate carries when the phase that sets its peak runs convolutions.
pub fn note(phase: &str) -> String {
    format!(
        "{phase}: cuDNN's convolution workspace is not in the need: PyTorch runs the first of cuDNN's configurations whose workspace it can allocate, so max_memory_allocated on a card with more free memory can read more than the need, up to the card; with less free memory, a configuration that fits runs"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn convolution_classes_are_the_ones_with_conv_layers() {
        assert!(runs_convolutions(Class::AutoencoderKl));
        assert!(runs_convolutions(Class::Unet2d));
        assert!(runs_convolutions(Class::AutoencoderKlWan));
        assert!(!runs_convolutions(Class::Flux));
        assert!(!runs_convolutions(Class::T5Encoder));
        assert!(note("VAE decode").starts_with("VAE decode: cuDNN"));
    }
}
