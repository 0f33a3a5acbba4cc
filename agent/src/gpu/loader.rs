//! Whether the CUDA libraries can be loaded, and the few facts read without a context.
//!
//! cudarc loads libcuda/libcublas lazily and **panics** when a symbol's library is
//! absent, so every other GPU call in the agent is reached only after
//! [`driver_library_present`] (and, for cuBLAS, [`cublas_library_present`]) said yes.
//! The calls here are `unsafe` only because they are raw FFI; each is documented.
#![allow(unsafe_code)]

use anyhow::{Result, anyhow};
use cudarc::cublas::sys as cublas_sys;
use cudarc::driver::sys as driver_sys;

/// True when libcuda (the driver API) can be opened by the dynamic loader.
pub fn driver_library_present() -> bool {
    // SAFETY: only tries `dlopen` on candidate names; no symbol is called.
    unsafe { driver_sys::is_culib_present() }
}

/// True when libcublas can be opened by the dynamic loader.
pub fn cublas_library_present() -> bool {
    // SAFETY: only tries `dlopen` on candidate names; no symbol is called.
    unsafe { cublas_sys::is_culib_present() }
}

/// CUDA driver API version as `"major.minor"` (cuDriverGetVersion; needs no cuInit).
/// Call only after [`driver_library_present`].
pub fn driver_api_version() -> Result<String> {
    let mut v: std::ffi::c_int = 0;
    // SAFETY: `v` is a valid out-pointer for the call's duration.
    unsafe { driver_sys::cuDriverGetVersion(&mut v) }
        .result()
        .map_err(|e| anyhow!("cuDriverGetVersion: {e}"))?;
    Ok(format!("{}.{}", v / 1000, (v % 1000) / 10))
}

/// cuBLAS library version as `"major.minor.patch"` (cublasGetProperty; needs no
/// handle). Call only after [`cublas_library_present`].
pub fn cublas_version() -> Result<String> {
    let mut parts = [0 as std::ffi::c_int; 3];
    let kinds = [
        cublas_sys::libraryPropertyType::MAJOR_VERSION,
        cublas_sys::libraryPropertyType::MINOR_VERSION,
        cublas_sys::libraryPropertyType::PATCH_LEVEL,
    ];
    for (slot, kind) in parts.iter_mut().zip(kinds) {
        // SAFETY: `slot` is a valid out-pointer for the call's duration.
        unsafe { cublas_sys::cublasGetProperty(kind, slot) }
            .result()
            .map_err(|e| anyhow!("cublasGetProperty: {e}"))?;
    }
    Ok(format!("{}.{}.{}", parts[0], parts[1], parts[2]))
}

/// Compute capability `(major, minor)` and total memory of device `ordinal`, read with
/// device attributes (no context needed). Call only after cuInit succeeded.
pub fn device_facts(dev: driver_sys::CUdevice) -> (Result<(i32, i32)>, Result<u64>) {
    use cudarc::driver::result::device;
    use driver_sys::CUdevice_attribute as A;
    // SAFETY: `dev` comes from cuDeviceGet for a valid ordinal (caller's contract).
    let cc = unsafe {
        device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).and_then(
            |major| {
                device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
                    .map(|minor| (major, minor))
            },
        )
    }
    .map_err(|e| anyhow!("cuDeviceGetAttribute: {e}"));
    // SAFETY: as above.
    let total = unsafe { device::total_mem(dev) }
        .map(|b| b as u64)
        .map_err(|e| anyhow!("cuDeviceTotalMem: {e}"));
    (cc, total)
}
