//! Where a run ran: the host, the scheduler's job and task ids and each device's
//! identity — the keys that join a gpumem document to the cluster's own records.
//!
//! DCGM's exporter labels its series with `Hostname`, `gpu`, `UUID`, `pci_bus_id`,
//! `modelName` and, when jobs are mapped, `hpc_job` / `pod` / `namespace` (NVIDIA
//! dcgm-exporter, `README.md` and `internal/pkg/transformation/const.go`); Slurm's
//! accounting (`sacct`) is keyed by job id, array task and step; a Kubernetes Indexed Job
//! by its pod and `JOB_COMPLETION_INDEX`. A [`RunContext`] records those keys as the run's
//! own environment gave them, so a result joins both without guessing. A value the
//! environment did not give is absent, never invented.

use serde::{Deserialize, Serialize};

/// The run's place in the cluster, recorded once per document (one `gpumem-agent`
/// process: under `srun` or a Kubernetes Job, one per task or pod).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RunContext {
    /// The run's id: the grouping key of its Prometheus series (`run_id`) and its
    /// row in a fleet sheet. `slurm-<job>[-<procid>]` in a Slurm job, the pod's name in
    /// Kubernetes, else `<host>-<pid>-<start time>`.
    pub run_id: String,
    /// The host name as `gethostname(2)` gives it (DCGM's `Hostname` label).
    pub hostname: Option<String>,
    /// Slurm's ids, when the agent runs inside a Slurm job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmContext>,
    /// Kubernetes' ids, when the agent runs in a pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesContext>,
    /// torchrun's (`torch.distributed.run`) rank variables in the agent's own
    /// environment, when it runs once per rank; ranks started by the measured command
    /// report theirs in the workload's `ranks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torchrun: Option<TorchrunContext>,
    /// `CUDA_VISIBLE_DEVICES` as the agent saw it (absent when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_visible_devices: Option<String>,
    /// The devices this run used or could use, with the ids that join DCGM's series.
    pub devices: Vec<DeviceIdentity>,
    /// Why `devices` is empty, when it is (no NVML, a synthetic test run, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices_reason: Option<String>,
}

/// A Slurm task's ids, from the variables `slurmstepd` sets (Slurm `sbatch(1)` and
/// `srun(1)`, "OUTPUT ENVIRONMENT VARIABLES").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SlurmContext {
    /// `SLURM_JOB_ID` (unique per array task too; DCGM's `hpc_job` when mapped).
    pub job_id: String,
    /// `SLURM_ARRAY_JOB_ID`: the array's first job id, shared by its tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_job_id: Option<String>,
    /// `SLURM_ARRAY_TASK_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_task_id: Option<u32>,
    /// `SLURM_STEP_ID`, inside a job step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// `SLURM_PROCID`: the task's global rank in its step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub procid: Option<u32>,
    /// `SLURM_LOCALID`: the task's rank on its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub localid: Option<u32>,
    /// `SLURM_NODEID`: the node's index in the allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodeid: Option<u32>,
    /// `SLURM_JOB_NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// `SLURM_CLUSTER_NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
}

/// A pod's ids: `JOB_COMPLETION_INDEX`, which the Job controller sets in every
/// container of an Indexed Job (Kubernetes, "Indexed Job for Parallel Processing with
/// Static Work Assignment"), and the pod's name and namespace, which a manifest passes
/// through the downward API (`fieldRef: metadata.name` / `metadata.namespace`) as
/// `POD_NAME` / `POD_NAMESPACE` (what `gpumem-agent bisect --plan k8s` writes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct KubernetesContext {
    /// The pod's name (DCGM's `pod` label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The pod's namespace (DCGM's `namespace` label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// `JOB_COMPLETION_INDEX` of an Indexed Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_completion_index: Option<u32>,
}

/// torchrun's per-rank variables (PyTorch, `torch.distributed.run`: `RANK`,
/// `LOCAL_RANK`, `WORLD_SIZE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TorchrunContext {
    /// `RANK`.
    pub rank: Option<u32>,
    /// `LOCAL_RANK`.
    pub local_rank: Option<u32>,
    /// `WORLD_SIZE`.
    pub world_size: Option<u32>,
}

/// One device as NVML names it: the keys of DCGM's `gpu`, `UUID`, `pci_bus_id` and
/// `modelName` labels.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DeviceIdentity {
    /// NVML's device index (DCGM's `gpu` label): the node's order, not CUDA's ordinal.
    pub index: u32,
    /// The CUDA ordinal this process used for it, when that mapping is certain
    /// (`CUDA_VISIBLE_DEVICES` by UUID, `CUDA_DEVICE_ORDER=PCI_BUS_ID`, or one device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_ordinal: Option<u32>,
    /// `GPU-xxxxxxxx-…` as nvidia-smi prints it.
    pub uuid: String,
    /// `00000000:65:00.0`: domain, bus, device and function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// The product name NVML reports (DCGM's `modelName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl RunContext {
    /// The device this process knows as CUDA ordinal `ordinal`, when certain.
    pub fn device_for_ordinal(&self, ordinal: u32) -> Option<&DeviceIdentity> {
        self.devices
            .iter()
            .find(|d| d.cuda_ordinal == Some(ordinal))
    }

    /// The device with this UUID.
    pub fn device_by_uuid(&self, uuid: &str) -> Option<&DeviceIdentity> {
        self.devices.iter().find(|d| d.uuid == uuid)
    }

    /// The job id DCGM's `hpc_job` label carries when jobs are mapped: Slurm's
    /// `SLURM_JOB_ID`.
    pub fn hpc_job(&self) -> Option<&str> {
        self.slurm.as_ref().map(|s| s.job_id.as_str())
    }
}
