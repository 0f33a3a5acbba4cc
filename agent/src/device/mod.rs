//! Device access the commands share: what the phase protocol needs from a GPU (the
//! [`Device`] trait and its readings), which devices `--device` selects, the debug-only
//! switch that lets the tests drive whole runs without one, and the recording stand-in
//! that implements the trait on the CPU. A leaf: it imports no other module of the agent.

use anyhow::{Result, bail};

// The test-only stand-in: in unit tests, and in debug builds behind the SYNTHETIC test
// switch ([`SYNTHETIC_TEST_SWITCH`]) so the cluster tests can drive whole `measure` and
// `bisect` runs without a GPU; release builds do not contain it.
#[cfg(any(test, debug_assertions))]
#[cfg_attr(not(test), allow(dead_code))]
pub mod standin;

/// Environment variable that, in debug builds only, lets `run` proceed without a GPU and
/// labels everything SYNTHETIC: the switch the tests use to drive the whole pipeline on
/// CPU. Release builds do not contain it.
pub const SYNTHETIC_TEST_SWITCH: &str = "GPUMEM_RUN_SYNTHETIC_FOR_TESTS";
/// Whether the debug-only test switch is on.
pub(crate) fn synthetic_test_switch() -> bool {
    #[cfg(debug_assertions)]
    {
        std::env::var_os(SYNTHETIC_TEST_SWITCH).is_some_and(|v| v == "1")
    }
    #[cfg(not(debug_assertions))]
    {
        false
    }
}

/// The pool's four counters read at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolReading {
    /// Bytes in use by live allocations (`USED_MEM_CURRENT`).
    pub used: u64,
    /// Bytes the pool holds from the device (`RESERVED_MEM_CURRENT`).
    pub reserved: u64,
    /// High watermark of `used` since the last reset (`USED_MEM_HIGH`).
    pub used_high: u64,
    /// High watermark of `reserved` since the last reset (`RESERVED_MEM_HIGH`).
    pub reserved_high: u64,
}

/// Device-level memory at one instant; every figure may be unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceReading {
    /// Total device memory (cuMemGetInfo).
    pub total: Option<u64>,
    /// Free device memory, all processes (cuMemGetInfo).
    pub free: Option<u64>,
    /// This process's memory per NVML.
    pub process_used: Option<u64>,
    /// Why `process_used` is unknown.
    pub process_reason: Option<String>,
}

/// What the protocol needs from a GPU. Every method maps to one documented driver or
/// library call in the real implementation; errors carry the driver's text.
pub trait Device {
    /// A device buffer owned by the protocol; dropping it returns it to the pool.
    type Buffer;

    /// Waits for all work on the measured device (the protocol's sync boundary).
    fn sync(&mut self) -> Result<()>;
    /// Reads the four pool counters.
    fn read_pool(&mut self) -> Result<PoolReading>;
    /// Resets both high watermarks.
    fn reset_peaks(&mut self) -> Result<()>;
    /// Reads device-level memory; never fails, unknown figures are `None`.
    fn device_level(&mut self) -> DeviceReading;
    /// Returns unused pool memory to the device (`--trim-between-repeats`).
    fn trim(&mut self) -> Result<()>;
    /// Allocates `bytes` from the measured pool.
    fn alloc(&mut self, bytes: u64) -> Result<Self::Buffer>;
    /// Returns a buffer to the pool.
    fn free(&mut self, buffer: Self::Buffer) -> Result<()>;
    /// Fills a buffer with seeded values uniform in `[-scale, scale)`.
    fn fill(&mut self, buffer: &mut Self::Buffer, seed: u64, scale: f32) -> Result<()>;
    /// `y = relu(x · wᵀ + b)` for `x: [rows, width]`, `w: [width, width]`, `b: [width]`.
    fn linear_relu(
        &mut self,
        x: &Self::Buffer,
        w: &Self::Buffer,
        b: &Self::Buffer,
        y: &mut Self::Buffer,
        rows: u64,
        width: u64,
    ) -> Result<()>;
}

/// Which devices `--device` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSel {
    /// `cuda:N`.
    One(u32),
    /// `all`.
    All,
}

/// Parses `cuda:N` / `all`.
pub fn parse_device(s: &str) -> Result<DeviceSel> {
    if s == "all" {
        return Ok(DeviceSel::All);
    }
    let Some(n) = s.strip_prefix("cuda:") else {
        bail!("--device {s:?}: expected cuda:N (e.g. cuda:0) or all");
    };
    n.parse::<u32>()
        .map(DeviceSel::One)
        .map_err(|_| anyhow::anyhow!("--device {s:?}: N in cuda:N must be a device number"))
}
