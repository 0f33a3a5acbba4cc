//! A test-only stand-in for the GPU: a simulated stream-ordered pool that records every
//! call, so the protocol's order and bookkeeping can be checked on machines without CUDA.
//! Compiled only under `cfg(test)`; no shipped command can reach it.

use std::cell::RefCell;
use std::rc::Rc;

use anyhow::{Result, anyhow, bail};

use super::{Device, DeviceReading, PoolReading};

#[derive(Debug, Default)]
struct PoolState {
    used: u64,
    reserved: u64,
    used_high: u64,
    reserved_high: u64,
}

impl PoolState {
    fn touch(&mut self) {
        self.used_high = self.used_high.max(self.used);
        self.reserved_high = self.reserved_high.max(self.reserved);
    }
}

/// A buffer of the stand-in; dropping it returns its bytes to the simulated pool.
pub struct Buf {
    bytes: u64,
    state: Rc<RefCell<PoolState>>,
}

impl Drop for Buf {
    fn drop(&mut self) {
        let mut s = self.state.borrow_mut();
        s.used -= self.bytes;
        s.touch();
    }
}

/// The stand-in device.
pub struct StandIn {
    /// Every call, in order: "sync", "read_pool", "reset_peaks", "device_level",
    /// "trim", "alloc N", "free N", "fill N", "linear".
    pub log: Vec<String>,
    state: Rc<RefCell<PoolState>>,
    /// Allocations beyond this many used bytes fail with an out-of-memory error.
    pub capacity: u64,
    /// Reserved memory grows in multiples of this (like a pool's granularity).
    pub granularity: u64,
    /// After an allocation failure, every later call fails too (a sticky error).
    pub sticky_after_oom: bool,
    broken: bool,
}

impl StandIn {
    /// A stand-in with `capacity` bytes and a 2 MiB reservation granularity.
    pub fn new(capacity: u64) -> Self {
        StandIn {
            log: Vec::new(),
            state: Rc::default(),
            capacity,
            granularity: 2 << 20,
            sticky_after_oom: false,
            broken: false,
        }
    }

    fn check(&self) -> Result<()> {
        if self.broken {
            bail!("CUDA_ERROR_ILLEGAL_ADDRESS (stand-in sticky error)");
        }
        Ok(())
    }

    /// Current used bytes (for assertions).
    pub fn used(&self) -> u64 {
        self.state.borrow().used
    }
}

impl Device for StandIn {
    type Buffer = Buf;

    fn sync(&mut self) -> Result<()> {
        self.log.push("sync".into());
        self.check()
    }

    fn read_pool(&mut self) -> Result<PoolReading> {
        self.log.push("read_pool".into());
        self.check()?;
        let s = self.state.borrow();
        Ok(PoolReading {
            used: s.used,
            reserved: s.reserved,
            used_high: s.used_high,
            reserved_high: s.reserved_high,
        })
    }

    fn reset_peaks(&mut self) -> Result<()> {
        self.log.push("reset_peaks".into());
        self.check()?;
        // Like the driver: the watermark is set to zero and rises at the next event.
        let mut s = self.state.borrow_mut();
        s.used_high = 0;
        s.reserved_high = 0;
        Ok(())
    }

    fn device_level(&mut self) -> DeviceReading {
        self.log.push("device_level".into());
        let s = self.state.borrow();
        // A fake context of 500 MiB outside the pool, as on a real device.
        let context = 500 << 20;
        DeviceReading {
            total: Some(self.capacity + context),
            free: Some(self.capacity.saturating_sub(s.reserved)),
            process_used: None,
            process_reason: Some("stand-in: no NVML".into()),
        }
    }

    fn trim(&mut self) -> Result<()> {
        self.log.push("trim".into());
        self.check()?;
        let mut s = self.state.borrow_mut();
        s.reserved = s.used.div_ceil(self.granularity) * self.granularity;
        Ok(())
    }

    fn alloc(&mut self, bytes: u64) -> Result<Buf> {
        self.log.push(format!("alloc {bytes}"));
        self.check()?;
        let mut s = self.state.borrow_mut();
        if s.used + bytes > self.capacity {
            drop(s);
            if self.sticky_after_oom {
                self.broken = true;
            }
            return Err(anyhow!("CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\""));
        }
        s.used += bytes;
        if s.used > s.reserved {
            s.reserved = s.used.div_ceil(self.granularity) * self.granularity;
        }
        s.touch();
        Ok(Buf {
            bytes,
            state: self.state.clone(),
        })
    }

    fn free(&mut self, buffer: Buf) -> Result<()> {
        self.log.push(format!("free {}", buffer.bytes));
        drop(buffer);
        self.check()
    }

    fn fill(&mut self, buffer: &mut Buf, _seed: u64, _scale: f32) -> Result<()> {
        self.log.push(format!("fill {}", buffer.bytes));
        self.check()
    }

    fn linear_relu(
        &mut self,
        x: &Buf,
        w: &Buf,
        b: &Buf,
        y: &mut Buf,
        rows: u64,
        width: u64,
    ) -> Result<()> {
        self.log.push("linear".into());
        self.check()?;
        // The shapes the real GEMM would check.
        let e = w.bytes / (width * width);
        assert_eq!(x.bytes, rows * width * e);
        assert_eq!(y.bytes, rows * width * e);
        assert_eq!(b.bytes, width * e);
        Ok(())
    }
}
