//! `gpumem-agent environment`: what a native agent can know about the GPUs here,
//! and what is missing for `measure` to run.
//!
//! It starts fast: the CUDA libraries are only probed with the dynamic loader, and no
//! CUDA context is created (free memory comes from NVML when it loads). Exit 0 means
//! `measure` can run here; exit 2 means something is missing, and the report says what.

use anyhow::Result;
use gpumem_proto::results::{ENVIRONMENT_SCHEMA, EnvironmentReport, Fact};

use crate::device::{DeviceSel, parse_device};
use crate::exit::Exit;
use crate::gpu;

/// Arguments of `environment`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Device to describe: `cuda:N`, or `all`.
    #[arg(long, default_value = "cuda:0")]
    pub device: String,
    /// Print the report as JSON (`gpumem.environment/v1`) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `environment`.
pub fn run(args: Args) -> Result<Exit> {
    let sel = parse_device(&args.device)?;
    let report = report(sel);
    if args.json {
        crate::out::outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::out::out!("{}", human(&report));
    }
    if report.missing.is_empty() {
        Ok(Exit::Ok)
    } else {
        for m in &report.missing {
            crate::out::errln!("gpumem-agent: {m}");
        }
        Ok(Exit::Unavailable)
    }
}

/// Builds the report; every unknown is `null` with a reason.
fn report(sel: DeviceSel) -> EnvironmentReport {
    let (driver_ok, cublas_ok) = gpu::libraries();
    let mut r = EnvironmentReport {
        schema: ENVIRONMENT_SCHEMA.to_owned(),
        agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        os: gpu::os(),
        cuda_driver_library: if driver_ok {
            Fact::known("libcuda loaded by the dynamic loader".to_owned())
        } else {
            Fact::unknown(gpu::NO_DRIVER)
        },
        cublas_library: if cublas_ok {
            Fact::known("libcublas loaded by the dynamic loader".to_owned())
        } else if driver_ok {
            Fact::unknown(gpu::NO_CUBLAS)
        } else {
            Fact::unknown("not probed: no CUDA driver library")
        },
        device_count: Fact::unknown("no CUDA driver library"),
        devices: Vec::new(),
        missing: Vec::new(),
    };
    if !driver_ok {
        r.missing.push(gpu::NO_DRIVER.to_owned());
        return r;
    }
    let driver = match gpu::Driver::init() {
        Ok(d) => d,
        Err(e) => {
            let why = format!("{e:#}");
            r.device_count = Fact::unknown(why.clone());
            r.missing.push(why);
            return r;
        }
    };
    r.device_count = Fact::known(driver.device_count);
    let indices: Vec<u32> = match sel {
        DeviceSel::All => (0..driver.device_count).collect(),
        DeviceSel::One(i) if i < driver.device_count => vec![i],
        DeviceSel::One(i) => {
            r.missing.push(format!(
                "cuda:{i} does not exist: {} device(s) visible (check CUDA_VISIBLE_DEVICES)",
                driver.device_count
            ));
            vec![]
        }
    };
    if driver.device_count == 0 {
        r.missing
            .push("no CUDA device visible (check CUDA_VISIBLE_DEVICES)".to_owned());
    }
    r.devices = indices.into_iter().map(|i| driver.environment(i)).collect();
    if !cublas_ok {
        r.missing.push(gpu::NO_CUBLAS.to_owned());
    }
    r
}

fn fact<T: std::fmt::Display>(f: &Fact<T>) -> String {
    match (&f.value, &f.reason) {
        (Some(v), _) => v.to_string(),
        (None, Some(r)) => format!("unknown ({r})"),
        (None, None) => "unknown".to_owned(),
    }
}

fn bytes(f: &Fact<u64>) -> String {
    match f.value {
        Some(v) => gpumem_core::Bytes(v).describe(),
        None => fact(f),
    }
}

/// The table printed without `--json`.
fn human(r: &EnvironmentReport) -> String {
    let mut s = String::new();
    let mut line = |k: &str, v: String| s.push_str(&format!("{k:<26} {v}\n"));
    line("agent", format!("gpumem-agent {}", r.agent_version));
    line("os", r.os.clone());
    line("CUDA driver library", fact(&r.cuda_driver_library));
    line("cuBLAS library", fact(&r.cublas_library));
    line("devices visible", fact(&r.device_count));
    for d in &r.devices {
        line("", String::new());
        line("device", d.device.clone());
        line("  name", fact(&d.gpu_name));
        line("  uuid", fact(&d.uuid));
        line("  compute capability", fact(&d.compute_capability));
        line("  total memory", bytes(&d.total_memory_bytes));
        line("  free memory", bytes(&d.free_memory_bytes));
        line("  driver version", fact(&d.driver_version));
        line("  CUDA driver API", fact(&d.cuda_driver_api_version));
        line("  cuBLAS", fact(&d.cublas_version));
        line("  NVML", fact(&d.nvml_version));
        line("  binding", d.binding.clone());
        line(
            "  allocator",
            format!(
                "{} — {} (release threshold {} B)",
                d.allocator.backend, d.allocator.pool, d.allocator.release_threshold_bytes
            ),
        );
        line("  os release", fact(&d.os_release));
    }
    if r.missing.is_empty() {
        s.push_str("\nmeasure can run here.\n");
    } else {
        s.push_str("\nmissing — measure cannot run here:\n");
        for m in &r.missing {
            s.push_str(&format!("  - {m}\n"));
        }
    }
    s
}
