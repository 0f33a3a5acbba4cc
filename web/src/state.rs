//! The page's state: the text of every input, exactly as typed, keyed by the
//! field table ([`gpumem_core::inputs`]: the CLI flags without their
//! dashes, the engine's included) plus a few page-only keys for the two extra
//! workloads and the sweep. Every key is a URL key.
//!
//! Nothing here parses or estimates: raw text goes in, and the [`crate::compute`]
//! memos turn it into results. Keeping the raw text is what lets an invalid value
//! stay on screen (and in the URL) beside its error instead of being lost.

use std::collections::BTreeMap;
use std::sync::Arc;

use gpumem_core::engine::engine_keys;
use gpumem_core::import::TensorSummary;
use gpumem_core::inputs::{field, fields};
use gpumem_core::params::keys;
use gpumem_core::presets::shape_keys;
use leptos::prelude::*;

/// Keys that exist only in the page: the long and near-limit workloads' dimensions
/// and the dimension the sweep varies. The CLI estimates one workload, so these
/// have no flag. (The card the page judges against is the engine's `card` field.)
pub const PAGE_KEYS: &[&str] = &[
    "long-sequences",
    "long-context",
    "long-generate",
    "limit-sequences",
    "limit-context",
    "limit-generate",
    "vary",
    // The Hub lookup: a link that names a model looks it up on opening.
    "model",
    "revision",
    "model-file",
    // The imported weights' bytes: a link made with an import says so, and the
    // tensors this browser holds count for it only if they are those.
    "tensors",
];

/// Every key the page keeps and writes to its URL: the field table's, then [`PAGE_KEYS`].
pub fn url_keys() -> impl Iterator<Item = &'static str> + Clone {
    fields().map(|f| f.key).chain(PAGE_KEYS.iter().copied())
}

/// Keys that belong to the parameter-count mode only.
pub const COUNT_KEYS: &[&str] = &["parameters"];

/// The architecture keys a parameter count keeps: the KV cache's shape (the model
/// shown's, shown beside the count), without which no context has a cache to size.
pub const KV_SHAPE_KEYS: [&str; 3] = ["layers", "kv-heads", "head-dim"];

/// Keys that belong to the architecture mode only (the shape's architecture groups,
/// without the keys that describe the cache).
pub fn is_arch_key(key: &str) -> bool {
    field(key).is_some_and(|f| f.group.is_arch())
}

/// How the model is described.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `parameters` (+ `bits`/`format`): the classic `estimate --parameters --bits`.
    Count,
    /// The decoder-only shape.
    Arch,
}

/// Tensors counted from file headers. Not expressible in a URL: kept in memory
/// and local storage only, and the page says so.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Imported {
    /// The files read (names only).
    pub files: Vec<String>,
    /// Their tensors, merged.
    pub summary: TensorSummary,
}

/// Every input signal. Cheap to clone (an `Arc` and signal handles).
#[derive(Clone)]
pub struct Form {
    values: Arc<BTreeMap<&'static str, RwSignal<String>>>,
    /// Parameter-count or architecture mode.
    pub mode: RwSignal<Mode>,
    /// Tensors imported from model files, if any.
    pub imported: RwSignal<Option<Imported>>,
    /// Which workload the detailed breakdown shows (0 typical, 1 long, 2 near-limit).
    pub focus: RwSignal<usize>,
    /// Why the last model lookup failed, shown at the top of the answer until a model
    /// is set again (a preset, an import, a lookup that succeeds).
    pub lookup_failed: RwSignal<Option<String>>,
}

impl Form {
    /// A form holding `pairs` (unknown keys are kept out; the caller reports them).
    pub fn new(pairs: &[(String, String)], imported: Option<Imported>) -> Form {
        // Inserted one by one: `collect` into a map sorts, and every sort instance
        // costs the wasm kilobytes.
        let mut values = BTreeMap::new();
        for k in url_keys() {
            let v = pairs
                .iter()
                .rev()
                .find(|(pk, _)| pk == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            values.insert(k, RwSignal::new(v));
        }
        let want = values
            .get("tensors")
            .map(|s| s.get_untracked())
            .unwrap_or_default();
        let theirs = |i: &Imported| want == i.summary.total.bytes.to_string();
        let missing = (!want.is_empty() && !imported.as_ref().is_some_and(theirs)).then(|| {
            format!("This link was made with imported weights of {want} B that this browser does not hold: import the same files again for its figures.")
        });
        Form {
            values: Arc::new(values),
            mode: RwSignal::new(mode_of(pairs)),
            imported: RwSignal::new(imported.filter(theirs)),
            focus: RwSignal::new(0),
            lookup_failed: RwSignal::new(missing),
        }
    }

    /// The signal of one key. Every key of [`url_keys`] exists.
    pub fn sig(&self, key: &str) -> RwSignal<String> {
        match self.values.get(key) {
            Some(s) => *s,
            // A programming error (a view naming a key outside the vocabulary):
            // a detached signal keeps the page alive.
            None => RwSignal::new(String::new()),
        }
    }

    /// Whether a key takes part in the estimate in the current mode.
    pub fn active(mode: Mode, key: &str) -> bool {
        match mode {
            Mode::Count => !is_arch_key(key) || KV_SHAPE_KEYS.contains(&key),
            Mode::Arch => !COUNT_KEYS.contains(&key),
        }
    }

    /// The CLI pairs that take part in the estimate: active, non-empty, in
    /// table order — exactly what `gpumem-agent estimate` would get as flags.
    pub fn cli_pairs(&self) -> Vec<(&'static str, String)> {
        let mode = self.mode.get();
        self.set_pairs(keys().filter(|k| Form::active(mode, k)))
    }

    /// The other pairs that are set: the engine's keys, then the page-only keys.
    pub fn page_pairs(&self) -> Vec<(&'static str, String)> {
        self.set_pairs(engine_keys().chain(PAGE_KEYS.iter().copied()))
    }

    /// The non-empty values of `keys`, trimmed.
    fn set_pairs(&self, keys: impl Iterator<Item = &'static str>) -> Vec<(&'static str, String)> {
        keys.filter_map(|k| {
            let v = self.sig(k).get();
            let t = v.trim();
            (!t.is_empty()).then(|| (k, t.to_string()))
        })
        .collect()
    }

    /// Replaces every input with `pairs` (an imported sheet): keys not in `pairs` are
    /// cleared, so nothing of the previous state survives; the mode follows the keys.
    pub fn replace_all(&self, pairs: &[(String, String)]) {
        for k in url_keys() {
            let v = pairs
                .iter()
                .rev()
                .find(|(pk, _)| pk == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            self.sig(k).set(v);
        }
        self.mode.set(mode_of(pairs));
        self.imported.set(None);
    }

    /// Replaces the model's shape with `pairs` (a preset or an imported
    /// config.json): every shape key not in `pairs` is cleared so nothing of the
    /// previous model survives.
    pub fn set_shape(&self, pairs: &[(&str, String)]) {
        self.lookup_failed.set(None);
        for k in shape_keys() {
            let v = pairs
                .iter()
                .find(|(pk, _)| *pk == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            self.sig(k).set(v);
        }
        self.mode.set(Mode::Arch);
    }
}

/// The mode a set of pairs describes: architecture unless only a parameter count is set.
fn mode_of(pairs: &[(String, String)]) -> Mode {
    let arch = pairs
        .iter()
        .any(|(k, v)| is_arch_key(k) && !v.trim().is_empty());
    let count = pairs
        .iter()
        .any(|(k, v)| COUNT_KEYS.contains(&k.as_str()) && !v.trim().is_empty());
    if arch || !count {
        Mode::Arch
    } else {
        Mode::Count
    }
}

/// A link's pairs over the defaults ([`default_pairs`]): a link that sets only a
/// workload, a format or a card (`?context=8192`, `?card=4090`) keeps the default model
/// and workloads, its own keys winning; a link that describes a model (a shape key, a
/// parameter count, a Hub `model`) is taken as it is, as the page writes it.
pub fn over_defaults(link: Vec<(String, String)>) -> Vec<(String, String)> {
    let own_model = link.iter().any(|(k, v)| {
        !v.trim().is_empty()
            && (shape_keys().any(|s| s == k) || COUNT_KEYS.contains(&k.as_str()) || k == "model")
    });
    if own_model {
        return link;
    }
    let mut pairs: Vec<(String, String)> = default_pairs()
        .into_iter()
        .filter(|(k, _)| !link.iter().any(|(l, _)| l == k))
        .collect();
    pairs.extend(link);
    pairs
}

/// The state a first visit starts from: Llama 3.1 8B in bf16, a 4 GiB reserve, and
/// three workloads that differ by context (method §1: typical, long, near-limit).
pub fn default_pairs() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = gpumem_core::presets::find("llama-3.1-8b")
        .map(|p| {
            p.pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .unwrap_or_default();
    for (k, val) in [
        ("context", "4096"),
        ("generate", "512"),
        ("long-context", crate::compute::LONGER_CONTEXTS[0].1),
        ("limit-context", crate::compute::LONGER_CONTEXTS[1].1),
        ("card", "h100-sxm-80gb"),
    ] {
        v.push((k.to_string(), val.to_string()));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumem_core::engine::is_engine_key;

    #[test]
    fn the_url_keys_are_the_table_and_the_page_keys_once_each() {
        let url: Vec<&str> = url_keys().collect();
        for (i, k) in url.iter().enumerate() {
            assert!(!url[..i].contains(k), "{k} twice");
        }
        assert_eq!(url.len(), fields().count() + PAGE_KEYS.len());
        for f in fields() {
            assert!(url.contains(&f.key), "{} is not a URL key", f.key);
        }
        for k in PAGE_KEYS {
            assert!(field(k).is_none(), "{k} is a page key and a field");
        }
    }

    #[test]
    fn a_link_merges_over_the_default_model() {
        let pairs = |q: &str| over_defaults(crate::query::parse(q));
        let get = |p: &[(String, String)], k: &str| {
            p.iter()
                .rev()
                .find(|(pk, _)| pk == k)
                .map(|(_, v)| v.clone())
        };
        // A workload alone keeps Llama 3.1 8B's shape.
        let p = pairs("?context=8192");
        assert_eq!(get(&p, "context").as_deref(), Some("8192"));
        assert_eq!(get(&p, "layers").as_deref(), Some("32"));
        assert_eq!(get(&p, "card").as_deref(), Some("h100-sxm-80gb"));
        assert_eq!(Form::new(&p, None).mode.get_untracked(), Mode::Arch);
        // A model of its own: the link as it is, never mixed with the default.
        let p = pairs("?parameters=7e9&card=t4");
        assert_eq!(get(&p, "layers"), None);
        assert_eq!(get(&p, "context"), None);
        assert_eq!(get(&p, "card").as_deref(), Some("t4"));
        assert_eq!(Form::new(&p, None).mode.get_untracked(), Mode::Count);
        let p = pairs("?layers=2&hidden=64&heads=2&vocab=10&intermediate=128");
        assert_eq!(get(&p, "layers").as_deref(), Some("2"));
        assert_eq!(get(&p, "kv-heads"), None);
        let p = pairs("?model=Qwen/Qwen2.5-0.5B");
        assert_eq!(get(&p, "layers"), None);
    }

    #[test]
    fn engine_keys_travel_in_the_page_pairs() {
        let typed = [
            ("layers", "32"),
            ("engine", "vllm"),
            ("card", "h100-sxm-80gb"),
            ("gpu-memory-utilization", "0.85"),
            ("max-model-len", "16000"),
            ("long-context", "32768"),
        ];
        let pairs: Vec<(String, String)> = typed
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let form = Form::new(&pairs, None);
        let cli = form.cli_pairs();
        let page = form.page_pairs();
        // The estimate's keys go to the estimate (and the CLI), the engine's and the
        // page's to the rest of the link; together they are everything typed.
        assert!(cli.iter().all(|(k, _)| !is_engine_key(k)));
        assert!(page.iter().filter(|(k, _)| is_engine_key(k)).count() == 4);
        let mut all: Vec<(&str, &str)> = cli
            .iter()
            .chain(&page)
            .map(|(k, v)| (*k, v.as_str()))
            .collect();
        all.sort();
        let mut want = typed.to_vec();
        want.sort();
        assert_eq!(all, want);
        // …and come back from the query string the page writes.
        let q = crate::query::build(all.iter().copied());
        let again = Form::new(&crate::query::parse(&q), None);
        assert_eq!(again.page_pairs(), page);
    }
}
