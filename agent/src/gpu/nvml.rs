//! Per-process device memory and driver facts through NVML (`nvml-wrapper`).
//!
//! NVML is optional: `nvml-wrapper` loads libnvidia-ml at run time and returns an error
//! (never panics) when it is missing, in which case the per-process column is `null`
//! with the reason. NVML's scope is the whole process on the device (context, cuBLAS
//! workspace, every pool), so it is reported beside the pool figures, never added to them.

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;

/// An initialised NVML, or why it is not available.
pub fn init() -> Result<Nvml, String> {
    Nvml::init().map_err(|e| format!("NVML unavailable (libnvidia-ml): {e}"))
}

/// Driver version string, e.g. `"580.95.05"`.
pub fn driver_version(nvml: &Nvml) -> Result<String, String> {
    nvml.sys_driver_version().map_err(|e| format!("NVML: {e}"))
}

/// NVML library version.
pub fn nvml_version(nvml: &Nvml) -> Result<String, String> {
    nvml.sys_nvml_version().map_err(|e| format!("NVML: {e}"))
}

/// Free memory of the device with this UUID, per NVML.
pub fn free_memory(nvml: &Nvml, uuid: &str) -> Result<u64, String> {
    let dev = nvml
        .device_by_uuid(uuid)
        .map_err(|e| format!("NVML device {uuid}: {e}"))?;
    dev.memory_info()
        .map(|m| m.free)
        .map_err(|e| format!("NVML memory info: {e}"))
}

/// Device memory used by this process on the device with this UUID.
pub fn process_used(nvml: &Nvml, uuid: &str) -> Result<u64, String> {
    let dev = nvml
        .device_by_uuid(uuid)
        .map_err(|e| format!("NVML device {uuid}: {e}"))?;
    let procs = dev
        .running_compute_processes()
        .map_err(|e| format!("NVML running processes: {e}"))?;
    let pid = std::process::id();
    match procs.iter().find(|p| p.pid == pid) {
        Some(p) => match p.used_gpu_memory {
            UsedGpuMemory::Used(bytes) => Ok(bytes),
            UsedGpuMemory::Unavailable => {
                Err("NVML reports this process's memory as unavailable".to_owned())
            }
        },
        // Not listed is not zero: in a container NVML lists host PIDs, not ours.
        None => Err(format!(
            "this process (pid {pid}) is not in NVML's process list (a container's PID namespace hides it)"
        )),
    }
}
