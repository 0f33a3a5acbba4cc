//! The Hugging Face Hub's conventions, without I/O: one implementation for the agent
//! (`estimate --model`) and the page's lookup, so both pick the same files from the
//! same answers and build the same URLs.
//!
//! The host fetches; this module only
//!
//! - checks what the user typed ([`check_repo_id`], [`check_file`]) before it becomes
//!   part of a URL or a cache path;
//! - builds the two URLs a lookup needs ([`tree_url`], [`resolve_url`]), encoded as
//!   `huggingface_hub` encodes them;
//! - reads the Hub's file listing page by page ([`TreePages`], [`parse_tree`],
//!   [`link_next`]) and decides which files hold the weights ([`choose_weights`]): a
//!   file the user named, else the shards of `model.safetensors.index.json`, else
//!   `model.safetensors`, else the one GGUF model — a single file or a complete split
//!   set ([`GgufChoice`]), whose headers [`check_split`] checks once read.
//!
//! The listing format is the Hub's `GET {endpoint}/api/models/{repo}/tree/{revision}`
//! answer, a JSON array of entries `{"type": "file" | "directory", "oid", "path",
//! "size", "lfs": {"oid", "size", "pointerSize"}?, "xetHash"?}` — as read by
//! `huggingface_hub` (github.com/huggingface/huggingface_hub,
//! `src/huggingface_hub/hf_api.py`: `list_repo_tree` builds
//! `{endpoint}/api/{repo_type}s/{repo_id}/tree/{quote(revision, safe="")}` and turns
//! each entry into `RepoFile` when `type == "file"`, else `RepoFolder`; `RepoFile`
//! reads `path`, `size` and `lfs.size`) and by huggingface.js
//! (`packages/hub/src/lib/list-files.ts`, `ListFileEntry`). It is asked for with
//! `?recursive=true&expand=false`, as `list_repo_tree(recursive=True)` sends it
//! (`paginate(path=tree_url, params={"recursive": recursive, "expand": expand})`), so
//! files in folders (`Q4_K_M/Model-Q4_K_M-00001-of-00003.gguf`) are listed too. The
//! Hub pages a long listing: each answer's `Link` header names the next page
//! (`<URL>; rel="next"`, the URL carrying its own query), followed until there is
//! none — `huggingface_hub`'s `utils/_pagination.py` (`paginate`, `_get_next_page`:
//! `response.links["next"]["url"]`) and huggingface.js's `listFiles` (`parseLinkHeader(
//! res.headers.get("Link")).next`) do the same. Here the pages are bounded
//! ([`MAX_TREE_PAGES`], an error past it, never a silent cut) and must stay on the
//! endpoint's origin.
//!
//! Split GGUF models follow llama.cpp's `gguf-split` convention (github.com/ggml-org/
//! llama.cpp `src/llama.cpp` `llama_split_path`: `"%s-%05d-of-%05d.gguf"` with the
//! split's number from 1; `tools/gguf-split/gguf-split.cpp` writes `split.no` (from
//! 0), `split.count` and `split.tensors.count` into each file, keys named in
//! `src/llama-arch.cpp`): every file is a whole GGUF file whose header holds its share
//! of the tensors, so a split model is one choice, read and summed whole.

#![deny(clippy::arithmetic_side_effects)]

use std::collections::BTreeSet;
use std::fmt;

use serde::Deserialize;

use crate::import::gguf::{self, GgufHeader};
use crate::import::read_policy::Header;
use crate::units::Bytes;

/// Largest tree listing / index JSON read.
pub const MAX_LISTING_BYTES: usize = 16 << 20;
/// The shard index of a sharded safetensors checkpoint (`transformers`' name).
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// The single file of an unsharded safetensors checkpoint.
pub const SINGLE_FILE: &str = "model.safetensors";
/// The model's configuration.
pub const CONFIG_FILE: &str = "config.json";
/// Longest repository id accepted (the Hub's own limit is 96 characters per name).
const MAX_REPO_ID: usize = 200;
/// Longest file path accepted.
const MAX_FILE_PATH: usize = 500;
/// Files named in a [`HubError::NoWeights`] message (a listing may hold thousands).
const NAMED_IN_ERRORS: usize = 20;
/// Pages of the file listing read at most: a lookup never cuts a listing silently,
/// it refuses past this ([`HubError::ListingTooLong`]). Each page is one more
/// sequential request, so a repository of a few hundred files costs none.
pub const MAX_TREE_PAGES: usize = 50;
/// Most files of one split GGUF model (`-of-NNNNN` above this is not read as a split;
/// real splits hold tens of files).
const MAX_SPLIT_FILES: u64 = 1_000;
const GGUF_EXT: &str = ".gguf";

/// One file of a repository, as listed by the Hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFile {
    /// Path from the repository's root.
    pub path: String,
    /// Size in bytes (of the LFS object for a large file, not of its pointer).
    pub size: u64,
}

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
    /// The set's files the listing lacks, in split order (empty when complete).
    pub missing: Vec<String>,
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
        self.files.len().saturating_add(self.missing.len())
    }

    fn is_split(&self) -> bool {
        numbered(&self.name, GGUF_EXT).is_some()
    }
}

/// Why a listing, an index or a name was refused, or no weights could be chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubError {
    /// A JSON answer larger than [`MAX_LISTING_BYTES`].
    TooLarge {
        /// What was being read ("file listing", "shard index").
        what: &'static str,
        /// Its length.
        bytes: usize,
    },
    /// A JSON answer that is not what the Hub sends.
    BadJson {
        /// What was being read.
        what: &'static str,
        /// The parser's words.
        reason: String,
    },
    /// A repository id that is not `ORG/NAME` made of plain characters.
    BadRepoId(String),
    /// A file path that is not plain (empty segments, `..`, odd characters).
    BadFile(String),
    /// Not a branch, tag or commit id.
    BadRevision(String),
    /// The file the user named is not in the repository.
    FileNotFound {
        /// The name given.
        file: String,
        /// Weight-like files that are there (safetensors and GGUF), for the message.
        candidates: Vec<String>,
    },
    /// The file the user named is neither safetensors nor GGUF.
    UnsupportedFile(String),
    /// The shard index names a file the listing does not have.
    ShardMissing(String),
    /// Several GGUF models (single files or split sets) and none named: the user must
    /// pick one.
    ManyGguf(Vec<GgufChoice>),
    /// A split GGUF set of which the listing lacks files: its tensors cannot all be
    /// counted.
    IncompleteSplit(GgufChoice),
    /// A split GGUF file's header disagrees with the set it was read in.
    SplitMismatch {
        /// The file.
        file: String,
        /// What disagrees, in words.
        reason: String,
    },
    /// The listing goes on past [`MAX_TREE_PAGES`] pages.
    ListingTooLong {
        /// Pages read.
        pages: usize,
        /// Files listed in them.
        files: usize,
    },
    /// A listing page whose next page is not on the endpoint's origin.
    ForeignPage(String),
    /// Nothing that holds weights in a format read here.
    NoWeights {
        /// The files found (the first few).
        found: Vec<String>,
        /// How many files the listing had.
        total: usize,
    },
}

impl fmt::Display for HubError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HubError::TooLarge { what, bytes } => write!(
                f,
                "the {what} is {bytes} bytes, more than the {} MiB read at most",
                MAX_LISTING_BYTES >> 20
            ),
            HubError::BadJson { what, reason } => {
                write!(f, "the {what} is not what the Hub sends: {reason}")
            }
            HubError::BadRepoId(r) => write!(
                f,
                "expected ORG/NAME as on the Hub (letters, digits, '-', '_', '.'), got {r:?}"
            ),
            HubError::BadFile(p) => write!(f, "{p:?}: not a plain file path"),
            HubError::BadRevision(r) => write!(f, "{r:?}: expected a branch, tag or commit id"),
            HubError::FileNotFound { file, candidates } => {
                write!(f, "{file}: not found in the repository")?;
                if candidates.is_empty() {
                    write!(f, " (it has no safetensors or GGUF file)")
                } else {
                    write!(f, "; weight files there: {}", candidates.join(", "))
                }
            }
            HubError::UnsupportedFile(p) => write!(
                f,
                "{p}: only .safetensors and .gguf files are read (their headers give every tensor)"
            ),
            HubError::ShardMissing(p) => write!(
                f,
                "{INDEX_FILE} names {p}, which is not in the repository's file list"
            ),
            HubError::ManyGguf(choices) => {
                write!(
                    f,
                    "{} GGUF models in the repository; pick one (a split model by any of its files):",
                    choices.len()
                )?;
                for c in choices {
                    if !c.missing.is_empty() {
                        write!(
                            f,
                            "\n  {}  incomplete: {} of its {} split files missing",
                            c.name,
                            c.missing.len(),
                            c.count()
                        )?;
                    } else if c.is_split() {
                        write!(
                            f,
                            "\n  {} ({} split files)  {}",
                            c.name,
                            c.count(),
                            Bytes(c.size()).describe()
                        )?;
                    } else {
                        write!(f, "\n  {}  {}", c.name, Bytes(c.size()).describe())?;
                    }
                }
                Ok(())
            }
            HubError::IncompleteSplit(c) => {
                write!(
                    f,
                    "{}: a GGUF model split into {} files, but the repository lacks {} of them: ",
                    c.name,
                    c.count(),
                    c.missing.len()
                )?;
                for (i, m) in c.missing.iter().take(NAMED_IN_ERRORS).enumerate() {
                    write!(f, "{}{m}", if i == 0 { "" } else { ", " })?;
                }
                if c.missing.len() > NAMED_IN_ERRORS {
                    write!(
                        f,
                        " and {} more",
                        c.missing.len().saturating_sub(NAMED_IN_ERRORS)
                    )?;
                }
                write!(
                    f,
                    " (every file of a split model holds part of its tensors)"
                )
            }
            HubError::SplitMismatch { file, reason } => {
                write!(f, "{file}: {reason}: not the split set its name says")
            }
            HubError::ListingTooLong { pages, files } => write!(
                f,
                "the file listing goes on past {pages} pages ({files} files so far), more than a lookup reads"
            ),
            HubError::ForeignPage(url) => write!(
                f,
                "the file listing's next page is on another site ({url}): not followed"
            ),
            HubError::NoWeights { found, total } => {
                write!(
                    f,
                    "no weights found: neither {INDEX_FILE}, {SINGLE_FILE}, safetensors shards nor a .gguf file"
                )?;
                if found.is_empty() {
                    return write!(f, " (the repository lists no files)");
                }
                write!(f, "; the repository has {}", found.join(", "))?;
                if *total > found.len() {
                    write!(f, " and {} more", total.saturating_sub(found.len()))?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for HubError {}

/// One entry of the listing. Unknown fields (`oid`, `xetHash`, `lastCommit`, …) are
/// ignored, so a Hub that adds fields is still read.
#[derive(Deserialize)]
struct TreeEntry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    lfs: Option<LfsInfo>,
}

#[derive(Deserialize)]
struct LfsInfo {
    size: u64,
}

/// Read as JSON's own map: a map type of its own (and its set of counts) would add
/// kilobytes to the page's lookup module.
#[derive(Deserialize)]
struct ShardIndex {
    weight_map: serde_json::Map<String, serde_json::Value>,
}

fn bounded(json: &[u8], what: &'static str) -> Result<(), HubError> {
    if json.len() > MAX_LISTING_BYTES {
        return Err(HubError::TooLarge {
            what,
            bytes: json.len(),
        });
    }
    Ok(())
}

/// Parses the Hub's `GET {endpoint}/api/models/{repo}/tree/{revision}` answer (a JSON
/// array of `{"type":"file"|"directory","path":…,"size":…,"lfs":{"size":…}?}`); files
/// only, size = `lfs.size` when present else `size`.
pub fn parse_tree(json: &[u8]) -> Result<Vec<RepoFile>, HubError> {
    const WHAT: &str = "file listing";
    bounded(json, WHAT)?;
    let entries: Vec<TreeEntry> = serde_json::from_slice(json).map_err(|e| HubError::BadJson {
        what: WHAT,
        reason: e.to_string(),
    })?;
    let mut files = Vec::new();
    for e in entries {
        if e.kind != "file" {
            continue;
        }
        let size = match (e.lfs, e.size) {
            (Some(lfs), _) => lfs.size,
            (None, Some(s)) => s,
            (None, None) => {
                return Err(HubError::BadJson {
                    what: WHAT,
                    reason: format!("{:?} has no size", e.path),
                });
            }
        };
        files.push(RepoFile { path: e.path, size });
    }
    Ok(files)
}

fn lower(path: &str) -> String {
    path.to_ascii_lowercase()
}

fn is_gguf(path: &str) -> bool {
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

/// The GGUF models of a listing (vision projectors, `mmproj*.gguf`, set aside): each
/// split set once, with the parts it lacks; in name order. (Plain vectors and linear
/// searches, not maps: the page's lookup module pays for every generic container in
/// its size, and a set has at most [`MAX_SPLIT_FILES`] parts.)
fn gguf_choices(tree: &[RepoFile]) -> Vec<GgufChoice> {
    let mut ggufs: Vec<RepoFile> = tree
        .iter()
        .filter(|f| is_gguf(&f.path) && !lower(base_name(&f.path)).starts_with("mmproj"))
        .cloned()
        .collect();
    by_path(&mut ggufs);
    let mut out: Vec<GgufChoice> = Vec::new();
    for f in ggufs {
        let Some(n) = numbered(&f.path, GGUF_EXT) else {
            out.push(GgufChoice {
                name: f.path.clone(),
                files: vec![f],
                missing: Vec::new(),
            });
            continue;
        };
        // A set goes by its first file's name, whichever part is listed first.
        let name = n.part(1);
        match out.iter_mut().find(|c| c.name == name) {
            Some(set) => set.files.push(f),
            None => out.push(GgufChoice {
                name,
                files: vec![f],
                missing: Vec::new(),
            }),
        }
    }
    for set in &mut out {
        let Some(template) = set.files.first().and_then(|f| numbered(&f.path, GGUF_EXT)) else {
            continue;
        };
        let mut files = Vec::new();
        for no in 1..=template.count {
            let part = set
                .files
                .iter()
                .find(|f| numbered(&f.path, GGUF_EXT).is_some_and(|n| n.no == no));
            match part {
                Some(f) => files.push(f.clone()),
                None => set.missing.push(template.part(no)),
            }
        }
        set.files = files;
    }
    out
}

/// A GGUF choice as the files to read, or why it cannot be read.
fn take_gguf(choice: GgufChoice) -> Result<WeightFiles, HubError> {
    if !choice.missing.is_empty() {
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
        if let Some(choice) = gguf_choices(tree).into_iter().find(|c| {
            c.name == name
                || c.missing.iter().any(|m| m == name)
                || c.files.iter().any(|f| f.path == name)
        }) {
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

/// `ORG/NAME` (or a legacy `NAME`): plain segments, no traversal — safe in a URL and
/// as a cache folder.
pub fn check_repo_id(repo: &str) -> Result<(), HubError> {
    let segments: Vec<&str> = repo.split('/').collect();
    let ok = (1..=2).contains(&segments.len())
        && repo.len() <= MAX_REPO_ID
        && segments.iter().all(|s| {
            plain_segment(s)
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        });
    if ok {
        Ok(())
    } else {
        Err(HubError::BadRepoId(repo.to_string()))
    }
}

/// A revision: a branch, tag or commit id (non-empty, at most 256 bytes, no control
/// characters; percent-encoded whole in a URL by [`resolve_url`]).
pub fn check_revision(revision: &str) -> Result<(), HubError> {
    if revision.is_empty() || revision.len() > 256 || revision.chars().any(char::is_control) {
        Err(HubError::BadRevision(revision.to_string()))
    } else {
        Ok(())
    }
}

/// A file path inside a repository, safe both in a URL and under a cache folder.
pub fn check_file(path: &str) -> Result<(), HubError> {
    let ok = path.len() <= MAX_FILE_PATH
        && path.split('/').all(|s| {
            plain_segment(s)
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.+=@".contains(&b))
        });
    if ok {
        Ok(())
    } else {
        Err(HubError::BadFile(path.to_string()))
    }
}

fn plain_segment(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".."
}

/// Percent-encodes everything but unreserved characters, as Python's
/// `quote(s, safe="")` does (how `huggingface_hub` puts a revision in a URL).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `{endpoint}/{repo}/resolve/{revision}/{file}` (`huggingface_hub`'s `hf_hub_url`):
/// the revision encoded whole (`refs/pr/1` → `refs%2Fpr%2F1`), the file segment by
/// segment (its `/` kept). `endpoint` has no trailing slash; `repo` is checked by
/// [`check_repo_id`].
pub fn resolve_url(endpoint: &str, repo: &str, revision: &str, file: &str) -> String {
    let file: Vec<String> = file.split('/').map(percent_encode).collect();
    format!(
        "{endpoint}/{repo}/resolve/{}/{}",
        percent_encode(revision),
        file.join("/")
    )
}

/// `{endpoint}/api/models/{repo}/tree/{revision}?recursive=true&expand=false`: the
/// first page of the repository's whole listing, folders' files included (the query
/// `list_repo_tree(recursive=True)` sends).
pub fn tree_url(endpoint: &str, repo: &str, revision: &str) -> String {
    format!(
        "{endpoint}/api/models/{repo}/tree/{}?recursive=true&expand=false",
        percent_encode(revision)
    )
}

/// The `rel="next"` target of an HTTP `Link` header (RFC 8288: link-values
/// `<URI>; param=value; …` separated by commas; `rel` may hold several
/// space-separated types, quoted or not, in any case), trimmed; `None` when there is
/// none.
pub fn link_next(header: &str) -> Option<&str> {
    let mut rest = header;
    loop {
        let open = rest.find('<')?;
        let after = rest.get(open.checked_add(1)?..)?;
        let close = after.find('>')?;
        let target = after.get(..close)?.trim();
        let tail = after.get(close.checked_add(1)?..)?;
        // This link-value's parameters run to the next comma outside quotes.
        let mut quoted = false;
        let end = tail
            .char_indices()
            .find(|&(_, c)| {
                if c == '"' {
                    quoted = !quoted;
                }
                c == ',' && !quoted
            })
            .map_or(tail.len(), |(i, _)| i);
        let params = tail.get(..end)?;
        let next = params.split(';').any(|p| {
            p.split_once('=').is_some_and(|(name, value)| {
                name.trim().eq_ignore_ascii_case("rel")
                    && value
                        .trim()
                        .trim_matches('"')
                        .split_ascii_whitespace()
                        .any(|r| r.eq_ignore_ascii_case("next"))
            })
        });
        if next && !target.is_empty() {
            return Some(target);
        }
        rest = tail.get(end..)?;
    }
}

/// The file listing, read page by page. The host fetches [`tree_url`], gives each
/// answer's body and `Link` header to [`TreePages::add`], and fetches the page it
/// returns until it returns none; then [`TreePages::into_files`] is the whole listing.
#[derive(Debug, Clone)]
pub struct TreePages {
    endpoint: String,
    pages: usize,
    files: Vec<RepoFile>,
}

impl TreePages {
    /// A listing from `endpoint` (scheme://host[:port], no trailing slash).
    pub fn new(endpoint: &str) -> TreePages {
        TreePages {
            endpoint: endpoint.to_string(),
            pages: 0,
            files: Vec::new(),
        }
    }

    /// Adds one page (its body, and its `Link` header when the answer had one); the
    /// next page's URL, or `None` when the listing is complete. The next page must be
    /// on the endpoint's origin ([`HubError::ForeignPage`]; a root-relative link is
    /// taken on it) and within [`MAX_TREE_PAGES`] ([`HubError::ListingTooLong`]).
    pub fn add(&mut self, body: &[u8], link: Option<&str>) -> Result<Option<String>, HubError> {
        self.files.extend(parse_tree(body)?);
        self.pages = self.pages.saturating_add(1);
        let Some(next) = link.and_then(link_next) else {
            return Ok(None);
        };
        let next = match origin(&self.endpoint) {
            Some((scheme, host, port)) if next.starts_with('/') && !next.starts_with("//") => {
                format!("{scheme}://{host}:{port}{next}")
            }
            _ => next.to_string(),
        };
        if !same_origin(&next, &self.endpoint) {
            return Err(HubError::ForeignPage(next));
        }
        if self.pages >= MAX_TREE_PAGES {
            return Err(HubError::ListingTooLong {
                pages: self.pages,
                files: self.files.len(),
            });
        }
        Ok(Some(next))
    }

    /// Pages read so far.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// Every file of the pages read.
    pub fn into_files(self) -> Vec<RepoFile> {
        self.files
    }
}

/// Model ids offered while a user types: at most this many.
pub const SEARCH_LIMIT: usize = 8;

/// `{endpoint}/api/models?search=…`: the Hub's model search (`huggingface_hub`'s
/// `HfApi.list_models(search=…, sort="downloads")`, `src/huggingface_hub/hf_api.py`),
/// most downloaded first. `None` for a query too short to be worth a request (under 2
/// characters), too long (over 96) or holding control characters.
pub fn search_url(endpoint: &str, query: &str) -> Option<String> {
    let q = query.trim();
    let n = q.chars().count();
    if !(2..=96).contains(&n) || q.chars().any(char::is_control) {
        return None;
    }
    Some(format!(
        "{endpoint}/api/models?search={}&sort=downloads&direction=-1&limit={SEARCH_LIMIT}",
        percent_encode(q)
    ))
}

/// The model ids of a search answer (a JSON array of objects with `id`, or the older
/// `modelId`), at most [`SEARCH_LIMIT`], each a valid repository id.
pub fn parse_search(json: &[u8]) -> Result<Vec<String>, HubError> {
    const WHAT: &str = "model search";
    #[derive(Deserialize)]
    struct Found {
        id: Option<String>,
        #[serde(rename = "modelId")]
        model_id: Option<String>,
    }
    bounded(json, WHAT)?;
    let found: Vec<Found> = serde_json::from_slice(json).map_err(|e| HubError::BadJson {
        what: WHAT,
        reason: e.to_string(),
    })?;
    Ok(found
        .into_iter()
        .filter_map(|f| f.id.or(f.model_id))
        .filter(|id| check_repo_id(id).is_ok())
        .take(SEARCH_LIMIT)
        .collect())
}

/// The Hub's refusal of a request in words, the same from the agent and the page:
/// 401/403 (gated, private, or — as the Hub answers without a token — missing) and 404
/// (repository, revision or file, as `X-Error-Code` names it). `what` names the request,
/// `model_page` the repository's page (for the licence), `token_sent` whether a token
/// went with it and `token_how` how this client is given one. `None` for any other
/// status.
pub fn refusal(
    status: u16,
    error_code: Option<&str>,
    what: &str,
    model_page: &str,
    token_sent: bool,
    token_how: &str,
) -> Option<String> {
    match status {
        401 | 403 if error_code == Some("RepositoryNotFound") => Some(format!(
            "{what}: not found (no such repository, or a private one: check the id, or {token_how})"
        )),
        401 | 403 => Some(format!(
            "{what}: access refused (HTTP {status}): the model is gated or private ({}): accept the licence on the model page ({model_page}) and {token_how}",
            if token_sent {
                "a token was sent, but it has no access to this repository"
            } else {
                "no token was given"
            }
        )),
        404 => Some(format!(
            "{what}: not found ({})",
            match error_code {
                Some("RepositoryNotFound") => "no such repository",
                Some("RevisionNotFound") => "no such revision",
                Some("EntryNotFound") => "no such file in this revision",
                _ => "HTTP 404",
            }
        )),
        _ => None,
    }
}

/// `Content-Range: bytes START-END/TOTAL` → (START, TOTAL), for a range inside the
/// file; `None` for anything else (an unknown total `*`, an inverted or outside span).
pub fn parse_content_range(v: &str) -> Option<(u64, u64)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (span, total) = rest.split_once('/')?;
    let (start, end) = span.split_once('-')?;
    let (start, end, total): (u64, u64, u64) = (
        start.trim().parse().ok()?,
        end.trim().parse().ok()?,
        total.trim().parse().ok()?,
    );
    (start <= end && end < total).then_some((start, total))
}

/// The origin of an `http(s)` URL: scheme, host (lower case) and port (the scheme's
/// default when none is written). `None` for any other scheme, an empty host, a bad
/// port, or userinfo (`user@host`: a URL that could dress one host as another is
/// never treated as the Hub's).
pub fn origin(url: &str) -> Option<(&'static str, String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let (scheme, default_port): (&'static str, u16) = if scheme.eq_ignore_ascii_case("https") {
        ("https", 443)
    } else if scheme.eq_ignore_ascii_case("http") {
        ("http", 80)
    } else {
        return None;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return None;
    }
    let (host, port) = match authority.rsplit_once(':') {
        // A bracketed IPv6 literal without a port has colons but ends in `]`.
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (authority, None),
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok()?,
        None => default_port,
    };
    (!host.is_empty()).then(|| (scheme, host.to_ascii_lowercase(), port))
}

/// Whether two URLs share scheme, host and port: where the token may be sent (the
/// Hub's own origin, never its CDN).
pub fn same_origin(a: &str, b: &str) -> bool {
    match (origin(a), origin(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // test data from small known numbers
mod tests {
    use super::*;

    #[test]
    fn content_range_is_checked() {
        assert_eq!(parse_content_range("bytes 0-7/100"), Some((0, 100)));
        assert_eq!(parse_content_range("bytes 8-99/100"), Some((8, 100)));
        assert_eq!(parse_content_range("bytes 0-7/*"), None);
        assert_eq!(parse_content_range("bytes 9-7/100"), None);
        assert_eq!(parse_content_range("bytes 0-100/100"), None);
    }

    #[test]
    fn revisions_are_checked() {
        assert!(check_revision("main").is_ok());
        assert!(check_revision("refs/pr/1").is_ok());
        assert!(check_revision("").is_err());
        assert!(check_revision("a\nb").is_err());
        assert!(check_revision(&"x".repeat(257)).is_err());
    }

    #[test]
    fn searches_are_bounded_and_read() {
        assert_eq!(search_url("https://h", "l"), None);
        assert_eq!(search_url("https://h", &"x".repeat(97)), None);
        assert_eq!(search_url("https://h", "a\nb"), None);
        assert_eq!(
            search_url("https://h", " llama 3.1 ").as_deref(),
            Some("https://h/api/models?search=llama%203.1&sort=downloads&direction=-1&limit=8")
        );
        let json = br#"[{"id":"meta-llama/Llama-3.1-8B","downloads":9},{"modelId":"gpt2"},{"id":"bad id/x/y"},{"other":1}]"#;
        assert_eq!(
            parse_search(json).unwrap(),
            vec!["meta-llama/Llama-3.1-8B".to_string(), "gpt2".to_string()]
        );
        assert!(parse_search(b"{").is_err());
        assert!(parse_search(&vec![b' '; MAX_LISTING_BYTES + 1]).is_err());
    }

    #[test]
    fn refusals_are_named() {
        let words = |status, code| {
            refusal(
                status,
                code,
                "x/y@main: config.json",
                "https://h/x/y",
                false,
                "set HF_TOKEN",
            )
        };
        assert!(
            words(401, Some("GatedRepo"))
                .unwrap()
                .contains("gated or private (no token was given)")
        );
        assert!(
            words(401, Some("RepositoryNotFound"))
                .unwrap()
                .contains("not found (no such repository")
        );
        assert!(
            words(404, Some("RevisionNotFound"))
                .unwrap()
                .ends_with("not found (no such revision)")
        );
        assert!(
            words(404, Some("EntryNotFound"))
                .unwrap()
                .ends_with("not found (no such file in this revision)")
        );
        assert!(words(404, None).unwrap().ends_with("not found (HTTP 404)"));
        assert_eq!(words(500, None), None);
        assert!(
            refusal(403, None, "w", "p", true, "t")
                .unwrap()
                .contains("a token was sent, but it has no access")
        );
    }

    #[test]
    fn origins_compare_scheme_host_and_port() {
        assert!(same_origin(
            "https://huggingface.co/a",
            "https://huggingface.co"
        ));
        assert!(same_origin(
            "https://HuggingFace.co:443/x",
            "https://huggingface.co"
        ));
        assert!(same_origin(
            "http://127.0.0.1:8080?x",
            "http://127.0.0.1:8080"
        ));
        assert!(!same_origin(
            "https://cdn-lfs.hf.co/x",
            "https://huggingface.co"
        ));
        assert!(!same_origin("http://127.0.0.1:1/x", "http://127.0.0.1:2"));
        assert!(!same_origin(
            "http://huggingface.co/x",
            "https://huggingface.co"
        ));
        assert!(!same_origin(
            "https://huggingface.co.evil.example/x",
            "https://huggingface.co"
        ));
        assert!(!same_origin(
            "https://huggingface.co@evil.example/x",
            "https://huggingface.co"
        ));
        assert!(!same_origin(
            "ftp://huggingface.co/x",
            "ftp://huggingface.co"
        ));
        assert!(!same_origin(
            "https://huggingface.co:99999/x",
            "https://huggingface.co:99999"
        ));
        assert_eq!(
            origin("http://[::1]:8080/x"),
            Some(("http", "[::1]".to_string(), 8080))
        );
        assert_eq!(
            origin("http://[::1]/x"),
            Some(("http", "[::1]".to_string(), 80))
        );
    }

    fn file(path: &str, size: u64) -> RepoFile {
        RepoFile {
            path: path.to_string(),
            size,
        }
    }

    fn paths(w: &WeightFiles) -> Vec<String> {
        w.paths()
    }

    /// The shape of a real answer (google-bert/bert-base-uncased, as recorded in
    /// huggingface.js `packages/hub/src/lib/list-files.spec.ts`), plus a folder.
    const TREE: &str = r#"[
      {"type":"file","oid":"dc08351d4dc0732d9c8af04070ced089b201ce2f","size":345,"path":".gitattributes"},
      {"type":"file","oid":"fca794a5f07ff8f963fe8b61e3694b0fb7f955df","size":313,"path":"config.json"},
      {"type":"directory","oid":"6f0e5a6c1e6b8c9d0a1b2c3d4e5f60718293a4b5","size":0,"path":"coreml"},
      {"type":"file","oid":"ba5d19791be1dd7992e33bd61f20207b0f7f50a5","size":440473133,
       "lfs":{"oid":"097417381d6c7230bd9e3557456d726de6e83245ec8b24f529f60198a67b203a","size":440473133,"pointerSize":134},
       "xetHash":"2d8408d3a894d02517d04956e2f7546ff08362594072f3527ce144b5212a3296","path":"model.safetensors"}
    ]"#;

    #[test]
    fn the_tree_keeps_files_with_their_lfs_size() {
        let t = parse_tree(TREE.as_bytes()).unwrap();
        assert_eq!(
            t,
            vec![
                file(".gitattributes", 345),
                file("config.json", 313),
                file("model.safetensors", 440_473_133)
            ]
        );
        // lfs.size wins over size (the pointer's) when both are given.
        let t = parse_tree(br#"[{"type":"file","path":"a.gguf","size":134,"lfs":{"size":9}}]"#)
            .unwrap();
        assert_eq!(t, vec![file("a.gguf", 9)]);
    }

    #[test]
    fn a_bad_or_oversized_tree_is_refused() {
        for bad in [
            &b"{}"[..],
            b"not json",
            b"[{\"type\":\"file\",\"path\":\"x\"}]",
            b"[{\"type\":\"file\",\"path\":\"x\",\"size\":-1}]",
            b"[{\"type\":\"file\",\"size\":1}]",
        ] {
            let e = parse_tree(bad).unwrap_err();
            assert!(matches!(e, HubError::BadJson { .. }), "{e}");
            assert!(e.to_string().contains("file listing"), "{e}");
        }
        let mut big = b"[".to_vec();
        big.resize(MAX_LISTING_BYTES + 1, b' ');
        let e = parse_tree(&big).unwrap_err();
        assert!(matches!(e, HubError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains("16 MiB"), "{e}");
        let e = choose_weights(&[], Some(&big), None).unwrap_err();
        assert!(matches!(e, HubError::TooLarge { .. }), "{e}");
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
    fn link_headers_name_the_next_page() {
        let next = "https://huggingface.co/api/models/o/m/tree/main?recursive=true&cursor=ZXlK%3D";
        assert_eq!(link_next(&format!("<{next}>; rel=\"next\"")), Some(next));
        // Several links, the next one not first; rel lists, case and spacing.
        assert_eq!(
            link_next(&format!(
                "<https://h/a?x=1,2>; rel=\"prev first\", < {next} > ;REL = \"last NEXT\""
            )),
            Some(next)
        );
        assert_eq!(link_next(&format!("<{next}>;rel=next")), Some(next));
        assert_eq!(
            link_next("<https://h/a>; title=\"next, page\"; rel=\"last\""),
            None
        );
        for none in [
            "",
            "garbage",
            "<https://h/a>; rel=\"last\"",
            "<>; rel=next",
            "<https://h/a; rel=next",
        ] {
            assert_eq!(link_next(none), None, "{none}");
        }
    }

    #[test]
    fn listing_pages_are_followed_on_the_same_origin_and_bounded() {
        let page = |path: &str| format!(r#"[{{"type":"file","path":"{path}","size":1}}]"#);
        let mut t = TreePages::new("https://huggingface.co");
        let next = t
            .add(
                page("a").as_bytes(),
                Some("<https://huggingface.co/api/models/o/m/tree/main?cursor=1>; rel=\"next\""),
            )
            .unwrap();
        assert_eq!(
            next.as_deref(),
            Some("https://huggingface.co/api/models/o/m/tree/main?cursor=1")
        );
        // A root-relative link is on the endpoint.
        let next = t
            .add(
                page("b/c").as_bytes(),
                Some("</api/x?cursor=2>; rel=\"next\""),
            )
            .unwrap();
        assert_eq!(
            next.as_deref(),
            Some("https://huggingface.co:443/api/x?cursor=2")
        );
        assert_eq!(t.add(page("d").as_bytes(), None).unwrap(), None);
        assert_eq!(t.pages(), 3);
        assert_eq!(
            t.clone().into_files(),
            vec![file("a", 1), file("b/c", 1), file("d", 1)]
        );
        // Another site, or a protocol-relative link, is never followed.
        for foreign in [
            "<https://evil.example/x>; rel=next",
            "<//evil.example/x>; rel=next",
            "<http://huggingface.co/x>; rel=next",
        ] {
            let e = t.add(b"[]", Some(foreign)).unwrap_err();
            assert!(matches!(e, HubError::ForeignPage(_)), "{foreign}: {e}");
        }
        // Past the bound, an error that says so.
        let mut t = TreePages::new("http://127.0.0.1:9");
        let link = "<http://127.0.0.1:9/next>; rel=\"next\"";
        for _ in 1..MAX_TREE_PAGES {
            assert!(t.add(page("f").as_bytes(), Some(link)).unwrap().is_some());
        }
        let e = t.add(page("f").as_bytes(), Some(link)).unwrap_err();
        assert_eq!(
            e,
            HubError::ListingTooLong {
                pages: MAX_TREE_PAGES,
                files: MAX_TREE_PAGES
            }
        );
        assert!(
            e.to_string()
                .contains(&format!("past {MAX_TREE_PAGES} pages")),
            "{e}"
        );
        // A bad page is the listing's error.
        assert!(matches!(
            TreePages::new("https://h").add(b"{", None),
            Err(HubError::BadJson { .. })
        ));
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

    #[test]
    fn repo_ids_and_file_names_are_checked() {
        assert!(check_repo_id("meta-llama/Llama-3.1-8B").is_ok());
        assert!(check_repo_id("gpt2").is_ok());
        for bad in ["", "a/b/c", "../x", "a/..", "a b/c", "a/b?x", "/a", "a/b+c"] {
            assert!(check_repo_id(bad).is_err(), "{bad}");
        }
        assert!(check_file("model-00001-of-00061.safetensors").is_ok());
        assert!(check_file("gguf/Llama-3.1-8B-Q4_K_M.gguf").is_ok());
        for bad in [
            "",
            "../config.json",
            "a//b",
            "a/./b",
            "a b",
            "a?b",
            "a%2Fb",
            "/a",
        ] {
            assert!(check_file(bad).is_err(), "{bad}");
        }
        assert!(check_file(&"a".repeat(MAX_FILE_PATH + 1)).is_err());
    }

    /// Property tests (native only: proptest does not build for wasm32).
    #[cfg(not(target_arch = "wasm32"))]
    mod properties {
        use proptest::prelude::*;

        use super::*;

        fn names() -> impl Strategy<Value = String> {
            prop::sample::select(vec![
                "config.json",
                "model.safetensors",
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors",
                "consolidated.safetensors",
                "a.gguf",
                "b.GGUF",
                "mmproj-f16.gguf",
                "sub/c.gguf",
                "q/m-00001-of-00002.gguf",
                "q/m-00002-of-00002.gguf",
                "q/m-2-of-3.gguf",
                "bad name.gguf",
                "../x.safetensors",
            ])
            .prop_map(str::to_string)
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

            /// Any bytes: a listing or an error, never a panic.
            #[test]
            fn any_bytes_are_answered(data in prop::collection::vec(any::<u8>(), 0..512)) {
                let _ = parse_tree(&data);
                let _ = choose_weights(&[], Some(&data), None);
                let _ = index_shards(&data);
                let text = String::from_utf8_lossy(&data);
                let _ = link_next(&text);
                let _ = split_set_names(&text);
                let _ = TreePages::new("https://h").add(&data, Some(&text));
            }

            /// Whatever the listing, a choice names only listed, plain files, and the
            /// safetensors and GGUF answers never mix.
            #[test]
            fn a_choice_is_always_listed_and_plain(
                listed in prop::collection::vec((names(), 0u64..u64::MAX), 0..12),
                requested in prop::option::of(names()),
            ) {
                let tree: Vec<RepoFile> = listed
                    .into_iter()
                    .map(|(path, size)| RepoFile { path, size })
                    .collect();
                if let Ok(w) = choose_weights(&tree, None, requested.as_deref()) {
                    let files = w.files();
                    prop_assert!(!files.is_empty());
                    for f in files {
                        prop_assert!(tree.contains(f));
                        prop_assert!(check_file(&f.path).is_ok());
                        let gguf = is_gguf(&f.path);
                        prop_assert_eq!(gguf, matches!(w, WeightFiles::Gguf(_)));
                    }
                }
            }
        }
    }

    #[test]
    fn urls_are_encoded_as_huggingface_hub_does() {
        assert_eq!(
            resolve_url(
                "https://huggingface.co",
                "org/m",
                "refs/pr/1",
                "gguf/a+b.gguf"
            ),
            "https://huggingface.co/org/m/resolve/refs%2Fpr%2F1/gguf/a%2Bb.gguf"
        );
        assert_eq!(
            resolve_url("http://127.0.0.1:9", "org/m", "main", "config.json"),
            "http://127.0.0.1:9/org/m/resolve/main/config.json"
        );
        assert_eq!(
            tree_url("https://huggingface.co", "org/m", "v1.0"),
            "https://huggingface.co/api/models/org/m/tree/v1.0?recursive=true&expand=false"
        );
        assert_eq!(percent_encode("a b/é"), "a%20b%2F%C3%A9");
    }
}
