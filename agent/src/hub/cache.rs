//! The Hub lookup's cache: what was read once is not asked for again.
//!
//! Under `$XDG_CACHE_HOME/gpumem/hub` (default `~/.cache/gpumem/hub`), one folder per
//! repository, `{repo}` = the id as one path component
//! ([`gpumem_core::import::hub::path_component`]: `org%2Fname`):
//!
//! - `{repo}/refs/{revision}`: the commit a branch or tag resolved to
//!   (`X-Repo-Commit`), trusted for [`REF_TTL`] — a branch moves, a commit does not;
//! - `{repo}/{commit}/manifest-{variant}.json`: the config text and the list of
//!   weight files of one lookup;
//! - `{repo}/{commit}/{file}.head`: the file's size (8 bytes, little-endian)
//!   then the header bytes read from its start — parsed again on use, so a damaged
//!   entry is refused by the same parser and simply read again.
//!
//! Without the commit (a mirror that does not send `X-Repo-Commit`), the revision as
//! given stands in for it, under `{repo}/rev/{revision}`. Every name that comes from
//! the user or a server is one path component: `--revision ..` is the folder `%2E.`,
//! never the organisation's, so no repository reads another's entries.
//!
//! The cache is bounded: at most [`CACHE_BUDGET`] bytes in all; past it the entries
//! used longest ago (a read touches its entry) are removed. Writes go to a temporary
//! file then are renamed; a cache that cannot be written is skipped, never an error.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use gpumem_core::import::hub::path_component;

use super::client::is_commit;

/// How long a branch or tag is trusted to point at the commit it last resolved to.
pub const REF_TTL: Duration = Duration::from_secs(24 * 3600);
/// Largest cache entry read back (a safetensors header is at most 100 MB).
const ENTRY_LIMIT: u64 = 128 << 20;
/// Bytes the whole cache keeps at most; past it the entries used longest ago go.
pub const CACHE_BUDGET: u64 = 512 << 20;
/// Files looked at when the cache is measured (a cache never holds this many).
const CACHE_FILES_LIMIT: usize = 100_000;

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
    /// The whole cache (`…/gpumem/hub`).
    root: Option<PathBuf>,
    /// This repository's folder in it.
    dir: Option<PathBuf>,
}

impl Cache {
    /// The user's cache for `repo` (already validated: plain path segments).
    pub fn for_repo(repo: &str) -> Self {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
        let root = base.map(|b| b.join("gpumem").join("hub"));
        Cache {
            dir: root.as_ref().map(|r| r.join(path_component(repo))),
            root,
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
            .join(path_component(revision));
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
                &d.join("refs").join(path_component(revision)),
                &[commit.as_bytes()],
            );
        }
    }

    /// `{repo}/{commit}`, or `{repo}/rev/{revision}` for a revision that stands in for
    /// its commit: never the same folder as `refs`, and always inside `{repo}`.
    fn key_dir(&self, key: &str) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        Some(if is_commit(key) {
            dir.join(key.to_ascii_lowercase())
        } else {
            dir.join("rev").join(path_component(key))
        })
    }

    /// The manifest of `variant` ("default" or the file named) at `key` (commit or revision).
    pub fn manifest(&self, key: &str, variant: &str) -> Option<Manifest> {
        let p = self
            .key_dir(key)?
            .join(format!("manifest-{}.json", path_component(variant)));
        serde_json::from_slice(&read_bounded(&p)?).ok()
    }

    /// Stores a manifest.
    pub fn set_manifest(&self, key: &str, variant: &str, m: &Manifest) {
        if let (Some(d), Ok(text)) = (self.key_dir(key), serde_json::to_vec(m)) {
            write_atomic(
                &d.join(format!("manifest-{}.json", path_component(variant))),
                &[&text],
            );
        }
    }

    /// A header read before: (file size, bytes from the file's start).
    pub fn head(&self, key: &str, file: &str) -> Option<(u64, Vec<u8>)> {
        let bytes = read_bounded(&self.key_dir(key)?.join(format!("{file}.head")))?;
        let size = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
        Some((size, bytes.get(8..)?.to_vec()))
    }

    /// The length of a cached header's entry, without reading it.
    pub fn head_len(&self, key: &str, file: &str) -> Option<u64> {
        let path = self.key_dir(key)?.join(format!("{file}.head"));
        Some(std::fs::metadata(path).ok()?.len().min(ENTRY_LIMIT))
    }

    /// Stores a header read.
    pub fn set_head(&self, key: &str, file: &str, size: u64, prefix: &[u8]) {
        if let Some(d) = self.key_dir(key) {
            write_atomic(
                &d.join(format!("{file}.head")),
                &[&size.to_le_bytes(), prefix],
            );
        }
    }

    /// Keeps the whole cache within `budget` bytes: the files used longest ago (a read
    /// or write sets a file's modification time) are removed until it fits. Returns
    /// the bytes removed.
    pub fn evict(&self, budget: u64) -> u64 {
        let Some(root) = &self.root else { return 0 };
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = Vec::new();
        let mut folders = vec![root.clone()];
        while let Some(dir) = folders.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let Ok(meta) = entry.metadata() else { continue };
                if meta.is_dir() {
                    folders.push(entry.path());
                } else if meta.is_file() && files.len() < CACHE_FILES_LIMIT {
                    let used = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                    files.push((used, meta.len(), entry.path()));
                }
            }
        }
        let mut total: u64 = files.iter().map(|f| f.1).fold(0, u64::saturating_add);
        if total <= budget {
            return 0;
        }
        files.sort_unstable_by_key(|f| f.0);
        let mut removed = 0u64;
        for (_, len, path) in files {
            if total <= budget {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total = total.saturating_sub(len);
                removed = removed.saturating_add(len);
            }
        }
        removed
    }
}

/// The entry's bytes (at most [`ENTRY_LIMIT`]); a read marks it as used just now, so
/// eviction keeps what is read often.
fn read_bounded(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    let file = std::fs::File::open(path).ok()?;
    let _ = file.set_modified(std::time::SystemTime::now());
    file.take(ENTRY_LIMIT).read_to_end(&mut out).ok()?;
    Some(out)
}

/// Temporary file then rename, so a reader never sees half an entry; errors ignored
/// (a cache is an optimisation). `parts` are written one after the other (no copy of
/// a large header to join them).
fn write_atomic(path: &Path, parts: &[&[u8]]) {
    use std::io::Write;
    let Some(parent) = path.parent() else { return };
    if std::fs::create_dir_all(parent).is_err() {
        return;
    }
    let tmp = parent.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id()
    ));
    let written =
        std::fs::File::create(&tmp).and_then(|mut f| parts.iter().try_for_each(|p| f.write_all(p)));
    if written.is_err() || std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_in(base: &Path, repo: &str) -> Cache {
        let root = base.join("gpumem").join("hub");
        Cache {
            dir: Some(root.join(path_component(repo))),
            root: Some(root),
        }
    }

    #[test]
    fn a_dot_revision_stays_inside_its_repository() {
        // A mirror without X-Repo-Commit: the revision as given is the key. `..` once
        // keyed the organisation's folder, and org/b then read org/a's header.
        let base = tempfile::tempdir().expect("tempdir");
        let (a, b) = (
            cache_in(base.path(), "org/a"),
            cache_in(base.path(), "org/b"),
        );
        for key in ["..", ".", "refs", "rev"] {
            a.set_head(key, "model.safetensors", 262_144, b"header of a");
            a.set_manifest(
                key,
                "default",
                &Manifest {
                    config: None,
                    files: vec!["model.safetensors".into()],
                },
            );
            assert!(a.head(key, "model.safetensors").is_some(), "{key}");
            assert!(b.head(key, "model.safetensors").is_none(), "{key}");
            assert!(b.manifest(key, "default").is_none(), "{key}");
        }
        // Every entry is inside a's own folder.
        for entry in walk(base.path()) {
            assert!(
                entry.starts_with(base.path().join("gpumem/hub/org%2Fa")),
                "{}",
                entry.display()
            );
        }
        // A legacy one-segment id and an organisation never share a folder either.
        let (legacy, org) = (
            cache_in(base.path(), "gpt2"),
            cache_in(base.path(), "gpt2/x"),
        );
        legacy.set_head("x", "f.gguf", 1, b"legacy");
        assert!(org.head("x", "f.gguf").is_none());
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
            if e.path().is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path());
            }
        }
        out
    }

    #[test]
    fn the_cache_keeps_to_its_budget_evicting_the_least_recently_used() {
        let base = tempfile::tempdir().expect("tempdir");
        let c = cache_in(base.path(), "org/a");
        let commit = "a".repeat(40);
        let block = vec![0u8; 1 << 20];
        for i in 0..8 {
            c.set_head(&commit, &format!("f{i}.safetensors"), 1, &block);
            // Distinct modification times, oldest first.
            let path = c
                .key_dir(&commit)
                .expect("dir")
                .join(format!("f{i}.safetensors.head"));
            let when = std::time::SystemTime::now() - Duration::from_secs(100 - i);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_modified(when))
                .expect("touch");
        }
        // A read makes the oldest entry the most recently used.
        assert!(c.head(&commit, "f0.safetensors").is_some());
        let removed = c.evict((5 << 20) + 1_000);
        assert!(removed >= 3 << 20, "{removed}");
        let kept: Vec<bool> = (0..8)
            .map(|i| c.head(&commit, &format!("f{i}.safetensors")).is_some())
            .collect();
        assert_eq!(kept, [true, false, false, false, true, true, true, true]);
    }
}
