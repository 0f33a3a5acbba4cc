//! Embeds the built page (`../dist`, written by `trunk build`) into `gpumem-agent`, so
//! that `serve` works from the single binary (R-PAIR-1).
//!
//! It writes `$OUT_DIR/dist_assets.rs`: a table of (URL path, content type, bytes via
//! `include_bytes!`). A missing or empty `dist/` is not an error — the agent then serves
//! a short page saying the page was not built, and the WebSocket works as usual — because
//! the agent must build on a fresh clone before anyone has run trunk.
#![allow(clippy::disallowed_macros)] // build scripts talk to cargo through stdout

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

// Shared with the agent's `--dist` loader so both agree on every content type.
#[path = "src/serve/content_type.rs"]
mod content_type;
use content_type::content_type;

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let dist = manifest_dir.join("..").join("dist");
    // Cargo rescans a directory given here for any change inside it.
    println!("cargo:rerun-if-changed=../dist");
    println!("cargo:rerun-if-changed=build.rs");

    let mut files = Vec::new();
    if dist.is_dir() {
        collect(&dist, &dist, &mut files);
    }
    files.sort();

    let mut table = String::from(
        "/// The built page: (URL path, content type, bytes), sorted by path.\n\
         pub static ASSETS: &[(&str, &str, &[u8])] = &[\n",
    );
    for (url, path) in &files {
        let _ = writeln!(
            table,
            "    ({url:?}, {ctype:?}, include_bytes!({path:?})),",
            ctype = content_type(url),
            path = path.display().to_string(),
        );
    }
    table.push_str("];\n");

    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default()).join("dist_assets.rs");
    // Rewriting an identical table would still make cargo recompile the agent.
    if fs::read_to_string(&out).ok().as_deref() != Some(table.as_str())
        && let Err(e) = fs::write(&out, table)
    {
        panic!("cannot write {}: {e}", out.display());
    }
}

/// Walks `dir`, collecting (URL path, absolute file path) for every regular file whose
/// path is plain UTF-8 and has no hidden component (editor and OS droppings stay out).
fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            collect(root, &path, files);
        } else if kind.is_file() {
            let Ok(relative) = path.strip_prefix(root) else {
                continue;
            };
            let Some(relative) = relative.to_str() else {
                continue;
            };
            let url = format!("/{}", relative.replace(std::path::MAIN_SEPARATOR, "/"));
            let absolute = fs::canonicalize(&path).unwrap_or(path);
            files.push((url, absolute));
        }
    }
}
