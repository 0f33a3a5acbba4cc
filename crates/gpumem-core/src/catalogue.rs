//! Catalogue of GPU cards and their memory capacities.
//!
//! Each [`GpuCard`] carries two capacity figures:
//!
//! * **The marketing label** ([`GpuCard::label`], [`GpuCard::label_bytes`]). Vendors print
//!   "80 GB", "24 GB" and so on. For HBM and GDDR cards the number means binary
//!   gibibytes of DRAM: an H100 80GB carries five 16 GiB HBM3 stacks, and an
//!   RTX 4090's 24 GB is twelve 2 GiB GDDR6X chips. So the catalogue stores the label
//!   text word for word (e.g. `"80 GB HBM3"`) and sets `label_bytes` to
//!   *label number × 2^30*. It never uses 10^9.
//! * **The reported capacity** ([`GpuCard::reported_bytes`]), when known. This is the
//!   total the device itself reports to software. Examples: the nvidia-smi / NVML
//!   "FB Memory Usage → Total", `rocm-smi --showmeminfo vram` "VRAM Total Memory",
//!   `torch.cuda.mem_get_info()` total. Devices report less than the label, because
//!   ECC metadata, firmware and driver reservations are taken out before software
//!   sees the memory. Some cards report exactly the label (e.g. A100 80GB:
//!   81920 MiB). nvidia-smi prints whole MiB, so an nvidia-smi figure is
//!   "nvidia-smi total, MiB-rounded": `reported_bytes` = printed MiB × 2^20, which
//!   can differ from the NVML byte count by up to 1 MiB. The reported total can
//!   also change with the driver version and the ECC setting (e.g. an A100 40GB
//!   printed a smaller total on an older driver; see its entry). Each source
//!   says which reading it is, and the catalogue records one public reading, not a
//!   guarantee.
//!
//! [`GpuCard::capacity`] picks the figure to compare against: the reported one
//! when known, else the label, tagged with a [`CapacityKind`] so callers can say
//! which one they used.
//!
//! An Apple silicon Mac is a row too ([`Vendor::Apple`], [`Segment::Unified`]): its
//! label is the whole unified memory ("128 GB" is 128 GiB of LPDDR, as a card's label
//! is), but its GPU may use only what macOS lets it wire, Metal's
//! `recommendedMaxWorkingSetSize` ([`metal_working_set`], or the wired limit the user
//! set, [`GpuCard::with_wired_limit`]); that is its capacity, and the rest is the
//! system's ([`GpuCard::system_left`]).
//!
//! The same row holds what the serving engines read of a card: its generation ([`Arch`]:
//! bf16 and fp8 support, sm_90), its bandwidth, the total torch reports
//! ([`EngineFacts::torch_bytes`]) and its SM count ([`EngineFacts::sms`]). A fact the row does
//! not know is not defaulted silently: [`GpuCard::torch_total`] and [`GpuCard::sms`]
//! say when their figure is assumed, and the engine names it in its budget.
//!
//! # Sources
//!
//! Every entry names where its figures come from, in the same row (`cards!` splits
//! them into [`SOURCES`]). `label` names the
//! vendor document that gives the label (a datasheet or product page, by title).
//! `reported` names the public readout the reported figure was taken from.
//! That is a GitHub issue or pull request, a repository file or a web page, with
//! its address, and the figure is quoted as printed. A card with no public readout
//! that could be found and cited has `reported_bytes: None`. The catalogue never
//! estimates a reported figure. `torch` and `sms` name where torch's total and the SM
//! count come from, the same way.

#![deny(clippy::arithmetic_side_effects)]

/// Bytes in one binary gibibyte (2^30), the unit vendors' "GB" labels stand for.
const GIB: u64 = 1 << 30;
/// Bytes in one binary mebibyte (2^20), the unit nvidia-smi prints.
const MIB: u64 = 1 << 20;

/// Who makes the card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    /// NVIDIA Corporation.
    Nvidia,
    /// Advanced Micro Devices.
    Amd,
    /// Apple (Apple silicon: the GPU shares the machine's RAM).
    Apple,
    /// Not known (a capacity typed by the user).
    Unknown,
}

/// Market segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// Data-centre accelerators (Tesla / Hopper / Blackwell / Instinct class).
    DataCentre,
    /// Professional workstation cards (RTX A-series, RTX Ada, Radeon PRO).
    Workstation,
    /// Consumer gaming cards (GeForce, Radeon RX).
    Consumer,
    /// Apple silicon Macs: no card, the GPU uses the machine's unified memory.
    Unified,
}

/// Which figure a capacity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacityKind {
    /// What the device reports (a measured, public readout).
    Reported,
    /// The marketing label converted at 2^30 bytes per "GB".
    Label,
    /// A capacity the user typed (`--card 24GiB`, or `--wired-limit-mb` on a Mac),
    /// taken as given.
    Given,
    /// What Metal lets the GPU use of a Mac's unified memory
    /// (`recommendedMaxWorkingSetSize`, by [`metal_working_set`]'s rule).
    WorkingSet,
}

impl CapacityKind {
    /// The word shown and written to `--json`: "reported", "label" or "given".
    pub const fn as_str(self) -> &'static str {
        match self {
            CapacityKind::Reported => "reported",
            CapacityKind::Label => "label",
            CapacityKind::Given => "given",
            CapacityKind::WorkingSet => "working set",
        }
    }
}

/// The chip generation, which decides the number formats the card computes in.
///
/// bf16: PyTorch's `torch.cuda.is_bf16_supported()` (torch/cuda/__init__.py) asks for
/// CUDA compute capability ≥ 8.0 (Ampere and later); Volta (7.0) and Turing (7.5) have
/// no bf16 units. AMD CDNA2/CDNA3 (MI200/MI300 ISA guides) and RDNA3 (WMMA) compute
/// in bf16, and so do Apple's M-series GPUs through Metal's `bfloat` (llama.cpp's Metal
/// backend, `ggml-metal-device.m`, sets `has_bfloat` from MTLGPUFamilyApple6, which every
/// M-series GPU is). fp8: vLLM's FP8 W8A8 page (docs/features/quantization/fp8.md) names Hopper
/// and Ada Lovelace (compute capability ≥ 8.9) and AMD MI300x; Blackwell has them too;
/// Ampere runs fp8 weights weight-only (W8A16, Marlin kernels), older cards not at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// NVIDIA Volta (compute capability 7.0).
    Volta,
    /// NVIDIA Turing (7.5).
    Turing,
    /// NVIDIA Ampere (8.0 / 8.6).
    Ampere,
    /// NVIDIA Ada Lovelace (8.9).
    Ada,
    /// NVIDIA Hopper (9.0).
    Hopper,
    /// NVIDIA Blackwell (10.0 / 12.0).
    Blackwell,
    /// AMD CDNA2 (MI200 series).
    Cdna2,
    /// AMD CDNA3 (MI300 series).
    Cdna3,
    /// AMD RDNA3 (Radeon RX 7000 / PRO W7000).
    Rdna3,
    /// Apple silicon's GPU (M1–M4), through Metal.
    Apple,
    /// Unknown (a capacity typed by the user).
    Unknown,
}

impl Arch {
    /// Whether the card computes in bf16 natively.
    pub const fn bf16(self) -> bool {
        !matches!(self, Arch::Volta | Arch::Turing)
    }

    /// Whether the card has fp8 tensor units (W8A8).
    pub const fn fp8(self) -> bool {
        matches!(
            self,
            Arch::Ada | Arch::Hopper | Arch::Blackwell | Arch::Cdna3 | Arch::Unknown
        )
    }

    /// Whether transformers keeps an fp8 checkpoint in fp8 on this generation:
    /// transformers 5.23 `quantizers/quantizer_finegrained_fp8.py` `validate_environment`
    /// dequantises it to bf16 when `torch.cuda.get_device_capability()` is below 8.9
    /// (Volta, Turing, Ampere) or when no CUDA device is there (a Mac's MPS); ROCm
    /// reports its gfx generation (9.0 and up), so an AMD card keeps it. `None`: unknown.
    pub const fn transformers_fp8(self) -> Option<bool> {
        match self {
            Arch::Volta | Arch::Turing | Arch::Ampere | Arch::Apple => Some(false),
            Arch::Unknown => None,
            _ => Some(true),
        }
    }

    /// The generation's name.
    pub const fn name(self) -> &'static str {
        match self {
            Arch::Volta => "Volta",
            Arch::Turing => "Turing",
            Arch::Ampere => "Ampere",
            Arch::Ada => "Ada",
            Arch::Hopper => "Hopper",
            Arch::Blackwell => "Blackwell",
            Arch::Cdna2 => "CDNA2",
            Arch::Cdna3 => "CDNA3",
            Arch::Rdna3 => "RDNA3",
            Arch::Apple => "Apple GPU (Metal)",
            Arch::Unknown => "unknown",
        }
    }
}

/// One card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuCard {
    /// Stable kebab-case key used in URLs and on the command line, e.g. `"h100-sxm-80gb"`.
    pub id: &'static str,
    /// Who makes the card.
    pub vendor: Vendor,
    /// Market segment.
    pub segment: Segment,
    /// Human-readable product name, e.g. `"NVIDIA H100 SXM 80GB"`.
    pub name: &'static str,
    /// The chip generation (which formats it computes in).
    pub arch: Arch,
    /// Memory bandwidth in GB/s (10^9 bytes per second), from the same vendor
    /// document as the label.
    pub bandwidth_gb_s: u32,
    /// Memory label word for word as the vendor prints it, e.g. `"80 GB HBM3"`.
    pub label: &'static str,
    /// The label number × 2^30 bytes.
    pub label_bytes: u64,
    /// Total the device reports to software, in bytes, when a public readout is known.
    pub reported_bytes: Option<u64>,
    /// On a Mac, the GPU's working set as `sudo sysctl iogpu.wired_limit_mb=N` sets it
    /// (`--wired-limit-mb`), in bytes: [`GpuCard::with_wired_limit`]. `None` everywhere
    /// else, and on a Mac left at macOS's default ([`metal_working_set`]).
    pub wired_limit_bytes: Option<u64>,
    /// The total torch reports for this card on the user's machine, given with it
    /// (`--card rtx-3090@23.58GiB`: what vLLM prints as `total_gpu_memory`), in bytes:
    /// [`GpuCard::with_torch_total`]. `None` unless given.
    pub torch_given_bytes: Option<u64>,
}

/// What the serving engines read of a card beyond what the page shows, from the same
/// row of [`CATALOGUE`] (`cards!` keeps them apart so the page's first module does not
/// carry them; [`GpuCard::torch_total`] and [`GpuCard::sms`] read them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineFacts {
    /// What torch reports as the device's total (`torch.cuda.mem_get_info()[1]`, the
    /// `total_memory` of `_CudaDeviceProperties`), which vLLM, SGLang and TGI size from:
    /// MiB as torch prints them × 2^20, or the bytes where printed; `None` where no
    /// public readout was found ([`GpuCard::torch_total`] then derives it, assumed).
    pub torch_bytes: Option<u64>,
    /// Streaming multiprocessors (NVIDIA) or compute units (AMD): torch's
    /// `multi_processor_count`, which sizes vLLM's top-k/top-p buffer; `None` where not
    /// known ([`GpuCard::sms`] then assumes [`ASSUMED_SMS`], and says so).
    pub sms: Option<u16>,
    /// How the card reaches its peers under tensor parallelism ([`Links`]).
    pub links: Links,
}

/// How a card reaches the other GPUs of a tensor-parallel group, from the vendor's
/// specification: what decides which communicators the serving engines and NCCL set
/// up at tp > 1, and so the memory they take (the engines' `request::interconnect`).
/// `--interconnect nvlink|pcie` says it where the row cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// An SXM module on an HGX/DGX board: every GPU reaches every other over NVLink
    /// through NVSwitch (NCCL's NVLS multicast on sm_90 and later, the engines'
    /// NVLink-only all-reduces).
    NvSwitch,
    /// No NVLink: peers are reached over PCIe (or through the host).
    Pcie,
    /// The row is sold both ways (SXM or PCIe), or as a PCIe card an NVLink bridge may
    /// join to one other: the row cannot know; the NVLink figures are kept (the more
    /// memory taken, the safe side) unless `--interconnect pcie` says otherwise.
    Either,
    /// Not an NVIDIA card (or a typed capacity): the NVLink figures are kept.
    Unknown,
}

impl Links {
    /// The word shown: "NVLink/NVSwitch", "PCIe", "either", "unknown".
    pub const fn as_str(self) -> &'static str {
        match self {
            Links::NvSwitch => "NVLink/NVSwitch",
            Links::Pcie => "PCIe only",
            Links::Either => "SXM or PCIe (NVLink bridge optional)",
            Links::Unknown => "unknown",
        }
    }
}

/// Where one card's figures come from ([`SOURCES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardSources {
    /// The card's id in [`CATALOGUE`].
    pub id: &'static str,
    /// The vendor document the label comes from.
    pub label: &'static str,
    /// Where `reported_bytes` comes from (tool, figure as printed, address); `Some`
    /// exactly when the card's `reported_bytes` is.
    pub reported: Option<&'static str>,
    /// Where `torch_bytes` comes from (torch's printout, quoted); `Some` exactly when the
    /// card's `torch_bytes` is.
    pub torch: Option<&'static str>,
    /// Where `sms` comes from; `Some` exactly when the card's `sms` is.
    pub sms: Option<&'static str>,
    /// Where `links` comes from (the vendor's specification of the card's interconnect).
    pub links: &'static str,
}

/// The sources of the card `id`.
pub fn sources(id: &str) -> Option<&'static CardSources> {
    SOURCES.iter().find(|s| s.id == id)
}

impl GpuCard {
    /// The capacity to compare against: the reported figure when known, else the label
    /// (a typed capacity is its own label, "given").
    ///
    /// A Mac's GPU has no memory of its own: its capacity is what Metal lets it use of
    /// the unified memory, the working set ([`metal_working_set`]), or the wired limit
    /// the user set (`--wired-limit-mb`, given).
    /// A card given with its torch total (`rtx-3090@23.58GiB`) has that total as its
    /// capacity, given.
    pub const fn capacity(&self) -> (u64, CapacityKind) {
        if let Some(bytes) = self.torch_given_bytes {
            return (bytes, CapacityKind::Given);
        }
        match (self.wired_limit_bytes, self.reported_bytes) {
            (Some(bytes), _) => (bytes, CapacityKind::Given),
            (None, Some(bytes)) => (bytes, CapacityKind::Reported),
            (None, None) if self.unified() => (
                metal_working_set(self.label_bytes),
                CapacityKind::WorkingSet,
            ),
            (None, None) if self.label.is_empty() => (self.label_bytes, CapacityKind::Given),
            (None, None) => (self.label_bytes, CapacityKind::Label),
        }
    }

    /// Whether the GPU shares the machine's RAM (an Apple silicon Mac): the label is
    /// then the whole unified memory, of which the GPU gets its working set and the
    /// system the rest ([`GpuCard::system_left`]).
    pub const fn unified(&self) -> bool {
        matches!(self.vendor, Vendor::Apple)
    }

    /// On a Mac, the unified memory left beside the GPU's capacity for macOS, the
    /// engine's process and every other program; `None` for a card with memory of its
    /// own.
    pub const fn system_left(&self) -> Option<u64> {
        if self.unified() {
            Some(self.label_bytes.saturating_sub(self.capacity().0))
        } else {
            None
        }
    }

    /// This Mac with the GPU's wired limit set to `mib` MiB (`sudo sysctl
    /// iogpu.wired_limit_mb=N`, which Metal's `recommendedMaxWorkingSetSize` then
    /// reports exactly: see [`WORKING_SET_READINGS`]). An error for a card with memory
    /// of its own, for 0 (macOS's "default"), and for a limit above the Mac's RAM.
    pub fn with_wired_limit(self, mib: u64) -> Result<GpuCard, String> {
        if !self.unified() {
            return Err(format!(
                "{} has memory of its own: the wired limit is a Mac's (iogpu.wired_limit_mb)",
                self.name
            ));
        }
        let bytes = mib
            .checked_mul(MIB)
            .filter(|b| *b > 0 && *b <= self.label_bytes)
            .ok_or_else(|| {
                format!(
                    "{mib} MiB: the wired limit is from 1 MiB to the Mac's {} MiB (0 is macOS's default: leave the flag out)",
                    self.label_bytes / MIB
                )
            })?;
        Ok(GpuCard {
            wired_limit_bytes: Some(bytes),
            ..self
        })
    }

    /// This card with the total torch reports on the user's machine (`bytes`: the
    /// driver, ECC or a MIG slice move it), as `--card rtx-3090@23.58GiB` gives it: the
    /// engines size from it ([`GpuCard::torch_total`]) while the card's other facts (its
    /// SMs, its generation) stay. An error on a Mac (its capacity is the working set:
    /// `--wired-limit-mb`), for 0 and above the card's label.
    pub fn with_torch_total(self, bytes: u64) -> Result<GpuCard, String> {
        if self.unified() {
            return Err(format!(
                "{} shares the Mac's memory: give its working set with --wired-limit-mb",
                self.name
            ));
        }
        if bytes == 0 || bytes > self.label_bytes {
            return Err(format!(
                "{} B: the total torch reports is above 0 and at most the card's {} ({} B)",
                bytes, self.label, self.label_bytes
            ));
        }
        Ok(GpuCard {
            torch_given_bytes: Some(bytes),
            ..self
        })
    }

    /// A card of `bytes` the user typed (`--card 24GiB`): id "custom", no label, no
    /// known generation (no format warning is given for it).
    pub const fn custom(bytes: u64) -> GpuCard {
        GpuCard {
            id: CUSTOM_ID,
            vendor: Vendor::Unknown,
            segment: Segment::DataCentre,
            arch: Arch::Unknown,
            bandwidth_gb_s: 0,
            name: "Custom card",
            label: "",
            label_bytes: bytes,
            reported_bytes: None,
            wired_limit_bytes: None,
            torch_given_bytes: None,
        }
    }

    /// The engines' facts of this card ([`ENGINE_FACTS`], the same row); a typed
    /// capacity has none.
    pub fn engine_facts(&self) -> EngineFacts {
        CATALOGUE
            .iter()
            .position(|c| c.id == self.id)
            .and_then(|i| ENGINE_FACTS.get(i))
            .copied()
            .unwrap_or(EngineFacts {
                torch_bytes: None,
                sms: None,
                links: Links::Unknown,
            })
    }

    /// The card's total as torch reports it, and whether it is assumed: the row's
    /// figure; a typed capacity (`--card 14.56GiB`) as given, since that is the total
    /// the engine itself prints (vLLM's "total_gpu_memory (14.56GiB)"), not a label to
    /// derive from; otherwise derived from the capacity less [`DERIVED_GAP_PER_MILLE`]
    /// and rounded down to a MiB, and assumed.
    pub fn torch_total(&self) -> (u64, bool) {
        if let Some(b) = self.torch_given_bytes {
            return (b, false);
        }
        match self.engine_facts().torch_bytes {
            Some(b) => (b, false),
            None if self.label.is_empty() => (self.label_bytes, false),
            None => {
                let c = self.capacity().0;
                let gap = (c / 1000).saturating_mul(DERIVED_GAP_PER_MILLE);
                (c.saturating_sub(gap) & !(MIB - 1), true)
            }
        }
    }

    /// Streaming multiprocessors, and whether assumed: the row's count, else
    /// [`ASSUMED_SMS`].
    pub fn sms(&self) -> (u64, bool) {
        match self.engine_facts().sms {
            Some(n) => (u64::from(n), false),
            None => (ASSUMED_SMS, true),
        }
    }

    /// How the card reaches its peers at tp > 1 (the row's [`Links`]; a typed capacity's
    /// is unknown).
    pub fn links(&self) -> Links {
        self.engine_facts().links
    }

    /// Whether the card is sm_90 (Hopper), which sizes torch's cuBLAS workspace.
    pub const fn sm90(&self) -> bool {
        matches!(self.arch, Arch::Hopper)
    }
}

/// The generation a training estimate sizes torch's cuBLAS workspace by
/// (`EstimateInput::card_sm90`), from the cards named: `None` when none is, or one is
/// a typed capacity of unknown generation (the larger, sm_90's, is then counted);
/// `Some(true)` when any is sm_90, the larger again; `Some(false)` otherwise.
pub fn cards_sm90(cards: &[GpuCard]) -> Option<bool> {
    if cards.is_empty() || cards.iter().any(|c| matches!(c.arch, Arch::Unknown)) {
        return None;
    }
    Some(cards.iter().any(GpuCard::sm90))
}

/// Whether transformers keeps fp8 weights on every card named
/// ([`Arch::transformers_fp8`]): `Some(false)` when one of them dequantises them (the
/// larger figure), `Some(true)` when all keep them, `None` when no card is named or a
/// named one's generation is unknown.
pub fn cards_fp8(cards: &[GpuCard]) -> Option<bool> {
    let mut all = Some(true);
    for c in cards {
        match c.arch.transformers_fp8() {
            Some(false) => return Some(false),
            None => all = None,
            Some(true) => {}
        }
    }
    if cards.is_empty() { None } else { all }
}

/// The bytes of one cuBLAS workspace torch allocates through its caching allocator for
/// a (cuBLAS handle, stream) pair at its first GEMM and keeps for the process's life:
/// 32 MiB on an sm_90 card, `:4096:2:16:8` elsewhere (4096 KiB × 2 + 16 KiB × 8 =
/// 8 519 680 B), without `CUBLAS_WORKSPACE_CONFIG`. pytorch/pytorch
/// aten/src/ATen/cuda/CublasHandlePool.cpp, `parseChosenWorkspaceSize` at v2.2.0 and
/// v2.3.0 (`getCurrentCUDABlasHandle` keys the workspace by handle and stream,
/// `cublas_handle_stream_to_workspace`).
pub const fn cublas_workspace_bytes(sm90: bool) -> u64 {
    if sm90 {
        32 * MIB
    } else {
        4096 * 1024 * 2 + 16 * 1024 * 8
    }
}

/// A torch total derived where none is public: the catalogue's capacity less 1 %
/// (the largest gap seen between nvidia-smi and torch: A100 80GB, 81 920 → 81 152 MiB).
pub const DERIVED_GAP_PER_MILLE: u64 = 10;

/// The SM count assumed for a card whose count is not known (a typed capacity): an
/// A100's 108, as the engines have always taken it. A card with more SMs makes vLLM's
/// top-k/top-p buffer larger by one vocabulary row in fp32 per SM.
pub const ASSUMED_SMS: u64 = 108;

/// The page of arm64 macOS, 16 KiB: the unit macOS gives the GPU's working set in.
const MACOS_PAGE: u64 = 16 * 1024;

/// The unified memory from which macOS lets the GPU take three quarters, not two thirds.
pub const THREE_QUARTERS_FROM: u64 = 64 * GIB;

/// What Metal lets a Mac's GPU use of `ram` bytes of unified memory by default: its
/// `MTLDevice.recommendedMaxWorkingSetSize`, which llama.cpp's Metal backend takes as
/// the device's total (`ggml_metal_device_get_memory`, and it logs it at start-up) and
/// MLX as its memory limit.
///
/// Apple does not document the rule; it is read from the figures macOS reported on
/// 16 to 128 GiB Macs ([`WORKING_SET_READINGS`], llama.cpp's start-up logs of macOS 13
/// and 14): two thirds of the RAM on 16 and 32 GiB, three quarters on 64 GiB and
/// more, in whole pages rounded up (the only reading of two thirds that prints
/// 21845.34 MiB for 32 GiB rather than 21845.33). No reading of a 36 or 48 GiB Mac
/// was found: below [`THREE_QUARTERS_FROM`] the smaller fraction is taken, so the GPU
/// is never given more than macOS may allow. Newer macOS releases were seen to give
/// more (107.52 GiB of 128 GiB on macOS 26), which this rule leaves out on the same
/// side; `sudo sysctl iogpu.wired_limit_mb=N` (`--wired-limit-mb`) sets the figure.
pub const fn metal_working_set(ram: u64) -> u64 {
    let (num, den): (u128, u128) = if ram >= THREE_QUARTERS_FROM {
        (3, 4)
    } else {
        (2, 3)
    };
    let page = MACOS_PAGE as u128;
    let pages = (ram as u128)
        .saturating_mul(num)
        .div_ceil(den.saturating_mul(page));
    let bytes = pages.saturating_mul(page);
    if bytes > u64::MAX as u128 {
        u64::MAX
    } else {
        bytes as u64
    }
}

/// One public readout of Metal's `recommendedMaxWorkingSetSize` on a Mac.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkingSetReading {
    /// The Mac's unified memory, bytes.
    pub ram: u64,
    /// The figure as printed, in hundredths of `unit` (llama.cpp's "21845.34 MB" of its
    /// 2023 builds is MiB: it divided by 1024 twice).
    pub hundredths: u64,
    /// The printed unit, bytes (a MiB or a GiB).
    pub unit: u64,
    /// Read on a macOS newer than the rule's (the rule must not exceed it).
    pub newer_os: bool,
    /// Where it was printed.
    pub source: &'static str,
}

/// The readouts [`metal_working_set`] is checked against: equal, to the hundredth
/// printed, on the macOS of the rule; never above on a newer one.
pub static WORKING_SET_READINGS: &[WorkingSetReading] = &[
    WorkingSetReading {
        ram: 16 * GIB,
        hundredths: 1_092_267,
        unit: MIB,
        newer_os: false,
        source: "llama-cpp-python on a 16 GB M1 MacBook Pro: `ggml_metal_init: \
             recommendedMaxWorkingSetSize  = 10922.67 MB`, \
             https://github.com/abetlen/llama-cpp-python/issues/687",
    },
    WorkingSetReading {
        ram: 32 * GIB,
        hundredths: 2_184_534,
        unit: MIB,
        newer_os: false,
        source: "ollama (llama.cpp) on a 32 GB M2 Max MacBook Pro: `ggml_metal_init: \
             recommendedMaxWorkingSetSize = 21845.34 MB`, \
             https://github.com/ollama/ollama/issues/434",
    },
    WorkingSetReading {
        ram: 32 * GIB,
        hundredths: 2_184_534,
        unit: MIB,
        newer_os: false,
        source: "llama.cpp on a 32 GB M1 Max: `ggml_metal_init: recommendedMaxWorkingSetSize \
             = 21845.34 MB`, https://github.com/ggml-org/llama.cpp/pull/2011",
    },
    WorkingSetReading {
        ram: 96 * GIB,
        hundredths: 7_372_800,
        unit: MIB,
        newer_os: false,
        source: "llama.cpp on a 96 GB M2 Max: `ggml_metal_init: recommendedMaxWorkingSetSize  \
             = 73728,00 MB`, https://github.com/ggml-org/llama.cpp/issues/3213",
    },
    WorkingSetReading {
        ram: 128 * GIB,
        hundredths: 10_752,
        unit: GIB,
        newer_os: true,
        source: "an M5 Max 128 GB on macOS 26: `recommendedMaxWorkingSetSize: 107.52 GiB` \
             (stock) and 112.00 GiB with `iogpu.wired_limit_mb = 114688`, \
             https://github.com/antirez/ds4/pull/893",
    },
];

/// Builds [`CATALOGUE`], [`ENGINE_FACTS`] and [`SOURCES`] from one row per card: each
/// card's facts and the sources of each are written once, side by side, and land in
/// three tables of the same order, so the pages' first module, which shows neither
/// the engines' facts nor the sources, does not carry them (the engine module and
/// `gpumem-agent cards --json` do).
macro_rules! cards {
    ($($id:literal {
        $($fact:ident: $value:expr,)*
    } engines {
        torch_bytes: $torch:expr,
        sms: $sms:expr,
        links: $links:expr,
    } sources {
        $($source:ident: $text:expr,)*
    },)*) => {
        /// Every card, data-centre first.
        pub static CATALOGUE: &[GpuCard] = &[$(GpuCard { id: $id, wired_limit_bytes: None, torch_given_bytes: None, $($fact: $value,)* },)*];
        /// The engines' facts of each card, in [`CATALOGUE`]'s order.
        pub static ENGINE_FACTS: &[EngineFacts] =
            &[$(EngineFacts { torch_bytes: $torch, sms: $sms, links: $links },)*];
        /// Where each card's figures come from, in [`CATALOGUE`]'s order.
        pub static SOURCES: &[CardSources] = &[$(CardSources { id: $id, $($source: $text,)* },)*];
    };
}

/// The id of a typed capacity ([`GpuCard::custom`]).
pub const CUSTOM_ID: &str = "custom";

// Every card, data-centre first, one row each: the facts the page shows, the engines'
// facts, then where each comes from.
cards! {
    // ---------------------------------------------------------------- NVIDIA data centre
    "b200" {
        vendor: Vendor::Nvidia,
        segment: Segment::DataCentre,
        arch: Arch::Blackwell,
        bandwidth_gb_s: 8000,
        name: "NVIDIA B200",
        label: "180 GB HBM3e",
        label_bytes: 180 * GIB,
        reported_bytes: Some(183_359 * MIB),
    } engines {
        torch_bytes: None,
        sms: Some(148),
        links: Links::NvSwitch,
    } sources {
        label: "NVIDIA DGX B200 datasheet (1,440 GB total GPU memory across 8 B200 GPUs, \
             i.e. 180 GB each); some third-party spec sheets list the raw 192 GB instead \
             (see https://github.com/huggingface/huggingface.js/pull/1539)",
        reported: Some(
            "nvidia-smi total 183359MiB (MiB-rounded), driver 580.95.05, seen in \
             https://github.com/NVIDIA/TensorRT-LLM/issues/10278",
        ),
        torch: None,
        sms: Some("the vendor's specification (or `multi_processor_count` in torch's printouts): 148 SMs"),
        links: "NVIDIA DGX B200 datasheet: eight B200 GPUs joined by fifth-generation NVLink through NVSwitch chips (1.8 TB/s per GPU); the card is the SXM module of HGX/DGX boards",
    },
    "h200-141gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::DataCentre,
        arch: Arch::Hopper,
        bandwidth_gb_s: 4800,
        name: "NVIDIA H200 141GB",
        label: "141 GB HBM3e",
        label_bytes: 141 * GIB,
        reported_bytes: Some(143_771 * MIB),
    } engines {
        torch_bytes: Some(143_156 * MIB),
        sms: Some(132),
        links: Links::Either,
    } sources {
        label: "NVIDIA H200 Tensor Core GPU datasheet / product page (GPU memory 141GB)",
        reported: Some(
            "nvidia-smi total 143771MiB (MiB-rounded) for \"NVIDIA H200\", listed in \
             https://thundergolfer.com/blog/nvidia-gpu-memory-capacity (table of NVML/nvidia-smi \
             totals); the same figure appears in many public nvidia-smi captures",
        ),
        torch: Some("H200: `total_memory=143156MB` in `_CudaDeviceProperties` as torch prints it"),
        sms: Some("the vendor's specification (or `multi_processor_count` in torch's printouts): 132 SMs"),
        links: "NVIDIA H200 Tensor Core GPU datasheet: H200 SXM (NVLink 900 GB/s through NVSwitch on HGX boards) or H200 NVL (PCIe, 2- or 4-way NVLink bridge): the row is both",
    },
    "h100-sxm-80gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::DataCentre,
        arch: Arch::Hopper,
        bandwidth_gb_s: 3350,
        name: "NVIDIA H100 SXM 80GB",
        label: "80 GB HBM3",
        label_bytes: 80 * GIB,
        reported_bytes: Some(81_559 * MIB),
    } engines {
        torch_bytes: Some(81_089 * MIB),
        sms: Some(132),
        links: Links::NvSwitch,
    } sources {
        label: "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: GPU memory 80GB)",
        reported: Some(
            "nvidia-smi total 81559MiB (MiB-rounded) for \"NVIDIA H100 80GB HBM3\", seen in \
             https://github.com/NVIDIA/nccl/issues/1264 and \
             https://github.com/wilicc/gpu-burn/issues/114; also in \
             https://thundergolfer.com/blog/nvidia-gpu-memory-capacity",
        ),
        torch: Some("H100 80GB HBM3: `total_memory=81089MB` in `_CudaDeviceProperties` as torch prints it (torch 2.7.0, CUDA 12.8; vLLM 0.19 logs `total_memory=79.19GiB`)"),
        sms: Some("the vendor's specification (or `multi_processor_count` in torch's printouts): 132 SMs"),
        links: "NVIDIA H100 Tensor Core GPU datasheet: H100 SXM, NVLink 900 GB/s, in HGX H100 boards of 4 or 8 GPUs through NVSwitch",
    },
    "h100-pcie-80gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::DataCentre,
        arch: Arch::Hopper,
        bandwidth_gb_s: 2000,
        name: "NVIDIA H100 PCIe 80GB",
        label: "80 GB HBM2e",
        label_bytes: 80 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(114),
        links: Links::Either,
    } sources {
        label: "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe: GPU memory 80GB)",
        reported: None,
        torch: None,
        sms: Some("the vendor's specification (or `multi_processor_count` in torch's printouts): 114 SMs"),
        links: "NVIDIA H100 Tensor Core GPU datasheet: H100 PCIe, PCIe Gen5 128 GB/s, NVLink bridge optional (600 GB/s, pairs)",
    },
    "h100-nvl-94gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::DataCentre,
        arch: Arch::Hopper,
        bandwidth_gb_s: 3900,
        name: "NVIDIA H100 NVL 94GB",
        label: "94 GB HBM3",
        label_bytes: 94 * GIB,
        reported_bytes: Some(95_830 * MIB),
    } engines {
        torch_bytes: None,
        sms: Some(132),
        links: Links::Either,
    } sources {
        label: "NVIDIA H100 Tensor Core GPU datasheet (H100 NVL: GPU memory 94GB)",
        reported: Some(
            "nvidia-smi total 95830MiB (MiB-rounded; `nvidia-smi -q` FB Memory Total 95830 MiB, \
             ECC enabled, driver 550.54.14) for \"NVIDIA H100 NVL\", captured in \
             https://github.com/thamada/nvidia-smi/blob/198aebb60732de6969556867659756f4685637c2/nvsim/H100NVLx2_smi.py",
        ),
        torch: None,
        sms: Some("the vendor's specification (or `multi_processor_count` in torch's printouts): 132 SMs"),
        links: "NVIDIA H100 Tensor Core GPU datasheet: H100 NVL, a PCIe card whose pairs may be joined by NVLink bridges (600 GB/s)",
    },
    "a100-80gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::DataCentre,
        arch: Arch::Ampere,
        bandwidth_gb_s: 2039,
        name: "NVIDIA A100 80GB",
        label: "80 GB HBM2e",
        label_bytes: 80 * GIB,
        reported_bytes: Some(81_920 * MIB),
    } engines {
        torch_bytes: Some(85_093_777_408),
        sms: Some(108),
        links: Links::Either,
    } sources {
        label: "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB: 80GB HBM2e)",
        reported: Some(
            "nvidia-smi total 81920MiB (MiB-rounded) for A100 80GB, listed in \
             https://thundergolfer.com/blog/nvidia-gpu-memory-capacity and \
             https://github.com/modal-labs/modal-client/pull/2797",
        ),
        torch: Some("A100 80GB PCIe: `total_memory=85093777408` (bytes) in `_CudaDeviceProperties`"),
        sms: Some("the vendor's specification (or `multi_processor_count` in torch's printouts): 108 SMs"),
        links: "NVIDIA A100 Tensor Core GPU datasheet: A100 80GB SXM (NVLink 600 GB/s, NVSwitch on HGX boards) or A100 80GB PCIe (NVLink bridge for 2 GPUs optional): the row is both",
    },
    "a100-40gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::DataCentre,
        arch: Arch::Ampere,
        bandwidth_gb_s: 1555,
        name: "NVIDIA A100 40GB",
        label: "40 GB HBM2",
        label_bytes: 40 * GIB,
        reported_bytes: Some(40_960 * MIB),
    } engines {
        torch_bytes: Some(40_536 * MIB),
        sms: Some(108),
        links: Links::Either,
    } sources {
        label: "NVIDIA A100 Tensor Core GPU datasheet (A100 40GB: 40GB HBM2)",
        reported: Some(
            "nvidia-smi total 40960MiB (MiB-rounded) for A100 40GB, listed in \
             https://thundergolfer.com/blog/nvidia-gpu-memory-capacity and \
             https://github.com/modal-labs/modal-client/pull/2797; older drivers printed less \
             (40536MiB on driver 470.82.01 in https://github.com/nanopool/phoenix-miner/issues/17)",
        ),
        torch: Some("A100-SXM4-40GB: `total_memory=40536MB` in `_CudaDeviceProperties`"),
        sms: Some("the vendor's specification (or `multi_processor_count` in torch's printouts): 108 SMs"),
        links: "NVIDIA A100 Tensor Core GPU datasheet: A100 40GB SXM (NVLink 600 GB/s, NVSwitch on HGX boards) or A100 40GB PCIe (NVLink bridge for 2 GPUs optional): the row is both",
    },
    "l40s-48gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::DataCentre,
        arch: Arch::Ada,
        bandwidth_gb_s: 864,
        name: "NVIDIA L40S",
        label: "48 GB GDDR6",
        label_bytes: 48 * GIB,
        reported_bytes: Some(46_068 * MIB),
    } engines {
        torch_bytes: Some(45_589 * MIB),
        sms: Some(142),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA L40S GPU datasheet (GPU memory 48GB GDDR6 with ECC)",
        reported: Some(
            "nvidia-smi total 46068MiB (MiB-rounded) for L40S, listed in \
             https://thundergolfer.com/blog/nvidia-gpu-memory-capacity and \
             https://github.com/modal-labs/modal-client/pull/2797",
        ),
        torch: Some("L40S: `total_memory=45589MB` in `_CudaDeviceProperties`"),
        sms: Some("the vendor's specification (or `multi_processor_count` in torch's printouts): 142 SMs"),
        links: "NVIDIA L40S datasheet: interconnect PCIe Gen4 x16 (64 GB/s bidirectional), NVLink support: no",
    },
    "l4-24gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::DataCentre,
        arch: Arch::Ada,
        bandwidth_gb_s: 300,
        name: "NVIDIA L4",
        label: "24 GB GDDR6",
        label_bytes: 24 * GIB,
        reported_bytes: Some(23_034 * MIB),
    } engines {
        torch_bytes: None,
        sms: Some(58),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA L4 Tensor Core GPU datasheet (GPU memory 24GB GDDR6)",
        reported: Some(
            "nvidia-smi total 23034MiB (MiB-rounded) for L4, listed in \
             https://thundergolfer.com/blog/nvidia-gpu-memory-capacity and \
             https://github.com/modal-labs/modal-client/pull/2797",
        ),
        torch: None,
        sms: Some("NVIDIA L4 datasheet: 7,424 CUDA cores, 128 per SM on Ada Lovelace (NVIDIA Ada GPU architecture whitepaper): 58 SMs"),
        links: "NVIDIA L4 Tensor Core GPU datasheet: interconnect PCIe Gen4 x16 (64 GB/s), no NVLink",
    },
    "a10-24gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::DataCentre,
        arch: Arch::Ampere,
        bandwidth_gb_s: 600,
        name: "NVIDIA A10",
        label: "24 GB GDDR6",
        label_bytes: 24 * GIB,
        reported_bytes: Some(24_146_608_128),
    } engines {
        torch_bytes: None,
        sms: Some(72),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA A10 Tensor Core GPU datasheet (GPU memory 24GB GDDR6)",
        reported: Some(
            "NVML memoryInfo Total 24146608128 bytes (exact, = 23028 MiB) for \"NVIDIA A10\", \
             driver 535.129.03, seen in https://github.com/mayooot/detect-gpu/issues/3; \
             nvidia-smi 23028MiB listed in https://thundergolfer.com/blog/nvidia-gpu-memory-capacity",
        ),
        torch: None,
        sms: Some("NVIDIA A10 datasheet: 9,216 CUDA cores, 128 per SM on GA102 (NVIDIA Ampere GA102 GPU architecture whitepaper): 72 SMs"),
        links: "NVIDIA A10 Tensor Core GPU datasheet: interconnect PCIe Gen4 (64 GB/s), no NVLink",
    },
    "a10g-24gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::DataCentre,
        arch: Arch::Ampere,
        bandwidth_gb_s: 600,
        name: "NVIDIA A10G",
        label: "24 GB GDDR6",
        label_bytes: 24 * GIB,
        reported_bytes: Some(23_028 * MIB),
    } engines {
        torch_bytes: Some(22_587 * MIB),
        sms: Some(80),
        links: Links::Pcie,
    } sources {
        label: "AWS Amazon EC2 G5 instance page (NVIDIA A10G Tensor Core GPU, 24 GB memory \
             per GPU); the A10G is an AWS-specific A10 variant",
        reported: Some(
            "nvidia-smi total 23028MiB (MiB-rounded) for \"NVIDIA A10G\", driver 535.247.01, \
             seen in https://github.com/NVIDIA/DCGM/issues/232",
        ),
        torch: Some("A10G: `total_memory=22587MB` in `_CudaDeviceProperties`"),
        sms: Some("the vendor's specification (or `multi_processor_count` in torch's printouts): 80 SMs"),
        links: "the A10G of AWS G5 instances (AWS's G5 page: PCIe; an A10-class card, whose datasheet lists PCIe Gen4 and no NVLink)",
    },
    "t4-16gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::DataCentre,
        arch: Arch::Turing,
        bandwidth_gb_s: 320,
        name: "NVIDIA T4",
        label: "16 GB GDDR6",
        label_bytes: 16 * GIB,
        reported_bytes: Some(15_360 * MIB),
    } engines {
        torch_bytes: Some(15_095 * MIB),
        sms: Some(40),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA T4 Tensor Core GPU datasheet (GPU memory 16 GB GDDR6)",
        reported: Some(
            "nvidia-smi total 15360MiB (MiB-rounded) for T4, listed in \
             https://thundergolfer.com/blog/nvidia-gpu-memory-capacity and \
             https://github.com/modal-labs/modal-client/pull/2797",
        ),
        torch: Some("Tesla T4: `total_memory=15095MB` in `_CudaDeviceProperties`"),
        sms: Some("the vendor's specification (or `multi_processor_count` in torch's printouts): 40 SMs"),
        links: "NVIDIA T4 Tensor Core GPU datasheet: interconnect PCIe Gen3 x16 (32 GB/s), no NVLink",
    },
    "v100-32gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::DataCentre,
        arch: Arch::Volta,
        bandwidth_gb_s: 900,
        name: "NVIDIA Tesla V100 32GB",
        label: "32 GB HBM2",
        label_bytes: 32 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(80),
        links: Links::Either,
    } sources {
        label: "NVIDIA Tesla V100 GPU datasheet (V100 32GB: 32 GB HBM2)",
        reported: None,
        torch: None,
        sms: Some("NVIDIA Tesla V100 GPU architecture whitepaper: 80 SMs (5,120 CUDA cores, 64 per SM)"),
        links: "NVIDIA Tesla V100 datasheet: V100 SXM2 (NVLink 300 GB/s) or V100 PCIe (32 GB/s, no NVLink): the row is both",
    },
    "v100-16gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::DataCentre,
        arch: Arch::Volta,
        bandwidth_gb_s: 900,
        name: "NVIDIA Tesla V100 16GB",
        label: "16 GB HBM2",
        label_bytes: 16 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(80),
        links: Links::Either,
    } sources {
        label: "NVIDIA Tesla V100 GPU datasheet (V100 16GB: 16 GB HBM2)",
        reported: None,
        torch: None,
        sms: Some("NVIDIA Tesla V100 GPU architecture whitepaper: 80 SMs (5,120 CUDA cores, 64 per SM)"),
        links: "NVIDIA Tesla V100 datasheet: V100 SXM2 (NVLink 300 GB/s) or V100 PCIe (32 GB/s, no NVLink): the row is both",
    },
    // ------------------------------------------------------------------- AMD data centre
    "mi325x" {
        vendor: Vendor::Amd,
        segment: Segment::DataCentre,
        arch: Arch::Cdna3,
        bandwidth_gb_s: 6000,
        name: "AMD Instinct MI325X",
        label: "256 GB HBM3E",
        label_bytes: 256 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(304),
        links: Links::Unknown,
    } sources {
        label: "AMD Instinct MI325X accelerator product page / data sheet \
             (256 GB HBM3E)",
        reported: None,
        torch: None,
        sms: Some("AMD Instinct MI325X data sheet: 304 compute units (what HIP reports as multi_processor_count)"),
        links: "not an NVIDIA card: NVLink is NVIDIA's; the engines' NVLink figures are kept",
    },
    "mi300x" {
        vendor: Vendor::Amd,
        segment: Segment::DataCentre,
        arch: Arch::Cdna3,
        bandwidth_gb_s: 5300,
        name: "AMD Instinct MI300X",
        label: "192 GB HBM3",
        label_bytes: 192 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(304),
        links: Links::Unknown,
    } sources {
        label: "AMD Instinct MI300X accelerator product page / data sheet (192 GB HBM3)",
        reported: None,
        torch: None,
        sms: Some("AMD Instinct MI300X data sheet: 304 compute units (what HIP reports as multi_processor_count)"),
        links: "not an NVIDIA card: NVLink is NVIDIA's; the engines' NVLink figures are kept",
    },
    // No SM count: software sees each of its two GCDs as a device of its own, with half
    // the compute units; an engine reading one assumes it and says so.
    "mi250x" {
        vendor: Vendor::Amd,
        segment: Segment::DataCentre,
        arch: Arch::Cdna2,
        bandwidth_gb_s: 3277,
        name: "AMD Instinct MI250X",
        label: "128 GB HBM2e",
        label_bytes: 128 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "AMD Instinct MI250X accelerator product page / data sheet (128 GB HBM2e). \
             The card has two GCDs that software sees as two devices of 64 GB each, so \
             a single framework device holds at most half the label",
        reported: None,
        torch: None,
        sms: None,
        links: "not an NVIDIA card: NVLink is NVIDIA's; the engines' NVLink figures are kept",
    },
    "mi210" {
        vendor: Vendor::Amd,
        segment: Segment::DataCentre,
        arch: Arch::Cdna2,
        bandwidth_gb_s: 1638,
        name: "AMD Instinct MI210",
        label: "64 GB HBM2e",
        label_bytes: 64 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(104),
        links: Links::Unknown,
    } sources {
        label: "AMD Instinct MI210 accelerator product page / data sheet (64 GB HBM2e)",
        reported: None,
        torch: None,
        sms: Some("AMD Instinct MI210 data sheet: 104 compute units (what HIP reports as multi_processor_count)"),
        links: "not an NVIDIA card: NVLink is NVIDIA's; the engines' NVLink figures are kept",
    },
    // ----------------------------------------------------------------------- workstation
    "rtx-6000-ada" {
        vendor: Vendor::Nvidia,
        segment: Segment::Workstation,
        arch: Arch::Ada,
        bandwidth_gb_s: 960,
        name: "NVIDIA RTX 6000 Ada Generation",
        label: "48 GB GDDR6",
        label_bytes: 48 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(142),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA RTX 6000 Ada Generation datasheet (GPU memory 48 GB GDDR6 with ECC)",
        reported: None,
        torch: None,
        sms: Some("NVIDIA RTX 6000 Ada Generation datasheet: 18,176 CUDA cores and 142 RT cores, one each per SM of 128 cores: 142 SMs"),
        links: "NVIDIA RTX 6000 Ada Generation datasheet: PCIe Gen4 x16, NVLink: not supported",
    },
    "rtx-a6000" {
        vendor: Vendor::Nvidia,
        segment: Segment::Workstation,
        arch: Arch::Ampere,
        bandwidth_gb_s: 768,
        name: "NVIDIA RTX A6000",
        label: "48 GB GDDR6",
        label_bytes: 48 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(84),
        links: Links::Either,
    } sources {
        label: "NVIDIA RTX A6000 datasheet (GPU memory 48 GB GDDR6 with ECC)",
        reported: None,
        torch: None,
        sms: Some("NVIDIA RTX A6000 datasheet: 10,752 CUDA cores and 84 RT cores, one each per SM of 128 cores: 84 SMs"),
        links: "NVIDIA RTX A6000 datasheet: PCIe Gen4 x16, NVLink bridge for 2 GPUs (112.5 GB/s) optional",
    },
    "radeon-pro-w7900" {
        vendor: Vendor::Amd,
        segment: Segment::Workstation,
        arch: Arch::Rdna3,
        bandwidth_gb_s: 864,
        name: "AMD Radeon PRO W7900",
        label: "48 GB GDDR6",
        label_bytes: 48 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(96),
        links: Links::Unknown,
    } sources {
        label: "AMD Radeon PRO W7900 product page (48 GB GDDR6 with ECC)",
        reported: None,
        torch: None,
        sms: Some("AMD Radeon PRO W7900 specifications: 96 compute units"),
        links: "not an NVIDIA card: NVLink is NVIDIA's; the engines' NVLink figures are kept",
    },
    "rtx-pro-6000" {
        vendor: Vendor::Nvidia,
        segment: Segment::Workstation,
        arch: Arch::Blackwell,
        bandwidth_gb_s: 1792,
        name: "NVIDIA RTX PRO 6000 Blackwell",
        label: "96 GB GDDR7",
        label_bytes: 96 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(188),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA RTX PRO 6000 Blackwell Workstation Edition datasheet (96 GB GDDR7 with ECC, 1792 GB/s)",
        reported: None,
        torch: None,
        sms: Some("NVIDIA RTX PRO 6000 Blackwell: 24,064 CUDA cores, 128 per SM: 188 of GB202's 192 SMs (as announced at GTC 2025)"),
        links: "NVIDIA RTX PRO 6000 Blackwell (Workstation and Server Edition) datasheets: PCIe Gen5 x16, no NVLink",
    },
    // -------------------------------------------------------------------------- consumer
    "rtx-5090" {
        vendor: Vendor::Nvidia,
        segment: Segment::Consumer,
        arch: Arch::Blackwell,
        bandwidth_gb_s: 1792,
        name: "NVIDIA GeForce RTX 5090",
        label: "32 GB GDDR7",
        label_bytes: 32 * GIB,
        reported_bytes: Some(32_607 * MIB),
    } engines {
        torch_bytes: None,
        sms: Some(170),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA GeForce RTX 5090 product page / specifications (32 GB GDDR7)",
        reported: Some(
            "nvidia-smi total 32607MiB (MiB-rounded) for \"NVIDIA GeForce RTX 5090\", seen in \
             https://github.com/noonghunna/club-3090/issues/1261",
        ),
        torch: None,
        sms: Some("NVIDIA GeForce RTX 5090 specifications: 21,760 CUDA cores, 128 per SM on Blackwell: 170 SMs"),
        links: "NVIDIA GeForce RTX 5090 specifications: PCIe Gen5; GeForce RTX 50 series cards have no NVLink",
    },
    "rtx-4090" {
        vendor: Vendor::Nvidia,
        segment: Segment::Consumer,
        arch: Arch::Ada,
        bandwidth_gb_s: 1008,
        name: "NVIDIA GeForce RTX 4090",
        label: "24 GB GDDR6X",
        label_bytes: 24 * GIB,
        reported_bytes: Some(24_564 * MIB),
    } engines {
        torch_bytes: Some(24_563 * MIB),
        sms: Some(128),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA GeForce RTX 4090 product page / specifications (24 GB GDDR6X)",
        reported: Some(
            "nvidia-smi total 24564MiB (MiB-rounded) for \"NVIDIA GeForce RTX 4090\", seen in \
             https://github.com/RLinf/RLinf/issues/255 (driver 550.163.01) and \
             https://github.com/vllm-project/vllm/issues/7553 (driver 535.54.03)",
        ),
        torch: Some("RTX 4090: `total_memory=24563MB` in `_CudaDeviceProperties`"),
        sms: Some("the vendor's specification (or `multi_processor_count` in torch's printouts): 128 SMs"),
        links: "NVIDIA GeForce RTX 4090 specifications: PCIe Gen4; GeForce RTX 40 series cards have no NVLink connector",
    },
    "rtx-3090" {
        vendor: Vendor::Nvidia,
        segment: Segment::Consumer,
        arch: Arch::Ampere,
        bandwidth_gb_s: 936,
        name: "NVIDIA GeForce RTX 3090",
        label: "24 GB GDDR6X",
        label_bytes: 24 * GIB,
        reported_bytes: Some(24_576 * MIB),
    } engines {
        torch_bytes: None,
        sms: Some(82),
        links: Links::Either,
    } sources {
        label: "NVIDIA GeForce RTX 3090 product page / specifications (24 GB GDDR6X)",
        reported: Some(
            "nvidia-smi total 24576MiB (MiB-rounded) for \"NVIDIA GeForce RTX 3090\", seen in \
             https://github.com/noonghunna/club-3090/issues/1128 and \
             https://github.com/noonghunna/club-3090/issues/32",
        ),
        torch: None,
        sms: Some("NVIDIA GeForce RTX 3090 specifications: 10,496 CUDA cores, 128 per SM on GA102: 82 SMs"),
        links: "NVIDIA GeForce RTX 3090 specifications: PCIe Gen4, NVLink bridge for 2 cards optional (the only GeForce 30 card with one)",
    },
    "rtx-4080" {
        vendor: Vendor::Nvidia,
        segment: Segment::Consumer,
        arch: Arch::Ada,
        bandwidth_gb_s: 717,
        name: "NVIDIA GeForce RTX 4080",
        label: "16 GB GDDR6X",
        label_bytes: 16 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(76),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA GeForce RTX 4080 product page / specifications (16 GB GDDR6X)",
        reported: None,
        torch: None,
        sms: Some("NVIDIA GeForce RTX 4080 specifications: 9,728 CUDA cores, 128 per SM on Ada Lovelace: 76 SMs"),
        links: "NVIDIA GeForce RTX 4080 specifications: PCIe Gen4; GeForce RTX 40 series cards have no NVLink connector",
    },
    "rtx-4060-ti-16gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::Consumer,
        arch: Arch::Ada,
        bandwidth_gb_s: 288,
        name: "NVIDIA GeForce RTX 4060 Ti 16GB",
        label: "16 GB GDDR6",
        label_bytes: 16 * GIB,
        reported_bytes: Some(16_380 * MIB),
    } engines {
        torch_bytes: None,
        sms: Some(34),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA GeForce RTX 4060 Ti product page / specifications (16 GB or 8 GB \
             GDDR6; this entry is the 16 GB model)",
        reported: Some(
            "nvidia-smi total 16380MiB (MiB-rounded; `nvidia-smi -q` FB Memory Total 16380 MiB, \
             BAR1 16384 MiB, driver 550.54.14) for \"NVIDIA GeForce RTX 4060 Ti\", captured in \
             https://github.com/thamada/nvidia-smi/blob/03fbe6e68c0bb4c28b72d5da786a9712a33cf408/nvsim/RTX4060Ti_smi.py",
        ),
        torch: None,
        sms: Some("NVIDIA GeForce RTX 4060 Ti specifications: 4,352 CUDA cores, 128 per SM on Ada Lovelace: 34 SMs"),
        links: "NVIDIA GeForce RTX 4060 Ti specifications: PCIe Gen4 x8; GeForce RTX 40 series cards have no NVLink connector",
    },
    "rtx-5070" {
        vendor: Vendor::Nvidia,
        segment: Segment::Consumer,
        arch: Arch::Blackwell,
        bandwidth_gb_s: 672,
        name: "NVIDIA GeForce RTX 5070",
        label: "12 GB GDDR7",
        label_bytes: 12 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(48),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA GeForce RTX 5070 product page / specifications (12 GB GDDR7)",
        reported: None,
        torch: None,
        sms: Some("NVIDIA GeForce RTX 5070 specifications: 6,144 CUDA cores, 128 per SM on Blackwell: 48 SMs"),
        links: "NVIDIA GeForce RTX 5070 specifications: PCIe Gen5; GeForce RTX 50 series cards have no NVLink",
    },
    "rtx-5080" {
        vendor: Vendor::Nvidia,
        segment: Segment::Consumer,
        arch: Arch::Blackwell,
        bandwidth_gb_s: 960,
        name: "NVIDIA GeForce RTX 5080",
        label: "16 GB GDDR7",
        label_bytes: 16 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(84),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA GeForce RTX 5080 product page / specifications (16 GB GDDR7, 960 GB/s)",
        reported: None,
        torch: None,
        sms: Some("NVIDIA GeForce RTX 5080 specifications: 10,752 CUDA cores, 128 per SM on Blackwell: 84 SMs"),
        links: "NVIDIA GeForce RTX 5080 specifications: PCIe Gen5; GeForce RTX 50 series cards have no NVLink",
    },
    "rtx-5060-ti-16gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::Consumer,
        arch: Arch::Blackwell,
        bandwidth_gb_s: 448,
        name: "NVIDIA GeForce RTX 5060 Ti 16GB",
        label: "16 GB GDDR7",
        label_bytes: 16 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(36),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA GeForce RTX 5060 Ti product page / specifications (16 GB or 8 GB GDDR7, 448 GB/s; this entry is the 16 GB model)",
        reported: None,
        torch: None,
        sms: Some("NVIDIA GeForce RTX 5060 Ti specifications: 4,608 CUDA cores, 128 per SM on Blackwell: 36 SMs"),
        links: "NVIDIA GeForce RTX 5060 Ti specifications: PCIe Gen5 x8; GeForce RTX 50 series cards have no NVLink",
    },
    "rtx-4070-ti-super" {
        vendor: Vendor::Nvidia,
        segment: Segment::Consumer,
        arch: Arch::Ada,
        bandwidth_gb_s: 672,
        name: "NVIDIA GeForce RTX 4070 Ti SUPER",
        label: "16 GB GDDR6X",
        label_bytes: 16 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(66),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA GeForce RTX 4070 family specifications (RTX 4070 Ti SUPER: 16 GB GDDR6X, 256-bit, 672 GB/s)",
        reported: None,
        torch: None,
        sms: Some("NVIDIA GeForce RTX 4070 Ti SUPER specifications: 8,448 CUDA cores, 128 per SM on Ada Lovelace: 66 SMs"),
        links: "NVIDIA GeForce RTX 4070 Ti SUPER specifications: PCIe Gen4; GeForce RTX 40 series cards have no NVLink connector",
    },
    "rtx-4070" {
        vendor: Vendor::Nvidia,
        segment: Segment::Consumer,
        arch: Arch::Ada,
        bandwidth_gb_s: 504,
        name: "NVIDIA GeForce RTX 4070",
        label: "12 GB GDDR6X",
        label_bytes: 12 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(46),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA GeForce RTX 4070 family specifications (RTX 4070: 12 GB GDDR6X, 192-bit, 504 GB/s)",
        reported: None,
        torch: None,
        sms: Some("NVIDIA GeForce RTX 4070 specifications: 5,888 CUDA cores, 128 per SM on Ada Lovelace: 46 SMs"),
        links: "NVIDIA GeForce RTX 4070 specifications: PCIe Gen4; GeForce RTX 40 series cards have no NVLink connector",
    },
    "rtx-3060-12gb" {
        vendor: Vendor::Nvidia,
        segment: Segment::Consumer,
        arch: Arch::Ampere,
        bandwidth_gb_s: 360,
        name: "NVIDIA GeForce RTX 3060 12GB",
        label: "12 GB GDDR6",
        label_bytes: 12 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(28),
        links: Links::Pcie,
    } sources {
        label: "NVIDIA GeForce RTX 3060 family specifications (RTX 3060: 12 GB GDDR6, 192-bit, 360 GB/s; this entry is the 12 GB model)",
        reported: None,
        torch: None,
        sms: Some("NVIDIA GeForce RTX 3060 specifications: 3,584 CUDA cores, 128 per SM on GA106: 28 SMs"),
        links: "NVIDIA GeForce RTX 3060 specifications: PCIe Gen4; only the RTX 3090 of the GeForce 30 series has an NVLink connector",
    },
    "radeon-rx-7900-xtx" {
        vendor: Vendor::Amd,
        segment: Segment::Consumer,
        arch: Arch::Rdna3,
        bandwidth_gb_s: 960,
        name: "AMD Radeon RX 7900 XTX",
        label: "24 GB GDDR6",
        label_bytes: 24 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: Some(96),
        links: Links::Unknown,
    } sources {
        label: "AMD Radeon RX 7900 XTX product page / specifications (24 GB GDDR6)",
        reported: None,
        torch: None,
        sms: Some("AMD Radeon RX 7900 XTX specifications: 96 compute units"),
        links: "not an NVIDIA card: NVLink is NVIDIA's; the engines' NVLink figures are kept",
    },
    // ------------------------------------------- Apple silicon (unified memory)
    // A Mac's "GB" of unified memory is GiB of LPDDR like a card's; what the GPU may use
    // of it is the working set (`metal_working_set`), not the label.
    "m1-pro-16gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 200,
        name: "Apple M1 Pro 16GB",
        label: "16 GB unified memory",
        label_bytes: 16 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, 2021): M1 Pro, 16GB unified memory, configurable to 32GB; 200GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m1-pro-32gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 200,
        name: "Apple M1 Pro 32GB",
        label: "32 GB unified memory",
        label_bytes: 32 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, 2021): M1 Pro, 16GB unified memory, configurable to 32GB; 200GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m1-max-32gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 400,
        name: "Apple M1 Max 32GB",
        label: "32 GB unified memory",
        label_bytes: 32 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, 2021) and Mac Studio (2022): M1 Max, 32GB unified memory, configurable to 64GB; 400GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m1-max-64gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 400,
        name: "Apple M1 Max 64GB",
        label: "64 GB unified memory",
        label_bytes: 64 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, 2021) and Mac Studio (2022): M1 Max, 32GB unified memory, configurable to 64GB; 400GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m1-ultra-64gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 800,
        name: "Apple M1 Ultra 64GB",
        label: "64 GB unified memory",
        label_bytes: 64 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, Mac Studio (2022): M1 Ultra, 64GB unified memory, configurable to 128GB; 800GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m1-ultra-128gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 800,
        name: "Apple M1 Ultra 128GB",
        label: "128 GB unified memory",
        label_bytes: 128 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, Mac Studio (2022): M1 Ultra, 64GB unified memory, configurable to 128GB; 800GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m2-pro-16gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 200,
        name: "Apple M2 Pro 16GB",
        label: "16 GB unified memory",
        label_bytes: 16 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, 2023) and Mac mini (2023): M2 Pro, 16GB unified memory, configurable to 32GB; 200GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m2-pro-32gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 200,
        name: "Apple M2 Pro 32GB",
        label: "32 GB unified memory",
        label_bytes: 32 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, 2023) and Mac mini (2023): M2 Pro, 16GB unified memory, configurable to 32GB; 200GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m2-max-32gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 400,
        name: "Apple M2 Max 32GB",
        label: "32 GB unified memory",
        label_bytes: 32 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, 2023) and Mac Studio (2023): M2 Max, 32GB unified memory, configurable to 64GB or 96GB; 400GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m2-max-64gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 400,
        name: "Apple M2 Max 64GB",
        label: "64 GB unified memory",
        label_bytes: 64 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, 2023) and Mac Studio (2023): M2 Max, 32GB unified memory, configurable to 64GB or 96GB; 400GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m2-max-96gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 400,
        name: "Apple M2 Max 96GB",
        label: "96 GB unified memory",
        label_bytes: 96 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, 2023) and Mac Studio (2023): M2 Max, 32GB unified memory, configurable to 64GB or 96GB; 400GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m2-ultra-64gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 800,
        name: "Apple M2 Ultra 64GB",
        label: "64 GB unified memory",
        label_bytes: 64 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, Mac Studio (2023) and Mac Pro (2023): M2 Ultra, 64GB unified memory, configurable to 128GB or 192GB; 800GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m2-ultra-128gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 800,
        name: "Apple M2 Ultra 128GB",
        label: "128 GB unified memory",
        label_bytes: 128 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, Mac Studio (2023) and Mac Pro (2023): M2 Ultra, 64GB unified memory, configurable to 128GB or 192GB; 800GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m2-ultra-192gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 800,
        name: "Apple M2 Ultra 192GB",
        label: "192 GB unified memory",
        label_bytes: 192 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, Mac Studio (2023) and Mac Pro (2023): M2 Ultra, 64GB unified memory, configurable to 128GB or 192GB; 800GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m3-pro-18gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 150,
        name: "Apple M3 Pro 18GB",
        label: "18 GB unified memory",
        label_bytes: 18 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, November 2023): M3 Pro, 18GB unified memory, configurable to 36GB; 150GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m3-pro-36gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 150,
        name: "Apple M3 Pro 36GB",
        label: "36 GB unified memory",
        label_bytes: 36 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, November 2023): M3 Pro, 18GB unified memory, configurable to 36GB; 150GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m3-max-36gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 300,
        name: "Apple M3 Max 36GB",
        label: "36 GB unified memory",
        label_bytes: 36 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, November 2023): M3 Max with 14-core CPU and 30-core GPU, 36GB unified memory, configurable to 96GB; 300GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m3-max-48gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 400,
        name: "Apple M3 Max 48GB",
        label: "48 GB unified memory",
        label_bytes: 48 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, November 2023): M3 Max with 16-core CPU and 40-core GPU, 48GB unified memory, configurable to 64GB or 128GB; 400GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m3-max-64gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 400,
        name: "Apple M3 Max 64GB",
        label: "64 GB unified memory",
        label_bytes: 64 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, November 2023): M3 Max with 16-core CPU and 40-core GPU, 48GB unified memory, configurable to 64GB or 128GB; 400GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m3-max-96gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 300,
        name: "Apple M3 Max 96GB",
        label: "96 GB unified memory",
        label_bytes: 96 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, November 2023): M3 Max with 14-core CPU and 30-core GPU, 36GB unified memory, configurable to 96GB; 300GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m3-max-128gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 400,
        name: "Apple M3 Max 128GB",
        label: "128 GB unified memory",
        label_bytes: 128 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, November 2023): M3 Max with 16-core CPU and 40-core GPU, 48GB unified memory, configurable to 64GB or 128GB; 400GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m3-ultra-96gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 819,
        name: "Apple M3 Ultra 96GB",
        label: "96 GB unified memory",
        label_bytes: 96 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, Mac Studio (2025): M3 Ultra, 96GB unified memory, configurable to 256GB or 512GB; 819GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m3-ultra-256gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 819,
        name: "Apple M3 Ultra 256GB",
        label: "256 GB unified memory",
        label_bytes: 256 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, Mac Studio (2025): M3 Ultra, 96GB unified memory, configurable to 256GB or 512GB; 819GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m3-ultra-512gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 819,
        name: "Apple M3 Ultra 512GB",
        label: "512 GB unified memory",
        label_bytes: 512 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, Mac Studio (2025): M3 Ultra, 96GB unified memory, configurable to 256GB or 512GB; 819GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m4-pro-24gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 273,
        name: "Apple M4 Pro 24GB",
        label: "24 GB unified memory",
        label_bytes: 24 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, Mac mini (2024) and MacBook Pro (14-inch and 16-inch, November 2024): M4 Pro, 24GB unified memory, configurable to 48GB or 64GB; 273GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m4-pro-48gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 273,
        name: "Apple M4 Pro 48GB",
        label: "48 GB unified memory",
        label_bytes: 48 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, Mac mini (2024) and MacBook Pro (14-inch and 16-inch, November 2024): M4 Pro, 24GB unified memory, configurable to 48GB or 64GB; 273GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m4-pro-64gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 273,
        name: "Apple M4 Pro 64GB",
        label: "64 GB unified memory",
        label_bytes: 64 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, Mac mini (2024) and MacBook Pro (14-inch and 16-inch, November 2024): M4 Pro, 24GB unified memory, configurable to 48GB or 64GB; 273GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m4-max-36gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 410,
        name: "Apple M4 Max 36GB",
        label: "36 GB unified memory",
        label_bytes: 36 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, November 2024) and Mac Studio (2025): M4 Max with 14-core CPU and 32-core GPU, 36GB unified memory; 410GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m4-max-48gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 546,
        name: "Apple M4 Max 48GB",
        label: "48 GB unified memory",
        label_bytes: 48 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, November 2024) and Mac Studio (2025): M4 Max with 16-core CPU and 40-core GPU, 48GB unified memory, configurable to 64GB or 128GB; 546GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m4-max-64gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 546,
        name: "Apple M4 Max 64GB",
        label: "64 GB unified memory",
        label_bytes: 64 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, November 2024) and Mac Studio (2025): M4 Max with 16-core CPU and 40-core GPU, 48GB unified memory, configurable to 64GB or 128GB; 546GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
    "m4-max-128gb" {
        vendor: Vendor::Apple,
        segment: Segment::Unified,
        arch: Arch::Apple,
        bandwidth_gb_s: 546,
        name: "Apple M4 Max 128GB",
        label: "128 GB unified memory",
        label_bytes: 128 * GIB,
        reported_bytes: None,
    } engines {
        torch_bytes: None,
        sms: None,
        links: Links::Unknown,
    } sources {
        label: "Apple's tech specs, MacBook Pro (14-inch and 16-inch, November 2024) and Mac Studio (2025): M4 Max with 16-core CPU and 40-core GPU, 48GB unified memory, configurable to 64GB or 128GB; 546GB/s memory bandwidth",
        reported: None,
        torch: None,
        sms: None,
        links: "one GPU in an Apple silicon Mac: no tensor parallelism over cards",
    },
}

/// Looks a card up by id (exact, case-insensitive ASCII).
pub fn find(id: &str) -> Option<&'static GpuCard> {
    CATALOGUE
        .iter()
        .find(|card| card.id.eq_ignore_ascii_case(id))
}

/// Words a card's name or id carries that nobody types to tell cards apart.
const NOISE: &[&str] = &[
    "nvidia",
    "geforce",
    "amd",
    "apple",
    "radeon",
    "instinct",
    "tesla",
    "rtx",
    "rx",
    "gb",
    "gib",
    "generation",
];

/// A name as people type it, reduced to what tells cards apart: lower case, split at
/// every non-alphanumeric and every letter/digit change, vendor and family words and
/// "GB" dropped, the rest joined: "NVIDIA GeForce RTX 4090", "rtx4090" and "4090" are
/// all "4090"; "A100 40GB" and "a100-40" are both "a10040".
fn key_of(text: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut last_digit = None;
    for c in text.chars().map(|c| c.to_ascii_lowercase()) {
        if !c.is_ascii_alphanumeric() {
            last_digit = None;
            words.push(std::mem::take(&mut word));
            continue;
        }
        let digit = c.is_ascii_digit();
        if last_digit.is_some_and(|d| d != digit) {
            words.push(std::mem::take(&mut word));
        }
        last_digit = Some(digit);
        word.push(c);
    }
    words.push(word);
    words
        .into_iter()
        .filter(|w| !w.is_empty() && !NOISE.contains(&w.as_str()))
        .collect()
}

/// A capacity as typed: a decimal number and a unit (GB, GiB, MB, MiB, TB, TiB; case
/// and spaces free), in bytes rounded down: "24GiB" → 25 769 803 776, "22.5GB" →
/// 22 500 000 000. `None` when the text is not one.
pub fn parse_capacity(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = t.split_at(split);
    let unit_bytes: u64 = match unit.trim() {
        "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        "mb" => 1_000_000,
        "mib" => 1 << 20,
        "tb" => 1_000_000_000_000,
        "tib" => 1 << 40,
        _ => return None,
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() || frac.len() > 9 || frac.contains('.') {
        return None;
    }
    // Digit by digit (no integer parser: the page's wasm carries none for u128).
    let mut digits: u128 = 0;
    for d in int.bytes().chain(frac.bytes()) {
        digits = digits
            .checked_mul(10)?
            .checked_add(u128::from(d.checked_sub(b'0')?))?;
    }
    let scale = 10u128.checked_pow(u32::try_from(frac.len()).ok()?)?;
    let bytes = digits
        .checked_mul(u128::from(unit_bytes))?
        .checked_div(scale)?;
    u64::try_from(bytes).ok()
}

/// Resolves a card as people type it (`--card`, the page's `card` key): a catalogue id
/// or name, a short form (`4090`, `rtx4090`, `t4`, `a100-40`, `l40s`, `h100-sxm`), or a
/// capacity (`24GiB`, `22.5GB`: [`GpuCard::custom`]). Tried in order: the id exactly,
/// the reduced name or id exactly, then as the start of exactly one card's, then inside
/// exactly one card's. Several matches are an error that lists them, never a guess. A
/// card followed by `@` and a capacity (`rtx-3090@23.58GiB`) is that card with the total
/// torch reports on the user's machine ([`GpuCard::with_torch_total`]).
pub fn resolve(text: &str) -> Result<GpuCard, String> {
    let t = text.trim();
    // A card with the total torch reports for it: `rtx-3090@23.58GiB`.
    if let Some((name, total)) = t.split_once('@') {
        let card = resolve(name)?;
        if card.id == CUSTOM_ID {
            return Err(format!(
                "{t:?}: name a card before @ (rtx-3090@23.58GiB), or give the capacity alone"
            ));
        }
        let bytes = parse_capacity(total.trim()).ok_or_else(|| {
            format!("{t:?}: after @ comes the total torch reports, such as 23.58GiB")
        })?;
        return card.with_torch_total(bytes);
    }
    if let Some(card) = find(t) {
        return Ok(*card);
    }
    match parse_capacity(t) {
        Some(0) => return Err("a capacity of 0 holds nothing".into()),
        Some(bytes) => return Ok(GpuCard::custom(bytes)),
        None => {}
    }
    let want = key_of(t);
    let unknown = || {
        format!(
            "{t:?} is not a card: `gpumem-agent cards` lists them (e.g. rtx-4090, h100-sxm-80gb), or give a capacity such as 24GiB or 22.5GB"
        )
    };
    if want.is_empty() {
        return Err(unknown());
    }
    let keys: Vec<(&'static GpuCard, [String; 2])> = CATALOGUE
        .iter()
        .map(|c| (c, [key_of(c.id), key_of(c.name)]))
        .collect();
    let tiers: [&dyn Fn(&str) -> bool; 3] =
        [&|k| k == want, &|k| k.starts_with(want.as_str()), &|k| {
            k.contains(want.as_str())
        }];
    for matches in tiers {
        let found: Vec<&'static GpuCard> = keys
            .iter()
            .filter(|(_, k)| k.iter().any(|k| matches(k)))
            .map(|(c, _)| *c)
            .collect();
        match found.as_slice() {
            [] => continue,
            [one] => return Ok(**one),
            many => {
                let names: Vec<String> = many
                    .iter()
                    .map(|c| format!("{} ({})", c.id, c.label))
                    .collect();
                return Err(format!("{t:?} could be {}: name one", names.join(", ")));
            }
        }
    }
    Err(unknown())
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    fn is_kebab_case(id: &str) -> bool {
        !id.is_empty()
            && !id.starts_with('-')
            && !id.ends_with('-')
            && !id.contains("--")
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    }

    fn leading_integer(label: &str) -> Option<u64> {
        let digits: String = label.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse().ok()
    }

    fn segment_rank(segment: Segment) -> u8 {
        match segment {
            Segment::DataCentre => 0,
            Segment::Workstation => 1,
            Segment::Consumer => 2,
            Segment::Unified => 3,
        }
    }

    #[test]
    fn catalogue_is_not_empty() {
        assert!(CATALOGUE.len() >= 25, "only {} cards", CATALOGUE.len());
    }

    #[test]
    fn ids_are_unique_and_kebab_case() {
        for (i, card) in CATALOGUE.iter().enumerate() {
            assert!(is_kebab_case(card.id), "id not kebab-case: {:?}", card.id);
            for other in &CATALOGUE[i + 1..] {
                assert!(
                    !card.id.eq_ignore_ascii_case(other.id),
                    "duplicate id {:?}",
                    card.id
                );
            }
        }
    }

    #[test]
    fn names_are_unique() {
        for (i, card) in CATALOGUE.iter().enumerate() {
            for other in &CATALOGUE[i + 1..] {
                assert_ne!(card.name, other.name);
            }
        }
    }

    #[test]
    fn label_bytes_match_label_number_in_gib() {
        for card in CATALOGUE {
            let n = leading_integer(card.label)
                .unwrap_or_else(|| panic!("{}: label has no leading number", card.id));
            assert!(n > 0, "{}: zero label", card.id);
            assert_eq!(card.label_bytes, n * (1u64 << 30), "{}", card.id);
            assert!(
                card.label[n.to_string().len()..].starts_with(" GB "),
                "{}: label {:?} is not of the form \"N GB TYPE\"",
                card.id,
                card.label
            );
        }
    }

    #[test]
    fn reported_figures_have_sources_and_do_not_exceed_label() {
        for card in CATALOGUE {
            let src = sources(card.id).unwrap_or_else(|| panic!("{}: no sources", card.id));
            assert_eq!(
                card.reported_bytes.is_some(),
                src.reported.is_some(),
                "{}: reported_bytes and its source must come together",
                card.id
            );
            if let Some(reported) = card.reported_bytes {
                assert!(reported > 0, "{}", card.id);
                assert!(
                    reported <= card.label_bytes,
                    "{}: reported {} > label {}",
                    card.id,
                    reported,
                    card.label_bytes
                );
                // Devices do not lose more than a tenth of the label to reservations.
                assert!(reported >= card.label_bytes / 10 * 9, "{}", card.id);
            }
        }
    }

    /// The engines' facts of each card sit in its row: torch's total within what the
    /// card has, an SM count where known, each with its source, and sm_90 exactly for
    /// Hopper. A card without torch's total gets a derived one, said to be assumed.
    #[test]
    fn engine_facts_sit_in_each_row_with_their_sources() {
        assert_eq!(ENGINE_FACTS.len(), CATALOGUE.len());
        for (card, src) in CATALOGUE.iter().zip(SOURCES) {
            assert_eq!(card.id, src.id, "one row, one card");
            let facts = card.engine_facts();
            assert_eq!(
                facts.torch_bytes.is_some(),
                src.torch.is_some(),
                "{}",
                card.id
            );
            assert_eq!(facts.sms.is_some(), src.sms.is_some(), "{}", card.id);
            let (total, assumed) = card.torch_total();
            assert_eq!(assumed, facts.torch_bytes.is_none(), "{}", card.id);
            assert!(
                total <= card.capacity().0.max(card.label_bytes),
                "{}: torch's total above the card's",
                card.id
            );
            assert!(total >= card.capacity().0 / 10 * 9, "{}", card.id);
            assert_eq!(card.sms().1, facts.sms.is_none(), "{}", card.id);
            assert!(
                facts.sms.is_none_or(|n| (16..=1024).contains(&n)),
                "{}",
                card.id
            );
            // Each count is the one its source names.
            if let (Some(n), Some(source)) = (facts.sms, src.sms) {
                assert!(source.contains(&format!(" {n} ")), "{}: {source}", card.id);
            }
            assert_eq!(card.sm90(), card.arch == Arch::Hopper, "{}", card.id);
        }
        // A typed capacity is torch's total as given, and assumes its SM count.
        let t4 = GpuCard::custom(15_637_086_208);
        assert_eq!(t4.torch_total(), (15_637_086_208, false));
        assert_eq!(t4.sms(), (ASSUMED_SMS, true));
        // Derived: the capacity less 1 %, whole MiB (H100 PCIe: its 80 GiB label).
        let pcie = find("h100-pcie-80gb").unwrap();
        assert_eq!(pcie.torch_total(), (85_039_513_600, true));
    }

    #[test]
    fn the_cards_generation_for_the_cublas_workspace() {
        let card = |id: &str| *find(id).unwrap();
        assert_eq!(cards_sm90(&[]), None);
        assert_eq!(cards_sm90(&[card("h100-sxm-80gb")]), Some(true));
        assert_eq!(cards_sm90(&[card("a100-40gb")]), Some(false));
        assert_eq!(cards_sm90(&[card("rtx-4090")]), Some(false));
        // Several: sm_90 if any is (its workspace is the larger).
        assert_eq!(
            cards_sm90(&[card("a100-40gb"), card("h100-sxm-80gb")]),
            Some(true)
        );
        // A typed capacity's generation is unknown.
        assert_eq!(cards_sm90(&[GpuCard::custom(24 << 30)]), None);
        assert_eq!(
            cards_sm90(&[card("rtx-4090"), GpuCard::custom(24 << 30)]),
            None
        );
    }

    #[test]
    fn sources_are_non_empty_one_per_card() {
        assert_eq!(SOURCES.len(), CATALOGUE.len());
        for card in CATALOGUE {
            let src = sources(card.id).unwrap_or_else(|| panic!("{}: no sources", card.id));
            assert!(!src.label.trim().is_empty(), "{}", card.id);
            assert!(!card.name.trim().is_empty(), "{}", card.id);
            if let Some(source) = src.reported {
                assert!(!source.trim().is_empty(), "{}", card.id);
                assert!(
                    source.contains("https://"),
                    "{}: reported source must cite an address",
                    card.id
                );
            }
        }
    }

    #[test]
    fn data_centre_first() {
        for pair in CATALOGUE.windows(2) {
            assert!(
                segment_rank(pair[0].segment) <= segment_rank(pair[1].segment),
                "{} ({:?}) listed before {} ({:?})",
                pair[0].id,
                pair[0].segment,
                pair[1].id,
                pair[1].segment
            );
        }
    }

    #[test]
    fn capacity_prefers_reported() {
        for card in CATALOGUE {
            let (bytes, kind) = card.capacity();
            match card.reported_bytes {
                Some(r) => {
                    assert_eq!(bytes, r);
                    assert_eq!(kind, CapacityKind::Reported);
                }
                None if card.unified() => {
                    assert_eq!(bytes, metal_working_set(card.label_bytes));
                    assert_eq!(kind, CapacityKind::WorkingSet);
                }
                None => {
                    assert_eq!(bytes, card.label_bytes);
                    assert_eq!(kind, CapacityKind::Label);
                }
            }
        }
    }

    #[test]
    fn find_is_case_insensitive() {
        let card = find("H100-SXM-80GB").expect("h100 present");
        assert_eq!(card.id, "h100-sxm-80gb");
        assert_eq!(find("rtx-4090").map(|c| c.id), Some("rtx-4090"));
        assert_eq!(find("RTX-4090").map(|c| c.id), Some("rtx-4090"));
        assert!(find("rtx-9999").is_none());
        assert!(find("").is_none());
        assert!(find("h100").is_none(), "lookup is exact, not prefix");
    }

    #[test]
    fn cards_resolve_as_people_type_them() {
        let id = |t: &str| resolve(t).map(|c| c.id);
        for (typed, want) in [
            ("4090", "rtx-4090"),
            ("rtx4090", "rtx-4090"),
            ("RTX 4090", "rtx-4090"),
            ("NVIDIA GeForce RTX 4090", "rtx-4090"),
            ("t4", "t4-16gb"),
            ("a100-40", "a100-40gb"),
            ("A100 80GB", "a100-80gb"),
            ("a10", "a10-24gb"),
            ("a10g", "a10g-24gb"),
            ("l40s", "l40s-48gb"),
            ("l4", "l4-24gb"),
            ("h100-sxm", "h100-sxm-80gb"),
            ("h100 nvl", "h100-nvl-94gb"),
            ("h200", "h200-141gb"),
            ("mi300x", "mi300x"),
            ("3060", "rtx-3060-12gb"),
            ("4060 ti", "rtx-4060-ti-16gb"),
            ("4070 ti super", "rtx-4070-ti-super"),
            ("a6000", "rtx-a6000"),
            ("6000 ada", "rtx-6000-ada"),
            ("w7900", "radeon-pro-w7900"),
            ("7900xtx", "radeon-rx-7900-xtx"),
        ] {
            assert_eq!(id(typed), Ok(want), "{typed}");
        }
        // Several cards: an error naming each, never a guess.
        for typed in ["a100", "h100", "v100"] {
            let e = resolve(typed).unwrap_err();
            assert!(e.contains("could be"), "{typed}: {e}");
        }
        assert!(resolve("a100").unwrap_err().contains("a100-40gb"));
        assert!(
            resolve("rtx-9999")
                .unwrap_err()
                .contains("gpumem-agent cards")
        );
        assert!(resolve("").is_err());
        assert!(resolve("--").is_err());
    }

    #[test]
    fn capacities_are_exact_bytes() {
        assert_eq!(parse_capacity("24GiB"), Some(24 << 30));
        assert_eq!(parse_capacity("24 gib"), Some(24 << 30));
        assert_eq!(parse_capacity("22.5GB"), Some(22_500_000_000));
        assert_eq!(parse_capacity("16384MiB"), Some(16 << 30));
        assert_eq!(parse_capacity("0.5TiB"), Some(1 << 39));
        for bad in ["24", "GB", "1.2.3GB", "24 GHz", "-1GB", "99999999999999TB"] {
            assert_eq!(parse_capacity(bad), None, "{bad}");
        }
        // A capacity of nothing is refused as such, never matched against the names.
        assert_eq!(parse_capacity("0GB"), Some(0));
        assert!(resolve("0GB").unwrap_err().contains("holds nothing"));
        let c = resolve("22.5GB").unwrap();
        assert_eq!(c.id, CUSTOM_ID);
        assert_eq!(c.capacity(), (22_500_000_000, CapacityKind::Given));
    }

    /// A card with the total torch reports on the user's machine keeps the card's
    /// facts (SMs, generation) and sizes from that total; nothing else takes one.
    #[test]
    fn a_card_takes_the_total_torch_reports_after_an_at() {
        let c = resolve("rtx-3090@23.58GiB").unwrap();
        assert_eq!(c.id, "rtx-3090");
        let bytes = parse_capacity("23.58GiB").unwrap();
        assert_eq!(c.torch_total(), (bytes, false));
        assert_eq!(c.capacity(), (bytes, CapacityKind::Given));
        assert_eq!(c.sms(), (82, false));
        assert_eq!(c.arch, Arch::Ampere);
        // The same card without it: the catalogue's derived total, assumed.
        let plain = resolve("3090").unwrap();
        assert!(plain.torch_total().1);
        assert_ne!(plain.torch_total().0, bytes);
        assert_eq!(resolve(" 3090 @ 23.58GiB ").unwrap(), c);
        assert!(resolve("24GiB@23GiB").unwrap_err().contains("name a card"));
        assert!(
            resolve("m3-max-128gb@100GiB")
                .unwrap_err()
                .contains("wired-limit-mb")
        );
        assert!(resolve("rtx-3090@30GiB").unwrap_err().contains("at most"));
        assert!(resolve("rtx-3090@0GiB").is_err());
        assert!(resolve("rtx-3090@lots").unwrap_err().contains("after @"));
        assert!(resolve("rtx-9999@20GiB").is_err());
    }

    #[test]
    fn known_figures() {
        let h100 = find("h100-sxm-80gb").expect("present");
        assert_eq!(h100.label_bytes, 85_899_345_920);
        assert_eq!(h100.reported_bytes, Some(85_520_809_984));
        let h200 = find("h200-141gb").expect("present");
        assert_eq!(h200.capacity(), (143_771 << 20, CapacityKind::Reported));
        let a10 = find("a10-24gb").expect("present");
        assert_eq!(a10.reported_bytes, Some(23_028 << 20));
        let mi300x = find("mi300x").expect("present");
        assert_eq!(mi300x.capacity(), (192 << 30, CapacityKind::Label));
    }

    #[test]
    fn required_cards_present() {
        for id in [
            "h200-141gb",
            "h100-sxm-80gb",
            "h100-pcie-80gb",
            "h100-nvl-94gb",
            "a100-80gb",
            "a100-40gb",
            "l40s-48gb",
            "l4-24gb",
            "a10-24gb",
            "a10g-24gb",
            "t4-16gb",
            "v100-16gb",
            "v100-32gb",
            "b200",
            "rtx-5090",
            "rtx-4090",
            "rtx-3090",
            "rtx-4080",
            "rtx-5070",
            "rtx-4060-ti-16gb",
            "rtx-a6000",
            "rtx-6000-ada",
            "mi300x",
            "mi325x",
            "mi250x",
            "mi210",
            "radeon-rx-7900-xtx",
            "radeon-pro-w7900",
        ] {
            assert!(find(id).is_some(), "missing {id}");
        }
    }

    /// Every Mac row: its label is its unified memory in GiB, the GPU's capacity is
    /// the working set of that memory, the rest is the system's, and its label source
    /// names the same memory size and the same bandwidth the row holds.
    #[test]
    fn apple_rows_are_their_sources() {
        let macs: Vec<&GpuCard> = CATALOGUE.iter().filter(|c| c.unified()).collect();
        assert!(macs.len() >= 31, "{} Macs", macs.len());
        for c in &macs {
            let src = sources(c.id).expect("sources");
            let gib = c.label_bytes >> 30;
            assert!(
                src.label.contains(&format!("{gib}GB")),
                "{}: {}",
                c.id,
                src.label
            );
            assert!(
                src.label.contains(&format!("; {}GB/s", c.bandwidth_gb_s)),
                "{}: {}",
                c.id,
                src.label
            );
            assert!(c.id.ends_with(&format!("-{gib}gb")), "{}", c.id);
            assert!(c.name.ends_with(&format!(" {gib}GB")), "{}", c.name);
            assert_eq!(c.arch, Arch::Apple);
            assert_eq!(c.segment, Segment::Unified);
            let (cap, kind) = c.capacity();
            assert_eq!(kind, CapacityKind::WorkingSet, "{}", c.id);
            assert_eq!(cap, metal_working_set(c.label_bytes), "{}", c.id);
            assert_eq!(c.system_left(), Some(c.label_bytes - cap), "{}", c.id);
        }
        // The configurations asked for most.
        for id in [
            "m1-max-32gb",
            "m1-max-64gb",
            "m1-ultra-64gb",
            "m1-ultra-128gb",
            "m2-max-32gb",
            "m2-max-64gb",
            "m2-max-96gb",
            "m2-ultra-64gb",
            "m2-ultra-128gb",
            "m2-ultra-192gb",
            "m3-max-36gb",
            "m3-max-48gb",
            "m3-max-64gb",
            "m3-max-96gb",
            "m3-max-128gb",
            "m4-max-36gb",
            "m4-max-48gb",
            "m4-max-64gb",
            "m4-max-128gb",
            "m4-pro-24gb",
            "m4-pro-48gb",
            "m4-pro-64gb",
            "m3-ultra-96gb",
            "m3-ultra-256gb",
            "m3-ultra-512gb",
        ] {
            assert!(find(id).is_some_and(GpuCard::unified), "missing {id}");
        }
        // A card with memory of its own leaves nothing to a system beside it.
        assert_eq!(find("rtx-4090").unwrap().system_left(), None);
    }

    /// The working-set rule equals each readout of macOS 13/14 to the hundredth
    /// printed, and stays at or below what a newer macOS gave.
    #[test]
    fn working_set_is_each_reading() {
        for r in WORKING_SET_READINGS {
            let rule = u128::from(metal_working_set(r.ram));
            let printed = u128::from(r.hundredths) * u128::from(r.unit);
            if r.newer_os {
                assert!(rule * 100 <= printed, "{}", r.source);
            } else {
                // |rule − printed| ≤ half a printed hundredth.
                let (hi, lo) = (rule.max(printed / 100), rule.min(printed / 100));
                assert!(
                    (hi - lo) * 200 <= u128::from(r.unit),
                    "rule {rule} vs {printed}/100: {}",
                    r.source
                );
            }
            assert!(r.source.contains("https://"), "{}", r.source);
        }
        // The figures themselves: 2/3 in whole 16 KiB pages below 64 GiB, 3/4 from it.
        assert_eq!(metal_working_set(32 << 30), 22_906_503_168);
        assert_eq!(metal_working_set(16 << 30), 11_453_251_584);
        assert_eq!(metal_working_set(36 << 30), 24 << 30);
        assert_eq!(metal_working_set(48 << 30), 32 << 30);
        assert_eq!(metal_working_set(64 << 30), 48 << 30);
        assert_eq!(metal_working_set(128 << 30), 96 << 30);
        assert_eq!(metal_working_set(512 << 30), 384 << 30);
        assert_eq!(metal_working_set(u64::MAX) % MACOS_PAGE, 0);
        let m3 = find("m3-max-128gb").unwrap();
        assert_eq!(m3.capacity(), (96 << 30, CapacityKind::WorkingSet));
        assert_eq!(m3.system_left(), Some(32 << 30));
    }

    /// `iogpu.wired_limit_mb` replaces the working set, given in MiB; a card with its
    /// own memory, 0 and more than the RAM are refused.
    #[test]
    fn wired_limit_sets_the_working_set() {
        let m3 = *find("m3-max-128gb").unwrap();
        let raised = m3.with_wired_limit(114_688).unwrap();
        assert_eq!(raised.capacity(), (112 << 30, CapacityKind::Given));
        assert_eq!(raised.system_left(), Some(16 << 30));
        assert!(m3.with_wired_limit(0).is_err());
        assert!(m3.with_wired_limit(131_073).is_err());
        assert!(m3.with_wired_limit(u64::MAX).is_err());
        assert_eq!(m3.with_wired_limit(131_072).unwrap().system_left(), Some(0));
        let e = find("rtx-4090")
            .unwrap()
            .with_wired_limit(20_000)
            .unwrap_err();
        assert!(e.contains("memory of its own"), "{e}");
    }

    #[test]
    fn macs_resolve_as_people_type_them() {
        let id = |t: &str| resolve(t).map(|c| c.id);
        assert_eq!(id("m3-max-128gb"), Ok("m3-max-128gb"));
        assert_eq!(id("M3 Max 128GB"), Ok("m3-max-128gb"));
        assert_eq!(id("Apple M2 Ultra 192GB"), Ok("m2-ultra-192gb"));
        assert_eq!(id("m4 pro 24"), Ok("m4-pro-24gb"));
        assert!(resolve("m3 max").unwrap_err().contains("could be"));
        // A bare capacity stays a typed card, never a Mac.
        assert_eq!(id("128GB"), Ok(CUSTOM_ID));
    }

    #[test]
    fn vendors_match_names() {
        for card in CATALOGUE {
            match card.vendor {
                Vendor::Nvidia => assert!(card.name.starts_with("NVIDIA "), "{}", card.id),
                Vendor::Amd => assert!(card.name.starts_with("AMD "), "{}", card.id),
                Vendor::Apple => assert!(card.name.starts_with("Apple "), "{}", card.id),
                Vendor::Unknown => panic!("{}: a catalogue card has a vendor", card.id),
            }
        }
    }

    /// Every NVIDIA row says how the card reaches its peers, with the vendor's words
    /// for it; cards without NVLink are PCIe, SXM boards NVSwitch, and a row sold both
    /// ways (or taking a bridge) says it cannot know. Nothing else claims NVLink.
    #[test]
    fn every_nvidia_row_says_its_interconnect() {
        for (card, src) in CATALOGUE.iter().zip(SOURCES) {
            assert!(!src.links.is_empty(), "{}", card.id);
            if card.vendor == Vendor::Nvidia {
                assert_ne!(card.links(), Links::Unknown, "{}", card.id);
                assert!(
                    src.links.contains("PCIe") || src.links.contains("NVLink"),
                    "{}: {}",
                    card.id,
                    src.links
                );
            } else {
                assert_eq!(card.links(), Links::Unknown, "{}", card.id);
            }
        }
        let links = |id: &str| find(id).map(|c| c.links());
        for id in [
            "l4-24gb",
            "rtx-4090",
            "rtx-pro-6000",
            "l40s-48gb",
            "a10g-24gb",
            "t4-16gb",
        ] {
            assert_eq!(links(id), Some(Links::Pcie), "{id}");
        }
        for id in ["h100-sxm-80gb", "b200"] {
            assert_eq!(links(id), Some(Links::NvSwitch), "{id}");
        }
        for id in [
            "a100-80gb",
            "h200-141gb",
            "h100-pcie-80gb",
            "rtx-3090",
            "rtx-a6000",
        ] {
            assert_eq!(links(id), Some(Links::Either), "{id}");
        }
        assert_eq!(GpuCard::custom(24 * GIB).links(), Links::Unknown);
    }
}
