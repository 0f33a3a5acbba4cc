//! The measured allocator: a dedicated CUDA stream-ordered memory pool.
//!
//! cudarc exposes pool attributes only as raw `cuMemPool*` calls, so this small module
//! is the one place they are made. The pool is created with `cuMemPoolCreate` on the
//! measured device, its release threshold set to `u64::MAX` so it keeps freed memory
//! cached (the analogue of PyTorch's caching allocator, and of its `cudaMallocAsync`
//! backend), and every measured buffer comes from it through
//! `cuMemAllocFromPoolAsync`. Nothing else uses the pool: cudarc's own allocations and
//! cuBLAS's workspace go elsewhere, which is why they show only in the device-level
//! figures.
#![allow(unsafe_code)]

use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use cudarc::driver::result::mem_pool;
use cudarc::driver::sys::{self, CUmemPool_attribute as Attr};
use cudarc::driver::{CudaSlice, CudaStream};

use crate::device::PoolReading;

/// An owned memory pool; destroyed on drop (after the owner has synchronised).
#[derive(Debug)]
pub struct Pool {
    raw: sys::CUmemoryPool,
}

impl Pool {
    /// Creates a device-local pool on `ordinal` that never releases memory on sync.
    /// The caller's context must be current on this thread.
    pub fn create(ordinal: i32) -> Result<Self> {
        // SAFETY: CUmemPoolProps is a plain C struct for which all-zero is the
        // documented "no options" value (reserved bytes must be zero).
        let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = ordinal;
        // SAFETY: `props` is a valid, fully initialised CUmemPoolProps.
        let raw =
            unsafe { mem_pool::create(&props) }.map_err(|e| anyhow!("cuMemPoolCreate: {e}"))?;
        let pool = Pool { raw };
        pool.set(Attr::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, u64::MAX)
            .context("setting the pool's release threshold to keep its memory")?;
        Ok(pool)
    }

    fn get(&self, attr: Attr) -> Result<u64> {
        let mut v: u64 = 0;
        // SAFETY: the four counters and the threshold are documented as cuuint64_t;
        // `v` is a valid u64 out-pointer; the pool is alive.
        unsafe { mem_pool::get_attribute(self.raw, attr, (&mut v as *mut u64).cast()) }
            .map_err(|e| anyhow!("cuMemPoolGetAttribute({attr:?}): {e}"))?;
        Ok(v)
    }

    fn set(&self, attr: Attr, value: u64) -> Result<()> {
        let mut v = value;
        // SAFETY: as in `get`; the driver reads a cuuint64_t through the pointer.
        unsafe { mem_pool::set_attribute(self.raw, attr, (&mut v as *mut u64).cast()) }
            .map_err(|e| anyhow!("cuMemPoolSetAttribute({attr:?}): {e}"))
    }

    /// The four counters.
    pub fn read(&self) -> Result<PoolReading> {
        Ok(PoolReading {
            used: self.get(Attr::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
            reserved: self.get(Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
            used_high: self.get(Attr::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
            reserved_high: self.get(Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
        })
    }

    /// Resets both high watermarks (the driver accepts only 0).
    pub fn reset_peaks(&self) -> Result<()> {
        self.set(Attr::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)?;
        self.set(Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)
    }

    /// The release threshold as set.
    pub fn release_threshold(&self) -> Result<u64> {
        self.get(Attr::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
    }

    /// Returns every unused byte to the device (cuMemPoolTrimTo 0).
    pub fn trim(&self) -> Result<()> {
        // SAFETY: the pool is alive; trimming never touches live allocations.
        unsafe { mem_pool::trim_to(self.raw, 0) }.map_err(|e| anyhow!("cuMemPoolTrimTo: {e}"))
    }

    /// Allocates `bytes` from this pool, ordered on `stream`. The returned slice frees
    /// itself with `cuMemFreeAsync` on the same stream when dropped. Event tracking must
    /// be disabled on the context (the agent uses one stream), see `GpuDevice::open`.
    pub fn alloc(&self, stream: &Arc<CudaStream>, bytes: u64) -> Result<CudaSlice<u8>> {
        let len = usize::try_from(bytes).context("allocation larger than the address space")?;
        // SAFETY: the pool and the stream are alive and belong to the same device; the
        // memory is uninitialised bytes, valid for `u8`, and used only on `stream`.
        let ptr = unsafe { mem_pool::alloc_async(self.raw, len, stream.cu_stream()) }
            .map_err(|e| anyhow!("cuMemAllocFromPoolAsync({bytes} bytes): {e}"))?;
        // SAFETY: `ptr` was just allocated with `len` bytes on this stream's device and is
        // owned by nobody else; the slice takes ownership and frees it on drop.
        Ok(unsafe { stream.upgrade_device_ptr::<u8>(ptr, len) })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: the pool was created by `create` and is destroyed exactly once; the
        // owner synchronised its stream first. An error here cannot be acted on.
        let _ = unsafe { mem_pool::destroy(self.raw) };
    }
}

/// Turns off cudarc's per-buffer event tracking: the agent uses one stream, so the
/// events would only add driver calls to every allocation, and
/// `upgrade_device_ptr` would otherwise create (and unwrap) two events per buffer.
pub fn single_stream_mode(ctx: &Arc<cudarc::driver::CudaContext>) {
    // SAFETY: called right after the context is created, before any stream or buffer
    // exists; every later operation runs on a single stream, in order.
    unsafe { ctx.disable_event_tracking() };
}
