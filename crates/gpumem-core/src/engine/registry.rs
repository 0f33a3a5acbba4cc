//! The registry: every engine, one line each ([`registry!`] below). From it come the
//! `--engine` names and releases, the field table's engine group ([`FIELDS`]: the
//! `engine` and `card` rows, then every engine's flags in registry order, each once),
//! the parser of the engine's pairs ([`from_pairs`]) and the rule a name runs. Nothing
//! else in gpumem learns an engine's name: the agent's `--engine` choices, the page's
//! select and the docs' lists are read from here.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::contract::{Engine, Info};
use super::flags::{
    BATCHED_TOKENS, CARD, EngineId, EngineParams, Flag, MAX_MODEL_LEN, Value, field, positive,
};
use super::pool::Draft;
use super::request::Ctx;
use super::{llama_cpp, sglang, tgi, transformers, vllm};
use crate::error::EstimateError;
use crate::fields::{Field, FieldKind};

/// Lists the engines: their [`Info`] in order ([`INFOS`]) and the dispatch from an
/// [`EngineId`] to its rule ([`rule_of`]), which only a budget links.
macro_rules! registry {
    ($($engine:ty),+ $(,)?) => {
        /// Every engine's [`Info`], in the registry's order.
        const INFOS: &[&Info] = &[$(&<$engine as Engine>::INFO),+];

        /// Runs the rule of `id`'s engine.
        pub(super) fn rule_of(id: EngineId, c: &Ctx) -> Result<Draft, EstimateError> {
            let rules: &[fn(&Ctx) -> Result<Draft, EstimateError>] =
                &[$(<$engine as Engine>::budget),+];
            match rules.get(usize::from(id.0)) {
                Some(rule) => rule(c),
                None => Err(EstimateError::invalid("engine", "not a registered engine")),
            }
        }
    };
}

// One line per engine, in the order `--help`, the page and the docs list them.
registry! {
    vllm::Vllm,
    sglang::Sglang,
    tgi::Tgi,
    llama_cpp::LlamaCpp,
    transformers::Transformers,
}

/// Every engine, in the registry's order.
pub static ENGINES: &[&Info] = INFOS;

/// Every engine, in the registry's order.
pub fn all() -> impl Iterator<Item = EngineId> + Clone {
    (0..ENGINES.len()).filter_map(|i| u8::try_from(i).ok().map(EngineId))
}

/// The engine `name` names (its name or an alias, any case), without a release.
pub fn find(name: &str) -> Option<EngineId> {
    let t = name.trim().to_ascii_lowercase();
    all().find(|e| e.info().name == t || e.info().aliases.contains(&t.as_str()))
}

impl EngineId {
    /// Who it is.
    pub fn info(self) -> &'static Info {
        ENGINES
            .get(usize::from(self.0))
            .copied()
            .unwrap_or(ENGINES[0])
    }

    /// Its name on the command line, in the URL and in `--json`.
    pub fn name(self) -> &'static str {
        self.info().name
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
            let hints: Vec<&str> = ENGINES.iter().map(|i| i.hint).collect();
            let list = match hints.split_last() {
                Some((last, [])) => (*last).to_string(),
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => String::new(),
            };
            return Err(EstimateError::invalid(
                "engine",
                format!("{text:?} is not an engine; use {list}"),
            ));
        };
        match (release, engine.info().release) {
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
        "Serving engine whose KV pool to predict (vllm: 0.27, Model Runner V2 or V1 with its CUDA-graph estimate; vllm@0.19, @0.10, @0.8, @0.7, @0.6, sglang@0.5.0, tgi@2.0, @0.9: older rules)",
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
/// `engine` and `card` rows) has.
#[allow(clippy::arithmetic_side_effects)] // evaluated by the compiler
const fn first_time(i: usize, j: usize) -> bool {
    let key = INFOS[i].flags[j].field.key;
    if same(key, ENGINE.field.key) || same(key, CARD.field.key) {
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
    let mut n = 2;
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
const fn fields() -> [Field; field_count()] {
    let mut out = [ENGINE.field; field_count()];
    out[1] = CARD.field;
    let mut k = 2;
    let mut i = 0;
    while i < INFOS.len() {
        let mut j = 0;
        while j < INFOS[i].flags.len() {
            if first_time(i, j) {
                out[k] = INFOS[i].flags[j].field;
                k += 1;
            }
            j += 1;
        }
        i += 1;
    }
    out
}

const TABLE: [Field; field_count()] = fields();

/// The field table's engine group: the `engine` and `card` rows, then each engine's
/// flags in registry order, a row shared by several engines once, where the first
/// reads it (the agent's flags, the page's form and URL keys).
pub static FIELDS: &[Field] = &TABLE;

/// The engine's keys ([`FIELDS`]: the flags without dashes, also the page's URL keys),
/// in table order.
pub fn engine_keys() -> impl Iterator<Item = &'static str> + Clone {
    FIELDS.iter().map(|f| f.key)
}

/// Whether `key` is one of the engine's keys ([`engine_keys`]).
pub fn is_engine_key(key: &str) -> bool {
    FIELDS.iter().any(|f| f.key == key)
}

/// The row of `key`: `engine`, `card`, or a flag some engine reads.
pub fn flag(key: &str) -> Option<&'static Flag> {
    [&ENGINE, &CARD, &MAX_MODEL_LEN, &BATCHED_TOKENS]
        .into_iter()
        .chain(ENGINES.iter().flat_map(|i| i.flags.iter().copied()))
        .find(|f| f.key() == key)
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
        let r: Result<(), EstimateError> = match flag(key) {
            Some(f) if f.key() == ENGINE.key() => EngineId::parse(value).map(|(e, r)| {
                p.engine = Some(e);
                p.release = r;
            }),
            Some(f) if f.key() == CARD.key() => crate::catalogue::resolve(value)
                .map(|c| p.card = Some(c))
                .map_err(|why| EstimateError::invalid(CARD.key(), why)),
            Some(f) if f.key() == MAX_MODEL_LEN.key() && matches!(value.trim(), "auto" | "-1") => {
                p.max_model_len_auto = true;
                Ok(())
            }
            Some(f) if f.key() == MAX_MODEL_LEN.key() => positive(f.key(), value).map(|v| {
                if let Value::Count(n) = v {
                    p.max_model_len = Some(n);
                }
            }),
            // A switch at its default is the absent key (every engine switch is off
            // unless given), so `is_empty` still says whether anything was asked.
            Some(f) => (f.parse)(f.key(), value).map(|v| {
                if v == Value::On(false) {
                    p.flags.remove(f.key());
                } else {
                    p.flags.insert(f.key(), v);
                }
            }),
            None => Err(EstimateError::invalid(
                "input",
                format!("unknown engine key {key:?}"),
            )),
        };
        if let Err(e) = r {
            errors.push(e);
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
