//! `bisect --plan slurm|k8s --parallel K` and `bisect --resume DIR`: the search as
//! rounds of K trials that a cluster's scheduler runs side by side, one fresh process
//! (and device) per trial, instead of one after another here.
//!
//! Round 1 tries K values spread evenly over `[from, to]`, both ends included (they
//! check the range's premise: `from` passes, `to` fails); each later round tries K
//! values spread evenly strictly inside the narrowed interval, so each round divides it
//! by about K + 1 where a sequential search halves it (batch 1…4096 with K = 15: 4
//! rounds of 15 trials, the first dividing by 14, against 14 trials one at a time).
//!
//! The agent submits nothing: each round is a file for `sbatch` (a job array, one trial
//! per task, `#SBATCH --array=0-(K-1)`) or `kubectl apply -f` (an Indexed Job,
//! `completionMode: Indexed`, one trial per completion index), and `bisect-plan.json`
//! keeps what the next `--resume` needs. Every trial writes
//! `round-N/trial-<dim>-<value>.json` in the shared output folder; a trial whose
//! measurement failed (exit 1, e.g. out of memory) is a finding, so its task exits 0,
//! while a task that could not measure (exit 2) fails and leaves no result, which
//! `--resume` reports instead of guessing.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use gpumem_proto::results::{RESULTS_SCHEMA, ResultsFile};
use serde::{Deserialize, Serialize};

use super::{Args, Search, Vary, create_empty_dir, measure_argv};
use crate::exit::Exit;
use crate::measure::NetworkArgs;
use crate::private::{self, Existing};

/// Schema identifier of `bisect-plan.json`.
pub const PLAN_SCHEMA: &str = "gpumem.bisect-plan/v1";
/// The plan's file name in the output folder.
const PLAN_FILE: &str = "bisect-plan.json";

/// Which scheduler a plan is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Scheduler {
    /// A Slurm job array script for `sbatch`.
    Slurm,
    /// A Kubernetes Indexed Job manifest (JSON) for `kubectl apply -f`.
    K8s,
}

/// `bisect-plan.json`: everything `--resume` needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanFile {
    /// Always [`PLAN_SCHEMA`].
    pub schema: String,
    /// Slurm or Kubernetes.
    pub scheduler: Scheduler,
    /// The varied flag (`batch`, `context`, `width`).
    pub vary: String,
    /// The range asked for.
    pub from: u64,
    /// The range asked for.
    pub to: u64,
    /// Trials per round.
    pub parallel: u64,
    /// The agent the trials run.
    pub agent: String,
    /// `measure`'s fixed flags (without the varied one and `--output`).
    pub measure_flags: Vec<String>,
    /// Extra `#SBATCH` lines.
    #[serde(default)]
    pub sbatch: Vec<String>,
    /// The Job's image.
    #[serde(default)]
    pub image: Option<String>,
    /// The shared claim.
    #[serde(default)]
    pub claim: Option<String>,
    /// The output folder (absolute).
    pub dir: String,
    /// Rounds written so far.
    pub rounds: Vec<Round>,
}

/// One round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Round {
    /// 1, 2, …
    pub round: u32,
    /// The values tried, ascending.
    pub values: Vec<u64>,
    /// The script or manifest, relative to the output folder.
    pub file: String,
}

fn vary_from(flag: &str) -> Result<Vary> {
    Ok(match flag {
        "batch" => Vary::Batch,
        "context" => Vary::Context,
        "width" => Vary::Width,
        other => bail!("{PLAN_FILE}: unknown dimension {other:?}"),
    })
}

/// `k` values spread evenly over `[from, to]`, both included (all of them when there
/// are no more than `k`).
pub fn first_round(from: u64, to: u64, k: u64) -> Vec<u64> {
    let span = u128::from(to - from);
    if span < u128::from(k) {
        return (from..=to).collect();
    }
    let k = u128::from(k);
    let mut v: Vec<u64> = (0..k)
        .map(|i| from + u64::try_from((span * i + (k - 1) / 2) / (k - 1)).unwrap_or(0))
        .collect();
    v.dedup();
    v
}

/// `k` values spread evenly strictly inside `(lo, hi)` (all of them when there are no
/// more than `k`).
pub fn next_round(lo: u64, hi: u64, k: u64) -> Vec<u64> {
    let inside = hi - lo - 1;
    if inside <= k {
        return (lo + 1..hi).collect();
    }
    let (span, k) = (u128::from(hi - lo), u128::from(k));
    let mut v: Vec<u64> = (1..=k)
        .map(|i| lo + u64::try_from((span * i + k.div_ceil(2)) / (k + 1)).unwrap_or(0))
        .filter(|x| *x > lo && *x < hi)
        .collect();
    v.dedup();
    v
}

/// Quotes a word for a POSIX shell.
fn sh(word: &str) -> String {
    if !word.is_empty()
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | ':' | '=' | ',')
        })
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// Quotes a word of an `#SBATCH` line as sbatch reads one (`src/sbatch/opt.c`
/// `_get_argument`: double quotes group, a backslash escapes the next character). The
/// word holds no control character (paths are checked before a plan is written).
fn sbatch_word(word: &str) -> String {
    if word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-:=,%".contains(c))
    {
        word.to_owned()
    } else {
        format!("\"{}\"", word.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// The shell lines every trial runs once `value` is set: measure, then map exit 1 (a
/// recorded failure, the search's finding) to 0.
fn trial_lines(plan: &PlanFile, round_dir: &str) -> String {
    let mut cmd = vec![sh(&plan.agent), "measure".to_owned()];
    cmd.extend(plan.measure_flags.iter().map(|f| sh(f)));
    format!(
        "{} --{} \"$value\" --output {}/trial-{}-\"$value\".json\nrc=$?\n# 1: the trial ran and failed (e.g. out of memory), recorded in its file: a finding.\nif [ \"$rc\" -eq 1 ]; then exit 0; fi\nexit \"$rc\"\n",
        cmd.join(" "),
        plan.vary,
        sh(round_dir),
        plan.vary
    )
}

/// The Slurm array script of a round.
pub fn slurm_script(plan: &PlanFile, round: &Round) -> String {
    let round_dir = format!("{}/round-{}", plan.dir, round.round);
    let mut s = String::from("#!/bin/bash\n");
    s.push_str(&format!(
        "#SBATCH --job-name=gpumem-bisect-{}-r{}\n#SBATCH --array=0-{}\n#SBATCH --ntasks=1\n#SBATCH --output={}\n",
        plan.vary,
        round.round,
        round.values.len().saturating_sub(1),
        sbatch_word(&format!("{round_dir}/slurm-%A_%a.out"))
    ));
    for line in &plan.sbatch {
        s.push_str(&format!("#SBATCH {line}\n"));
    }
    s.push_str(&format!(
        "# Written by gpumem-agent bisect --plan slurm: round {} of a search over --{} between {} and {}, one trial per array task, each a fresh process.\n# Submit: sbatch {}\n# Then, when the array has finished: gpumem-agent bisect --resume {}\n",
        round.round,
        plan.vary,
        plan.from,
        plan.to,
        sh(&format!("{round_dir}/{}", round_file(Scheduler::Slurm))),
        sh(&plan.dir)
    ));
    let values: Vec<String> = round.values.iter().map(u64::to_string).collect();
    s.push_str(&format!(
        "values=({})\nvalue=${{values[$SLURM_ARRAY_TASK_ID]}}\n",
        values.join(" ")
    ));
    s.push_str(&trial_lines(plan, &round_dir));
    s
}

/// The Kubernetes Indexed Job of a round (JSON, which `kubectl apply -f` reads).
pub fn k8s_manifest(plan: &PlanFile, round: &Round) -> serde_json::Value {
    let round_dir = format!("{}/round-{}", plan.dir, round.round);
    let values: Vec<String> = round.values.iter().map(u64::to_string).collect();
    let script = format!(
        "set -- {}\nshift \"$JOB_COMPLETION_INDEX\"\nvalue=$1\n{}",
        values.join(" "),
        trial_lines(plan, &round_dir)
    );
    let n = round.values.len();
    serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": format!("gpumem-bisect-{}-r{}", plan.vary, round.round),
            "labels": {
                "app.kubernetes.io/name": "gpumem",
                "app.kubernetes.io/component": "bisect",
            },
            "annotations": {
                "gpumem/search": format!("--{} {}..{}, round {}", plan.vary, plan.from, plan.to, round.round),
                "gpumem/resume": format!("gpumem-agent bisect --resume {}", plan.dir),
            },
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": n,
            "parallelism": n,
            // A trial that could not measure is not retried: --resume reports it.
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "gpumem"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "trial",
                        "image": plan.image.clone().unwrap_or_default(),
                        "command": ["/bin/sh", "-c", script],
                        "env": [
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                        ],
                        "resources": {"limits": {"nvidia.com/gpu": 1}},
                        "volumeMounts": [{"name": "results", "mountPath": plan.dir}],
                    }],
                    "volumes": [{
                        "name": "results",
                        "persistentVolumeClaim": {"claimName": plan.claim.clone().unwrap_or_default()},
                    }],
                },
            },
        },
    })
}

fn round_file(s: Scheduler) -> &'static str {
    match s {
        Scheduler::Slurm => "gpumem-bisect.sbatch",
        Scheduler::K8s => "gpumem-bisect-job.json",
    }
}

/// Writes round `values` into the plan's folder and records it.
fn write_round(plan: &mut PlanFile, values: Vec<u64>) -> Result<PathBuf> {
    let n = u32::try_from(plan.rounds.len() + 1).context("too many rounds")?;
    let dir = Path::new(&plan.dir).join(format!("round-{n}"));
    private::make_subfolder(&dir)?;
    let round = Round {
        round: n,
        values,
        file: format!("round-{n}/{}", round_file(plan.scheduler)),
    };
    let text = match plan.scheduler {
        Scheduler::Slurm => slurm_script(plan, &round),
        Scheduler::K8s => serde_json::to_string_pretty(&k8s_manifest(plan, &round))? + "\n",
    };
    let path = Path::new(&plan.dir).join(&round.file);
    private::write_atomically(&path, text.as_bytes(), Existing::Refuse)?;
    plan.rounds.push(round);
    private::write_atomically(
        &Path::new(&plan.dir).join(PLAN_FILE),
        (serde_json::to_string_pretty(plan)? + "\n").as_bytes(),
        Existing::Replace,
    )?;
    Ok(path)
}

fn submit_hint(plan: &PlanFile, path: &Path) -> String {
    match plan.scheduler {
        Scheduler::Slurm => format!("sbatch {}", sh(&path.display().to_string())),
        Scheduler::K8s => format!("kubectl apply -f {}", sh(&path.display().to_string())),
    }
}

/// An extra `#SBATCH` line must stay one line of printable text: a line break would
/// add a shell command to the script.
fn check_sbatch(lines: &[String]) -> Result<()> {
    for l in lines {
        if l.is_empty() || l.len() > 512 || !l.chars().all(|c| c == ' ' || c.is_ascii_graphic()) {
            bail!("--sbatch {l:?}: one line of printable ASCII, e.g. --sbatch=--gres=gpu:1");
        }
    }
    Ok(())
}

/// The agent the trials run: `--agent` as given, else this executable (Slurm: a shared
/// file system) or `gpumem-agent` on the image's PATH (Kubernetes). One printable word.
fn agent_for(given: Option<&str>, scheduler: Scheduler) -> Result<String> {
    let agent = match (given, scheduler) {
        (Some(a), _) => a.to_owned(),
        (None, Scheduler::Slurm) => std::env::current_exe()
            .context("finding this agent's executable")?
            .display()
            .to_string(),
        (None, Scheduler::K8s) => "gpumem-agent".to_owned(),
    };
    if agent.is_empty() || agent.chars().any(char::is_control) {
        bail!("--agent {agent:?}: one path without control characters");
    }
    Ok(agent)
}

/// `measure`'s flags for the trials: every network flag but the varied one, in
/// [`measure_argv`]'s order, without `--events` and `--output`.
fn fixed_flags(net: &NetworkArgs, vary: Vary) -> Vec<String> {
    let all = measure_argv(net, Path::new("-"));
    let skip = [vary.flag(), "events", "output"];
    let mut flags = Vec::new();
    let mut i = 1; // past "measure"
    while i < all.len() {
        let flag = all[i].trim_start_matches("--");
        let takes_value = all.get(i + 1).is_some_and(|v| !v.starts_with("--"));
        if !skip.contains(&flag) {
            flags.push(all[i].clone());
            if takes_value {
                flags.push(all[i + 1].clone());
            }
        }
        i += if takes_value { 2 } else { 1 };
    }
    flags
}

/// Re-derives a plan's `measure` flags: parsed by `measure`'s own parser (each value
/// checked: numbers, a dtype, a device) and written out again, they must come back
/// word for word; anything else is not a flag list this agent wrote.
fn rederive_flags(words: &[String], vary: Vary) -> Result<()> {
    use clap::{Args as _, FromArgMatches as _};
    let cmd = NetworkArgs::augment_args(clap::Command::new("measure").no_binary_name(true));
    let matches = cmd
        .try_get_matches_from(words)
        .map_err(|e| anyhow::anyhow!("{}", e.kind()))?;
    let net = NetworkArgs::from_arg_matches(&matches).map_err(|e| anyhow::anyhow!("{e}"))?;
    if fixed_flags(&net, vary) != words {
        bail!("its flags are not in the order and form this agent writes");
    }
    crate::device::parse_device(&net.device)?;
    Ok(())
}

/// A Kubernetes image reference and claim name: the characters their grammars allow
/// (an image `[registry/]name[:tag][@digest]`, a claim a DNS-1123 subdomain).
fn check_k8s_words(image: Option<&str>, claim: Option<&str>) -> Result<()> {
    if let Some(i) = image
        && (i.is_empty()
            || i.len() > 512
            || !i
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "./:@_-".contains(c)))
    {
        bail!("--image {i:?}: an image reference such as registry.example/gpumem:0.1");
    }
    if let Some(c) = claim
        && (c.is_empty()
            || c.len() > 253
            || !c
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-".contains(c)))
    {
        bail!("--claim {c:?}: a PersistentVolumeClaim name (lower-case letters, digits, '-', '.')");
    }
    Ok(())
}

/// `bisect --plan`: writes round 1.
pub(super) fn start(search: &Search, scheduler: Scheduler, args: &Args) -> Result<Exit> {
    let Some(k) = args.parallel else {
        bail!("--plan needs --parallel K");
    };
    if scheduler == Scheduler::K8s && (args.image.is_none() || args.claim.is_none()) {
        bail!(
            "--plan k8s needs --image IMAGE (holding gpumem-agent) and --claim NAME (a PersistentVolumeClaim shared with this machine)"
        );
    }
    if scheduler == Scheduler::Slurm && (args.image.is_some() || args.claim.is_some()) {
        bail!("--image and --claim go with --plan k8s");
    }
    if scheduler == Scheduler::K8s && !args.sbatch.is_empty() {
        bail!("--sbatch goes with --plan slurm");
    }
    check_sbatch(&args.sbatch)?;
    check_k8s_words(args.image.as_deref(), args.claim.as_deref())?;
    // Refused before anything is made: a path that cannot go into a script.
    private::check_printable(&search.output_dir)?;
    let dir = create_empty_dir(&search.output_dir)?;
    let dir = private::check_printable(&dir)?.to_owned();
    let agent = agent_for(args.agent.as_deref(), scheduler)?;
    let measure_flags = fixed_flags(&search.net, search.vary);
    let mut plan = PlanFile {
        schema: PLAN_SCHEMA.to_owned(),
        scheduler,
        vary: search.vary.flag().to_owned(),
        from: search.from,
        to: search.to,
        parallel: k,
        agent,
        measure_flags,
        sbatch: args.sbatch.clone(),
        image: args.image.clone(),
        claim: args.claim.clone(),
        dir,
        rounds: Vec::new(),
    };
    let path = write_round(&mut plan, first_round(search.from, search.to, k))?;
    crate::out::outln!(
        "round 1: {} trials of --{} from {} to {} written to {}",
        plan.rounds[0].values.len(),
        plan.vary,
        plan.from,
        plan.to,
        path.display()
    );
    crate::out::outln!("submit: {}", submit_hint(&plan, &path));
    crate::out::outln!("then: gpumem-agent bisect --resume {}", sh(&plan.dir));
    Ok(Exit::Ok)
}

/// A trial's outcome as its results file says: `Ok(true)` passed.
fn outcome(path: &Path) -> Result<Option<bool>> {
    if !path.exists() {
        return Ok(None);
    }
    let text = crate::export::read_document(path)?;
    let f: ResultsFile =
        serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
    if f.schema != RESULTS_SCHEMA {
        bail!(
            "{}: schema {:?}, expected {RESULTS_SCHEMA:?}",
            path.display(),
            f.schema
        );
    }
    Ok(Some(!f.any_failed()))
}

/// `bisect --resume DIR`.
pub fn resume(dir: &Path, agent: Option<&str>) -> Result<Exit> {
    let plan_path = dir.join(PLAN_FILE);
    // What the next round runs comes from this folder: it must be the user's alone,
    // as `--plan` made it (no one else may write the plan, the folder or a round).
    let resolved =
        std::fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))?;
    for p in [&resolved, &plan_path] {
        private::check_owned_unwritable(p)
            .with_context(|| format!("refusing to resume from {}", dir.display()))?;
    }
    private::check_ancestors(&resolved)
        .with_context(|| format!("refusing to resume from {}", dir.display()))?;
    let text = crate::export::read_document(&plan_path)
        .with_context(|| format!("reading {} (written by bisect --plan)", plan_path.display()))?;
    let mut plan: PlanFile = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a bisect plan", plan_path.display()))?;
    if plan.schema != PLAN_SCHEMA {
        bail!(
            "{}: schema {:?}, expected {PLAN_SCHEMA:?}",
            plan_path.display(),
            plan.schema
        );
    }
    // The plan is read back from a shared folder: everything that reaches the next
    // script is checked again (the values are numbers, the words are quoted), and every
    // command word is derived again as `--plan` derives it.
    let vary = vary_from(&plan.vary)?;
    check_sbatch(&plan.sbatch)?;
    check_k8s_words(plan.image.as_deref(), plan.claim.as_deref())?;
    private::check_printable(Path::new(&plan.dir))?;
    let expected = agent_for(agent, plan.scheduler)?;
    if plan.agent != expected {
        bail!(
            "{}: the plan runs {:?}, not {:?}, the agent this command would plan with; if you planned with --agent, give it again: --resume {} --agent {}",
            plan_path.display(),
            plan.agent,
            expected,
            sh(&dir.display().to_string()),
            sh(&plan.agent)
        );
    }
    rederive_flags(&plan.measure_flags, vary).with_context(|| {
        format!(
            "{}: the plan's measure flags {:?} are not ones bisect --plan writes",
            plan_path.display(),
            plan.measure_flags
        )
    })?;
    for round in &plan.rounds {
        let expected = format!("round-{}/{}", round.round, round_file(plan.scheduler));
        if round.file != expected {
            bail!(
                "{}: round {} names the file {:?}, not {expected:?}",
                plan_path.display(),
                round.round,
                round.file
            );
        }
    }
    if !(2..=1000).contains(&plan.parallel) || plan.from >= plan.to {
        bail!(
            "{}: a damaged plan (parallel {}, range {}..{})",
            plan_path.display(),
            plan.parallel,
            plan.from,
            plan.to
        );
    }
    if Path::new(&plan.dir) != dir
        && std::fs::canonicalize(dir).ok() != Some(PathBuf::from(&plan.dir))
    {
        bail!(
            "{}: the plan is for {}; resume it there (a Kubernetes claim is mounted at that path)",
            plan_path.display(),
            plan.dir
        );
    }
    let Some(last) = plan.rounds.last().cloned() else {
        bail!("{}: no round was written", plan_path.display());
    };
    let mut trials: Vec<(u64, bool, PathBuf)> = Vec::new();
    let mut missing = Vec::new();
    for round in &plan.rounds {
        for v in &round.values {
            let path = Path::new(&plan.dir)
                .join(format!("round-{}", round.round))
                .join(format!("trial-{}-{v}.json", plan.vary));
            match outcome(&path)? {
                Some(pass) => trials.push((*v, pass, path)),
                None if round.round == last.round => missing.push(*v),
                None => {}
            }
        }
    }
    if !missing.is_empty() {
        let list: Vec<String> = missing.iter().map(u64::to_string).collect();
        bail!(
            "round {}: {} of {} trials have no result yet (--{} {}): wait until the {} has finished, or read round-{}'s logs for a trial that could not measure",
            last.round,
            missing.len(),
            last.values.len(),
            plan.vary,
            list.join(", "),
            match plan.scheduler {
                Scheduler::Slurm => "array (squeue)",
                Scheduler::K8s => "Job (kubectl get job)",
            },
            last.round
        );
    }
    trials.sort_by_key(|t| t.0);
    let hi = trials.iter().filter(|t| !t.1).map(|t| t.0).min();
    let lo = trials
        .iter()
        .filter(|t| t.1 && hi.is_none_or(|h| t.0 < h))
        .map(|t| t.0)
        .max();
    let monotone = match (hi, trials.iter().filter(|t| t.1).map(|t| t.0).max()) {
        (Some(h), Some(p)) => p < h,
        _ => true,
    };
    if !monotone {
        crate::out::errln!(
            "gpumem-agent: bisect: a value above a failing one passed: the need is not monotone here (fragmentation, another process on the device?); narrowing below the smallest failure"
        );
    }
    let done = match (lo, hi) {
        (Some(l), Some(h)) => h - l <= 1,
        _ => true,
    };
    let flag = plan.vary.clone();
    if !done && let (Some(l), Some(h)) = (lo, hi) {
        let values = next_round(l, h, plan.parallel);
        let path = write_round(&mut plan, values)?;
        let round = plan.rounds.last().map_or(0, |r| r.round);
        crate::out::outln!(
            "round {}: --{flag} passes at {l} and fails at {h}; round {round}: {} trials written to {}",
            last.round,
            plan.rounds.last().map_or(0, |r| r.values.len()),
            path.display()
        );
        crate::out::outln!("submit: {}", submit_hint(&plan, &path));
        crate::out::outln!("then: gpumem-agent bisect --resume {}", sh(&plan.dir));
        return Ok(Exit::Ok);
    }
    crate::out::outln!(
        "bisect --vary {flag} from {} to {} in {} rounds of up to {} trials:",
        plan.from,
        plan.to,
        plan.rounds.len(),
        plan.parallel
    );
    for (v, pass, path) in &trials {
        crate::out::outln!(
            "  --{flag} {v:>12}  {:<5} {}",
            if *pass { "pass" } else { "FAIL" },
            path.display()
        );
    }
    let show = |v: Option<u64>| v.map_or_else(|| "none".to_owned(), |v| v.to_string());
    crate::out::outln!("largest passing {flag}: {}", show(lo));
    crate::out::outln!("smallest failing {flag}: {}", show(hi));
    let summary = serde_json::json!({
        "vary": flag,
        "from": plan.from,
        "to": plan.to,
        "largest_passing": lo,
        "smallest_failing": hi,
        "stopped": serde_json::Value::Null,
        "plan": plan.scheduler,
        "parallel": plan.parallel,
        "rounds": plan.rounds.len(),
        "monotone": monotone,
        "trials": trials.iter().map(|(v, pass, path)| serde_json::json!({
            "value": v,
            "outcome": if *pass { "pass" } else { "fail" },
            "file": path.display().to_string(),
        })).collect::<Vec<_>>(),
    });
    let summary_path = Path::new(&plan.dir).join("bisect-summary.json");
    private::write_atomically(
        &summary_path,
        (serde_json::to_string_pretty(&summary)? + "\n").as_bytes(),
        Existing::Replace,
    )?;
    crate::out::outln!("summary: {}", summary_path.display());
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_one_spreads_k_values_over_the_range_ends_included() {
        let v = first_round(1, 4096, 15);
        assert_eq!(v.len(), 15);
        assert_eq!((v[0], v[14]), (1, 4096));
        assert!(v.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(first_round(3, 6, 15), [3, 4, 5, 6]);
    }

    #[test]
    fn later_rounds_stay_strictly_inside_and_finish() {
        assert_eq!(next_round(10, 14, 15), [11, 12, 13]);
        let v = next_round(0, 1600, 15);
        assert_eq!(v.len(), 15);
        assert_eq!(v[0], 100);
        assert!(v.iter().all(|x| *x > 0 && *x < 1600));
        // Batch 1…4096 with K = 15 ends in 4 rounds for any boundary.
        for boundary in [2u64, 100, 1000, 2049, 4095, 4096] {
            let (mut lo, mut hi) = (1u64, 4096u64);
            let mut rounds = 1;
            let r1 = first_round(1, 4096, 15);
            lo = *r1.iter().filter(|v| **v < boundary).max().unwrap_or(&lo);
            hi = *r1.iter().filter(|v| **v >= boundary).min().unwrap_or(&hi);
            while hi - lo > 1 {
                let r = next_round(lo, hi, 15);
                lo = *r.iter().filter(|v| **v < boundary).max().unwrap_or(&lo);
                hi = *r.iter().filter(|v| **v >= boundary).min().unwrap_or(&hi);
                rounds += 1;
            }
            assert!(rounds <= 4, "boundary {boundary}: {rounds} rounds");
        }
    }

    #[test]
    fn sbatch_lines_stay_one_line() {
        assert!(check_sbatch(&["--gres=gpu:1".into(), "--partition a100".into()]).is_ok());
        assert!(check_sbatch(&["--x\nrm -rf ~".into()]).is_err());
        assert!(check_sbatch(&[String::new()]).is_err());
    }

    #[test]
    fn sbatch_words_are_quoted_as_sbatch_reads_them() {
        assert_eq!(
            sbatch_word("/scratch/r-1/slurm-%A_%a.out"),
            "/scratch/r-1/slurm-%A_%a.out"
        );
        assert_eq!(sbatch_word("/a b/x"), "\"/a b/x\"");
        assert_eq!(sbatch_word("/a\"b\\c"), "\"/a\\\"b\\\\c\"");
    }

    #[test]
    fn shell_words_are_quoted() {
        assert_eq!(sh("/opt/gpumem-agent"), "/opt/gpumem-agent");
        assert_eq!(sh("a b"), "'a b'");
        assert_eq!(sh("it's"), "'it'\\''s'");
        assert_eq!(sh(""), "''");
    }
}
