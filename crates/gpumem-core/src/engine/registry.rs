//! What the registry makes of its list (the `engines!` line per engine, in
//! `engine/mod.rs`): the `--engine` names and releases, the field table's engine group
//! ([`FIELDS`]: the `engine` and `card` rows, then every engine's flags in registry
//! order, each once), the parser of the engine's pairs ([`from_pairs`]) and the rule a
//! name runs. Nothing else in gpumem learns an engine's name: the agent's `--engine`
//! choices, the page's select and the docs' lists are read from here.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::contract::{Info, ReleaseParser};
use super::flags::{
    CARD, EngineId, EngineParams, Flag, MAX_MODEL_LEN, Value, WIRED_LIMIT_MB, field, positive,
};
use super::{ENCODER_ENGINES, INFO_COUNT, INFOS, RUNTIME_ENGINES, SPLIT_ENGINES};
use crate::error::EstimateError;
use crate::fields::{Field, FieldKind};

/// Lists the engines, one line each (`module::Type`): declares each engine's folder,
/// and makes their [`Info`] in order (`INFOS`) and the dispatch from an [`EngineId`] to
/// its rule (`rule_of`: direct calls, each rule's one caller, which only a budget
/// links).
macro_rules! engines {
    ($($module:ident::$engine:ident),+ $(,)?) => {
        $(mod $module;)+

        /// Every engine's [`Info`], in the registry's order.
        const INFOS: &[&Info] = &[$(&<$module::$engine as Engine>::INFO),+];

        /// How many engines the registry lists.
        const INFO_COUNT: usize = INFOS.len();

        /// Whether each engine serves an encoder-only model, in the registry's order.
        const ENCODER_ENGINES: &[bool] = &[$(<$module::$engine as Engine>::ENCODERS),+];

        /// Whether each engine sizes a split over several cards, in the registry's order.
        const SPLIT_ENGINES: &[bool] = &[$(<$module::$engine as Engine>::SEVERAL_CARDS),+];

        /// Whose cache layout each engine's states follow, in the registry's order.
        const RUNTIME_ENGINES: &[crate::arch::CacheRuntime] =
            &[$(<$module::$engine as Engine>::CACHE_RUNTIME),+];

        /// Runs the encoder rule of `id`'s engine.
        fn batch_rule_of(
            id: EngineId,
            c: &Ctx,
        ) -> Result<(Draft, pool::Batch), crate::EstimateError> {
            let mut at = 0u8;
            $(
                if id.0 == at {
                    return <$module::$engine as Engine>::batch_budget(c);
                }
                at = at.saturating_add(1);
            )+
            let _ = at;
            Err(crate::EstimateError::invalid("engine", "not a registered engine"))
        }

        /// Runs the cross-attention rule of `id`'s engine.
        fn cross_rule_of(
            id: EngineId,
            x: &CrossLayers,
            params: &EngineParams,
        ) -> Result<Cross, crate::EstimateError> {
            let mut at = 0u8;
            $(
                if id.0 == at {
                    return <$module::$engine as Engine>::cross_attention(x, params);
                }
                at = at.saturating_add(1);
            )+
            let _ = at;
            Err(crate::EstimateError::invalid("engine", "not a registered engine"))
        }

        /// Runs the encoder-decoder rule of `id`'s engine.
        fn encdec_rule_of(
            id: EngineId,
            x: &CrossLayers,
            params: &EngineParams,
        ) -> Result<Cross, crate::EstimateError> {
            let mut at = 0u8;
            $(
                if id.0 == at {
                    return <$module::$engine as Engine>::encoder_decoder(x, params);
                }
                at = at.saturating_add(1);
            )+
            let _ = at;
            Err(crate::EstimateError::invalid("engine", "not a registered engine"))
        }

        /// Runs the rule of `id`'s engine.
        fn rule_of(id: EngineId, c: &Ctx) -> Result<Draft, crate::EstimateError> {
            let mut at = 0u8;
            $(
                if id.0 == at {
                    return <$module::$engine as Engine>::budget(c);
                }
                at = at.saturating_add(1);
            )+
            let _ = at;
            Err(crate::EstimateError::invalid("engine", "not a registered engine"))
        }
    };
}

/// Every engine, in the registry's order.
pub static ENGINES: &[&Info] = INFOS;

/// What the parser and the headline read of an engine, copied out of its [`Info`] when
/// compiling: whatever parses the flags or offers formats (the page's first module)
/// links these, not the engines' `Info`, their flag rows or their rules.
#[derive(Clone, Copy)]
struct Names {
    name: &'static str,
    aliases: &'static [&'static str],
    hint: &'static str,
    release: Option<ReleaseParser>,
    formats: &'static [&'static str],
}

#[allow(clippy::arithmetic_side_effects)] // evaluated by the compiler
const fn names() -> [Names; INFO_COUNT] {
    let mut out = [Names {
        name: "",
        aliases: &[],
        hint: "",
        release: None,
        formats: &[],
    }; INFO_COUNT];
    let mut i = 0;
    while i < INFOS.len() {
        let info = INFOS[i];
        out[i] = Names {
            name: info.name,
            aliases: info.aliases,
            hint: info.hint,
            release: info.release,
            formats: info.formats,
        };
        i += 1;
    }
    out
}

static NAMES: [Names; INFO_COUNT] = names();

/// What a budget reads of an engine beyond its rule, copied out of its [`Info`] when
/// compiling (the engine module links these, not the `Info` with its flag rows): the
/// flags it reads (bit `k` for the `k`th row of [`FIELDS`]), whether it pages sliding
/// windows and shares its context among sequences, and its refusal.
#[derive(Clone, Copy)]
struct Traits {
    reads: u64,
    windows: bool,
    shared_context: bool,
    metal: bool,
    refusal: Option<&'static str>,
    encoders: bool,
    several_cards: bool,
    runtime: crate::arch::CacheRuntime,
}

#[allow(clippy::arithmetic_side_effects)] // evaluated by the compiler
const fn traits() -> [Traits; INFO_COUNT] {
    assert!(field_count() <= 64, "one bit per row of the engine group");
    let mut out = [Traits {
        reads: 0,
        windows: false,
        shared_context: false,
        metal: false,
        refusal: None,
        encoders: false,
        several_cards: false,
        runtime: crate::arch::CacheRuntime::Serving,
    }; INFO_COUNT];
    let mut i = 0;
    while i < INFOS.len() {
        let info = INFOS[i];
        let mut reads = 0u64;
        let mut j = 0;
        while j < info.flags.len() {
            let mut k = 0;
            while k < ROWS.len() {
                if same(ROWS[k].field.key, info.flags[j].field.key) {
                    reads |= 1 << k;
                }
                k += 1;
            }
            j += 1;
        }
        out[i] = Traits {
            reads,
            windows: info.windows,
            shared_context: info.shared_context,
            metal: info.metal,
            refusal: info.refusal,
            encoders: ENCODER_ENGINES[i],
            several_cards: SPLIT_ENGINES[i],
            runtime: RUNTIME_ENGINES[i],
        };
        i += 1;
    }
    out
}

static TRAITS: [Traits; INFO_COUNT] = traits();

/// Every engine, in the registry's order.
pub fn all() -> impl Iterator<Item = EngineId> + Clone {
    (0..NAMES.len()).filter_map(|i| u8::try_from(i).ok().map(EngineId))
}

/// The engine `name` names (its name or an alias, any case), without a release.
pub fn find(name: &str) -> Option<EngineId> {
    let t = name.trim().to_ascii_lowercase();
    all().find(|e| {
        let n = e.names();
        n.name == t || n.aliases.contains(&t.as_str())
    })
}

impl EngineId {
    /// Who it is (its flag rows included: whatever only parses or budgets reads the
    /// copies above instead, so the page's modules do not carry the rows twice).
    pub fn info(self) -> &'static Info {
        ENGINES
            .get(usize::from(self.0))
            .copied()
            .unwrap_or(ENGINES[0])
    }

    fn names(self) -> &'static Names {
        NAMES.get(usize::from(self.0)).unwrap_or(&NAMES[0])
    }

    fn traits(self) -> &'static Traits {
        TRAITS.get(usize::from(self.0)).unwrap_or(&TRAITS[0])
    }

    /// Whether it reads the flag `key` (one of its [`Info::flags`]).
    pub fn reads(self, key: &str) -> bool {
        row(key).is_some_and(|k| (self.traits().reads >> k) & 1 == 1)
    }

    /// Whether its rule sizes sliding-window layers by their window ([`Info::windows`]).
    pub fn windows(self) -> bool {
        self.traits().windows
    }

    /// Whether its length is the context of all its sequences ([`Info::shared_context`]).
    pub fn shared_context(self) -> bool {
        self.traits().shared_context
    }

    /// Whether it serves an encoder-only model ([`super::Engine::ENCODERS`]).
    pub fn encoders(self) -> bool {
        self.traits().encoders
    }

    /// Whether it sizes a split over several cards ([`super::Engine::SEVERAL_CARDS`]).
    pub fn several_cards(self) -> bool {
        self.traits().several_cards
    }

    /// Whose cache layout its recurrent states and indexer keys follow
    /// ([`super::Engine::CACHE_RUNTIME`]).
    pub fn cache_runtime(self) -> crate::arch::CacheRuntime {
        self.traits().runtime
    }

    /// Whether it runs on a Mac's GPU ([`Info::metal`]).
    pub fn metal(self) -> bool {
        self.traits().metal
    }

    /// What a budget and the headline say of it on a Mac when it has no Metal backend.
    pub fn not_on_a_mac(self) -> String {
        format!(
            "{} does not run on a Mac's GPU (no Metal backend): this is its rule on the GPU's working set, for comparison only",
            self.name()
        )
    }

    /// What a budget says when nothing is left for its pool ([`Info::refusal`]).
    pub fn refusal(self) -> Option<&'static str> {
        self.traits().refusal
    }

    /// Its name on the command line, in the URL and in `--json`.
    pub fn name(self) -> &'static str {
        self.names().name
    }

    /// The weight formats it loads, widest first ([`Info::formats`]).
    pub fn formats(self) -> &'static [&'static str] {
        self.names().formats
    }

    /// Parses an engine as `--engine` takes it: a name or alias (any case), with an
    /// optional `@release` (`vllm@0.10`, `tgi@2.0`): the engine and the release's place
    /// in its [`Info::releases`] (`None`: the newest).
    pub fn parse(text: &str) -> Result<(EngineId, Option<usize>), EstimateError> {
        let t = text.trim().to_ascii_lowercase();
        let (name, release) = match t.split_once('@') {
            Some((n, v)) => (n, Some(v)),
            None => (t.as_str(), None),
        };
        let Some(engine) = find(name) else {
            // "use vllm (…), sglang (…), … or transformers", from each engine's hint.
            let mut list = String::new();
            for (i, n) in NAMES.iter().enumerate() {
                list.push_str(match i {
                    0 => "",
                    _ if i.saturating_add(1) == NAMES.len() => " or ",
                    _ => ", ",
                });
                list.push_str(n.hint);
            }
            return Err(EstimateError::invalid(
                "engine",
                format!("{text:?} is not an engine; use {list}"),
            ));
        };
        match (release, engine.names().release) {
            (None, _) => Ok((engine, None)),
            (Some(v), Some(parse)) => parse(v).map(|r| (engine, Some(r))),
            (Some(_), None) => Err(EstimateError::invalid(
                "engine",
                format!(
                    "{text:?}: one version of this engine's rules is carried (name it without @)"
                ),
            )),
        }
    }
}

impl std::fmt::Debug for EngineId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for EngineId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for EngineId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<EngineId, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        all()
            .find(|e| e.name() == text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown engine {text:?}")))
    }
}

/// The schema of an engine: one of the registry's names, each with its summary.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for EngineId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Engine".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let one_of: Vec<serde_json::Value> = ENGINES
            .iter()
            .map(|i| {
                serde_json::json!({
                    "description": i.summary,
                    "type": "string",
                    "const": i.name,
                })
            })
            .collect();
        schemars::json_schema!({
            "description": "A serving engine.",
            "oneOf": one_of,
        })
    }
}

/// The `engine` row: its choices are every engine's releases.
pub const ENGINE: Flag = Flag::new(
    field(
        "engine",
        FieldKind::Choice,
        "Engine",
        "",
        "Serving engine whose KV pool to predict (vllm: 0.29, Model Runner V2 with its CUDA-graph estimate; vllm@0.27, @0.19, @0.10, @0.8, @0.7, @0.6 (0.6.5 on), @0.6.4, sglang@0.5.0, tgi@2.0, @0.9, mlx@0.26: older rules); an encoder-only model: vllm (its pooling runner) or tei, their largest batch on the card",
    )
    .choices(&CHOICES),
    engine_name,
);

fn engine_name(_: &'static str, text: &str) -> Result<Value, EstimateError> {
    EngineId::parse(text).map(|_| Value::Text(text.trim().to_string()))
}

/// "every engine" (no engine: every one is shown), then each engine's releases.
const CHOICES: [(&str, &str); choice_count()] = choices();

#[allow(clippy::arithmetic_side_effects)] // evaluated by the compiler: an overflow fails the build
const fn choice_count() -> usize {
    let mut n = 1;
    let mut i = 0;
    while i < INFOS.len() {
        n += INFOS[i].releases.len();
        i += 1;
    }
    n
}

#[allow(clippy::arithmetic_side_effects)] // evaluated by the compiler
const fn choices() -> [(&'static str, &'static str); choice_count()] {
    let mut out = [("", "every engine"); choice_count()];
    let mut k = 1;
    let mut i = 0;
    while i < INFOS.len() {
        let mut j = 0;
        while j < INFOS[i].releases.len() {
            out[k] = INFOS[i].releases[j];
            k += 1;
            j += 1;
        }
        i += 1;
    }
    out
}

/// Whether two keys are the same (a `const` comparison).
#[allow(clippy::arithmetic_side_effects)] // evaluated by the compiler
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Whether the `j`th flag of the `i`th engine is a row no earlier engine (nor the
/// `engine`, `card` and `wired-limit-mb` rows) has.
#[allow(clippy::arithmetic_side_effects)] // evaluated by the compiler
const fn first_time(i: usize, j: usize) -> bool {
    let key = INFOS[i].flags[j].field.key;
    if same(key, ENGINE.field.key)
        || same(key, CARD.field.key)
        || same(key, WIRED_LIMIT_MB.field.key)
    {
        return false;
    }
    let mut a = 0;
    while a <= i {
        let flags = INFOS[a].flags;
        let end = if a == i { j } else { flags.len() };
        let mut b = 0;
        while b < end {
            if same(flags[b].field.key, key) {
                return false;
            }
            b += 1;
        }
        a += 1;
    }
    true
}

#[allow(clippy::arithmetic_side_effects)] // evaluated by the compiler
const fn field_count() -> usize {
    let mut n = 3;
    let mut i = 0;
    while i < INFOS.len() {
        let mut j = 0;
        while j < INFOS[i].flags.len() {
            if first_time(i, j) {
                n += 1;
            }
            j += 1;
        }
        i += 1;
    }
    n
}

#[allow(clippy::arithmetic_side_effects)] // evaluated by the compiler
const fn rows() -> [Flag; field_count()] {
    let mut out = [ENGINE; field_count()];
    out[1] = CARD;
    out[2] = WIRED_LIMIT_MB;
    let mut k = 3;
    let mut i = 0;
    while i < INFOS.len() {
        let mut j = 0;
        while j < INFOS[i].flags.len() {
            if first_time(i, j) {
                out[k] = *INFOS[i].flags[j];
                k += 1;
            }
            j += 1;
        }
        i += 1;
    }
    out
}

#[allow(clippy::arithmetic_side_effects)] // evaluated by the compiler
const fn fields_of(rows: &[Flag; field_count()]) -> [Field; field_count()] {
    let mut out = [ENGINE.field; field_count()];
    let mut k = 0;
    while k < rows.len() {
        out[k] = rows[k].field;
        k += 1;
    }
    out
}

const ROWS: [Flag; field_count()] = rows();

/// How each row of [`FIELDS`] reads a value, copied out of the rows when compiling
/// (so the page's first module links neither the engines' `Info` nor a second copy of
/// the fields).
static PARSERS: [Parse; field_count()] = parsers();

/// What a budget says when a row is given and the engine named does not read it
/// ([`Flag::unread`]), by row.
static UNREAD: [Option<&str>; field_count()] = unread_texts();

type Parse = fn(&'static str, &str) -> Result<Value, EstimateError>;

#[allow(clippy::arithmetic_side_effects)] // evaluated by the compiler
const fn parsers() -> [Parse; field_count()] {
    let mut out = [ENGINE.parse; field_count()];
    let mut k = 0;
    while k < ROWS.len() {
        out[k] = ROWS[k].parse;
        k += 1;
    }
    out
}

#[allow(clippy::arithmetic_side_effects)] // evaluated by the compiler
const fn unread_texts() -> [Option<&'static str>; field_count()] {
    let mut out = [None; field_count()];
    let mut k = 0;
    while k < ROWS.len() {
        out[k] = ROWS[k].unread;
        k += 1;
    }
    out
}

const TABLE: [Field; field_count()] = fields_of(&ROWS);

/// The field table's engine group: the `engine`, `card` and `wired-limit-mb` rows,
/// then each engine's
/// flags in registry order, a row shared by several engines once, where the first
/// reads it (the agent's flags, the page's form and URL keys).
pub static FIELDS: &[Field] = &TABLE;

/// The engine's keys ([`FIELDS`]: the flags without dashes, also the page's URL keys),
/// in table order.
pub fn engine_keys() -> impl Iterator<Item = &'static str> + Clone {
    FIELDS.iter().map(|f| f.key)
}

/// The engine group's field of `key`, if it is one.
pub fn field_of(key: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.key == key)
}

/// Whether `key` is one of the engine's keys ([`engine_keys`]).
pub fn is_engine_key(key: &str) -> bool {
    FIELDS.iter().any(|f| f.key == key)
}

/// The place of `key`'s row in [`FIELDS`].
fn row(key: &str) -> Option<usize> {
    FIELDS.iter().position(|f| f.key == key)
}

/// What a budget says when `key` is given and the engine named does not read it.
pub(super) fn unread(key: &str) -> Option<&'static str> {
    row(key).and_then(|i| UNREAD.get(i).copied().flatten())
}

/// Reads the engine `key=value` pairs; one error per bad field, valid fields kept.
/// Keys that are not engine keys are an error too (the caller routes them).
pub fn from_pairs<'a, I>(pairs: I) -> (EngineParams, Vec<EstimateError>)
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let mut p = EngineParams::default();
    let mut errors = Vec::new();
    for (key, value) in pairs {
        let row = row(key).and_then(|i| Some((FIELDS.get(i)?.key, PARSERS.get(i)?)));
        let r: Result<(), EstimateError> = match row {
            Some((k, _)) if k == ENGINE.key() => EngineId::parse(value).map(|(e, r)| {
                p.engine = Some(e);
                p.release = r;
            }),
            Some((k, _)) if k == CARD.key() => super::flags::resolve_cards(value)
                .map(|c| {
                    p.card = c.first().copied();
                    p.devices = if c.len() > 1 { c } else { Vec::new() };
                })
                .map_err(|why| EstimateError::invalid(CARD.key(), why)),
            Some((k, _)) if k == MAX_MODEL_LEN.key() && matches!(value.trim(), "auto" | "-1") => {
                p.max_model_len_auto = true;
                Ok(())
            }
            Some((k, _)) if k == MAX_MODEL_LEN.key() => positive(k, value).map(|v| {
                if let Value::Count(n) = v {
                    p.max_model_len = Some(n);
                }
            }),
            // A switch at its default is the absent key (every engine switch is off
            // unless given), so `is_empty` still says whether anything was asked.
            Some((k, parse)) => {
                parse(k, value).map(|v| p.set(k, Some(v).filter(|v| *v != Value::On(false))))
            }
            None => Err(EstimateError::invalid(
                "input",
                format!("unknown engine key {key:?}"),
            )),
        };
        if let Err(e) = r {
            errors.push(e);
        }
    }
    // Several cards are llama.cpp's `--tensor-split` over them: the other engines'
    // rules and the estimate judge one card (or `--gpus` copies of it).
    if !p.devices.is_empty() && !p.engine.is_some_and(EngineId::several_cards) {
        errors.push(EstimateError::invalid(
            CARD.key(),
            "several cards are judged under --engine llama.cpp (its --tensor-split over unequal GPUs) and --engine vllm (its pipeline stages, --pp); the other engines and the estimate judge one card, or --gpus copies of it",
        ));
    }
    // The wired limit is the Mac's capacity: applied to the card once both are read,
    // whichever came first.
    if let Some(mib) = p.count(WIRED_LIMIT_MB.key()) {
        let key = WIRED_LIMIT_MB.key();
        match p.card {
            Some(card) => match card.with_wired_limit(mib) {
                Ok(c) => p.card = Some(c),
                Err(why) => errors.push(EstimateError::invalid(key, why)),
            },
            None => errors.push(EstimateError::invalid(
                key,
                "is a Mac's: give --card naming one (m3-max-128gb, `gpumem-agent cards`)",
            )),
        }
    }
    (p, errors)
}

/// The engine flags among `pairs` (a page's or a workload's: every other key is
/// skipped), as [`from_pairs`] parses them.
pub fn from_pairs_among<'a, I>(pairs: I) -> (EngineParams, Vec<EstimateError>)
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    from_pairs(pairs.into_iter().filter(|(k, _)| is_engine_key(k)))
}
