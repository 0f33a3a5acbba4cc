//! The network's two operations on raw pool buffers: a cuBLAS GEMM (`cublasGemmEx`) and
//! the bias + ReLU kernel launch. Both are raw FFI in cudarc, hence `unsafe`; the shapes
//! are checked by the caller (`measure::Args::validate` bounds every dimension to what
//! cuBLAS's `int` arguments and the kernel's grid accept).
#![allow(unsafe_code)]

use std::sync::Arc;

use anyhow::{Result, anyhow};
use cudarc::cublas::{CudaBlas, result as blas, sys as blas_sys};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};
use gpumem_proto::results::Dtype;

use super::ptx;

/// `y[rows, width] = x[rows, width] · w[width, width]ᵀ` (row-major, PyTorch's Linear
/// layout), computed in f32 for every dtype.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    blas_handle: &CudaBlas,
    stream: &Arc<CudaStream>,
    dtype: Dtype,
    x: &CudaSlice<u8>,
    w: &CudaSlice<u8>,
    y: &mut CudaSlice<u8>,
    rows: u64,
    width: u64,
) -> Result<()> {
    let n = i32::try_from(rows).map_err(|_| anyhow!("rows {rows} exceed cuBLAS's int"))?;
    let m = i32::try_from(width).map_err(|_| anyhow!("width {width} exceeds cuBLAS's int"))?;
    let size = dtype.size_bytes();
    if x.len() as u64 != rows * width * size
        || y.len() as u64 != rows * width * size
        || w.len() as u64 != width * width * size
    {
        anyhow::bail!("buffer sizes do not match [{rows}, {width}] {dtype}");
    }
    let data = match dtype {
        Dtype::Float32 => blas_sys::cudaDataType::CUDA_R_32F,
        Dtype::Float16 => blas_sys::cudaDataType::CUDA_R_16F,
        Dtype::Bfloat16 => blas_sys::cudaDataType::CUDA_R_16BF,
    };
    let alpha: f32 = 1.0;
    let beta: f32 = 0.0;
    let (xp, _x_sync) = x.device_ptr(stream);
    let (wp, _w_sync) = w.device_ptr(stream);
    let (yp, _y_sync) = y.device_ptr(stream);
    // Column-major view: yᵀ[width, rows] = w[width, width] · xᵀ[width, rows]; the stored
    // row-major `w` is wᵀ in column-major, hence op(A) = T; `x` is xᵀ, op(B) = N.
    // SAFETY: all three buffers are alive pool allocations of the checked sizes on the
    // handle's stream; alpha/beta are f32 as CUBLAS_COMPUTE_32F requires.
    unsafe {
        blas::gemm_ex(
            *blas_handle.handle(),
            blas_sys::cublasOperation_t::CUBLAS_OP_T,
            blas_sys::cublasOperation_t::CUBLAS_OP_N,
            m,
            n,
            m,
            (&alpha as *const f32).cast(),
            wp as *const _,
            data,
            m,
            xp as *const _,
            data,
            m,
            (&beta as *const f32).cast(),
            yp as *mut _,
            data,
            m,
            blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| anyhow!("cublasGemmEx: {e}"))
}

/// `y = max(y + bias[col], 0)` in place with the dtype's PTX kernel.
pub fn bias_relu(
    stream: &Arc<CudaStream>,
    func: &CudaFunction,
    y: &mut CudaSlice<u8>,
    bias: &CudaSlice<u8>,
    elements: u64,
    width: u64,
) -> Result<()> {
    let blocks = elements
        .div_ceil(u64::from(ptx::BLOCK))
        .clamp(1, u64::from(ptx::MAX_GRID));
    let cfg = LaunchConfig {
        grid_dim: (u32::try_from(blocks).unwrap_or(ptx::MAX_GRID), 1, 1),
        block_dim: (ptx::BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut launch = stream.launch_builder(func);
    launch.arg(y).arg(bias).arg(&elements).arg(&width);
    // SAFETY: the kernel's four parameters are (u64 ptr, u64 ptr, u64, u64), matching
    // the pushed arguments; `y` holds `elements` values and `bias` `width` values of the
    // kernel's dtype (checked by the caller), and the grid-stride loop stays in bounds.
    unsafe { launch.launch(cfg) }
        .map(|_| ())
        .map_err(|e| anyhow!("cuLaunchKernel(bias_relu): {e}"))
}
