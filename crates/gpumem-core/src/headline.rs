//! The answer first: does the workload fit, on what, with how much room.
//!
//! [`headline`] turns an estimate into what a reader wants before any table: the
//! verdict on the chosen card (or, without one, on the smallest catalogue card that
//! fits), the need against the capacity with its headroom and margin, then three
//! ways out — how many such cards (the tensor-parallel degree that splits it enough),
//! the smallest card that holds it as it is, and the widest weight format that fits
//! the card. The CLI's default output and the page's verdict box both print this one
//! value with the labels below, so they cannot disagree.
//!
//! With a serving engine ([`Basis::Engine`]) the need is the engine's: the card's
//! capacity minus what its KV pool has left once it holds the workload's KV cache and
//! one sequence of `max-model-len` — the engine's own rule, not the generic estimate.

#![deny(clippy::arithmetic_side_effects)]

use serde::{Deserialize, Serialize};

use crate::catalogue::{Arch, CATALOGUE, GpuCard};
use crate::engine::{self, EngineId, EngineParams};
use crate::error::EstimateError;
use crate::estimate::{Estimate, EstimateInput, TrainMode, estimate};
use crate::fit::{
    CardFit, Margin, Verdict, assumed_margin, assumed_reserve, fit_card_reserve, margin,
};
use crate::format::{Dtype, StorageFormat};
use crate::units::{Bytes, group_digits};

/// The headline's row labels, one place for the CLI and the page.
pub const LABEL_CARDS: &str = "Cards needed";
/// See [`LABEL_CARDS`].
pub const LABEL_SMALLEST: &str = "Smallest card that fits";
/// See [`LABEL_CARDS`].
pub const LABEL_FORMAT: &str = "Widest format that fits";
/// See [`LABEL_CARDS`].
pub const LABEL_MARGIN: &str = "Margin";

/// The weight formats tried for [`Headline::format`], widest first: 16-bit, the two
/// 8-bit kinds serving engines load (fp8, bitsandbytes int8), 4-bit groups of 128 as
/// AWQ/GPTQ checkpoints ship, and llama.cpp's 3- and 2-bit k-quants.
pub const FORMAT_LADDER: [&str; 6] = ["bf16", "fp8", "int8", "awq-4-g128", "q3_k", "q2_k"];

/// The formats a workload can take, widest first: inference any of [`FORMAT_LADDER`];
/// LoRA a 16-bit base or one bitsandbytes quantised (8-bit, or 4-bit as QLoRA's
/// recipes load it); QLoRA its 4-bit base (with or without double quantisation); a
/// full fine-tune trains the weights themselves, which no quantised format can hold.
pub fn format_ladder(train: TrainMode) -> &'static [&'static str] {
    match train {
        TrainMode::None => &FORMAT_LADDER,
        TrainMode::Lora => &["bf16", "int8", "nf4-dq"],
        TrainMode::Qlora => &["nf4", "nf4-dq"],
        TrainMode::Full => &["bf16"],
    }
}

/// The formats `engine` loads, widest first, as its registry entry lists them
/// ([`engine::Info::formats`]: the pool engines load safetensors checkpoints — 16-bit,
/// fp8, bitsandbytes int8, 4-bit AWQ/GPTQ — and no GGUF block type; llama.cpp loads
/// GGUF only, each k-quant file type counted as its mix of types; transformers what its
/// loaders take). Without an engine, the estimate's ladder; for training, the training
/// method's own.
pub fn engine_ladder(train: TrainMode, engine: Option<EngineId>) -> &'static [&'static str] {
    if train != TrainMode::None {
        return format_ladder(train);
    }
    match engine {
        None => &FORMAT_LADDER,
        Some(e) => e.formats(),
    }
}

/// [`Headline::cards_note`] of a training run.
pub const TRAINING_CARDS: &str =
    "each GPU holds the whole training step (replicas; --zero, --fsdp shard it)";

/// [`Headline::cards_note`] of a sharded training run.
pub const SHARDED_CARDS: &str =
    "each GPU holds one rank's share of the step (more --gpus shard it further)";

/// The largest tensor-parallel degree tried for [`Headline::cards`] (one 8-GPU node
/// and then some: beyond it the answer is a different deployment, not more cards).
pub const MAX_TP: u64 = 64;

/// What a need is measured by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Basis {
    /// The estimate's most loaded device.
    Estimate,
    /// A serving engine's budget on the card (its flags; the card is the headline's).
    Engine(Box<EngineParams>),
}

/// One need on one card: what the most loaded device needs and half its assumed part,
/// and under an engine the sequences its pool holds at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// What the most loaded device needs, bytes.
    pub bytes: u64,
    /// Half its assumed part ([`assumed_margin`]), the margin it is judged with.
    pub assumed: u64,
    /// The assumed reserve inside `bytes` ([`assumed_reserve`]; 0 under an engine).
    pub reserve: u64,
    /// Under an engine: the workload's sequences its pool holds at once.
    pub sequences: Option<Sequences>,
    /// Host memory per node the answer puts there (offloaded states, llama.cpp's CPU
    /// buffer), bytes: never in `bytes`.
    pub host: u64,
    /// Over several cards (llama.cpp's `--tensor-split`): the most loaded one, whose
    /// need this is; `None` when the need is the card's given.
    pub device: Option<GpuCard>,
}

/// What the host memory of [`Need::host`] holds, as the answer names it.
const HOST_OFFLOADED: &str = "what is offloaded to the host (the host.* lines)";
/// llama.cpp's CPU buffer.
pub const HOST_LLAMA: &str = "llama.cpp's weights kept in host memory (its CPU buffer)";
/// vLLM's `--cpu-offload-gb` weights.
pub const HOST_VLLM: &str =
    "the weights --cpu-offload-gb keeps in pinned host memory (every GPU's)";

/// What a need is measured by: the estimate ([`ByEstimate`]) or a serving engine's
/// budget ([`Basis`]). [`headline`] is generic over it, so a caller that judges by the
/// estimate alone (the page's first module) carries no engine rule.
pub trait Rule {
    /// The need of `input` (estimated as `est`) on `card`.
    fn need(
        &self,
        input: &EstimateInput,
        est: &Estimate,
        card: &GpuCard,
    ) -> Result<Need, EstimateError>;
    /// The engine whose budget is the need, if any.
    fn engine(&self) -> Option<EngineId>;
    /// The same rule judging one card alone (the searches over other cards and other
    /// counts of a card: several cards given are not carried into them).
    /// `None`: the rule is the same.
    fn alone(&self) -> Option<Self>
    where
        Self: Sized,
    {
        None
    }
    /// The estimate of `input`, as the searches ask it (another card count, another
    /// format): [`estimate`], every stage.
    fn estimate(&self, input: &EstimateInput) -> Result<Estimate, EstimateError> {
        estimate(input)
    }
    /// The need of `input` on `card`, estimating it first.
    fn need_of(&self, input: &EstimateInput, card: &GpuCard) -> Result<Need, EstimateError> {
        let est = self.estimate(input)?;
        self.need(input, &est, card)
    }
}

/// The estimate's most loaded device as the need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByEstimate;

impl Rule for ByEstimate {
    fn need(&self, _: &EstimateInput, est: &Estimate, _: &GpuCard) -> Result<Need, EstimateError> {
        Ok(Need {
            bytes: est.per_device_bytes,
            assumed: assumed_margin(est),
            reserve: assumed_reserve(est),
            sequences: None,
            host: est.host_bytes,
            device: None,
        })
    }

    fn engine(&self) -> Option<EngineId> {
        None
    }
}

/// [`ByEstimate`] for inference alone: its searches estimate with
/// [`crate::estimate::estimate_inference`], so a caller judging by it carries none of
/// the training stages (the page's first module; its training runs are answered by
/// the module that carries them). A training input's searches find nothing: judge it
/// [`ByEstimate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByInference;

impl Rule for ByInference {
    fn need(
        &self,
        i: &EstimateInput,
        est: &Estimate,
        card: &GpuCard,
    ) -> Result<Need, EstimateError> {
        ByEstimate.need(i, est, card)
    }

    fn engine(&self) -> Option<EngineId> {
        None
    }

    fn estimate(&self, input: &EstimateInput) -> Result<Estimate, EstimateError> {
        crate::estimate::estimate_inference(input)
    }
}

/// [`ByEstimate`] for training runs alone: its searches estimate with
/// [`crate::estimate::estimate_training`], so a caller judging by it carries none of
/// inference's stages (the page's training module; inference is answered by the
/// engine module). An inference's searches find nothing: judge it [`ByEstimate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByTraining;

impl Rule for ByTraining {
    fn need(
        &self,
        i: &EstimateInput,
        est: &Estimate,
        card: &GpuCard,
    ) -> Result<Need, EstimateError> {
        ByEstimate.need(i, est, card)
    }

    fn engine(&self) -> Option<EngineId> {
        None
    }

    fn estimate(&self, input: &EstimateInput) -> Result<Estimate, EstimateError> {
        crate::estimate::estimate_training(input)
    }
}

/// Under an engine: the workload's sequences its pool holds at once, beside those
/// asked ("14 of 16 sequences of 32 768 tokens").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Sequences {
    /// Sequences asked for (`sequences`).
    pub asked: u64,
    /// Sequences of `tokens` the pool holds at once (llama.cpp: all its slots or none).
    pub fit: u64,
    /// Tokens of each.
    pub tokens: u64,
}

impl Rule for Basis {
    fn need(
        &self,
        input: &EstimateInput,
        est: &Estimate,
        card: &GpuCard,
    ) -> Result<Need, EstimateError> {
        let Basis::Engine(params) = self else {
            return ByEstimate.need(input, est, card);
        };
        // Several cards are judged together when the card asked about is one of them.
        let split = params.devices.contains(card);
        let p = EngineParams {
            card: Some(*card),
            devices: if split {
                params.devices.clone()
            } else {
                Vec::new()
            },
            ..(**params).clone()
        };
        let b = engine::budget(input, est, &p)?;
        // Over several cards the budget is the most loaded device's: its row's place
        // in the device order names the card.
        let device = if split {
            b.devices
                .iter()
                .find(|d| d.most_loaded)
                .and_then(|d| p.devices.get(usize::try_from(d.device).ok()?))
                .copied()
        } else {
            None
        };
        // The engine's own figure: its pool less what it must hold — one sequence of
        // max-model-len to start (or llama.cpp's cache) and the asked sequences at
        // once, whichever leaves less — judged against the spread of its assumed
        // lines; a refusal (no pool at all) leaves no margin to hide in.
        let (capacity, _) = device.unwrap_or(*card).capacity();
        let margin = b.margin_bytes.min(b.workload_margin_bytes);
        let bytes = i128::from(capacity)
            .saturating_sub(i128::from(margin))
            .max(0);
        // llama.cpp's cache holds its slots or refuses; a pool counts sequences.
        let per_slot = b.kv_cache_bytes.is_some();
        let fit = if per_slot {
            if b.workload_margin_bytes >= 0 {
                b.sequences
            } else {
                0
            }
        } else {
            b.max_sequences
        };
        Ok(Need {
            bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
            assumed: if b.kv_capacity_bytes <= 0 {
                0
            } else {
                b.uncertainty_bytes
            },
            reserve: 0,
            device,
            host: b
                .host_weights_bytes
                .unwrap_or(0)
                .saturating_add(est.host_bytes),
            sequences: Some(Sequences {
                asked: b.sequences,
                fit,
                tokens: if per_slot {
                    b.max_model_len.checked_div(b.sequences).unwrap_or(0)
                } else {
                    b.max_model_len
                },
            }),
        })
    }

    fn engine(&self) -> Option<EngineId> {
        match self {
            Basis::Engine(p) => p.engine,
            Basis::Estimate => None,
        }
    }

    fn alone(&self) -> Option<Self> {
        match self {
            Basis::Engine(p) if !p.devices.is_empty() => {
                Some(Basis::Engine(Box::new(EngineParams {
                    devices: Vec::new(),
                    ..(**p).clone()
                })))
            }
            _ => None,
        }
    }
}

/// How many cards of the chosen kind hold the workload, split by tensor parallelism.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Cards {
    /// Cards: tp × pp.
    pub cards: u64,
    /// The tensor-parallel degree.
    pub tp: u64,
    /// The pipeline stages (as given).
    pub pp: u64,
    /// What the most loaded device then needs.
    pub need_bytes: u64,
}

/// One weight format on the chosen card.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FormatFit {
    /// The format's name (as `--format` takes it).
    pub format: String,
    /// The weights in that format, bytes.
    pub weights_bytes: u64,
    /// The fit of the need in that format on the card.
    pub fit: CardFit,
    /// Whether the card runs weights in this format at all (no fp8 before Ampere), and
    /// the runtime loads them as the checkpoint has them (a GPTQ/AWQ MoE under
    /// transformers does not load its experts).
    pub runs: bool,
}

/// The answer: the verdict first, then the ways out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Headline {
    /// "yes", "borderline" or "no" (as [`Verdict::key`]).
    pub verdict: String,
    /// The card judged against, the need, the headroom and the margin.
    pub card: CardFit,
    /// Whether the card was chosen by the user; otherwise it is the smallest catalogue
    /// card that fits (the largest when none does).
    pub card_given: bool,
    /// What the margin is made of.
    pub margin: Margin,
    /// "estimate", or the engine's name when its budget is the need.
    pub basis: String,
    /// need / capacity in millionths (the bar; above 1 000 000 when over).
    pub used_ppm: u64,
    /// Under an engine: the workload's sequences its pool holds at once.
    pub sequences: Option<Sequences>,
    /// The fewest such cards that hold it (tensor parallelism from the given degree up
    /// to [`MAX_TP`]); `None` when even that does not, or when splitting is not what
    /// the workload does ([`Headline::cards_note`]).
    pub cards: Option<Cards>,
    /// Why no card count is given when it is not for want of cards (training: every GPU
    /// holds the whole step, or one rank's share of it).
    pub cards_note: Option<String>,
    /// Whether some catalogue card holds it alone; without a card chosen and none that
    /// does, the headline's card is the largest, named as such.
    pub any_fits: bool,
    /// The smallest catalogue card that holds it as it is; `None` when none does.
    pub smallest: Option<CardFit>,
    /// The widest format of [`format_ladder`] that fits the card; `None` when none
    /// does, or when the weights come from file headers (their format is the file's).
    pub format: Option<FormatFit>,
    /// Formats the card does not compute in (bf16 on a T4, fp8 before Ada).
    pub warnings: Vec<String>,
    /// On a Mac: its unified memory, the GPU's share and what is left to the system.
    pub unified: Option<Unified>,
    /// The host memory the answer puts there and its verdict against the RAM; `None`
    /// when nothing goes to the host and no RAM was given.
    pub host: Option<HostFit>,
}

/// How a Mac's unified memory is split between its GPU and everything else: the GPU
/// and the host share one RAM, so what the GPU may wire is not there for macOS, the
/// engine's own process or host-side weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Unified {
    /// The Mac's RAM, bytes (its "128 GB" is GiB).
    pub ram_bytes: u64,
    /// What the GPU may use: Metal's working set, or the wired limit given.
    pub gpu_bytes: u64,
    /// The rest, left to macOS and every other program.
    pub system_bytes: u64,
    /// Whether `gpu_bytes` is a wired limit given (`--wired-limit-mb`) rather than
    /// macOS's default.
    pub wired_limit: bool,
}

impl Unified {
    /// The split of `card`'s memory when it is a Mac.
    pub fn of(card: &GpuCard) -> Option<Unified> {
        Some(Unified {
            ram_bytes: card.label_bytes,
            gpu_bytes: card.capacity().0,
            system_bytes: card.system_left()?,
            wired_limit: card.wired_limit_bytes.is_some(),
        })
    }
}

impl Unified {
    /// The split in words, both units: what the GPU may use and what is left to the
    /// system (the CLI's and the page's sentence).
    pub fn sentence(&self) -> String {
        format!(
            "the GPU and the system share {} of RAM: the GPU's {} is the capacity, {} left for macOS, the engine's process and host memory{}",
            both_units(self.ram_bytes),
            if self.wired_limit {
                "wired limit (--wired-limit-mb)"
            } else {
                "working set (Metal's recommendedMaxWorkingSetSize, macOS's default)"
            },
            both_units(self.system_bytes),
            if self.wired_limit {
                ""
            } else {
                "; `sudo sysctl iogpu.wired_limit_mb=N` and --wired-limit-mb N move the split"
            }
        )
    }
}

/// "20.61 GiB (22.13 GB)".
fn both_units(b: u64) -> String {
    format!(
        "{} GiB ({} GB)",
        Bytes(b).gib_string(2),
        Bytes(b).gb_string(2)
    )
}

/// The host memory an answer puts there, judged against the RAM (`--ram`, or a Mac's
/// unified memory, which the GPU's need shares).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HostFit {
    /// Host memory per node, bytes.
    pub need_bytes: u64,
    /// What it holds.
    pub what: String,
    /// The RAM it is judged against, bytes: `--ram`, else a Mac's unified memory;
    /// `None` when neither is known (no verdict).
    pub ram_bytes: Option<u64>,
    /// On a Mac, the GPU's need, which takes the same RAM (0 beside a card).
    pub gpu_bytes: u64,
    /// RAM less the GPU's need on a Mac and the host's need, bytes (negative: short);
    /// `None` without a RAM.
    pub left_bytes: Option<i64>,
    /// Whether it fits; `None` without a RAM.
    pub fits: Option<bool>,
}

impl HostFit {
    /// What it holds per node and its verdict against the RAM, in words with both
    /// units (the CLI's and the page's sentence); `mac` when the card is a Mac's
    /// unified memory.
    pub fn sentence(&self, mac: bool) -> String {
        let mut t = format!(
            "{} per node for {} (not in the GPU's need)",
            both_units(self.need_bytes),
            self.what
        );
        let (Some(ram), Some(left), Some(fits)) = (self.ram_bytes, self.left_bytes, self.fits)
        else {
            t.push_str("; --ram SIZE (64GiB) for a verdict");
            return t;
        };
        let word = if fits { "FITS" } else { "DOES NOT FIT" };
        let rest = format!(
            "{} {}",
            both_units(left.unsigned_abs()),
            if fits { "left" } else { "short" }
        );
        if mac {
            t.push_str(&format!(
                "; on a Mac the host's memory is the GPU's: with the GPU's need of {} it takes {} of the {} of RAM: {word}, {rest} for macOS and other programs",
                both_units(self.gpu_bytes),
                both_units(self.gpu_bytes.saturating_add(self.need_bytes)),
                both_units(ram)
            ));
        } else {
            t.push_str(&format!("; --ram {}: {word}, {rest}", both_units(ram)));
        }
        t
    }

    /// `host` bytes of host memory beside a GPU need of `gpu_need` on `card`, judged
    /// against `ram` (a Mac's own unified memory when none is given, with the GPU's
    /// need counted in it); `None` when nothing goes to the host and no RAM is known.
    pub fn judge(
        host: u64,
        gpu_need: u64,
        ram: Option<u64>,
        card: Option<&GpuCard>,
        what: &str,
    ) -> Option<HostFit> {
        let mac = card.filter(|c| c.unified());
        if host == 0 && ram.is_none() {
            return None;
        }
        let ram = ram.or(mac.map(|c| c.label_bytes));
        let gpu_bytes = if mac.is_some() { gpu_need } else { 0 };
        let left_bytes = ram.map(|r| {
            let left = i128::from(r)
                .saturating_sub(i128::from(gpu_bytes))
                .saturating_sub(i128::from(host));
            i64::try_from(left).unwrap_or(if left < 0 { i64::MIN } else { i64::MAX })
        });
        Some(HostFit {
            need_bytes: host,
            what: what.to_string(),
            ram_bytes: ram,
            gpu_bytes,
            fits: left_bytes.map(|l| l >= 0),
            left_bytes,
        })
    }
}

/// Why a Mac gets no card count: it is one machine, not a card of which to add more.
pub const MAC_CARDS: &str = "one Mac (several over a network are not modelled)";
/// What "cards needed" says over several cards given (llama.cpp's `--tensor-split`).
pub const SPLIT_CARDS: &str =
    "the cards --card names, layers split over them; the verdict is the most loaded one's";

impl Headline {
    /// The verdict.
    pub fn verdict(&self) -> Verdict {
        Verdict::of_fit(&self.card)
    }
}

/// `need / capacity` in millionths, saturated.
pub fn used_ppm(need: u64, capacity: u64) -> u64 {
    let v = u128::from(need)
        .saturating_mul(1_000_000)
        .checked_div(u128::from(capacity))
        .unwrap_or(u128::MAX);
    u64::try_from(v).unwrap_or(u64::MAX)
}

fn fit_of(card: &GpuCard, need: Need) -> CardFit {
    // Over several cards, the most loaded one's fit.
    let card = need.device.as_ref().unwrap_or(card);
    fit_card_reserve(card, need.bytes, need.assumed, need.reserve)
}

/// The headline of `input` (estimated as `est`) on `card`, or on the smallest
/// catalogue card that fits when `card` is `None`.
pub fn headline<R: Rule>(
    input: &EstimateInput,
    est: &Estimate,
    card: Option<&GpuCard>,
    basis: &R,
) -> Result<Headline, EstimateError> {
    // Without a card the engine's rule judges every catalogue card: the smallest that
    // fits is the one it serves the workload on.
    let one = basis.alone();
    let alone = one.as_ref().unwrap_or(basis);
    let smallest = smallest_card(input, est, alone);
    let (card, card_given) = match (card, &smallest) {
        (Some(c), _) => (*c, true),
        (None, Some(f)) => (by_id(&f.id), false),
        (None, None) => (largest_card(), false),
    };
    let need = basis.need(input, est, &card)?;
    // Several cards: the verdict is the most loaded one's.
    let given = card;
    let card = need.device.unwrap_or(card);
    let what = if need.host > est.host_bytes {
        if basis.engine().is_some() && basis.engine() == crate::engine::find("vllm") {
            HOST_VLLM
        } else {
            HOST_LLAMA
        }
    } else {
        HOST_OFFLOADED
    };
    let host = HostFit::judge(need.host, need.bytes, input.ram, Some(&card), what);
    let fit = fit_of(&card, need);
    let m = Margin {
        reserve_bytes: need.reserve,
        ..margin(&card, need.assumed)
    };
    let training = input.train != TrainMode::None;
    Ok(Headline {
        verdict: fit.verdict.clone(),
        used_ppm: used_ppm(need.bytes, fit.capacity_bytes),
        card: fit,
        card_given,
        margin: m,
        basis: basis.engine().map_or("estimate", |e| e.name()).into(),
        sequences: need.sequences,
        cards: if training || card.unified() || one.is_some() {
            None
        } else {
            cards_needed(input, &given, alone)
        },
        cards_note: if training {
            Some(
                if input.zero > 0 || input.fsdp != crate::estimate::Fsdp::None {
                    SHARDED_CARDS.to_string()
                } else {
                    TRAINING_CARDS.to_string()
                },
            )
        } else if one.is_some() {
            Some(SPLIT_CARDS.to_string())
        } else {
            card.unified().then(|| MAC_CARDS.to_string())
        },
        any_fits: smallest.is_some(),
        smallest,
        format: widest_format(input, &given, basis),
        warnings: {
            let mut w = format_warnings(input, &card);
            if let Some(e) = basis.engine().filter(|e| card.unified() && !e.metal()) {
                w.push(e.not_on_a_mac());
            }
            w
        },
        unified: Unified::of(&card),
        host,
    })
}

/// The smallest catalogue card on which `basis` says the workload fits (catalogue
/// order among equals). A Mac is
/// judged when it is named, never picked: it is a machine, not a card beside others
/// (no tensor parallelism over Macs, and the CUDA engines do not run on it).
fn smallest_card<R: Rule>(input: &EstimateInput, est: &Estimate, basis: &R) -> Option<CardFit> {
    // The card named made transformers dequantise fp8 weights; the cards offered keep
    // them, so they are judged on the estimate that keeps them.
    let kept = input
        .format
        .filter(|f| crate::estimate::fp8_dequantised(input, *f))
        .and_then(|_| {
            let mut i = input.clone();
            i.card_fp8 = Some(true);
            let e = basis.estimate(&i).ok()?;
            Some((i, e))
        });
    let (input, est) = kept.as_ref().map_or((input, est), |(i, e)| (i, e));
    CATALOGUE
        .iter()
        .filter(|c| !c.unified() && runs_format(c, input))
        .filter_map(|c| {
            let f = fit_of(c, basis.need(input, est, c).ok()?);
            (Verdict::of_fit(&f) == Verdict::Fits).then_some(f)
        })
        .min_by_key(|f| f.capacity_bytes)
}

fn by_id(id: &str) -> GpuCard {
    CATALOGUE
        .iter()
        .find(|c| c.id == id)
        .copied()
        .unwrap_or_else(largest_card)
}

fn largest_card() -> GpuCard {
    CATALOGUE
        .iter()
        .filter(|c| !c.unified())
        .max_by_key(|c| c.capacity().0)
        .copied()
        .unwrap_or(CATALOGUE[0])
}

/// The fewest cards (tp × the given pp) at which the need fits `card`: tp a power of
/// two up to [`MAX_TP`] that divides the attention heads (vLLM's and Megatron's
/// requirement: every rank holds whole heads).
fn cards_needed<R: Rule>(input: &EstimateInput, card: &GpuCard, basis: &R) -> Option<Cards> {
    let heads = input.arch.map(|a| a.heads);
    // From the degree given (a split already asked for is never undone), doubling.
    let mut tp = input.tp.max(1);
    while tp <= MAX_TP {
        if heads.is_none_or(|h| h.is_multiple_of(tp)) {
            let mut i = input.clone();
            i.tp = tp;
            i.gpus = tp.saturating_mul(i.pp);
            if let Ok(need) = basis.need_of(&i, card)
                && Verdict::of_fit(&fit_of(card, need)) == Verdict::Fits
            {
                return Some(Cards {
                    cards: i.gpus,
                    tp,
                    pp: i.pp,
                    need_bytes: need.bytes,
                });
            }
        }
        tp = tp.saturating_mul(2);
    }
    None
}

/// `input` with its linear layers (and the parameter count's bytes) in `format`.
fn with_format(input: &EstimateInput, format: StorageFormat) -> EstimateInput {
    let mut i = input.clone();
    i.format = Some(format);
    i.bits = None;
    if i.attention_format.is_some() {
        i.attention_format = Some(format);
    }
    i
}

/// Each of `formats` on `card`: the weights and the fit. A name the parser refuses is
/// an error naming it; a format the estimate refuses is left out.
pub fn compare_formats<R: Rule>(
    input: &EstimateInput,
    card: &GpuCard,
    basis: &R,
    formats: &[&str],
) -> Result<Vec<FormatFit>, EstimateError> {
    let mut out = Vec::new();
    for name in formats {
        let f = StorageFormat::parse("formats", name)?;
        // The input's own format is the input as given (a checkpoint that keeps its
        // attention in bf16 keeps it), not the format applied to every linear.
        let i = if input.format == Some(f) {
            input.clone()
        } else {
            with_format(input, f)
        };
        let Ok(est) = basis.estimate(&i) else {
            continue;
        };
        let Ok(need) = basis.need(&i, &est, card) else {
            continue;
        };
        let format = f.name();
        out.push(FormatFit {
            // A pre-quantised GPTQ/AWQ MoE under transformers loads with its routed
            // experts at random (`estimate::experts_not_loaded`): not a format to run.
            runs: runs_fp8(card, &format, input.runtime())
                && !crate::estimate::experts_not_loaded(&i, f),
            format,
            weights_bytes: est.weights_bytes,
            fit: fit_of(card, need),
        });
    }
    Ok(out)
}

fn widest_format<R: Rule>(input: &EstimateInput, card: &GpuCard, basis: &R) -> Option<FormatFit> {
    // Weights read from file headers keep the file's format: no other format applies.
    if input.tensors.is_some() {
        return None;
    }
    let fits = |f: &FormatFit| Verdict::of_fit(&f.fit) == Verdict::Fits && f.runs;
    let ladder = compare_formats(
        input,
        card,
        basis,
        engine_ladder(input.train, basis.engine()),
    )
    .ok()?
    .into_iter()
    .find(fits);
    // The input's own format when it fits and is at least as wide (gpt-oss's mxfp4
    // rather than the ladder's awq-4-g128 of about the same bytes).
    let own = input
        .format
        .map(|f| f.name())
        .and_then(|name| compare_formats(input, card, basis, &[name.as_str()]).ok())
        .and_then(|mut v| v.pop())
        .filter(fits);
    match (ladder, own) {
        (Some(l), Some(o)) if o.weights_bytes >= l.weights_bytes => Some(o),
        (None, o) => o,
        (l, _) => l,
    }
}

/// Whether `card` runs weights of `format` at all: fp8 needs fp8 units, or Ampere's
/// weight-only kernels (vLLM's FP8 page: "Ampere GPUs are supported for W8A16");
/// older cards run none. Under transformers a card below compute capability 8.9
/// dequantises an fp8 checkpoint ([`crate::estimate::fp8_dequantised`]): the figure
/// computed without that card is not its figure, so it is not offered; and a card
/// without fp8 units is not offered either (an MI250X keeps the weights in fp8 there,
/// for kernels it cannot run).
fn runs_fp8(card: &GpuCard, format: &str, runtime: crate::arch::CacheRuntime) -> bool {
    if !format.starts_with("fp8") {
        return true;
    }
    if runtime == crate::arch::CacheRuntime::Transformers {
        return card.arch.fp8() && card.arch.transformers_fp8() != Some(false);
    }
    card.arch.fp8() || card.arch == Arch::Ampere
}

/// [`runs_fp8`] for an input's format (any other format runs everywhere, and so does
/// a compressed-tensors checkpoint transformers decompresses,
/// [`crate::estimate::ct_decompressed`]).
fn runs_format(card: &GpuCard, input: &EstimateInput) -> bool {
    match input.format {
        Some(f) if crate::estimate::ct_decompressed(input, f) => true,
        Some(StorageFormat::Fp8 { .. } | StorageFormat::Fp8Channel) => {
            runs_fp8(card, "fp8", input.runtime())
        }
        _ => true,
    }
}

/// What `card` cannot compute in among the input's formats, in words.
pub fn format_warnings(input: &EstimateInput, card: &GpuCard) -> Vec<String> {
    let mut out = Vec::new();
    let arch = card.arch;
    let dense = |f: Option<StorageFormat>, d: Dtype| f == Some(StorageFormat::Dense { dtype: d });
    let bf16 = input.compute_dtype == Dtype::Bf16 || dense(input.format, Dtype::Bf16);
    if !arch.bf16() && bf16 {
        out.push(format!(
            "{} ({}) has no bf16: PyTorch emulates it slowly or refuses; --compute-dtype fp16 and --format fp16 take the same bytes",
            card.name,
            arch.name()
        ));
    }
    // A compressed-tensors checkpoint under transformers runs decompressed, in the
    // model's dtype ([`crate::estimate::ct_decompressed`]): no fp8 weight is left.
    let fp8 = input.compute_dtype == Dtype::Fp8
        || matches!(
            input.format,
            Some(f @ (StorageFormat::Fp8 { .. } | StorageFormat::Fp8Channel))
                if !crate::estimate::ct_decompressed(input, f)
        );
    if !arch.fp8() && fp8 {
        out.push(
            if input.runtime() == crate::arch::CacheRuntime::Transformers
                && arch.transformers_fp8() == Some(false)
            {
                format!(
                    "{} ({}) has no fp8 units: transformers dequantises an fp8 checkpoint to bf16 there at load, 2 B a weight (a serving engine keeps fp8: --engine vllm)",
                    card.name,
                    arch.name()
                )
            } else {
                format!(
                    "{} ({}) has no fp8 units: engines run fp8 weights weight-only (W8A16, e.g. vLLM's Marlin kernels on Ampere) or not at all; the bytes are the same",
                    card.name,
                    arch.name()
                )
            },
        );
    }
    out
}

/// The inputs in one line, for the top of the answer: the model (`model`, else its
/// shape or parameter count), the weights' format, the workload, the mode and the
/// split — "Llama-3.1-8B · 8.03 B parameters · bf16 · 1 × (8 192 + 0) tokens · inference".
pub fn inputs_line(input: &EstimateInput, est: &Estimate, model: Option<&str>) -> String {
    let mut parts: Vec<String> = Vec::new();
    match (model, input.arch, input.parameters) {
        (Some(m), _, _) => parts.push(m.to_string()),
        (None, Some(a), _) => parts.push(format!("{} layers × {} wide", a.layers, a.hidden)),
        (None, None, _) if input.kv_only.is_some() => parts.push("KV shape only".into()),
        _ => {}
    }
    if let Some(p) = est.parameters {
        parts.push(format!("{} B parameters", Bytes(p).gb_string(2)));
    }
    parts.push(if input.tensors.is_some() {
        "weights from file headers".into()
    } else {
        match (input.format, input.bits) {
            (Some(f), _) => f.name(),
            (None, Some(b)) => format!("{b}-bit"),
            (None, None) => "bf16".into(),
        }
    });
    if let Some(c) = input.context {
        parts.push(format!(
            "{} × ({} + {}) tokens",
            group_digits(input.sequences),
            group_digits(c),
            group_digits(input.generate)
        ));
    }
    parts.push(match input.train {
        TrainMode::None => "inference".into(),
        TrainMode::Full => format!("full training, {}", input.optimizer.name()),
        TrainMode::Lora => format!("LoRA r{}", input.lora_rank),
        TrainMode::Qlora => format!("QLoRA r{}", input.lora_rank),
    });
    if input.gpus > 1 || input.tp > 1 || input.pp > 1 {
        let pp = if input.pp > 1 {
            format!(" × pp {}", input.pp)
        } else {
            String::new()
        };
        let group = input.tp.saturating_mul(input.pp).max(1);
        let replicas = input.gpus.checked_div(group).unwrap_or(1);
        let nodes = if input.nodes > 1 {
            format!(" on {} nodes", input.nodes)
        } else {
            String::new()
        };
        parts.push(match crate::estimate::rank_summary(input) {
            Some(ranks) => format!(
                "{} GPUs{nodes}: {replicas} data-parallel ranks of tp {}{pp}; {ranks}",
                input.gpus, input.tp
            ),
            None if replicas > 1 => format!(
                "{} GPUs{nodes}: {replicas} replicas of tp {}{pp}, each holding the whole model{}",
                input.gpus,
                input.tp,
                if input.train != TrainMode::None && !input.ddp_bucket_view {
                    " and DDP's gradient buckets"
                } else {
                    ""
                }
            ),
            None => format!("{} GPUs{nodes}, tp {}{pp}", input.gpus, input.tp),
        });
    } else if let Some(ranks) = crate::estimate::rank_summary(input) {
        parts.push(format!("1 GPU; {ranks}"));
    }
    parts.join(" · ")
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::catalogue::{find, resolve};
    use crate::fit::fit_card;
    use crate::params::from_pairs;
    use crate::presets;

    fn llama_8b(extra: &[(&str, &str)]) -> EstimateInput {
        let p = presets::find("llama-3.1-8b").unwrap();
        let (i, e) = from_pairs(p.pairs.iter().copied().chain(extra.iter().copied()));
        assert!(e.is_empty(), "{e:?}");
        i
    }

    fn head(input: &EstimateInput, card: Option<&str>) -> Headline {
        let est = estimate(input).unwrap();
        let card = card.map(|c| resolve(c).unwrap());
        headline(input, &est, card.as_ref(), &Basis::Estimate).unwrap()
    }

    /// `--ram`: the host memory an answer puts there (ZeRO-3's offloaded states) is
    /// judged against it, per node, with what is left or short; without host memory
    /// and without a RAM there is no host line.
    #[test]
    fn host_memory_is_judged_against_the_ram() {
        let offload = [
            ("context", "2048"),
            ("train", "full"),
            ("gpus", "8"),
            ("zero", "3"),
            ("offload-optimizer", "cpu"),
            ("offload-param", "cpu"),
        ];
        let i = llama_8b(&offload);
        let est = estimate(&i).unwrap();
        assert!(est.host_bytes > 0);
        // No RAM given: the need, no verdict.
        let h = head(&i, Some("h100-sxm-80gb")).host.expect("host memory");
        assert_eq!(
            (h.need_bytes, h.ram_bytes, h.fits),
            (est.host_bytes, None, None)
        );
        assert_eq!(h.what, HOST_OFFLOADED);
        for (ram, fits) in [("64GiB", false), ("2048GiB", true)] {
            let i = llama_8b(&[offload.as_slice(), &[("ram", ram)]].concat());
            let h = head(&i, Some("h100-sxm-80gb")).host.expect("host memory");
            let r = crate::catalogue::parse_capacity(ram).unwrap();
            assert_eq!(h.ram_bytes, Some(r));
            assert_eq!(h.gpu_bytes, 0, "a card's memory is its own");
            assert_eq!(h.left_bytes, Some(r as i64 - est.host_bytes as i64));
            assert_eq!(h.fits, Some(fits), "{ram}");
        }
        // Nothing on the host: no line, unless a RAM is given (then 0 of it).
        let plain = llama_8b(&[("context", "8192")]);
        assert!(head(&plain, Some("l40s")).host.is_none());
        let with_ram = llama_8b(&[("context", "8192"), ("ram", "32GiB")]);
        let h = head(&with_ram, Some("l40s")).host.unwrap();
        assert_eq!((h.need_bytes, h.left_bytes), (0, Some(32 << 30)));
    }

    /// llama.cpp's CPU buffer is host memory; on a Mac it takes the same RAM as the
    /// GPU's need, so both are counted against the Mac's unified memory.
    #[test]
    fn on_a_mac_the_host_and_the_gpu_share_the_ram() {
        let i = llama_8b(&[("context", "8192"), ("format", "q8_0")]);
        let est = estimate(&i).unwrap();
        let (p, e) = engine::from_pairs([
            ("engine", "llama.cpp"),
            ("card", "m3-max-36gb"),
            ("n-gpu-layers", "20"),
        ]);
        assert!(e.is_empty(), "{e:?}");
        let b = engine::budget(&i, &est, &p).unwrap();
        let host_weights = b.host_weights_bytes.unwrap();
        assert!(host_weights > 0);
        let mac = p.card.unwrap();
        let h = headline(&i, &est, Some(&mac), &Basis::Engine(Box::new(p))).unwrap();
        let host = h.host.expect("llama.cpp's CPU buffer");
        assert_eq!(host.need_bytes, host_weights);
        assert_eq!(host.what, HOST_LLAMA);
        // The Mac's own RAM, no --ram needed; the GPU's need counted beside.
        assert_eq!(host.ram_bytes, Some(36 << 30));
        assert_eq!(host.gpu_bytes, h.card.need_bytes);
        assert_eq!(
            host.left_bytes,
            Some((36i64 << 30) - h.card.need_bytes as i64 - host_weights as i64)
        );
        assert_eq!(host.fits, Some(true));
    }

    #[test]
    fn llama_8b_at_8k_fits_a_4090_and_not_a_t4() {
        let i = llama_8b(&[("context", "8192")]);
        let est = estimate(&i).unwrap();
        let h = head(&i, Some("4090"));
        assert_eq!(h.verdict(), Verdict::Fits);
        assert_eq!(h.card.need_bytes, est.per_device_bytes);
        assert_eq!(h.card.capacity_bytes, 24_564 << 20);
        assert_eq!(
            h.card.headroom_bytes,
            (24_564i64 << 20) - est.per_device_bytes as i64
        );
        assert!(h.card_given);
        assert_eq!(h.cards.as_ref().map(|c| (c.cards, c.tp)), Some((1, 1)));
        assert_eq!(h.format.as_ref().map(|f| f.format.as_str()), Some("bf16"));
        assert!(h.warnings.is_empty());
        // 16 GiB: two T4s at tp 2, or a 4-bit format on one (a T4 runs no fp8, and
        // int8 is borderline once LLM.int8's accumulator at the prefill is counted);
        // and it has no bf16.
        let t4 = head(&i, Some("t4"));
        assert_eq!(t4.verdict(), Verdict::DoesNotFit);
        let cards = t4.cards.unwrap();
        assert_eq!((cards.cards, cards.tp, cards.pp), (2, 2, 1));
        let f = t4.format.unwrap();
        assert_eq!(f.format, "awq-4-g128");
        assert_eq!(Verdict::of_fit(&f.fit), Verdict::Fits);
        assert_eq!(t4.warnings.len(), 1, "{:?}", t4.warnings);
        assert!(t4.warnings[0].contains("no bf16"), "{:?}", t4.warnings);
        let fp8 = llama_8b(&[
            ("context", "8192"),
            ("format", "fp8"),
            ("compute-dtype", "fp16"),
        ]);
        let w = format_warnings(&fp8, &resolve("t4").unwrap());
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("no fp8"), "{w:?}");
        assert!(format_warnings(&fp8, find("h100-sxm-80gb").unwrap()).is_empty());
        // The same fp8 from a compressed-tensors checkpoint: transformers runs it
        // decompressed, on any card, and a T4 is offered like any other.
        let mut ct = llama_8b(&[
            ("context", "8192"),
            ("format", "fp8-channel"),
            ("compute-dtype", "fp16"),
            ("compressed-tensors", "true"),
        ]);
        assert!(format_warnings(&ct, &resolve("t4").unwrap()).is_empty());
        assert!(runs_format(&resolve("t4").unwrap(), &ct));
        ct.compressed_tensors = false;
        assert!(!runs_format(&resolve("t4").unwrap(), &ct));
        // The smallest card that fits holds it and is the smallest that does.
        let s = t4.smallest.unwrap();
        assert_eq!(s.verdict, "yes");
        // (Macs are judged when named, never picked.)
        for c in CATALOGUE.iter().filter(|c| !c.unified()) {
            if c.capacity().0 < s.capacity_bytes {
                let f = fit_card(c, est.per_device_bytes, assumed_margin(&est));
                assert_ne!(f.verdict, "yes", "{} is smaller and fits", c.id);
            }
        }
    }

    #[test]
    fn without_a_card_the_smallest_that_fits_is_judged() {
        let i = llama_8b(&[("context", "8192")]);
        let h = head(&i, None);
        assert!(!h.card_given);
        assert_eq!(h.verdict(), Verdict::Fits);
        assert_eq!(Some(&h.card), h.smallest.as_ref());
        // Nothing fits 405B-class weights at bf16 on one card: the largest is shown.
        let big = from_pairs([("parameters", "2000000000000"), ("bits", "16")]).0;
        let h = head(&big, None);
        assert_eq!(h.verdict(), Verdict::DoesNotFit);
        let largest = CATALOGUE
            .iter()
            .filter(|c| !c.unified())
            .map(|c| c.capacity().0)
            .max()
            .unwrap();
        assert_eq!(h.card.capacity_bytes, largest);
        assert!(h.smallest.is_none());
        // A Mac holds more than any card (an M3 Ultra's 512 GB), but is not one to pick.
        assert!(CATALOGUE.iter().any(|c| c.capacity().0 > largest));
        assert!(!find(&h.card.id).is_some_and(|c| c.unified()));
        // Named, it is judged on its working set.
        let h = head(&llama_8b(&[("context", "8192")]), Some("m3-max-128gb"));
        assert_eq!(h.card.capacity_bytes, 96 << 30);
        assert_eq!(h.card.capacity_kind, "working set");
        let u = h.unified.expect("a Mac's split");
        assert_eq!(
            (u.ram_bytes, u.gpu_bytes, u.system_bytes, u.wired_limit),
            (128 << 30, 96 << 30, 32 << 30, false)
        );
        // One Mac: no count of cards, said why.
        assert!(h.cards.is_none());
        assert_eq!(h.cards_note.as_deref(), Some(MAC_CARDS));
        // An engine without a Metal backend is said not to run there.
        let (vllm, _) = engine::from_pairs([("engine", "vllm")]);
        let i = llama_8b(&[("context", "8192")]);
        let est = estimate(&i).unwrap();
        let mac = resolve("m3-max-128gb").unwrap();
        let under = |p: engine::EngineParams| {
            headline(&i, &est, Some(&mac), &Basis::Engine(Box::new(p))).unwrap()
        };
        assert!(
            under(vllm)
                .warnings
                .iter()
                .any(|w| w.contains("does not run on a Mac"))
        );
        let (llama, _) = engine::from_pairs([("engine", "llama.cpp")]);
        assert!(
            under(llama)
                .warnings
                .iter()
                .all(|w| !w.contains("does not run on a Mac"))
        );
        // A card with memory of its own has no split.
        assert!(
            head(&llama_8b(&[("context", "8192")]), Some("l40s"))
                .unified
                .is_none()
        );
    }

    #[test]
    fn borderline_within_the_margin_of_a_custom_capacity() {
        // The CUDA context is the assumed line whose half is the margin.
        let i = llama_8b(&[("context", "8192"), ("cuda-context-mib", "500")]);
        let est = estimate(&i).unwrap();
        let m = assumed_margin(&est);
        assert!(m > 0);
        let exact = format!("{}MiB", est.per_device_bytes.div_ceil(1 << 20));
        let h = head(&i, Some(&exact));
        assert_eq!(h.card.id, "custom");
        assert_eq!(h.verdict(), Verdict::Borderline);
        assert_eq!(h.margin.bytes, m);
        assert_eq!(h.margin.capacity_bytes, 0);
    }

    #[test]
    fn formats_compare_side_by_side() {
        let i = llama_8b(&[("context", "8192")]);
        let card = find("rtx-4090").unwrap();
        let rows = compare_formats(
            &i,
            card,
            &Basis::Estimate,
            &["bf16", "fp8", "awq-4-g128", "q4_k"],
        )
        .unwrap();
        assert_eq!(rows.len(), 4);
        assert!(
            rows.windows(2)
                .all(|w| w[0].weights_bytes > w[1].weights_bytes || w[1].format == "q4_k")
        );
        assert!(compare_formats(&i, card, &Basis::Estimate, &["bogus"]).is_err());
    }

    /// A GPTQ/AWQ MoE under transformers loads its experts at random: counted, never
    /// offered; a dense model's AWQ is.
    #[test]
    fn a_gptq_or_awq_moe_under_transformers_is_not_a_format_to_run() {
        let p = presets::find("mixtral-8x7b").unwrap();
        let (moe, e) = from_pairs(p.pairs.iter().copied());
        assert!(e.is_empty(), "{e:?}");
        let card = find("h200-141gb").unwrap();
        let rows = compare_formats(&moe, card, &Basis::Estimate, &["awq-4-g128", "nf4"]).unwrap();
        assert!(!rows[0].runs, "{rows:?}");
        assert!(rows[1].runs, "{rows:?}");
        let dense =
            compare_formats(&llama_8b(&[]), card, &Basis::Estimate, &["awq-4-g128"]).unwrap();
        assert!(dense[0].runs, "{dense:?}");
    }

    #[test]
    fn llama_cpps_ladder_names_its_file_types_as_typed_and_narrows() {
        let i = llama_8b(&[("context", "8192")]);
        let card = find("rtx-4090").unwrap();
        let ladder = engine_ladder(TrainMode::None, engine::find("llama.cpp"));
        let rows = compare_formats(&i, card, &Basis::Estimate, ladder).unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r.format.as_str()).collect();
        assert_eq!(names, ladder);
        assert!(
            rows.windows(2)
                .all(|w| w[0].weights_bytes > w[1].weights_bytes),
            "{rows:?}"
        );
    }

    #[test]
    fn a_training_run_is_offered_only_formats_it_can_train_on() {
        let format = |train: &str, card: &str| {
            let i = llama_8b(&[
                ("context", "4096"),
                ("train", train),
                ("checkpointing", "true"),
            ]);
            head(&i, Some(card)).format.map(|f| f.format)
        };
        // QLoRA's base is 4-bit NormalFloat; a GGUF k-quant or AWQ would not train.
        assert_eq!(format("qlora", "rtx-4090").as_deref(), Some("nf4"));
        // LoRA on a bitsandbytes base when 16 bits do not fit.
        assert_eq!(format("lora", "rtx-4090").as_deref(), Some("int8"));
        assert_eq!(format("lora", "h100-sxm-80gb").as_deref(), Some("bf16"));
        // A full fine-tune trains the weights themselves: 16-bit or nothing.
        assert_eq!(format("full", "rtx-4090"), None);
        assert_eq!(format_ladder(TrainMode::Full), &["bf16"]);
    }

    /// Judged for inference alone, an inference workload gets the same answer as judged
    /// by the whole estimate (its searches included: card counts, formats).
    #[test]
    fn by_inference_answers_inference_as_by_estimate() {
        for (extra, card) in [
            (&[("context", "8192")][..], Some("rtx-4090")),
            (&[("context", "32768"), ("sequences", "16")], None),
            (&[("context", "8192")], Some("l4")),
        ] {
            let i = llama_8b(extra);
            let est = estimate(&i).unwrap();
            let card = card.map(|c| resolve(c).unwrap());
            let by = |r: &dyn Fn() -> Result<Headline, EstimateError>| r().unwrap();
            let whole = by(&|| headline(&i, &est, card.as_ref(), &ByEstimate));
            let alone = by(&|| headline(&i, &est, card.as_ref(), &ByInference));
            assert_eq!(alone, whole, "{extra:?}");
            assert!(whole.cards.is_some() || whole.format.is_some(), "{extra:?}");
        }
    }

    #[test]
    fn an_engine_need_is_the_engines_pool() {
        let i = llama_8b(&[("context", "8192")]);
        let est = estimate(&i).unwrap();
        let card = *find("l40s-48gb").unwrap();
        let params = EngineParams {
            engine: engine::find("vllm"),
            max_model_len: Some(16384),
            ..EngineParams::default()
        };
        let h = headline(
            &i,
            &est,
            Some(&card),
            &Basis::Engine(Box::new(params.clone())),
        )
        .unwrap();
        assert_eq!(h.basis, "vllm");
        let b = engine::budget(
            &i,
            &est,
            &EngineParams {
                card: Some(card),
                ..params
            },
        )
        .unwrap();
        // The engine's own margin and uncertainty are the headroom and the margin.
        assert_eq!(h.card.headroom_bytes, b.margin_bytes);
        assert_eq!(h.margin.assumed_bytes, b.uncertainty_bytes);
        assert_eq!(b.outcome, engine::Outcome::Fits);
        assert_eq!(h.verdict(), Verdict::Fits);
    }
}
