//! Which files of a repository hold its weights: a file the user named, the shards of
//! `model.safetensors.index.json`, `model.safetensors`, a complete shard set, Mistral's
//! `consolidated` files, or the one GGUF model — a single file or a split set — and
//! the check of a split set's headers once read.
//!
//! Split GGUF models follow llama.cpp's `gguf-split` convention (github.com/ggml-org/
//! llama.cpp `src/llama.cpp` `llama_split_path`: `"%s-%05d-of-%05d.gguf"` with the
//! split's number from 1; `tools/gguf-split/gguf-split.cpp` writes `split.no` (from
//! 0), `split.count` and `split.tensors.count` into each file, keys named in
//! `src/llama-arch.cpp`): every file is a whole GGUF file whose header holds its share
//! of the tensors, so a split model is one choice, read and summed whole.

#![deny(clippy::arithmetic_side_effects)]

use std::collections::BTreeSet;

use serde::Deserialize;

use super::ids::check_file;
use super::listing::RepoFile;
use super::{HubError, NAMED_IN_ERRORS, SINGLE_FILE, bounded};
use crate::import::gguf::{self, GgufHeader};
use crate::import::read_policy::Header;

/// Most files of one split GGUF model (`-of-NNNNN` above this is not read as a split;
/// real splits hold tens of files).
const MAX_SPLIT_FILES: u64 = 1_000;
const GGUF_EXT: &str = ".gguf";

/// The files that hold a checkpoint's weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightFiles {
    /// One or more safetensors files, read and summed (shards in name order).
    Safetensors(Vec<RepoFile>),
    /// One GGUF model: a single file, or every file of a split set in split order,
    /// read and summed (then checked by [`check_split`]).
    Gguf(Vec<RepoFile>),
}

impl WeightFiles {
    /// The chosen files, in reading order.
    pub fn files(&self) -> Vec<&RepoFile> {
        match self {
            WeightFiles::Safetensors(v) | WeightFiles::Gguf(v) => v.iter().collect(),
        }
    }

    /// The chosen files' paths, in reading order.
    pub fn paths(&self) -> Vec<String> {
        self.files().into_iter().map(|f| f.path.clone()).collect()
    }
}

/// One GGUF model a repository offers: a single file, or the files of one split set
/// (`{prefix}-00001-of-00003.gguf` …, see the module's words on `gguf-split`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufChoice {
    /// The name it goes by: the file, or the set's first file.
    pub name: String,
    /// The set's files the listing has, in split order (the one file when unsplit).
    pub files: Vec<RepoFile>,
    /// The first [`NAMED_IN_ERRORS`] of the set's files the listing lacks, in split
    /// order (empty when complete): a set may claim a thousand parts, and only the
    /// names a message shows are made.
    pub missing: Vec<String>,
    /// How many of the set's files the listing lacks.
    pub missing_count: usize,
}

impl GgufChoice {
    /// The listed files' bytes together (for display; saturating).
    pub fn size(&self) -> u64 {
        self.files
            .iter()
            .fold(0u64, |a, f| a.saturating_add(f.size))
    }

    /// Files the set has when complete.
    pub fn count(&self) -> usize {
        self.files.len().saturating_add(self.missing_count)
    }

    pub(super) fn is_split(&self) -> bool {
        numbered(&self.name, GGUF_EXT).is_some()
    }
}

/// Read as JSON's own map: a map type of its own (and its set of counts) would add
/// kilobytes to the page's lookup module.
#[derive(Deserialize)]
struct ShardIndex {
    weight_map: serde_json::Map<String, serde_json::Value>,
}

fn lower(path: &str) -> String {
    path.to_ascii_lowercase()
}

pub(super) fn is_gguf(path: &str) -> bool {
    lower(path).ends_with(".gguf")
}

fn is_safetensors(path: &str) -> bool {
    lower(path).ends_with(".safetensors")
}

/// The last path segment.
fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A numbered part's name, `{prefix}-NNNNN-of-MMMMM{ext}`, taken apart.
struct Numbered<'a> {
    /// Everything before `-NNNNN` (folders included).
    prefix: &'a str,
    /// NNNNN, from 1.
    no: u64,
    /// How many digits NNNNN is written with.
    width: usize,
    /// MMMMM as written.
    of: &'a str,
    /// MMMMM.
    count: u64,
    /// The extension as written (`.gguf`, `.GGUF`…).
    ext: &'a str,
}

impl Numbered<'_> {
    /// The name of part `no` of the same set.
    fn part(&self, no: u64) -> String {
        format!(
            "{}-{no:0width$}-of-{}{}",
            self.prefix,
            self.of,
            self.ext,
            width = self.width
        )
    }
}

/// `{prefix}-NNNNN-of-MMMMM{ext}` (`ext` matched in any case), 1 ≤ NNNNN ≤ MMMMM ≤
/// [`MAX_SPLIT_FILES`]: `transformers`' shard names (`model-00001-of-00004.safetensors`),
/// Mistral's (`consolidated-00001-of-00002`) and `gguf-split`'s.
fn numbered<'a>(path: &'a str, ext: &str) -> Option<Numbered<'a>> {
    let cut = path.len().checked_sub(ext.len())?;
    let (stem, found_ext) = (path.get(..cut)?, path.get(cut..)?);
    if !found_ext.eq_ignore_ascii_case(ext) {
        return None;
    }
    let (rest, of) = stem.rsplit_once("-of-")?;
    let (prefix, number) = rest.rsplit_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.len() <= 12 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(number) || !digits(of) || base_name(prefix).is_empty() {
        return None;
    }
    let (no, count): (u64, u64) = (number.parse().ok()?, of.parse().ok()?);
    (1..=count).contains(&no).then_some(())?;
    (count <= MAX_SPLIT_FILES).then_some(Numbered {
        prefix,
        no,
        width: number.len(),
        of,
        count,
        ext: found_ext,
    })
}

/// `{stem}-NNNNN-of-MMMMM.safetensors` → (stem, MMMMM).
fn shard_of(path: &str) -> Option<(&str, u64)> {
    numbered(base_name(path), ".safetensors").map(|n| (n.prefix, n.count))
}

/// The name of the GGUF model `path` belongs to: its split set's first file, or the
/// file itself when it is not a split part.
fn gguf_model_name(path: &str) -> String {
    numbered(path, GGUF_EXT).map_or_else(|| path.to_string(), |n| n.part(1))
}

/// The GGUF models of a listing (vision projectors, `mmproj*.gguf`, set aside): each
/// split set once, with the parts it lacks; in name order. Linear after one sort (a
/// hostile listing of 160 000 one-part sets costs a sort, not 160 000² comparisons),
/// and a set's missing parts are counted, only the first [`NAMED_IN_ERRORS`] named.
///
/// The sort is [`by_path`]'s, on stand-in entries whose path is the sort key (model
/// name, then part number) and whose size is the file's place in the listing: the
/// page's lookup module pays for every sort and container instantiated, and this one
/// is already there.
fn gguf_choices(tree: &[RepoFile]) -> Vec<GgufChoice> {
    let ggufs: Vec<&RepoFile> = tree
        .iter()
        .filter(|f| is_gguf(&f.path) && !lower(base_name(&f.path)).starts_with("mmproj"))
        .collect();
    let mut keys: Vec<RepoFile> = Vec::new();
    for (place, f) in (0u64..).zip(&ggufs) {
        let no = numbered(&f.path, GGUF_EXT).map_or(0, |n| n.no);
        keys.push(RepoFile {
            path: format!("{}\u{0}{no:020}", gguf_model_name(&f.path)),
            size: place,
        });
    }
    by_path(&mut keys);
    let mut out: Vec<GgufChoice> = Vec::new();
    let mut last_key = "";
    for key in &keys {
        let Some(f) = usize::try_from(key.size).ok().and_then(|i| ggufs.get(i)) else {
            continue;
        };
        // A part listed twice (the same path on two pages) counts once.
        if key.path == last_key {
            continue;
        }
        last_key = &key.path;
        let name = gguf_model_name(&f.path);
        match out.last_mut() {
            Some(set) if set.name == name => set.files.push((*f).clone()),
            _ => out.push(GgufChoice {
                name,
                files: vec![(*f).clone()],
                missing: Vec::new(),
                missing_count: 0,
            }),
        }
    }
    for set in &mut out {
        let Some(template) = set.files.first().and_then(|f| numbered(&f.path, GGUF_EXT)) else {
            continue;
        };
        let count = usize::try_from(template.count).unwrap_or(usize::MAX);
        set.missing_count = count.saturating_sub(set.files.len());
        // The first missing parts' names: the numbers below the count that no listed
        // part has (the parts are in order, so one pass).
        let mut listed = set.files.iter().filter_map(|f| numbered(&f.path, GGUF_EXT));
        let mut have = listed.next();
        for no in 1..=template.count {
            if set.missing.len() >= NAMED_IN_ERRORS {
                break;
            }
            if have.as_ref().is_some_and(|n| n.no == no) {
                have = listed.next();
            } else {
                set.missing.push(template.part(no));
            }
        }
    }
    out
}

/// A GGUF choice as the files to read, or why it cannot be read.
fn take_gguf(choice: GgufChoice) -> Result<WeightFiles, HubError> {
    if choice.missing_count > 0 {
        return Err(HubError::IncompleteSplit(choice));
    }
    for f in &choice.files {
        check_file(&f.path)?;
    }
    Ok(WeightFiles::Gguf(choice.files))
}

/// The files of the split GGUF set `path` belongs to, in split order (just `path` for
/// an unsplit file) — for a host without the listing, which learns from the name alone
/// which files a split model needs.
pub fn split_set_names(path: &str) -> Vec<String> {
    match numbered(path, GGUF_EXT) {
        Some(n) => (1..=n.count).map(|no| n.part(no)).collect(),
        None => vec![path.to_string()],
    }
}

/// [`check_split`] on the headers a lookup read (in the order of `paths`): a model of
/// safetensors files has nothing to check. The one call of the agent and the page.
pub fn check_read_split(paths: &[String], headers: &[Header]) -> Result<(), HubError> {
    let ggufs: Vec<&GgufHeader> = headers
        .iter()
        .filter_map(|h| match h {
            Header::Gguf(g) => Some(g.as_ref()),
            Header::Safetensors(_) => None,
        })
        .collect();
    if ggufs.is_empty() {
        return Ok(());
    }
    check_split(paths, &ggufs)
}

/// Checks the headers of a GGUF model's files, read in the order of `paths`, against
/// the set they were read as: where a header carries them, `split.count` must be the
/// number of files, `split.no` the file's place (from 0) and `split.tensors.count`
/// the tensors of all the headers together — what llama.cpp's loader requires of a
/// split model (`src/llama-model-loader.cpp`). A file without the keys passes.
pub fn check_split(paths: &[String], headers: &[&GgufHeader]) -> Result<(), HubError> {
    let mismatch = |file: &str, reason: String| HubError::SplitMismatch {
        file: file.to_string(),
        reason,
    };
    let first = paths.first().map_or("", String::as_str);
    if paths.len() != headers.len() {
        return Err(mismatch(
            first,
            format!("{} files but {} headers read", paths.len(), headers.len()),
        ));
    }
    let files = u64::try_from(paths.len()).unwrap_or(u64::MAX);
    let tensors = headers
        .iter()
        .try_fold(0u64, |a, h| a.checked_add(h.tensors.total.tensors))
        .ok_or_else(|| mismatch(first, "too many tensors to count".to_string()))?;
    for ((path, h), place) in paths.iter().zip(headers).zip(0u64..) {
        for (key, want) in [
            (gguf::SPLIT_COUNT, files),
            (gguf::SPLIT_NO, place),
            (gguf::SPLIT_TENSORS_COUNT, tensors),
        ] {
            if let Some(said) = h.number(key)
                && said != want
            {
                return Err(mismatch(
                    path,
                    format!(
                        "its header says {key} = {said}, not {want} (read as file {} of {files}, {tensors} tensors in all)",
                        place.saturating_add(1)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A complete set of `{prefix}-NNNNN-of-MMMMM.safetensors` shards at the top level,
/// for a checkpoint that ships its shards without an index.
fn shard_set<'a>(tree: &'a [RepoFile], prefix: &str) -> Option<Vec<&'a RepoFile>> {
    let shards: Vec<&RepoFile> = tree
        .iter()
        .filter(|f| !f.path.contains('/'))
        .filter(|f| shard_of(&f.path).is_some_and(|(p, _)| p == prefix))
        .collect();
    let mut counts = shards
        .iter()
        .filter_map(|f| shard_of(&f.path).map(|(_, n)| n));
    let first = counts.next();
    let same = counts.all(|n| Some(n) == first);
    match first {
        Some(n) if same && u64::try_from(shards.len()).ok() == Some(n) => Some(shards),
        _ => None,
    }
}

/// Sorts files by path (one sort for every list here).
fn by_path(files: &mut [RepoFile]) {
    files.sort_by(|a, b| a.path.cmp(&b.path));
}

fn checked(files: Vec<&RepoFile>) -> Result<Vec<RepoFile>, HubError> {
    let mut out: Vec<RepoFile> = files.into_iter().cloned().collect();
    by_path(&mut out);
    for f in &out {
        check_file(&f.path)?;
    }
    Ok(out)
}

/// Chooses the weight files: `requested` (a file name the user gave, must be in the
/// tree) wins; else the shards named by `model.safetensors.index.json`'s `weight_map`
/// (its text given as `index`, when present, sizes from the tree), else
/// `model.safetensors`, else a complete set of `model-NNNNN-of-MMMMM.safetensors`
/// shards, else Mistral's `consolidated.safetensors` (or its shards), else exactly one
/// GGUF model (vision projectors, `mmproj*.gguf`, set aside): a single `.gguf` file or
/// a complete split set, counted as one; several → [`HubError::ManyGguf`], a split set
/// missing files → [`HubError::IncompleteSplit`], none → [`HubError::NoWeights`]
/// naming what was found. A requested file of a split set (its first or any other)
/// chooses the whole set.
///
/// Mistral repositories ship `consolidated.safetensors` beside the sharded
/// `model-*.safetensors` (the same weights in two layouts): the index, the single file
/// or the shard set is chosen first, so the two are never added up.
pub fn choose_weights(
    tree: &[RepoFile],
    index: Option<&[u8]>,
    requested: Option<&str>,
) -> Result<WeightFiles, HubError> {
    if let Some(name) = requested {
        check_file(name)?;
        // Any file of a split set (listed or not) stands for the whole set.
        let model = gguf_model_name(name);
        if let Some(choice) = gguf_choices(tree).into_iter().find(|c| c.name == model) {
            return take_gguf(choice);
        }
        let Some(file) = tree.iter().find(|f| f.path == name) else {
            return Err(HubError::FileNotFound {
                file: name.to_string(),
                candidates: tree
                    .iter()
                    .filter(|f| is_gguf(&f.path) || is_safetensors(&f.path))
                    .take(NAMED_IN_ERRORS)
                    .map(|f| f.path.clone())
                    .collect(),
            });
        };
        return if is_gguf(name) {
            Ok(WeightFiles::Gguf(vec![file.clone()]))
        } else if is_safetensors(name) {
            Ok(WeightFiles::Safetensors(vec![file.clone()]))
        } else {
            Err(HubError::UnsupportedFile(name.to_string()))
        };
    }
    if let Some(text) = index {
        let mut shards = Vec::new();
        for name in index_shards(text)? {
            let file = tree
                .iter()
                .find(|f| f.path == name)
                .ok_or(HubError::ShardMissing(name))?;
            shards.push(file);
        }
        return Ok(WeightFiles::Safetensors(checked(shards)?));
    }
    if let Some(single) = tree.iter().find(|f| f.path == SINGLE_FILE) {
        return Ok(WeightFiles::Safetensors(vec![single.clone()]));
    }
    if let Some(shards) = shard_set(tree, "model") {
        return Ok(WeightFiles::Safetensors(checked(shards)?));
    }
    if let Some(single) = tree.iter().find(|f| f.path == "consolidated.safetensors") {
        return Ok(WeightFiles::Safetensors(vec![single.clone()]));
    }
    if let Some(shards) = shard_set(tree, "consolidated") {
        return Ok(WeightFiles::Safetensors(checked(shards)?));
    }
    let mut ggufs = gguf_choices(tree);
    match ggufs.len() {
        1 => take_gguf(ggufs.remove(0)),
        0 => Err(HubError::NoWeights {
            found: tree
                .iter()
                .take(NAMED_IN_ERRORS)
                .map(|f| f.path.clone())
                .collect(),
            total: tree.len(),
        }),
        _ => Err(HubError::ManyGguf(ggufs)),
    }
}

/// The distinct files named by a `model.safetensors.index.json`'s `weight_map`, in
/// name order, each checked by [`check_file`] (for a host that has no listing).
pub fn index_shards(index: &[u8]) -> Result<Vec<String>, HubError> {
    const WHAT: &str = "shard index";
    bounded(index, WHAT)?;
    let idx: ShardIndex = serde_json::from_slice(index).map_err(|e| HubError::BadJson {
        what: WHAT,
        reason: e.to_string(),
    })?;
    let mut names = BTreeSet::new();
    for (_, file) in idx.weight_map {
        let Some(file) = file.as_str() else {
            return Err(HubError::BadJson {
                what: WHAT,
                reason: "weight_map: a value is not a file name".to_string(),
            });
        };
        names.insert(file.to_string());
    }
    if names.is_empty() {
        return Err(HubError::BadJson {
            what: WHAT,
            reason: "weight_map is empty".to_string(),
        });
    }
    for name in &names {
        check_file(name)?;
    }
    Ok(names.into_iter().collect())
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // test data from small known numbers
mod tests {
    use super::*;
    use crate::import::hub::*;

    fn file(path: &str, size: u64) -> RepoFile {
        RepoFile {
            path: path.to_string(),
            size,
        }
    }

    fn paths(w: &WeightFiles) -> Vec<String> {
        w.paths()
    }

    #[test]
    fn the_index_names_the_shards_with_sizes_from_the_tree() {
        let tree = vec![
            file("config.json", 600),
            file(INDEX_FILE, 30_000),
            file("model-00002-of-00002.safetensors", 2_000),
            file("model-00001-of-00002.safetensors", 5_000),
            file("model.safetensors", 7_000),
        ];
        let idx = br#"{"metadata":{"total_size":6900},"weight_map":{
            "a":"model-00002-of-00002.safetensors","b":"model-00001-of-00002.safetensors",
            "c":"model-00002-of-00002.safetensors"}}"#;
        let w = choose_weights(&tree, Some(idx), None).unwrap();
        assert_eq!(
            w,
            WeightFiles::Safetensors(vec![
                file("model-00001-of-00002.safetensors", 5_000),
                file("model-00002-of-00002.safetensors", 2_000)
            ])
        );
        // A shard the listing lacks, a traversal, an empty map, a bad index.
        let e = choose_weights(
            &tree,
            Some(br#"{"weight_map":{"a":"m-9.safetensors"}}"#),
            None,
        )
        .unwrap_err();
        assert_eq!(e, HubError::ShardMissing("m-9.safetensors".into()));
        let e = choose_weights(&tree, Some(br#"{"weight_map":{"a":"../x"}}"#), None).unwrap_err();
        assert!(matches!(e, HubError::BadFile(_)), "{e}");
        for bad in [
            &br#"{"weight_map":{}}"#[..],
            br#"{"weight_map":{"a":7}}"#,
            b"[]",
            b"{",
        ] {
            let e = choose_weights(&tree, Some(bad), None).unwrap_err();
            assert!(matches!(e, HubError::BadJson { .. }), "{e}");
        }
    }

    #[test]
    fn a_single_file_without_an_index() {
        let tree = vec![file("config.json", 600), file(SINGLE_FILE, 7_000)];
        assert_eq!(
            choose_weights(&tree, None, None).unwrap(),
            WeightFiles::Safetensors(vec![file(SINGLE_FILE, 7_000)])
        );
    }

    #[test]
    fn consolidated_beside_shards_is_never_counted_twice() {
        // Mistral-7B-v0.3's layout: the same weights as consolidated and as shards.
        let tree = vec![
            file("consolidated.safetensors", 14_496_078_512),
            file("model-00001-of-00003.safetensors", 4_949_453_792),
            file("model-00002-of-00003.safetensors", 4_999_819_336),
            file("model-00003-of-00003.safetensors", 4_546_807_800),
            file(INDEX_FILE, 23_950),
            file("params.json", 202),
        ];
        let idx = br#"{"weight_map":{"a":"model-00001-of-00003.safetensors",
            "b":"model-00002-of-00003.safetensors","c":"model-00003-of-00003.safetensors"}}"#;
        let want = vec![
            "model-00001-of-00003.safetensors".to_string(),
            "model-00002-of-00003.safetensors".to_string(),
            "model-00003-of-00003.safetensors".to_string(),
        ];
        assert_eq!(
            paths(&choose_weights(&tree, Some(idx), None).unwrap()),
            want
        );
        // Without the index, the complete shard set still wins over consolidated.
        assert_eq!(paths(&choose_weights(&tree, None, None).unwrap()), want);
        // An incomplete set is not a checkpoint: consolidated is then the weights.
        let partial: Vec<RepoFile> = tree
            .iter()
            .filter(|f| f.path != "model-00002-of-00003.safetensors")
            .cloned()
            .collect();
        assert_eq!(
            paths(&choose_weights(&partial, None, None).unwrap()),
            vec!["consolidated.safetensors".to_string()]
        );
    }

    #[test]
    fn one_gguf_is_chosen_and_projectors_are_set_aside() {
        let tree = vec![
            file("README.md", 3_000),
            file("Llama-3.2-1B-Q4_K_M.gguf", 807_694_464),
            file("mmproj-F16.gguf", 851_251_104),
        ];
        assert_eq!(
            choose_weights(&tree, None, None).unwrap(),
            WeightFiles::Gguf(vec![file("Llama-3.2-1B-Q4_K_M.gguf", 807_694_464)])
        );
    }

    #[test]
    fn many_gguf_files_are_listed_with_gb_and_gib() {
        let tree = vec![
            file("m-Q8_0.gguf", 1_321_083_072),
            file("m-Q4_K_M.gguf", 807_694_464),
            file("m-Q6_K.gguf", 1_021_800_640),
        ];
        let e = choose_weights(&tree, None, None).unwrap_err();
        let HubError::ManyGguf(list) = &e else {
            panic!("{e}")
        };
        assert_eq!(list.len(), 3);
        assert!(e.to_string().starts_with("3 GGUF models"), "{e}");
        let text = e.to_string();
        assert!(text.contains("pick one"), "{text}");
        // Sorted by name, each with both units.
        assert!(
            text.contains("m-Q4_K_M.gguf  807 694 464 B · 0.81 GB · 0.75 GiB")
                && text.contains("m-Q6_K.gguf  1 021 800 640 B · 1.02 GB · 0.95 GiB")
                && text.contains("m-Q8_0.gguf  1 321 083 072 B · 1.32 GB · 1.23 GiB"),
            "{text}"
        );
        assert!(text.find("Q4_K_M") < text.find("Q6_K"), "{text}");
        // Naming one settles it.
        assert_eq!(
            choose_weights(&tree, None, Some("m-Q6_K.gguf")).unwrap(),
            WeightFiles::Gguf(vec![file("m-Q6_K.gguf", 1_021_800_640)])
        );
    }

    /// unsloth's layout: a split model in a folder beside single files.
    fn split_tree() -> Vec<RepoFile> {
        vec![
            file("README.md", 3_000),
            file("Q4_K_M/Model-Q4_K_M-00002-of-00003.gguf", 4_000_000_000),
            file("Q4_K_M/Model-Q4_K_M-00001-of-00003.gguf", 4_900_000_000),
            file("Q4_K_M/Model-Q4_K_M-00003-of-00003.gguf", 1_100_000_000),
            file("Model-Q2_K.gguf", 3_000_000_000),
            file("mmproj-F16.gguf", 800_000_000),
        ]
    }

    #[test]
    fn a_split_gguf_set_is_one_choice_listed_with_its_total() {
        let tree = split_tree();
        let e = choose_weights(&tree, None, None).unwrap_err();
        let HubError::ManyGguf(list) = &e else {
            panic!("{e}")
        };
        assert_eq!(list.len(), 2, "{e}");
        let set = &list[1];
        assert_eq!(set.name, "Q4_K_M/Model-Q4_K_M-00001-of-00003.gguf");
        assert_eq!(set.size(), 10_000_000_000);
        assert_eq!(set.files.len(), 3);
        let text = e.to_string();
        assert!(text.starts_with("2 GGUF models"), "{text}");
        assert!(
            text.contains(
                "\n  Q4_K_M/Model-Q4_K_M-00001-of-00003.gguf (3 split files)  10 000 000 000 B · 10.00 GB · 9.31 GiB"
            ) && text.contains("\n  Model-Q2_K.gguf  3 000 000 000 B"),
            "{text}"
        );
        assert!(!text.contains("00002"), "{text}");
        // Any file of the set, the first or another, chooses all three in split order.
        let want = vec![
            "Q4_K_M/Model-Q4_K_M-00001-of-00003.gguf".to_string(),
            "Q4_K_M/Model-Q4_K_M-00002-of-00003.gguf".to_string(),
            "Q4_K_M/Model-Q4_K_M-00003-of-00003.gguf".to_string(),
        ];
        for named in &want {
            let w = choose_weights(&tree, None, Some(named)).unwrap();
            assert!(matches!(w, WeightFiles::Gguf(_)), "{w:?}");
            assert_eq!(w.paths(), want);
        }
        // Alone, the set is the choice.
        let only: Vec<RepoFile> = tree
            .iter()
            .filter(|f| f.path != "Model-Q2_K.gguf")
            .cloned()
            .collect();
        assert_eq!(choose_weights(&only, None, None).unwrap().paths(), want);
    }

    #[test]
    fn an_incomplete_split_set_is_refused_naming_what_is_missing() {
        let tree: Vec<RepoFile> = split_tree()
            .into_iter()
            .filter(|f| !f.path.contains("00002"))
            .collect();
        let missing = "Q4_K_M/Model-Q4_K_M-00002-of-00003.gguf";
        for named in [
            "Q4_K_M/Model-Q4_K_M-00001-of-00003.gguf",
            "Q4_K_M/Model-Q4_K_M-00003-of-00003.gguf",
            missing,
        ] {
            let e = choose_weights(&tree, None, Some(named)).unwrap_err();
            assert!(matches!(e, HubError::IncompleteSplit(_)), "{e}");
            let text = e.to_string();
            assert!(
                text.contains("split into 3 files")
                    && text.contains(&format!("lacks 1 of them: {missing}")),
                "{text}"
            );
        }
        // Listed among the choices as incomplete; alone, refused.
        let text = choose_weights(&tree, None, None).unwrap_err().to_string();
        assert!(
            text.contains("incomplete: 1 of its 3 split files missing"),
            "{text}"
        );
        let alone: Vec<RepoFile> = tree
            .into_iter()
            .filter(|f| f.path.starts_with("Q4_K_M/"))
            .collect();
        let e = choose_weights(&alone, None, None).unwrap_err();
        assert!(matches!(e, HubError::IncompleteSplit(_)), "{e}");
        // The numbers' width and the extension come from the files listed.
        let odd = vec![file("m-1-of-3.GGUF", 1), file("m-3-of-3.GGUF", 1)];
        let HubError::IncompleteSplit(c) = choose_weights(&odd, None, None).unwrap_err() else {
            panic!()
        };
        assert_eq!(
            (c.name.as_str(), c.missing.clone()),
            ("m-1-of-3.GGUF", vec!["m-2-of-3.GGUF".to_string()])
        );
    }

    #[test]
    fn a_hostile_listing_is_grouped_in_linear_time_and_named_briefly() {
        // 160 000 one-part sets: a sort, not 160 000² comparisons (32–42 s before; the
        // agent's test `hub_hostile` times it, the core has no clock).
        let tree: Vec<RepoFile> = (0..160_000)
            .map(|i| file(&format!("m{i}-00001-of-00002.gguf"), 1))
            .collect();
        let e = choose_weights(&tree, None, None).unwrap_err();
        let HubError::ManyGguf(choices) = &e else {
            panic!("{e}")
        };
        assert_eq!(choices.len(), 160_000);
        // The message names 20 models and counts the rest (11.7 MB before).
        let text = e.to_string();
        assert!(text.len() < 4_000, "{} bytes", text.len());
        assert!(text.contains("… and 159980 more"), "{text}");
        assert_eq!(text.lines().count(), 1 + NAMED_IN_ERRORS + 1);

        // Sets claiming a thousand parts: the missing parts are counted, and only the
        // first few named (every missing name was made before: 1.43 GB for 20 000).
        let tree: Vec<RepoFile> = (0..20_000)
            .map(|i| file(&format!("m{i}-00001-of-01000.gguf"), 1))
            .collect();
        let choices = gguf_choices(&tree);
        assert_eq!(choices.len(), 20_000);
        for c in &choices {
            assert_eq!((c.missing_count, c.missing.len()), (999, NAMED_IN_ERRORS));
            assert_eq!(c.count(), 1_000);
        }
        assert_eq!(
            choices[0].missing[..2],
            [
                "m0-00002-of-01000.gguf".to_string(),
                "m0-00003-of-01000.gguf".to_string()
            ]
        );
        // A part listed twice counts once; the gaps between listed parts are named.
        let tree = vec![
            file("s-00003-of-00005.gguf", 1),
            file("s-00001-of-00005.gguf", 1),
            file("s-00003-of-00005.gguf", 1),
        ];
        let c = &gguf_choices(&tree)[0];
        assert_eq!(c.files.len(), 2);
        assert_eq!(c.missing_count, 3);
        assert_eq!(
            c.missing,
            [
                "s-00002-of-00005.gguf",
                "s-00004-of-00005.gguf",
                "s-00005-of-00005.gguf"
            ]
        );
    }

    #[test]
    fn split_names_out_of_range_are_plain_files() {
        for name in [
            "m-00000-of-00002.gguf",
            "m-00003-of-00002.gguf",
            "-00001-of-00002.gguf",
            "d/-00001-of-00001.gguf",
            "m-1-of-99999999.gguf",
        ] {
            assert!(numbered(name, GGUF_EXT).is_none(), "{name}");
            assert_eq!(split_set_names(name), vec![name.to_string()]);
        }
        assert_eq!(
            split_set_names("a/m-00002-of-00002.gguf"),
            vec![
                "a/m-00001-of-00002.gguf".to_string(),
                "a/m-00002-of-00002.gguf".to_string()
            ]
        );
    }

    fn split_header(tensors: usize, split: Option<(u16, u16, i32)>) -> GgufHeader {
        let names: Vec<String> = (0..tensors)
            .map(|i| format!("blk.{i}.attn_q.weight"))
            .collect();
        let list: Vec<(&str, &[u64], u32)> = names
            .iter()
            .map(|n| (n.as_str(), &[32u64, 2][..], 8))
            .collect();
        gguf::parse_header(&gguf::build_split_header("llama", &list, split)).unwrap()
    }

    #[test]
    fn split_headers_must_agree_with_the_set() {
        let paths: Vec<String> = split_set_names("m-00001-of-00003.gguf");
        let good = [
            split_header(2, Some((0, 3, 6))),
            split_header(3, Some((1, 3, 6))),
            split_header(1, Some((2, 3, 6))),
        ];
        let refs: Vec<&GgufHeader> = good.iter().collect();
        assert_eq!(check_split(&paths, &refs), Ok(()));
        // Without the keys, nothing to disagree with.
        let bare = [
            split_header(1, None),
            split_header(1, None),
            split_header(1, None),
        ];
        assert_eq!(
            check_split(&paths, &bare.iter().collect::<Vec<_>>()),
            Ok(())
        );
        let cases = [
            (
                [
                    split_header(2, Some((0, 4, 6))),
                    split_header(3, Some((1, 3, 6))),
                    split_header(1, Some((2, 3, 6))),
                ],
                "m-00001-of-00003.gguf",
                "split.count = 4, not 3 (read as file 1 of 3, 6 tensors in all)",
            ),
            (
                [
                    split_header(2, Some((0, 3, 6))),
                    split_header(3, Some((2, 3, 6))),
                    split_header(1, Some((2, 3, 6))),
                ],
                "m-00002-of-00003.gguf",
                "split.no = 2, not 1 (read as file 2 of 3, 6 tensors in all)",
            ),
            (
                [
                    split_header(2, Some((0, 3, 7))),
                    split_header(3, Some((1, 3, 6))),
                    split_header(1, Some((2, 3, 6))),
                ],
                "m-00001-of-00003.gguf",
                "split.tensors.count = 7, not 6 (read as file 1 of 3, 6 tensors in all)",
            ),
        ];
        for (headers, file, words) in cases {
            let e = check_split(&paths, &headers.iter().collect::<Vec<_>>()).unwrap_err();
            let text = e.to_string();
            assert!(text.starts_with(file) && text.contains(words), "{text}");
        }
        // One file of a set read alone is caught by its own header.
        let e = check_split(&paths[..1], &refs[..1]).unwrap_err();
        assert!(
            e.to_string()
                .contains("split.count = 3, not 1 (read as file 1 of 1, 2 tensors in all)"),
            "{e}"
        );
    }

    #[test]
    fn a_requested_file_must_be_in_the_tree() {
        let tree = vec![
            file("config.json", 600),
            file(SINGLE_FILE, 7_000),
            file("m.gguf", 9),
        ];
        let e = choose_weights(&tree, None, Some("absent.gguf")).unwrap_err();
        assert!(matches!(e, HubError::FileNotFound { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("absent.gguf: not found") && text.contains("m.gguf"),
            "{text}"
        );
        // The request wins over the index and the single file.
        assert_eq!(
            choose_weights(&tree, Some(b"{}"), Some(SINGLE_FILE)).unwrap(),
            WeightFiles::Safetensors(vec![file(SINGLE_FILE, 7_000)])
        );
        let e = choose_weights(&tree, None, Some("config.json")).unwrap_err();
        assert!(matches!(e, HubError::UnsupportedFile(_)), "{e}");
        let e = choose_weights(&tree, None, Some("../etc/passwd")).unwrap_err();
        assert!(matches!(e, HubError::BadFile(_)), "{e}");
    }

    #[test]
    fn no_weights_names_what_was_found() {
        let tree = vec![file("README.md", 1), file("pytorch_model.bin", 2)];
        let e = choose_weights(&tree, None, None).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("no weights") && text.contains("pytorch_model.bin"),
            "{text}"
        );
        let many: Vec<RepoFile> = (0..30).map(|i| file(&format!("f{i}.txt"), 1)).collect();
        let text = choose_weights(&many, None, None).unwrap_err().to_string();
        assert!(text.contains("and 10 more"), "{text}");
        let text = choose_weights(&[], None, None).unwrap_err().to_string();
        assert!(text.contains("lists no files"), "{text}");
    }
}
