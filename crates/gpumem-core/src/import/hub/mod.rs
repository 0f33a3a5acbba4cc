//! The Hugging Face Hub's conventions, without I/O: one implementation for the agent
//! (`estimate --model`) and the page's lookup, so both pick the same files from the
//! same answers and build the same URLs.
//!
//! The host fetches; this module only
//!
//! - checks what the user typed ([`check_repo_id`], [`check_file`]) before it becomes
//!   part of a URL or a cache path, and builds the URLs a lookup needs ([`tree_url`],
//!   [`resolve_url`]), encoded as `huggingface_hub` encodes them ([`ids`]);
//! - reads the Hub's file listing page by page ([`TreePages`], [`parse_tree`]:
//!   [`listing`]);
//! - decides which files hold the weights ([`choose_weights`]): a file the user named,
//!   else the shards of `model.safetensors.index.json`, else `model.safetensors`, else
//!   the one GGUF model — a single file or a complete split set ([`GgufChoice`]), whose
//!   headers [`check_split`] checks once read ([`weights`]);
//! - builds and reads the model search ([`search`]);
//! - reads the HTTP answers' headers the same way on both hosts: `Link`,
//!   `Content-Range`, the origin a token may go to, a refusal in words ([`http`]).
//!
//! Every refusal is a [`HubError`]; a message names at most [`NAMED_IN_ERRORS`] files
//! or models, whatever a listing holds.

#![deny(clippy::arithmetic_side_effects)]

pub mod http;
pub mod ids;
pub mod listing;
pub mod search;
pub mod weights;

use std::fmt;

use crate::units::Bytes;

pub use http::{link_next, origin, parse_content_range, refusal, same_origin};
pub use ids::{
    check_file, check_repo_id, check_revision, path_component, percent_encode, resolve_url,
    tree_url,
};
pub use listing::{MAX_LISTED_FILES, MAX_TREE_PAGES, RepoFile, TreePages, parse_tree};
pub use search::{SEARCH_LIMIT, parse_search, search_url};
pub use weights::{
    GgufChoice, WeightFiles, check_read_split, check_split, choose_weights, index_shards,
    split_set_names,
};

/// Largest tree listing / index JSON read.
pub const MAX_LISTING_BYTES: usize = 16 << 20;
/// The shard index of a sharded safetensors checkpoint (`transformers`' name).
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// The single file of an unsharded safetensors checkpoint.
pub const SINGLE_FILE: &str = "model.safetensors";
/// The model's configuration.
pub const CONFIG_FILE: &str = "config.json";
/// Files (or GGUF models) named in a message (a listing may hold thousands): the
/// rest are counted, never listed, so a hostile listing cannot make a message large.
pub const NAMED_IN_ERRORS: usize = 20;

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
                for c in choices.iter().take(NAMED_IN_ERRORS) {
                    if c.missing_count > 0 {
                        write!(
                            f,
                            "\n  {}  incomplete: {} of its {} split files missing",
                            c.name,
                            c.missing_count,
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
                if choices.len() > NAMED_IN_ERRORS {
                    write!(
                        f,
                        "\n  … and {} more",
                        choices.len().saturating_sub(NAMED_IN_ERRORS)
                    )?;
                }
                Ok(())
            }
            HubError::IncompleteSplit(c) => {
                write!(
                    f,
                    "{}: a GGUF model split into {} files, but the repository lacks {} of them: ",
                    c.name,
                    c.count(),
                    c.missing_count
                )?;
                for (i, m) in c.missing.iter().take(NAMED_IN_ERRORS).enumerate() {
                    write!(f, "{}{m}", if i == 0 { "" } else { ", " })?;
                }
                if c.missing_count > c.missing.len() {
                    write!(
                        f,
                        " and {} more",
                        c.missing_count.saturating_sub(c.missing.len())
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

fn bounded(json: &[u8], what: &'static str) -> Result<(), HubError> {
    if json.len() > MAX_LISTING_BYTES {
        return Err(HubError::TooLarge {
            what,
            bytes: json.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::weights::is_gguf;
    use super::*;

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
}
