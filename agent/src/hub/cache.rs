//! The Hub lookup's cache: what was read once is not asked for again.
//!
//! Under `$XDG_CACHE_HOME/gpumem/hub` (default `~/.cache/gpumem/hub`):
//!
//! - `{org}/{name}/refs/{revision}`: the commit a branch or tag resolved to
//!   (`X-Repo-Commit`), trusted for [`REF_TTL`] — a branch moves, a commit does not;
//! - `{org}/{name}/{commit}/manifest-{variant}.json`: the config text and the list of
//!   weight files of one lookup;
//! - `{org}/{name}/{commit}/{file}.head`: the file's size (8 bytes, little-endian)
//!   then the header bytes read from its start — parsed again on use, so a damaged
//!   entry is refused by the same parser and simply read again.
//!
//! Without the commit (a mirror that does not send `X-Repo-Commit`), the revision as
//! given stands in for it. Writes go to a temporary file then are renamed; a cache that
//! cannot be written is skipped, never an error.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use gpumem_core::import::hub::percent_encode;

use super::client::is_commit;

/// How long a branch or tag is trusted to point at the commit it last resolved to.
pub const REF_TTL: Duration = Duration::from_secs(24 * 3600);
/// Largest cache entry read back (a safetensors header is at most 100 MB).
const ENTRY_LIMIT: u64 = 128 << 20;

/// What one lookup found, kept for the next.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// `config.json`'s text, when the repository has one.
    pub config: Option<String>,
    /// The weight files read, in order.
    pub files: Vec<String>,
}

/// The cache of one repository.
pub struct Cache {
    dir: Option<PathBuf>,
}

impl Cache {
    /// The user's cache for `repo` (already validated: plain path segments).
    pub fn for_repo(repo: &str) -> Self {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
        Cache {
            dir: base.map(|b| b.join("gpumem").join("hub").join(repo)),
        }
    }

    /// The commit `revision` is known to resolve to (itself when it is a commit id).
    pub fn commit_of(&self, revision: &str) -> Option<String> {
        if is_commit(revision) {
            return Some(revision.to_ascii_lowercase());
        }
        let path = self
            .dir
            .as_ref()?
            .join("refs")
            .join(percent_encode(revision));
        let age = std::fs::metadata(&path)
            .ok()?
            .modified()
            .ok()?
            .elapsed()
            .ok()?;
        if age > REF_TTL {
            return None;
        }
        let text = read_bounded(&path)?;
        let c = String::from_utf8(text).ok()?;
        is_commit(c.trim()).then(|| c.trim().to_string())
    }

    /// Remembers the commit a revision resolved to.
    pub fn set_commit(&self, revision: &str, commit: &str) {
        if let Some(d) = &self.dir
            && !is_commit(revision)
        {
            write_atomic(
                &d.join("refs").join(percent_encode(revision)),
                commit.as_bytes(),
            );
        }
    }

    fn key_dir(&self, key: &str) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join(percent_encode(key)))
    }

    /// The manifest of `variant` ("default" or the file named) at `key` (commit or revision).
    pub fn manifest(&self, key: &str, variant: &str) -> Option<Manifest> {
        let p = self
            .key_dir(key)?
            .join(format!("manifest-{}.json", percent_encode(variant)));
        serde_json::from_slice(&read_bounded(&p)?).ok()
    }

    /// Stores a manifest.
    pub fn set_manifest(&self, key: &str, variant: &str, m: &Manifest) {
        if let (Some(d), Ok(text)) = (self.key_dir(key), serde_json::to_vec(m)) {
            write_atomic(
                &d.join(format!("manifest-{}.json", percent_encode(variant))),
                &text,
            );
        }
    }

    /// A header read before: (file size, bytes from the file's start).
    pub fn head(&self, key: &str, file: &str) -> Option<(u64, Vec<u8>)> {
        let bytes = read_bounded(&self.key_dir(key)?.join(format!("{file}.head")))?;
        let size = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
        Some((size, bytes.get(8..)?.to_vec()))
    }

    /// Stores a header read.
    pub fn set_head(&self, key: &str, file: &str, size: u64, prefix: &[u8]) {
        if let Some(d) = self.key_dir(key) {
            let mut bytes = size.to_le_bytes().to_vec();
            bytes.extend_from_slice(prefix);
            write_atomic(&d.join(format!("{file}.head")), &bytes);
        }
    }
}

fn read_bounded(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(ENTRY_LIMIT)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

/// Temporary file then rename, so a reader never sees half an entry; errors ignored
/// (a cache is an optimisation).
fn write_atomic(path: &Path, bytes: &[u8]) {
    let Some(parent) = path.parent() else { return };
    if std::fs::create_dir_all(parent).is_err() {
        return;
    }
    let tmp = parent.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id()
    ));
    if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}
