//! Everything the agent does with CUDA: finding the driver and devices, describing them,
//! and [`GpuDevice`], the real implementation of the phase protocol's
//! [`Device`] trait.
//!
//! **Architecture invariant:** cudarc is used only inside this module. The raw FFI is in
//! three small modules that allow `unsafe` locally: [`loader`] (library presence and
//! context-free facts), [`pool`] (the measured memory pool) and [`ops`] (GEMM and the
//! activation kernel). No CUDA call is made before [`loader::driver_library_present`]
//! returned true, because cudarc panics when libcuda is missing.
//!
//! Note: the release profile sets `panic = "abort"`, so the `catch_unwind` around context
//! creation protects debug builds only; the library checks are the real defence.

mod loader;
mod nvml;
mod ops;
mod pool;
mod ptx;

use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, result as drv};
use cudarc::nvrtc::Ptx;
use gpumem_proto::results::{AllocatorInfo, Dtype, Environment, Fact};

use crate::device::{Device, DeviceReading, PoolReading};

/// The message every command prints when libcuda cannot be loaded.
pub const NO_DRIVER: &str = "no CUDA driver library (libcuda.so) found: cannot measure here";
/// The message when libcublas cannot be loaded.
pub const NO_CUBLAS: &str = "no cuBLAS library (libcublas.so) found: `measure` needs it for the matrix products (add the CUDA toolkit's lib64, or PyTorch's nvidia/cu13/lib, to LD_LIBRARY_PATH)";

/// The Rust binding and its version, pinned by a test against Cargo.lock.
pub const BINDING: &str = "cudarc 0.19.10";

/// An initialised CUDA driver with its visible devices.
#[derive(Debug)]
pub struct Driver {
    /// Devices visible to this process (respects CUDA_VISIBLE_DEVICES).
    pub device_count: u32,
    /// NVML, when libnvidia-ml loads.
    nvml: Result<nvml_wrapper::Nvml, String>,
}

/// Whether libcuda and libcublas can be loaded, without calling either.
pub fn libraries() -> (bool, bool) {
    let driver = loader::driver_library_present();
    // cuBLAS is only probed when the driver exists; without it nothing can run anyway.
    let cublas = driver && loader::cublas_library_present();
    (driver, cublas)
}

impl Driver {
    /// Loads the driver (cuInit) and counts devices. Errors are "cannot measure here".
    pub fn init() -> Result<Driver> {
        if !loader::driver_library_present() {
            bail!(NO_DRIVER);
        }
        guarded("cuInit", drv::init)
            .and_then(|r| r.map_err(|e| anyhow!("{e}")))
            .context("the CUDA driver could not be initialised (no device, or driver/library mismatch): cannot measure here")?;
        let count = guarded("cuDeviceGetCount", drv::device::get_count)?
            .map_err(|e| anyhow!("cuDeviceGetCount: {e}"))?;
        let device_count = u32::try_from(count).unwrap_or(0);
        Ok(Driver {
            device_count,
            nvml: nvml::init(),
        })
    }

    /// The environment facts for device `index`, read without creating a context; free memory
    /// comes from NVML when it loads (a context costs time and memory `environment`
    /// should not spend).
    pub fn environment(&self, index: u32) -> Environment {
        let mut env = base_environment(index);
        let dev = match i32::try_from(index)
            .map_err(|e| anyhow!("{e}"))
            .and_then(|i| drv::device::get(i).map_err(|e| anyhow!("cuDeviceGet({i}): {e}")))
        {
            Ok(d) => d,
            Err(e) => {
                let reason = format!("{e:#}");
                env.gpu_name = Fact::unknown(reason.clone());
                env.uuid = Fact::unknown(reason.clone());
                env.compute_capability = Fact::unknown(reason.clone());
                env.total_memory_bytes = Fact::unknown(reason.clone());
                env.free_memory_bytes = Fact::unknown(reason);
                return env;
            }
        };
        env.gpu_name = Fact::from_result(
            drv::device::get_name(dev).map_err(|e| format!("cuDeviceGetName: {e}")),
        );
        env.uuid = Fact::from_result(
            drv::device::get_uuid(dev)
                .map(|u| format_uuid(&u.bytes))
                .map_err(|e| format!("cuDeviceGetUuid: {e}")),
        );
        let (cc, total) = loader::device_facts(dev);
        env.compute_capability = Fact::from_result(
            cc.map(|(a, b)| format!("{a}.{b}"))
                .map_err(|e| format!("{e:#}")),
        );
        env.total_memory_bytes = Fact::from_result(total.map_err(|e| format!("{e:#}")));
        env.free_memory_bytes = match (&self.nvml, &env.uuid.value) {
            (Ok(n), Some(uuid)) => Fact::from_result(nvml::free_memory(n, uuid)),
            (Err(reason), _) => Fact::unknown(format!(
                "{reason}; `measure` reads it with cuMemGetInfo inside its context"
            )),
            (Ok(_), None) => Fact::unknown("no UUID to find the device in NVML"),
        };
        match &self.nvml {
            Ok(n) => {
                env.driver_version = Fact::from_result(nvml::driver_version(n));
                env.nvml_version = Fact::from_result(nvml::nvml_version(n));
            }
            Err(reason) => {
                env.driver_version = Fact::unknown(reason.clone());
                env.nvml_version = Fact::unknown(reason.clone());
            }
        }
        env
    }

    /// Opens device `index` for measuring `dtype`: context, stream, cuBLAS, kernel, pool.
    pub fn open(&self, index: u32, dtype: Dtype) -> Result<GpuDevice> {
        if !loader::cublas_library_present() {
            bail!(NO_CUBLAS);
        }
        if index >= self.device_count {
            bail!(
                "cuda:{index} does not exist: {} device(s) visible (check CUDA_VISIBLE_DEVICES)",
                self.device_count
            );
        }
        let ordinal = index as usize;
        let ctx = guarded("CudaContext::new", || CudaContext::new(ordinal))?
            .map_err(|e| anyhow!("creating a CUDA context on cuda:{index}: {e}"))?;
        pool::single_stream_mode(&ctx);
        let stream = ctx
            .new_stream()
            .map_err(|e| anyhow!("creating a stream: {e}"))?;
        let blas =
            CudaBlas::new(stream.clone()).map_err(|e| anyhow!("creating a cuBLAS handle: {e}"))?;
        let module = ctx
            .load_module(Ptx::from_src(ptx::SOURCE))
            .map_err(|e| anyhow!("loading the activation kernels (PTX JIT): {e}"))?;
        let name = match dtype {
            Dtype::Float32 => ptx::KERNELS[0],
            Dtype::Float16 => ptx::KERNELS[1],
            Dtype::Bfloat16 => ptx::KERNELS[2],
        };
        let func = module
            .load_function(name)
            .map_err(|e| anyhow!("finding kernel {name}: {e}"))?;
        let pool = pool::Pool::create(index as i32).context("creating the measured memory pool")?;
        let threshold = pool.release_threshold().unwrap_or(u64::MAX);
        let uuid = drv::device::get_uuid(ctx.cu_device())
            .map(|u| format_uuid(&u.bytes))
            .ok();
        let mut environment = self.environment(index);
        environment.free_memory_bytes = Fact::from_result(
            ctx.mem_get_info()
                .map(|(free, _)| free as u64)
                .map_err(|e| format!("cuMemGetInfo: {e}")),
        );
        environment.allocator.release_threshold_bytes = threshold;
        // NVML handles are not shareable between owners; a second init is cheap.
        let (nvml, nvml_uuid) = match (nvml::init(), uuid) {
            (Ok(n), Some(u)) => (Some(n), Ok(u)),
            (Err(e), _) => (None, Err(e)),
            (Ok(_), None) => (None, Err("no UUID to find the device in NVML".to_owned())),
        };
        Ok(GpuDevice {
            blas,
            func,
            pool,
            stream,
            ctx,
            dtype,
            nvml_uuid,
            nvml,
            environment,
        })
    }
}

/// Runs a cudarc call that may panic (missing symbol) and turns a panic into an error.
fn guarded<T>(what: &str, f: impl FnOnce() -> T + std::panic::UnwindSafe) -> Result<T> {
    std::panic::catch_unwind(f).map_err(|_| {
        anyhow!("{what} panicked inside cudarc: the CUDA driver library is missing or too old")
    })
}

/// The environment with only what is known without any CUDA call.
pub fn base_environment(index: u32) -> Environment {
    let pending = || Fact::unknown("not read");
    Environment {
        device: format!("cuda:{index}"),
        index,
        gpu_name: pending(),
        uuid: pending(),
        compute_capability: pending(),
        total_memory_bytes: Fact::unknown("not read"),
        free_memory_bytes: Fact::unknown("not read"),
        driver_version: pending(),
        cuda_driver_api_version: if loader::driver_library_present() {
            Fact::from_result(loader::driver_api_version().map_err(|e| format!("{e:#}")))
        } else {
            Fact::unknown(NO_DRIVER)
        },
        cublas_version: if loader::driver_library_present() && loader::cublas_library_present() {
            Fact::from_result(loader::cublas_version().map_err(|e| format!("{e:#}")))
        } else {
            Fact::unknown("libcublas.so not found by the dynamic loader")
        },
        nvml_version: pending(),
        binding: BINDING.to_owned(),
        allocator: allocator_info(u64::MAX),
        agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        os: os(),
        os_release: Fact::from_result(
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .map_err(|e| format!("/proc/sys/kernel/osrelease: {e}")),
        ),
    }
}

/// The measured allocator and its settings.
pub fn allocator_info(release_threshold_bytes: u64) -> AllocatorInfo {
    AllocatorInfo {
        backend: "cuda_mempool".to_owned(),
        pool: "dedicated device-local pool from cuMemPoolCreate; buffers from cuMemAllocFromPoolAsync / cuMemFreeAsync on one stream".to_owned(),
        release_threshold_bytes,
        allocated_counter: "CU_MEMPOOL_ATTR_USED_MEM_CURRENT (peak: USED_MEM_HIGH)".to_owned(),
        reserved_counter: "CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT (peak: RESERVED_MEM_HIGH)".to_owned(),
        peak_reset: "USED_MEM_HIGH and RESERVED_MEM_HIGH set to 0; reported peak = max(watermark, start, end)".to_owned(),
    }
}

/// `"linux x86_64"`.
pub fn os() -> String {
    format!("{} {}", std::env::consts::OS, std::env::consts::ARCH)
}

/// nvidia-smi's form: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
fn format_uuid(bytes: &[std::ffi::c_char; 16]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{:02x}", *b as u8)).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex[0..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..16].concat()
    )
}

/// One opened device, ready to run the protocol.
///
/// Field order is drop order: cuBLAS and the kernel go first, then the pool (after
/// [`Drop`] has synchronised the stream), then the stream and the context.
pub struct GpuDevice {
    blas: CudaBlas,
    func: CudaFunction,
    pool: pool::Pool,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
    dtype: Dtype,
    nvml_uuid: Result<String, String>,
    nvml: Option<nvml_wrapper::Nvml>,
    environment: Environment,
}

impl GpuDevice {
    /// The environment as read when the device was opened (free memory from
    /// cuMemGetInfo inside the context).
    pub fn environment(&self) -> &Environment {
        &self.environment
    }
}

impl Drop for GpuDevice {
    fn drop(&mut self) {
        // Frees are stream-ordered: let them finish before the pool is destroyed.
        let _ = self.stream.synchronize();
    }
}

/// Host-side generator for the synthetic data: splitmix64, so runs are reproducible.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `count` values uniform in `[-scale, scale)`, encoded as `dtype`'s little-endian bytes.
pub(crate) fn synthetic_bytes(dtype: Dtype, count: usize, seed: u64, scale: f32) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(count * dtype.size_bytes() as usize);
    for _ in 0..count {
        // 24 random bits → [0, 1) exactly representable in f32.
        let unit = (splitmix64(&mut state) >> 40) as f32 / (1u32 << 24) as f32;
        let v = (2.0 * unit - 1.0) * scale;
        match dtype {
            Dtype::Float32 => out.extend_from_slice(&v.to_le_bytes()),
            Dtype::Float16 => out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
            Dtype::Bfloat16 => out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
        }
    }
    out
}

/// Elements generated on the host per fill; the rest is replicated on the device.
const FILL_CHUNK_ELEMENTS: usize = 1 << 20;

impl Device for GpuDevice {
    type Buffer = CudaSlice<u8>;

    fn sync(&mut self) -> Result<()> {
        // cuCtxSynchronize: every stream of the device's context, like torch.cuda.synchronize.
        self.ctx
            .synchronize()
            .map_err(|e| anyhow!("cuCtxSynchronize: {e}"))
    }

    fn read_pool(&mut self) -> Result<PoolReading> {
        self.pool.read()
    }

    fn reset_peaks(&mut self) -> Result<()> {
        self.pool.reset_peaks()
    }

    fn device_level(&mut self) -> DeviceReading {
        let (total, free) = match self.ctx.mem_get_info() {
            Ok((free, total)) => (Some(total as u64), Some(free as u64)),
            Err(_) => (None, None),
        };
        let process = match (&self.nvml, &self.nvml_uuid) {
            (Some(n), Ok(uuid)) => nvml::process_used(n, uuid),
            (None, Err(reason)) | (Some(_), Err(reason)) => Err(reason.clone()),
            (None, Ok(_)) => Err("NVML unavailable".to_owned()),
        };
        let (process_used, process_reason) = match process {
            Ok(b) => (Some(b), None),
            Err(r) => (None, Some(r)),
        };
        DeviceReading {
            total,
            free,
            process_used,
            process_reason,
        }
    }

    fn trim(&mut self) -> Result<()> {
        self.pool.trim()
    }

    fn alloc(&mut self, bytes: u64) -> Result<Self::Buffer> {
        self.pool.alloc(&self.stream, bytes)
    }

    fn free(&mut self, buffer: Self::Buffer) -> Result<()> {
        // Dropping issues cuMemFreeAsync on the stream; errors surface at the next sync.
        drop(buffer);
        Ok(())
    }

    fn fill(&mut self, buffer: &mut Self::Buffer, seed: u64, scale: f32) -> Result<()> {
        let size = self.dtype.size_bytes() as usize;
        let total = buffer.len();
        let elements = total / size;
        let first = elements.min(FILL_CHUNK_ELEMENTS);
        let host = synthetic_bytes(self.dtype, first, seed, scale);
        let mut head = buffer.slice_mut(0..host.len());
        self.stream
            .memcpy_htod(&host, &mut head)
            .map_err(|e| anyhow!("copying synthetic data to the device: {e}"))?;
        // Replicate on the device by doubling: far faster than uploading gigabytes, and
        // the memory measured does not depend on the values.
        let mut filled = host.len();
        while filled < total {
            let k = filled.min(total - filled);
            let (done, mut rest) = buffer.split_at_mut(filled);
            let src = done.slice(0..k);
            let mut dst = rest.slice_mut(0..k);
            self.stream
                .memcpy_dtod(&src, &mut dst)
                .map_err(|e| anyhow!("replicating synthetic data on the device: {e}"))?;
            filled += k;
        }
        Ok(())
    }

    fn linear_relu(
        &mut self,
        x: &Self::Buffer,
        w: &Self::Buffer,
        b: &Self::Buffer,
        y: &mut Self::Buffer,
        rows: u64,
        width: u64,
    ) -> Result<()> {
        ops::gemm(&self.blas, &self.stream, self.dtype, x, w, y, rows, width)?;
        let elements = rows
            .checked_mul(width)
            .ok_or_else(|| anyhow!("rows × width overflows"))?;
        ops::bias_relu(&self.stream, &self.func, y, b, elements, width)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_constant_matches_cargo_lock() {
        let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock"))
            .expect("Cargo.lock at the workspace root");
        let version = BINDING
            .strip_prefix("cudarc ")
            .expect("BINDING starts with cudarc");
        assert!(
            lock.contains(&format!("name = \"cudarc\"\nversion = \"{version}\"")),
            "BINDING says {BINDING} but Cargo.lock pins another cudarc version: update BINDING"
        );
    }

    #[test]
    fn synthetic_data_is_seeded_bounded_and_encoded_per_dtype() {
        let a = synthetic_bytes(Dtype::Float32, 1000, 42, 0.5);
        assert_eq!(a, synthetic_bytes(Dtype::Float32, 1000, 42, 0.5));
        assert_ne!(a, synthetic_bytes(Dtype::Float32, 1000, 43, 0.5));
        assert_eq!(a.len(), 4000);
        for c in a.chunks_exact(4) {
            let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            assert!((-0.5..0.5).contains(&v), "{v}");
        }
        assert_eq!(synthetic_bytes(Dtype::Float16, 10, 1, 1.0).len(), 20);
        assert_eq!(synthetic_bytes(Dtype::Bfloat16, 10, 1, 1.0).len(), 20);
    }

    #[test]
    fn uuid_is_formatted_like_nvidia_smi() {
        let bytes: [std::ffi::c_char; 16] = [
            0x12,
            0x34,
            0x56,
            0x78,
            0x9a_u8 as _,
            0xbc_u8 as _,
            0xde_u8 as _,
            0xf0_u8 as _,
            0,
            1,
            2,
            3,
            4,
            5,
            6,
            7,
        ];
        assert_eq!(
            format_uuid(&bytes),
            "GPU-12345678-9abc-def0-0001-020304050607"
        );
    }

    #[test]
    fn without_libcuda_init_refuses_cleanly() {
        if loader::driver_library_present() {
            gpumem_e2e::skip(
                "gpu::tests::without_libcuda_init_refuses_cleanly",
                gpumem_e2e::Missing::Machine,
                "libcuda is present; this test checks the no-driver path",
            );
            return;
        }
        let err = Driver::init().unwrap_err();
        assert_eq!(format!("{err:#}"), NO_DRIVER);
    }
}
