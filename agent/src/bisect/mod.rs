//! `gpumem-agent bisect`: the boundary between passing and failing for one dimension
//! (method §10), each trial a fresh child process of this agent (method §8), so
//! no trial inherits another's pool, context or fragmentation.
//!
//! Trials: `--from` (expected to pass), `--to` (expected to fail), then halving the gap.
//! Each child runs `measure --events jsonl --output DIR/trial-<dim>-<value>.json`; its
//! event lines drive the progress display and its stderr goes to a `.log` beside the
//! result. A child's exit 1 is a recorded failure, 0 a pass; exit 2 (cannot measure)
//! stops the search with exit 2.
//!
//! With `--plan slurm|k8s --parallel K` nothing runs here: [`plan`] writes round 1 —
//! K trials as a Slurm array script or a Kubernetes Indexed Job manifest — for `sbatch`
//! or `kubectl`, and `--resume DIR` reads the finished trials, narrows the interval and
//! writes the next round, until the boundary is found.

pub mod plan;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use gpumem_proto::results::Event;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::device::DeviceSel;
use crate::exit::Exit;
use crate::measure::NetworkArgs;

/// The dimension `bisect` varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Vary {
    /// `--batch`.
    Batch,
    /// `--context`.
    Context,
    /// `--width`.
    Width,
}

impl Vary {
    fn flag(self) -> &'static str {
        match self {
            Vary::Batch => "batch",
            Vary::Context => "context",
            Vary::Width => "width",
        }
    }
}

/// Arguments of `bisect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Dimension to vary; the other measure flags stay fixed.
    #[arg(long, value_enum, required_unless_present = "resume")]
    pub vary: Option<Vary>,
    /// Smallest value (expected to pass).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), required_unless_present = "resume")]
    pub from: Option<u64>,
    /// Largest value (expected to fail).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), required_unless_present = "resume")]
    pub to: Option<u64>,
    /// Folder for every trial's result and log; created, must be new or empty.
    #[arg(long, required_unless_present = "resume")]
    pub output_dir: Option<PathBuf>,
    /// Write the trials as a Slurm array script or a Kubernetes Indexed Job manifest
    /// (round 1, `--parallel` trials) instead of running them here; nothing is submitted.
    #[arg(long, value_enum, requires = "parallel", conflicts_with = "resume")]
    pub plan: Option<plan::Scheduler>,
    /// Trials per round with `--plan` (each a fresh process on its own device).
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..=1000))]
    pub parallel: Option<u64>,
    /// Read the finished trials of a planned search in DIR, narrow the interval and
    /// write the next round (or the answer).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["vary", "from", "to", "output_dir", "plan"])]
    pub resume: Option<PathBuf>,
    /// The planned trials' agent: this executable's path for Slurm (a shared file
    /// system), `gpumem-agent` (on the image's PATH) for Kubernetes. Give it again with
    /// `--resume` when the plan named another one: the plan's agent must be the one
    /// this command would choose.
    #[arg(long, value_name = "PATH")]
    pub agent: Option<String>,
    /// An extra `#SBATCH` line for the Slurm script (repeatable), e.g.
    /// `--sbatch=--gres=gpu:1 --sbatch=--partition=a100`.
    #[arg(long, value_name = "OPTION", allow_hyphen_values = true)]
    pub sbatch: Vec<String>,
    /// The container image of the Kubernetes Job (it must hold `gpumem-agent`).
    #[arg(long)]
    pub image: Option<String>,
    /// The PersistentVolumeClaim shared by the Job's pods and this machine, mounted at
    /// the output folder's path so trials write where `--resume` reads.
    #[arg(long)]
    pub claim: Option<String>,
    /// The fixed network and protocol flags (the varied one is overridden).
    #[command(flatten)]
    pub net: NetworkArgs,
}

/// The sequential search's arguments, once `--resume`/`--plan` are set aside.
struct Search {
    vary: Vary,
    from: u64,
    to: u64,
    output_dir: PathBuf,
    net: NetworkArgs,
}

/// How one trial ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pass,
    Fail,
}

struct Trial {
    value: u64,
    outcome: Outcome,
    file: PathBuf,
    failed_phase: Option<String>,
}

fn with_value(net: &NetworkArgs, vary: Vary, value: u64) -> NetworkArgs {
    let mut n = net.clone();
    match vary {
        Vary::Batch => n.batch = value,
        Vary::Context => n.context = value,
        Vary::Width => n.width = value,
    }
    n
}

/// Step one: every flag, before any child starts.
fn validate(args: &Search) -> Result<()> {
    check_range(args)?;
    create_empty_dir(&args.output_dir).map(drop)
}

/// The range, the device and both ends' networks.
fn check_range(args: &Search) -> Result<()> {
    if args.to <= args.from {
        bail!(
            "--to ({}) must be larger than --from ({})",
            args.to,
            args.from
        );
    }
    if args.net.device == "all" || crate::device::parse_device(&args.net.device)? == DeviceSel::All
    {
        bail!("bisect searches one device at a time: give --device cuda:N");
    }
    for v in [args.from, args.to] {
        with_value(&args.net, args.vary, v)
            .validate()
            .with_context(|| format!("--{} {v}", args.vary.flag()))?;
    }
    Ok(())
}

/// Creates `dir` (0700), or accepts it when it exists, is empty and is the user's
/// alone (each series gets a new folder; `crate::private::output_dir`). Returns its
/// resolved path.
fn create_empty_dir(dir: &Path) -> Result<PathBuf> {
    crate::private::output_dir(dir)
}

fn measure_argv(net: &NetworkArgs, output: &Path) -> Vec<String> {
    let mut v = vec![
        "measure".to_owned(),
        "--device".to_owned(),
        net.device.clone(),
        "--batch".to_owned(),
        net.batch.to_string(),
        "--context".to_owned(),
        net.context.to_string(),
        "--width".to_owned(),
        net.width.to_string(),
        "--layers".to_owned(),
        net.layers.to_string(),
        "--dtype".to_owned(),
        gpumem_proto::results::Dtype::from(net.dtype)
            .as_str()
            .to_owned(),
        "--warmup".to_owned(),
        net.warmup.to_string(),
        "--repeats".to_owned(),
        net.repeats.to_string(),
        "--seed".to_owned(),
        net.seed.to_string(),
        "--events".to_owned(),
        "jsonl".to_owned(),
        "--output".to_owned(),
        output.display().to_string(),
    ];
    if net.trim_between_repeats {
        v.push("--trim-between-repeats".to_owned());
    }
    v
}

/// Runs one trial in a fresh process; `Ok(None)` means the child could not measure.
fn trial(
    args: &Search,
    value: u64,
    bar: &ProgressBar,
) -> Result<std::result::Result<Trial, String>> {
    let name = format!("trial-{}-{value}", args.vary.flag());
    let file = args.output_dir.join(format!("{name}.json"));
    let log = args.output_dir.join(format!("{name}.log"));
    let exe = std::env::current_exe().context("finding this agent's executable")?;
    let log_file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(crate::private::FILE_MODE)
            .open(&log)
            .with_context(|| format!("creating {}", log.display()))?
    };
    let net = with_value(&args.net, args.vary, value);
    bar.set_message(format!("--{} {value}: starting", args.vary.flag()));
    let mut child = Command::new(&exe)
        .args(measure_argv(&net, &file))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    let mut failed_phase = None;
    let mut fatal = None;
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out)
            .lines()
            .map_while(std::result::Result::ok)
        {
            match serde_json::from_str::<Event>(&line) {
                Ok(Event::Phase { result, .. }) => {
                    bar.set_message(format!(
                        "--{} {value}: {} done",
                        args.vary.flag(),
                        result.phase
                    ));
                }
                Ok(Event::Finished {
                    failed_phase: f, ..
                }) => failed_phase = f.map(|p| p.to_string()),
                Ok(Event::Failed { error, .. }) => fatal = Some(error),
                _ => {}
            }
        }
    }
    let status = child.wait().context("waiting for the trial")?;
    match status.code() {
        Some(0) => Ok(Ok(Trial {
            value,
            outcome: Outcome::Pass,
            file,
            failed_phase: None,
        })),
        Some(1) => Ok(Ok(Trial {
            value,
            outcome: Outcome::Fail,
            file,
            failed_phase,
        })),
        code => Ok(Err(format!(
            "trial --{} {value} could not measure (exit {}): {} (log: {})",
            args.vary.flag(),
            code.map(|c| c.to_string())
                .unwrap_or_else(|| "by signal".to_owned()),
            fatal.unwrap_or_else(|| "see the log".to_owned()),
            log.display()
        ))),
    }
}

/// Runs `bisect`.
pub fn run(args: Args) -> Result<Exit> {
    if let Some(dir) = &args.resume {
        return plan::resume(dir, args.agent.as_deref());
    }
    if args.agent.is_some() && args.plan.is_none() {
        bail!("--agent goes with --plan or --resume (the trials here run this agent)");
    }
    let (Some(vary), Some(from), Some(to), Some(output_dir)) =
        (args.vary, args.from, args.to, args.output_dir.clone())
    else {
        bail!("give --vary, --from, --to and --output-dir (or --resume DIR)");
    };
    let search = Search {
        vary,
        from,
        to,
        output_dir,
        net: args.net.clone(),
    };
    if let Some(scheduler) = args.plan {
        check_range(&search)?;
        return plan::start(&search, scheduler, &args);
    }
    if args.parallel.is_some()
        || args.image.is_some()
        || args.claim.is_some()
        || !args.sbatch.is_empty()
    {
        bail!("--parallel, --image, --claim and --sbatch go with --plan slurm|k8s");
    }
    sequential(search)
}

/// The search run here, one trial after another.
fn sequential(args: Search) -> Result<Exit> {
    validate(&args)?;
    let span = args.to - args.from;
    let estimate = 2 + u64::from(64 - span.leading_zeros());
    let bar = ProgressBar::with_draw_target(Some(estimate), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{bar:30} trial {pos}/~{len} {msg}") {
        bar.set_style(style);
    }
    let mut trials: Vec<Trial> = Vec::new();
    let mut stopped = None;
    let mut run_one = |value: u64, trials: &mut Vec<Trial>| -> Result<Option<Outcome>> {
        let t = trial(&args, value, &bar)?;
        bar.inc(1);
        match t {
            Ok(t) => {
                let o = t.outcome;
                trials.push(t);
                Ok(Some(o))
            }
            Err(why) => {
                stopped = Some(why);
                Ok(None)
            }
        }
    };

    let (mut lo, mut hi) = (None, None);
    match run_one(args.from, &mut trials)? {
        Some(Outcome::Pass) => lo = Some(args.from),
        Some(Outcome::Fail) => hi = Some(args.from),
        None => {}
    }
    if lo.is_some() {
        match run_one(args.to, &mut trials)? {
            Some(Outcome::Pass) => lo = Some(args.to),
            Some(Outcome::Fail) => hi = Some(args.to),
            None => {}
        }
    }
    if let (Some(mut l), Some(mut h)) = (lo, hi) {
        while h - l > 1 {
            let mid = l + (h - l) / 2;
            match run_one(mid, &mut trials)? {
                Some(Outcome::Pass) => l = mid,
                Some(Outcome::Fail) => h = mid,
                None => break,
            }
        }
        lo = Some(l);
        hi = Some(h);
    }
    bar.finish_and_clear();

    let flag = args.vary.flag();
    crate::out::outln!("bisect --vary {flag} from {} to {}:", args.from, args.to);
    trials.sort_by_key(|t| t.value);
    for t in &trials {
        crate::out::outln!(
            "  --{flag} {:>12}  {:<5} {:<14} {}",
            t.value,
            if t.outcome == Outcome::Pass {
                "pass"
            } else {
                "FAIL"
            },
            t.failed_phase.as_deref().unwrap_or(""),
            t.file.display()
        );
    }
    let show = |v: Option<u64>| {
        v.map(|v| v.to_string())
            .unwrap_or_else(|| "none".to_owned())
    };
    crate::out::outln!("largest passing {flag}: {}", show(lo));
    crate::out::outln!("smallest failing {flag}: {}", show(hi));
    let summary = serde_json::json!({
        "vary": flag,
        "from": args.from,
        "to": args.to,
        "largest_passing": lo,
        "smallest_failing": hi,
        "stopped": stopped,
        "trials": trials.iter().map(|t| serde_json::json!({
            "value": t.value,
            "outcome": if t.outcome == Outcome::Pass { "pass" } else { "fail" },
            "failed_phase": t.failed_phase,
            "file": t.file.display().to_string(),
        })).collect::<Vec<_>>(),
    });
    let summary_path = args.output_dir.join("bisect-summary.json");
    crate::private::write_new_atomically(
        &summary_path,
        serde_json::to_string_pretty(&summary)?.as_bytes(),
    )?;
    crate::out::outln!("summary: {}", summary_path.display());
    if let Some(why) = stopped {
        crate::out::errln!("gpumem-agent: bisect stopped: {why}");
        return Ok(Exit::Unavailable);
    }
    Ok(Exit::Ok)
}
