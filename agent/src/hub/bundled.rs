//! The bundled catalogue: popular models' published `config.json`, compiled into the
//! agent (`agent/models/*.json`, embedded by `build.rs`), so `estimate --model ID` and
//! `trace --model ID` answer without a network.
//!
//! Each file is one model: `{"id", "source", "read", "published_parameters"?,
//! "config"}` — the Hub id, where the config was read (a public copy: a URL, or a
//! repository and path), the day it was read, the checkpoint's parameter count where a
//! source states it, and the config.json itself, unedited. A bundled config gives the
//! architecture only: the weights are then counted from it, not from the checkpoint's
//! headers, which only the Hub has (`--revision` reads them).

use std::sync::OnceLock;

use serde::Deserialize;

include!(concat!(env!("OUT_DIR"), "/bundled_models.rs"));

/// One bundled model.
#[derive(Debug)]
pub struct Bundled {
    /// The Hub id, as the Hub spells it (`meta-llama/Llama-3.1-8B`).
    pub id: String,
    /// Where the config.json was read: a URL, or `owner/repo path` of a public copy.
    pub source: String,
    /// The day it was read (YYYY-MM-DD).
    pub read: String,
    /// The checkpoint's parameter count, where a source states it.
    pub published_parameters: Option<u64>,
    /// The config.json's text.
    pub config: String,
}

/// A catalogue file as written (every key required but the published count).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    id: String,
    source: String,
    read: String,
    #[serde(default)]
    published_parameters: Option<u64>,
    config: serde_json::Value,
}

/// Reads one catalogue file; the errors name what is wrong, for the tests.
fn parse(file: &str, text: &str) -> Result<Bundled, String> {
    let e: Entry = serde_json::from_str(text).map_err(|e| format!("{file}: {e}"))?;
    if !e.config.is_object() {
        return Err(format!("{file}: config is not a JSON object"));
    }
    let config = serde_json::to_string_pretty(&e.config).map_err(|e| format!("{file}: {e}"))?;
    Ok(Bundled {
        id: e.id,
        source: e.source,
        read: e.read,
        published_parameters: e.published_parameters,
        config,
    })
}

/// Every catalogue file read, with the error of each that cannot be (none, as the
/// tests keep it).
fn read_all() -> (Vec<Bundled>, Vec<String>) {
    let mut models = Vec::with_capacity(FILES.len());
    let mut errors = Vec::new();
    for (file, text) in FILES {
        match parse(file, text) {
            Ok(b) => models.push(b),
            Err(e) => errors.push(e),
        }
    }
    models.sort_by_key(|b| b.id.to_ascii_lowercase());
    (models, errors)
}

/// The catalogue, sorted by id (case-insensitive); read once.
pub fn all() -> &'static [Bundled] {
    static MODELS: OnceLock<Vec<Bundled>> = OnceLock::new();
    MODELS.get_or_init(|| read_all().0)
}

/// The bundled model whose id is `id`, compared without case (the Hub's ids are
/// case-insensitive too).
pub fn find(id: &str) -> Option<&'static Bundled> {
    all().iter().find(|b| b.id.eq_ignore_ascii_case(id))
}

/// Up to `n` bundled ids closest to `id`, closest first: the edit distance of the whole
/// id or of its name alone (a wrong or missing organisation), within a third of the
/// name's length; an id containing the name comes first.
pub fn closest(id: &str, n: usize) -> Vec<&'static Bundled> {
    let wanted = id.to_ascii_lowercase();
    let wanted_name = wanted.rsplit('/').next().unwrap_or(&wanted).to_owned();
    let limit = (wanted_name.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, &'static Bundled)> = all()
        .iter()
        .filter_map(|b| {
            let have = b.id.to_ascii_lowercase();
            let have_name = have.rsplit('/').next().unwrap_or(&have);
            if !wanted_name.is_empty() && have_name.contains(&wanted_name) {
                return Some((0, b));
            }
            let d = distance(&wanted, &have).min(distance(&wanted_name, have_name));
            (d <= limit).then_some((d, b))
        })
        .collect();
    scored.sort_by_key(|(d, b)| (*d, b.id.len(), b.id.to_ascii_lowercase()));
    scored.into_iter().take(n).map(|(_, b)| b).collect()
}

/// Levenshtein distance over characters (ids are short: the quadratic cost is nothing).
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// What to tell a user whose `--model ID` could not be read from the Hub: the bundled
/// ids close to it, or where the list is.
pub fn hint(id: &str) -> String {
    let near = closest(id, 5);
    if near.is_empty() {
        format!(
            "{} models are bundled for use without a network: `gpumem-agent models` lists them",
            all().len()
        )
    } else {
        let ids: Vec<&str> = near.iter().map(|b| b.id.as_str()).collect();
        format!(
            "bundled (no network needed): {}; `gpumem-agent models` lists all {}",
            ids.join(", "),
            all().len()
        )
    }
}

/// Where a bundled config.json comes from, in one phrase.
pub fn provenance(b: &Bundled) -> String {
    format!(
        "the bundled copy of {} (source {}, read {})",
        b.id, b.source, b.read
    )
}

/// The assumption an estimate from a bundled config carries.
pub fn assumption(b: &Bundled) -> String {
    format!(
        "config.json: {}; weights counted from the config, not the checkpoint's headers; `--revision main` reads the Hub",
        provenance(b)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumem_core::import::config::parse_config;

    #[test]
    fn every_file_reads_names_its_id_and_has_a_source_and_a_day() {
        let (models, errors) = read_all();
        assert!(errors.is_empty(), "{errors:#?}");
        assert!(models.len() >= 100, "{} bundled models", models.len());
        for (file, text) in FILES {
            let b = parse(file, text).expect("read");
            let wanted = format!("{}.json", b.id.replace('/', "--"));
            assert_eq!(*file, wanted, "a file is named after its id");
            assert!(
                gpumem_core::import::hub::check_repo_id(&b.id).is_ok(),
                "{file}: {} is not a Hub id",
                b.id
            );
            assert!(b.source.trim().len() > 10, "{file}: no source");
            let day = b.read.as_bytes();
            assert!(
                day.len() == 10
                    && day[4] == b'-'
                    && day[7] == b'-'
                    && b.read.replace('-', "").chars().all(|c| c.is_ascii_digit()),
                "{file}: read {:?} is not YYYY-MM-DD",
                b.read
            );
        }
    }

    #[test]
    fn every_config_parses() {
        for b in all() {
            parse_config(&b.config).unwrap_or_else(|e| panic!("{}: {e}", b.id));
        }
    }

    #[test]
    fn ids_are_unique_without_case() {
        let mut ids: Vec<String> = all().iter().map(|b| b.id.to_ascii_lowercase()).collect();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n, "an id is bundled twice");
    }

    #[test]
    fn find_ignores_case_and_closest_forgives_typos() {
        let b = find("META-LLAMA/llama-3.1-8b").expect("bundled");
        assert_eq!(b.id, "meta-llama/Llama-3.1-8B");
        assert!(find("meta-llama/Llama-3.1-8").is_none(), "exact ids only");
        let near: Vec<&str> = closest("meta-llama/Lama-3.1-8B", 3)
            .iter()
            .map(|b| b.id.as_str())
            .collect();
        assert_eq!(near.first(), Some(&"meta-llama/Llama-3.1-8B"), "{near:?}");
        let near: Vec<&str> = closest("someone/Llama-3.1-8B", 3)
            .iter()
            .map(|b| b.id.as_str())
            .collect();
        assert!(near.contains(&"meta-llama/Llama-3.1-8B"), "{near:?}");
        assert!(closest("zz/qqqqqqqqqqqqqq", 3).is_empty());
    }

    #[test]
    fn distance_counts_edits() {
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("same", "same"), 0);
    }
}
