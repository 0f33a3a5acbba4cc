//! The run's place in the cluster ([`RunContext`]): host name, the scheduler's job and
//! task ids from the environment the scheduler gave this process, and the identity of
//! each device (NVML: index, UUID, PCI bus id, name), so that a document joins DCGM's
//! series and the scheduler's accounting.
//!
//! Reading is split in two: [`from_env`] is a pure function of an environment lookup
//! (tested with made-up environments), and [`current`] feeds it this process's
//! environment, host name and NVML.

use gpumem_proto::context::{
    DeviceIdentity, KubernetesContext, RunContext, SlurmContext, TorchrunContext,
};

/// Longest value kept from one environment variable: ids are short; anything longer is
/// not an id and is dropped rather than carried into every document and label.
const MAX_VALUE: usize = 256;

/// One NVML device as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlDevice {
    /// NVML index.
    pub index: u32,
    /// `GPU-…`.
    pub uuid: String,
    /// `00000000:65:00.0`.
    pub pci_bus_id: Option<String>,
    /// Product name.
    pub name: Option<String>,
}

/// This process's context: its environment, host name and, unless `synthetic`, the
/// devices NVML lists.
pub fn current(synthetic: bool) -> RunContext {
    let devices = if synthetic {
        Err("SYNTHETIC test run: no device was read".to_owned())
    } else {
        nvml_devices()
    };
    from_env(
        &|k| std::env::var(k).ok(),
        hostname(),
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        devices,
    )
}

/// The host name: the kernel's UTS node name, which `gethostname(2)` returns and
/// `/proc/sys/kernel/hostname` shows (Linux `proc(5)`), read without unsafe code.
pub fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .and_then(clean)
}

/// Every device NVML lists, or why none could be read.
fn nvml_devices() -> Result<Vec<NvmlDevice>, String> {
    let nvml =
        nvml_wrapper::Nvml::init().map_err(|e| format!("NVML unavailable (libnvidia-ml): {e}"))?;
    let count = nvml
        .device_count()
        .map_err(|e| format!("NVML device count: {e}"))?;
    let mut out = Vec::new();
    for index in 0..count {
        let Ok(dev) = nvml.device_by_index(index) else {
            continue;
        };
        let Ok(uuid) = dev.uuid() else { continue };
        out.push(NvmlDevice {
            index,
            uuid,
            pci_bus_id: dev.pci_info().ok().map(|p| p.bus_id),
            name: dev.name().ok(),
        });
    }
    Ok(out)
}

/// Keeps a value that looks like an id: non-empty, bounded, printable, no spaces.
fn clean(v: String) -> Option<String> {
    let v = v.trim().to_owned();
    (!v.is_empty() && v.len() <= MAX_VALUE && v.chars().all(|c| c.is_ascii_graphic())).then_some(v)
}

/// The context for an environment `env`, a host name, this process's id and start
/// time, and the devices NVML listed (or why not).
pub fn from_env(
    env: &dyn Fn(&str) -> Option<String>,
    hostname: Option<String>,
    pid: u32,
    started_unix_s: u64,
    devices: Result<Vec<NvmlDevice>, String>,
) -> RunContext {
    let get = |k: &str| env(k).and_then(clean);
    let num = |k: &str| get(k).and_then(|v| v.parse::<u32>().ok());
    let slurm = get("SLURM_JOB_ID").map(|job_id| SlurmContext {
        job_id,
        array_job_id: get("SLURM_ARRAY_JOB_ID"),
        array_task_id: num("SLURM_ARRAY_TASK_ID"),
        step_id: get("SLURM_STEP_ID"),
        procid: num("SLURM_PROCID"),
        localid: num("SLURM_LOCALID"),
        nodeid: num("SLURM_NODEID"),
        job_name: get("SLURM_JOB_NAME"),
        cluster_name: get("SLURM_CLUSTER_NAME"),
    });
    // KUBERNETES_SERVICE_HOST is set in every container of a pod (Kubernetes,
    // "Container Environment Variables"): the pod's name then comes from the downward
    // API variables our manifests set, else from HOSTNAME, which is the pod's name.
    let in_pod = get("KUBERNETES_SERVICE_HOST").is_some() || get("POD_NAME").is_some();
    let kubernetes = in_pod.then(|| KubernetesContext {
        pod: get("POD_NAME").or_else(|| get("HOSTNAME")),
        namespace: get("POD_NAMESPACE"),
        job_completion_index: num("JOB_COMPLETION_INDEX"),
    });
    let torchrun = TorchrunContext {
        rank: num("RANK"),
        local_rank: num("LOCAL_RANK"),
        world_size: num("WORLD_SIZE"),
    };
    let torchrun = (torchrun != TorchrunContext::default()).then_some(torchrun);
    let cuda_visible_devices = env("CUDA_VISIBLE_DEVICES").filter(|v| v.len() <= 4096);
    let (devices, devices_reason) = match devices {
        Ok(list) if list.is_empty() => (Vec::new(), Some("NVML lists no device".to_owned())),
        Ok(list) => (
            identify(
                list,
                cuda_visible_devices.as_deref(),
                env("CUDA_DEVICE_ORDER").as_deref(),
            ),
            None,
        ),
        Err(why) => (Vec::new(), Some(why)),
    };
    let run_id = run_id(
        slurm.as_ref(),
        kubernetes.as_ref(),
        hostname.as_deref(),
        pid,
        started_unix_s,
    );
    RunContext {
        run_id,
        hostname,
        slurm,
        kubernetes,
        torchrun,
        cuda_visible_devices,
        devices,
        devices_reason,
    }
}

/// `slurm-<job>[-<procid>]`, the pod's name, or `<host>-<pid>-<start>`: unique per
/// task, stable when the same task's file is exported again.
fn run_id(
    slurm: Option<&SlurmContext>,
    k8s: Option<&KubernetesContext>,
    hostname: Option<&str>,
    pid: u32,
    started: u64,
) -> String {
    if let Some(s) = slurm {
        return match s.procid {
            Some(p) => format!("slurm-{}-{p}", s.job_id),
            None => format!("slurm-{}", s.job_id),
        };
    }
    if let Some(pod) = k8s.and_then(|k| k.pod.as_deref()) {
        return pod.to_owned();
    }
    format!("{}-{pid}-{started}", hostname.unwrap_or("host"))
}

/// NVML's devices with the CUDA ordinal each has in this process, where certain.
///
/// CUDA numbers devices fastest first unless `CUDA_DEVICE_ORDER=PCI_BUS_ID`, and then
/// renumbers the ones `CUDA_VISIBLE_DEVICES` keeps in the order it lists them (CUDA C++
/// Programming Guide, "CUDA Environment Variables"); NVML always counts in PCI order. So
/// the ordinal is certain when the visible list names UUIDs, when the order is PCI's,
/// or when one device is visible; otherwise it is left out rather than guessed.
fn identify(
    list: Vec<NvmlDevice>,
    visible: Option<&str>,
    order: Option<&str>,
) -> Vec<DeviceIdentity> {
    let pci_order = order == Some("PCI_BUS_ID");
    let mut ordinals: Vec<Option<u32>> = vec![None; list.len()];
    match visible.map(str::trim) {
        Some(v) if !v.is_empty() => {
            let entries: Vec<&str> = v.split(',').map(str::trim).collect();
            let all_uuids = entries.iter().all(|e| e.starts_with("GPU-"));
            let mut found = Vec::new();
            for e in &entries {
                // A UUID may be given by a unique prefix; an index by its number.
                let hit = if e.starts_with("GPU-") {
                    let m: Vec<usize> = list
                        .iter()
                        .enumerate()
                        .filter(|(_, d)| d.uuid.starts_with(e))
                        .map(|(i, _)| i)
                        .collect();
                    (m.len() == 1).then(|| m[0])
                } else {
                    e.parse::<u32>()
                        .ok()
                        .and_then(|n| list.iter().position(|d| d.index == n))
                };
                // CUDA stops at the first entry it cannot use.
                let Some(i) = hit else { break };
                found.push(i);
            }
            if all_uuids || pci_order || found.len() == 1 {
                for (ordinal, i) in found.into_iter().enumerate() {
                    if let (Some(slot), Ok(o)) = (ordinals.get_mut(i), u32::try_from(ordinal)) {
                        *slot = Some(o);
                    }
                }
            }
        }
        _ => {
            if pci_order || list.len() == 1 {
                for (i, slot) in ordinals.iter_mut().enumerate() {
                    *slot = u32::try_from(i).ok();
                }
            }
        }
    }
    list.into_iter()
        .zip(ordinals)
        .map(|(d, cuda_ordinal)| DeviceIdentity {
            index: d.index,
            cuda_ordinal,
            uuid: d.uuid,
            pci_bus_id: d.pci_bus_id,
            name: d.name,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn gpus(n: u32) -> Vec<NvmlDevice> {
        (0..n)
            .map(|i| NvmlDevice {
                index: i,
                uuid: format!("GPU-{i}{i}{i}{i}aaaa-0000"),
                pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x10 + i)),
                name: Some("NVIDIA H100 80GB HBM3".into()),
            })
            .collect()
    }

    #[test]
    fn a_slurm_array_task_records_its_ids_and_names_its_run() {
        let e = env(&[
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_ARRAY_JOB_ID", "4240"),
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_PROCID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NODEID", "0"),
            ("SLURM_JOB_NAME", "gpumem-bisect"),
        ]);
        let c = from_env(&e, Some("node1".into()), 7, 100, Ok(gpus(1)));
        let s = c.slurm.as_ref().unwrap();
        assert_eq!(s.job_id, "4242");
        assert_eq!(s.array_job_id.as_deref(), Some("4240"));
        assert_eq!(s.array_task_id, Some(2));
        assert_eq!(s.procid, Some(0));
        assert_eq!(c.run_id, "slurm-4242-0");
        assert_eq!(c.hpc_job(), Some("4242"));
        assert!(c.kubernetes.is_none() && c.torchrun.is_none());
        // One device: its ordinal is certain.
        assert_eq!(c.devices[0].cuda_ordinal, Some(0));
        assert_eq!(
            c.device_for_ordinal(0).unwrap().pci_bus_id.as_deref(),
            Some("00000000:10:00.0")
        );
    }

    #[test]
    fn a_pod_of_an_indexed_job_records_pod_namespace_and_index() {
        let e = env(&[
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
            ("POD_NAME", "gpumem-bisect-r1-3-abcde"),
            ("POD_NAMESPACE", "ml"),
            ("JOB_COMPLETION_INDEX", "3"),
            ("RANK", "1"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "2"),
        ]);
        let c = from_env(
            &e,
            Some("gpumem-bisect-r1-3-abcde".into()),
            1,
            0,
            Err("no NVML".into()),
        );
        let k = c.kubernetes.as_ref().unwrap();
        assert_eq!(k.pod.as_deref(), Some("gpumem-bisect-r1-3-abcde"));
        assert_eq!(k.namespace.as_deref(), Some("ml"));
        assert_eq!(k.job_completion_index, Some(3));
        assert_eq!(c.run_id, "gpumem-bisect-r1-3-abcde");
        assert_eq!(c.torchrun.unwrap().rank, Some(1));
        assert!(c.devices.is_empty());
        assert_eq!(c.devices_reason.as_deref(), Some("no NVML"));
    }

    #[test]
    fn outside_a_scheduler_the_run_id_is_host_pid_and_start() {
        let c = from_env(&env(&[]), Some("ws".into()), 99, 1700, Ok(Vec::new()));
        assert_eq!(c.run_id, "ws-99-1700");
        assert!(c.slurm.is_none() && c.kubernetes.is_none());
        assert_eq!(c.devices_reason.as_deref(), Some("NVML lists no device"));
    }

    #[test]
    fn hostile_values_are_dropped_not_carried_into_labels() {
        let long = "9".repeat(MAX_VALUE + 1);
        let pairs = [
            ("SLURM_JOB_ID", "12 34"),
            ("SLURM_PROCID", "-1"),
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
            ("POD_NAME", long.as_str()),
        ];
        let e = env(&pairs);
        let c = from_env(&e, None, 1, 2, Ok(Vec::new()));
        assert!(c.slurm.is_none(), "an id with a space is not an id");
        assert_eq!(c.kubernetes.unwrap().pod, None);
        assert_eq!(c.run_id, "host-1-2");
    }

    #[test]
    fn cuda_ordinals_are_given_only_where_certain() {
        let by_uuid = identify(gpus(4), Some("GPU-3333,GPU-1111"), None);
        let ord: Vec<Option<u32>> = by_uuid.iter().map(|d| d.cuda_ordinal).collect();
        assert_eq!(ord, [None, Some(1), None, Some(0)]);
        // Indices in the default (fastest first) order: not certain with two.
        let guess = identify(gpus(4), Some("2,3"), None);
        assert!(guess.iter().all(|d| d.cuda_ordinal.is_none()));
        let pci = identify(gpus(4), Some("2,3"), Some("PCI_BUS_ID"));
        let ord: Vec<Option<u32>> = pci.iter().map(|d| d.cuda_ordinal).collect();
        assert_eq!(ord, [None, None, Some(0), Some(1)]);
        // One visible device is certain whatever the order.
        let one = identify(gpus(4), Some("2"), None);
        assert_eq!(one[2].cuda_ordinal, Some(0));
        // Nothing set: all four in PCI order only when asked for.
        assert!(
            identify(gpus(4), None, None)
                .iter()
                .all(|d| d.cuda_ordinal.is_none())
        );
        let all = identify(gpus(4), None, Some("PCI_BUS_ID"));
        assert_eq!(all[3].cuda_ordinal, Some(3));
        // CUDA stops at the first entry it cannot use.
        let stop = identify(gpus(4), Some("1,9,2"), Some("PCI_BUS_ID"));
        let ord: Vec<Option<u32>> = stop.iter().map(|d| d.cuda_ordinal).collect();
        assert_eq!(ord, [None, Some(0), None, None]);
    }
}
