//! Collecting what the probe channel reports, rank by rank: each process's hello, phases,
//! facts and failures as they arrive, pushed to paired pages when `--serve` is on.

use super::*;

/// One process's messages as they arrive.
#[derive(Debug, Default)]
pub(super) struct RankState {
    pub(super) hello: Option<ProbeMessage>,
    pub(super) phases: Vec<(WorkloadPhase, u64)>,
    pub(super) facts: ProbeFacts,
    pub(super) failures: Vec<Failure>,
    pub(super) overhead: Option<Overhead>,
    pub(super) hooks_removed: Option<String>,
    pub(super) bye: bool,
    /// Phases already pushed to the page (`--serve`).
    pub(super) pushed: usize,
    /// What the probe said of the allocator history (`--memory-history`).
    pub(super) history: Option<super::history::Said>,
}

/// Everything the channel delivered.
#[derive(Debug, Default)]
pub(super) struct Collected {
    pub(super) ranks: BTreeMap<u64, RankState>,
    pub(super) stats: ChannelStats,
    /// Bytes charged against [`MAX_KEPT_BYTES`].
    pub(super) kept_bytes: usize,
}

pub(super) fn emit(events: bool, value: &serde_json::Value) {
    if !events {
        return;
    }
    let mut out = std::io::stdout().lock();
    // A closed pipe must not stop the measurement; the file is the record. The probe's
    // texts may hold terminal escapes that JSON leaves raw (C1, bidi): escaped.
    let line = value.to_string();
    let _ = writeln!(out, "{}", crate::out::terminal_safe(&line));
    let _ = out.flush();
}

pub(super) fn collect(
    rx: &mpsc::Receiver<ChannelEvent>,
    started: Instant,
    events: bool,
    live: Option<&Feed>,
    export: Option<&crate::export::sink::Live>,
    open: &AtomicI64,
) -> Collected {
    let mut c = Collected::default();
    while let Ok(event) = rx.recv() {
        match event {
            ChannelEvent::Connected(id) => {
                open.fetch_add(1, Ordering::SeqCst);
                c.stats.connections += 1;
                if c.ranks.len() < MAX_RANKS {
                    c.ranks.insert(id, RankState::default());
                }
            }
            ChannelEvent::ConnectionRefused => c.stats.connections_refused += 1,
            ChannelEvent::Rejected => c.stats.rejected += 1,
            ChannelEvent::Closed => {
                open.fetch_sub(1, Ordering::SeqCst);
            }
            ChannelEvent::Message(id, message, len) => {
                let cost = len.saturating_add(KEPT_OVERHEAD);
                let Some(rank) = c
                    .ranks
                    .get_mut(&id)
                    .filter(|_| c.kept_bytes.saturating_add(cost) <= MAX_KEPT_BYTES)
                else {
                    c.stats.rejected += 1;
                    continue;
                };
                c.kept_bytes = c.kept_bytes.saturating_add(cost);
                let at = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                let phases_before = rank.phases.len();
                if absorb(rank, *message, at, events, id) {
                    if let (Some(x), Some((phase, _))) = (export, rank.phases.last())
                        && rank.phases.len() > phases_before
                    {
                        x.workload_phase(hello_rank(rank), phase);
                    }
                    push_phase(live, rank, id);
                    c.stats.messages += 1;
                } else {
                    c.stats.rejected += 1;
                }
            }
        }
    }
    c
}

/// Folds one message into its rank; false when it was refused (e.g. a second hello).
pub(super) fn absorb(
    rank: &mut RankState,
    message: ProbeMessage,
    at_ns: u64,
    events: bool,
    id: u64,
) -> bool {
    if rank.hello.is_none() && !matches!(message, ProbeMessage::Hello { .. }) {
        return false;
    }
    match message {
        ProbeMessage::Hello { .. } => {
            if rank.hello.is_some() {
                // The stand-in is swapped in after the first hello: keep the last reader.
                if let (
                    Some(ProbeMessage::Hello { reader: old, .. }),
                    ProbeMessage::Hello { reader, .. },
                ) = (&mut rank.hello, &message)
                {
                    old.clone_from(reader);
                }
                return true;
            }
            rank.hello = Some(message);
        }
        ProbeMessage::Phase {
            name,
            step,
            first_step,
            manual,
            device,
            wall_ns,
            allocated_start_bytes,
            allocated_peak_bytes,
            allocated_end_bytes,
            reserved_start_bytes,
            reserved_peak_bytes,
            reserved_end_bytes,
            device_free_bytes,
            device_total_bytes,
            error,
        } => {
            if rank.phases.len() >= MAX_PHASES {
                return false;
            }
            let phase = WorkloadPhase {
                name,
                step,
                first_step,
                manual,
                device,
                allocator: AllocatorCounters {
                    allocated_start_bytes,
                    allocated_peak_bytes,
                    allocated_end_bytes,
                    reserved_start_bytes,
                    reserved_peak_bytes,
                    reserved_end_bytes,
                },
                device_free_end_bytes: device_free_bytes,
                device_total_bytes,
                process_tree_peak_bytes: None,
                wall_time_ns: wall_ns,
                error,
            };
            emit(
                events,
                &serde_json::json!({"event": "phase", "connection": id, "phase": &phase}),
            );
            rank.phases.push((phase, at_ns));
        }
        ProbeMessage::Model {
            module,
            parameters_by_dtype,
            buffers_by_dtype,
            trainable_parameters,
            input_shapes,
            config,
            hf_config,
            gradient_checkpointing,
            distributed,
        } => {
            let conv = |m: BTreeMap<String, messages::DtypeCount>| {
                m.into_iter()
                    .map(|(k, v)| {
                        (
                            k,
                            gpumem_proto::workload::DtypeCount {
                                count: v.count,
                                bytes: v.bytes,
                            },
                        )
                    })
                    .collect()
            };
            rank.facts.model.get_or_insert(ModelFacts {
                module,
                parameters_by_dtype: conv(parameters_by_dtype),
                buffers_by_dtype: conv(buffers_by_dtype),
                trainable_parameters,
                input_shapes: input_shapes
                    .into_iter()
                    .map(|s| InputShape {
                        shape: s.shape,
                        dtype: s.dtype,
                    })
                    .collect(),
                config,
                hf_config,
                gradient_checkpointing,
                distributed,
            });
        }
        ProbeMessage::Optimizer {
            optimizer_class,
            state_bytes,
            state_by_dtype,
            parameters_covered,
        } => {
            rank.facts.optimizer.get_or_insert(OptimizerFacts {
                optimizer_class,
                state_bytes,
                state_by_dtype: state_by_dtype
                    .into_iter()
                    .map(|(k, v)| {
                        (
                            k,
                            gpumem_proto::workload::DtypeCount {
                                count: v.count,
                                bytes: v.bytes,
                            },
                        )
                    })
                    .collect(),
                parameters_covered,
            });
        }
        ProbeMessage::Generation {
            forwards,
            output_shape,
            kv_bytes,
            kv_tensors,
            ..
        } => {
            if rank.facts.generations.len() >= MAX_GENERATIONS {
                return false;
            }
            rank.facts.generations.push(GenerationFacts {
                forwards,
                output_shape,
                kv_bytes,
                kv_tensors,
            });
        }
        ProbeMessage::Failure {
            kind,
            phase,
            step,
            message,
            last,
            ..
        } => {
            if rank.failures.len() >= 16 {
                return false;
            }
            let oom = kind == "oom";
            let mut text = message.clone();
            if !last.is_empty() {
                let values: Vec<String> = last
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.map_or("null".into(), |b| b.to_string())))
                    .collect();
                let _ = write!(text, " [last read: {}]", values.join(", "));
            }
            rank.failures.push(Failure {
                kind: if oom {
                    FailureKind::OutOfMemory
                } else {
                    FailureKind::Exception
                },
                rank: None,
                phase,
                step,
                requested_bytes: if oom {
                    oom::requested_bytes(&message)
                } else {
                    None
                },
                message: text,
            });
        }
        ProbeMessage::HooksRemoved { reason, steps, .. } => {
            rank.hooks_removed = Some(format!("{reason} (steps done: {steps})"));
        }
        ProbeMessage::MemoryHistory { .. } => {
            if rank.history.is_some() {
                return false;
            }
            rank.history = super::history::Said::of(&message);
        }
        ProbeMessage::ProbeError { message } => {
            rank.hooks_removed = Some(format!("probe error, hooks removed: {message}"));
        }
        ProbeMessage::Truncated { .. } => return false,
        ProbeMessage::Bye {
            overhead_ns,
            hook_calls,
            instrumented_ns,
            ..
        } => {
            rank.overhead = Some(Overhead {
                overhead_ns,
                hook_calls,
                instrumented_ns,
            });
            rank.bye = true;
        }
    }
    true
}

/// The pid a process reported in its hello.
pub(super) fn hello_pid(rank: &RankState) -> Option<u32> {
    match &rank.hello {
        Some(ProbeMessage::Hello { pid, .. }) => Some(*pid),
        _ => None,
    }
}

/// The `RANK` a process reported in its hello.
pub(super) fn hello_rank(rank: &RankState) -> Option<u32> {
    match &rank.hello {
        Some(ProbeMessage::Hello { rank, .. }) => *rank,
        _ => None,
    }
}

/// Pushes the phase `absorb` has just kept, if it kept one, to the paired pages.
pub(super) fn push_phase(live: Option<&Feed>, rank: &mut RankState, id: u64) {
    let Some(feed) = live else { return };
    if rank.pushed >= rank.phases.len() {
        return;
    }
    rank.pushed = rank.phases.len();
    let Some((phase, _)) = rank.phases.last() else {
        return;
    };
    let rank_number = hello_rank(rank);
    feed.push(AgentMessage::WorkloadPhase {
        run_id: WORKLOAD_RUN_ID,
        process: id,
        rank: rank_number,
        phase: Box::new(phase.clone()),
    });
}
