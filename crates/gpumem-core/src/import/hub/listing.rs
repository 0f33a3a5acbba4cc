//! The Hub's file listing, read page by page.
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

#![deny(clippy::arithmetic_side_effects)]

use serde::Deserialize;

use super::http::{link_next, origin, same_origin};
use super::{HubError, bounded};

/// Files of a whole listing read at most, every page together (a model repository
/// holds tens to a few thousand; [`HubError::ListingTooLong`] past it).
pub const MAX_LISTED_FILES: usize = 200_000;
/// Pages of the file listing read at most: a lookup never cuts a listing silently,
/// it refuses past this ([`HubError::ListingTooLong`]). Each page is one more
/// sequential request, so a repository of a few hundred files costs none.
pub const MAX_TREE_PAGES: usize = 50;

/// One file of a repository, as listed by the Hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFile {
    /// Path from the repository's root.
    pub path: String,
    /// Size in bytes (of the LFS object for a large file, not of its pointer).
    pub size: u64,
}

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
        if self.files.len() > MAX_LISTED_FILES {
            return Err(HubError::ListingTooLong {
                pages: self.pages,
                files: self.files.len(),
            });
        }
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
    fn a_listing_past_its_file_bound_is_refused() {
        let entry = r#"{"type":"file","path":"x","size":1},"#;
        let page = format!(
            "[{}{{\"type\":\"file\",\"path\":\"y\",\"size\":1}}]",
            entry.repeat(99_999)
        );
        let mut pages = TreePages::new("https://h.co");
        let next = Some(r#"<https://h.co/next>; rel="next""#);
        assert!(pages.add(page.as_bytes(), next).is_ok());
        assert!(pages.add(page.as_bytes(), next).is_ok());
        assert!(matches!(
            pages.add(page.as_bytes(), next),
            Err(HubError::ListingTooLong { files: 300_000, .. })
        ));
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
}
