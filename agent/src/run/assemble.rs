//! Assembling the workload document (`gpumem.workload/v1`) from what was collected:
//! ranks told from their helper processes, each rank's phases and comparison, the timeline.

use super::*;
use std::collections::BTreeSet;

pub(super) struct Assembly {
    pub(super) synthetic: bool,
    pub(super) created_unix_s: Option<u64>,
    pub(super) requested_device: String,
    pub(super) command: Vec<String>,
    pub(super) allocator_env: BTreeMap<String, String>,
    pub(super) steps: u32,
    pub(super) ended: crate::process::Ended,
    pub(super) wall_time_ns: u64,
    pub(super) collected: Collected,
    pub(super) timeline: Timeline,
    pub(super) context: gpumem_proto::context::RunContext,
    /// Whether a process is still running now (the command has ended).
    pub(super) still_running: fn(u32) -> bool,
}

/// The processes that are helpers of another rather than ranks, by pid, with the pid
/// of the process that started them: a process whose parent also loaded the probe,
/// that carries its parent's `RANK`, `LOCAL_RANK` and `WORLD_SIZE` (inherited, as a
/// DataLoader worker's are) and ran no model step (at most the `model_load` phase
/// every process opens when it imports torch). A rank started by a launcher that
/// imports torch (torchrun's agent) has its own `RANK`; one started by `mp.spawn`
/// runs steps.
pub(super) fn workers(ranks: &BTreeMap<u64, RankState>) -> BTreeMap<u32, u32> {
    type Identity = (Option<u32>, Option<u32>, Option<u32>);
    let identity = |state: &RankState| -> Option<(u32, Option<u32>, Identity)> {
        match &state.hello {
            Some(ProbeMessage::Hello {
                pid,
                ppid,
                rank,
                local_rank,
                world_size,
                ..
            }) => Some((*pid, *ppid, (*rank, *local_rank, *world_size))),
            _ => None,
        }
    };
    let by_pid: BTreeMap<u32, Identity> = ranks
        .values()
        .filter_map(identity)
        .map(|(pid, _, id)| (pid, id))
        .collect();
    ranks
        .values()
        .filter(|state| state.phases.iter().all(|(p, _)| p.name == "model_load"))
        .filter_map(identity)
        .filter_map(|(pid, ppid, id)| {
            let parent = ppid?;
            (parent != pid && by_pid.get(&parent) == Some(&id)).then_some((pid, parent))
        })
        .collect()
}

/// The launchers among the processes: a process without `RANK` that ran no model step
/// and started a rank (its parent pid) — or started such a launcher (DeepSpeed's
/// runner starts `deepspeed.launcher.launch`, which starts the ranks).
pub(super) fn launchers(ranks: &BTreeMap<u64, RankState>) -> BTreeSet<u32> {
    let hello = |state: &RankState| match &state.hello {
        Some(ProbeMessage::Hello {
            pid, ppid, rank, ..
        }) => Some((*pid, *ppid, *rank)),
        _ => None,
    };
    let idle: BTreeMap<u32, Option<u32>> = ranks
        .values()
        .filter(|state| state.phases.iter().all(|(p, _)| p.name == "model_load"))
        .filter_map(hello)
        .filter(|(_, _, rank)| rank.is_none())
        .map(|(pid, ppid, _)| (pid, ppid))
        .collect();
    let mut found: BTreeSet<u32> = ranks
        .values()
        .filter_map(hello)
        .filter(|(_, _, rank)| rank.is_some())
        .filter_map(|(_, ppid, _)| ppid)
        .filter(|p| idle.contains_key(p))
        .collect();
    // Their own launchers, a few levels up.
    for _ in 0..4 {
        let up: Vec<u32> = found
            .iter()
            .filter_map(|p| idle.get(p).copied().flatten())
            .filter(|p| idle.contains_key(p))
            .collect();
        found.extend(up);
    }
    found
}

pub(super) fn assemble(a: Assembly) -> WorkloadFile {
    let mut failures = Vec::new();
    let mut ranks = Vec::new();
    let mut stand_in = false;
    let workers = workers(&a.collected.ranks);
    let launchers = launchers(&a.collected.ranks);
    for (_, state) in a.collected.ranks {
        let Some(ProbeMessage::Hello {
            pid,
            ppid: _,
            rank,
            local_rank,
            world_size,
            reader,
            backend,
            device_available,
            torch_version,
            cuda_version,
            hip_version,
            cudnn_version,
            allocator_backend,
            alloc_conf,
            python_executable,
            ..
        }) = state.hello
        else {
            continue;
        };
        stand_in |= reader != "torch.cuda";
        let phases: Vec<WorkloadPhase> = state
            .phases
            .into_iter()
            .map(|(mut p, at)| {
                p.process_tree_peak_bytes =
                    sampler::peak_between(&a.timeline, at.saturating_sub(p.wall_time_ns), at);
                p
            })
            .collect();
        let device = phases
            .iter()
            .find_map(|p| p.device)
            .map(|d| format!("cuda:{d}"));
        for mut f in state.failures {
            f.rank = rank;
            failures.push(f);
        }
        let worker_of = workers.get(&pid).copied();
        let launcher = launchers.contains(&pid);
        // A worker is ended by its rank when the loader is done (DataLoader terminates
        // the ones that do not exit in time): no goodbye is no failure there.
        if !state.bye && worker_of.is_none() {
            failures.push(Failure {
                kind: FailureKind::ProbeLost,
                rank,
                phase: phases.last().map(|p| p.name.clone()),
                step: phases.last().and_then(|p| p.step),
                requested_bytes: None,
                message: if (a.still_running)(pid) {
                    format!(
                        "process {pid} is still running after the command ended (started by it and left behind; not stopped by gpumem): its phases are those until the command ended"
                    )
                } else {
                    format!(
                        "process {pid} ended without the probe's goodbye (killed, crashed or exited abruptly)"
                    )
                },
            });
        }
        let comparison = compare::compare(&state.facts, &phases);
        ranks.push(RankResult {
            pid,
            rank,
            local_rank,
            world_size,
            worker_of,
            launcher,
            device,
            environment: ProbeEnvironment {
                reader,
                backend,
                device_available,
                torch_version,
                cuda_version,
                hip_version,
                cudnn_version,
                allocator_backend,
                alloc_conf,
                python_executable,
            },
            phases,
            facts: state.facts,
            overhead: state.overhead,
            hooks_removed: state.hooks_removed,
            ended_cleanly: state.bye,
            comparison,
            memory_history: None,
        });
    }
    if ranks.is_empty() {
        failures.push(Failure {
            kind: FailureKind::ProbeNeverConnected,
            rank: None,
            phase: None,
            step: None,
            requested_bytes: None,
            message: "no process of the command imported torch with the probe loaded (not a Python/PyTorch program, or PYTHONPATH was reset): only the device-level timeline was measured".into(),
        });
    }
    if let Some(sig) = a.ended.signal {
        failures.push(Failure {
            kind: FailureKind::Signal,
            rank: None,
            phase: None,
            step: None,
            requested_bytes: None,
            message: format!("the command was ended by signal {sig}"),
        });
    } else if let Some(code) = a.ended.code.filter(|c| *c != 0) {
        failures.push(Failure {
            kind: FailureKind::ExitCode,
            rank: None,
            phase: None,
            step: None,
            requested_bytes: None,
            message: format!("the command exited with code {code}"),
        });
    }
    let synthetic = a.synthetic || stand_in;
    WorkloadFile {
        schema: WORKLOAD_SCHEMA.to_owned(),
        synthetic,
        note: synthetic.then(|| {
            "SYNTHETIC: the memory figures come from a test stand-in, not a GPU; they are not memory of anything".to_owned()
        }),
        agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        created_unix_s: a.created_unix_s,
        requested_device: a.requested_device,
        command: a.command,
        allocator_env: a.allocator_env,
        steps_instrumented: a.steps,
        outcome: Outcome {
            status: if failures.is_empty() {
                Status::Ok
            } else {
                Status::Failed
            },
            exit_code: a.ended.code,
            signal: a.ended.signal,
            forwarded_signals: a.ended.forwarded,
            wall_time_ns: a.wall_time_ns,
            failures,
        },
        ranks,
        timeline: a.timeline,
        channel: a.collected.stats,
        context: Some(a.context),
    }
}
