//! Repository ids, revisions and file paths checked before they become part of a URL
//! or a cache path, and the two URLs a lookup needs (`resolve` and the listing's
//! `tree`), encoded as `huggingface_hub` encodes them.

#![deny(clippy::arithmetic_side_effects)]

use super::HubError;

/// Longest repository id accepted (the Hub's own limit is 96 characters per name).
const MAX_REPO_ID: usize = 200;
/// Longest file path accepted.
const MAX_FILE_PATH: usize = 500;

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

/// `s` as one safe path component (a cache folder or file name for a repository id or
/// a revision): percent-encoded as [`percent_encode`] does, and a leading `.` written
/// `%2E`, so `.`, `..` and hidden names cannot occur. Injective: [`percent_encode`]
/// never writes `%2E` itself, so two inputs never share a component.
pub fn path_component(s: &str) -> String {
    let encoded = percent_encode(s);
    match encoded.strip_prefix('.') {
        Some(rest) => format!("%2E{rest}"),
        None if encoded.is_empty() => "%".to_string(),
        None => encoded,
    }
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

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // test data from small known numbers
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn revisions_are_checked() {
        assert!(check_revision("main").is_ok());
        assert!(check_revision("refs/pr/1").is_ok());
        assert!(check_revision("").is_err());
        assert!(check_revision("a\nb").is_err());
        assert!(check_revision(&"x".repeat(257)).is_err());
    }

    #[test]
    fn path_components_are_single_safe_and_distinct() {
        for (input, want) in [
            ("..", "%2E."),
            (".", "%2E"),
            (".hidden", "%2Ehidden"),
            ("main", "main"),
            ("refs/pr/1", "refs%2Fpr%2F1"),
            ("org/name", "org%2Fname"),
            ("a.b", "a.b"),
            ("", "%"),
        ] {
            assert_eq!(path_component(input), want, "{input:?}");
        }
        let inputs = ["..", "%2E.", ".", "%2E", "%", "", "a/b", "a%2Fb"];
        let outputs: BTreeSet<String> = inputs.iter().map(|s| path_component(s)).collect();
        assert_eq!(outputs.len(), inputs.len());
        for o in &outputs {
            assert!(!o.contains('/') && o != "." && o != ".." && !o.starts_with('.'));
        }
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
