//! Embeds the built page (`../dist`, written by `trunk build`) into `gpumem-agent`, so
//! that `serve` works from the single binary.
//!
//! It writes `$OUT_DIR/dist_assets.rs`: a table of (URL path, content type, bytes via
//! `include_bytes!`). A missing or empty `dist/` is not an error — the agent then serves
//! a short page saying the page was not built, and the WebSocket works as usual — because
//! the agent must build on a fresh clone before anyone has run trunk.
//!
//! It also writes `$OUT_DIR/bundled_models.rs`, the catalogue of named models
//! (`models/*.json`, one published config.json each) as (file name, text via
//! `include_str!`): see [`bundled_models`]. And it sets `GPUMEM_GIT_COMMIT` (shown by
//! `--version`): see [`git_commit`].
#![allow(clippy::disallowed_macros)] // build scripts talk to cargo through stdout

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
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
    git_commit(&manifest_dir);
    bundled_models(&manifest_dir);

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

    write_if_changed("dist_assets.rs", &table);
}

/// Writes `$OUT_DIR/{name}` unless it already holds `text`: rewriting an identical
/// table would still make cargo recompile the agent.
fn write_if_changed(name: &str, text: &str) {
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default()).join(name);
    if fs::read_to_string(&out).ok().as_deref() != Some(text)
        && let Err(e) = fs::write(&out, text)
    {
        panic!("cannot write {}: {e}", out.display());
    }
}

/// The bundled catalogue's table: every `models/*.json` (plain UTF-8 names, no hidden
/// files), sorted by name. A missing folder gives an empty table (the agent then knows
/// no model by name and reads every one from the Hub); what each file must hold is
/// checked by the agent's tests, not here.
fn bundled_models(manifest_dir: &Path) {
    let dir = manifest_dir.join("models");
    println!("cargo:rerun-if-changed=models");
    let mut files: Vec<(String, PathBuf)> = fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let path = entry.path();
            let name = path.file_name()?.to_str()?.to_owned();
            let plain = !name.starts_with('.') && name.ends_with(".json");
            (plain && entry.file_type().ok()?.is_file()).then(|| {
                let absolute = fs::canonicalize(&path).unwrap_or(path);
                (name, absolute)
            })
        })
        .collect();
    files.sort();
    let mut table = String::from(
        "/// The bundled models: (file name, the file's text), sorted by file name.\n\
         pub static FILES: &[(&str, &str)] = &[\n",
    );
    for (name, path) in &files {
        let _ = writeln!(
            table,
            "    ({name:?}, include_str!({path:?})),",
            path = path.display().to_string(),
        );
    }
    table.push_str("];\n");
    write_if_changed("bundled_models.rs", &table);
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

/// Sets `GPUMEM_GIT_COMMIT` to `git rev-parse --short HEAD` of this checkout, or to
/// "unknown" where that cannot be had: no git, or no repository around the sources (a
/// wheel built from an sdist, `cargo install` from a tarball). Never a build failure,
/// and never the commit of an unrelated repository that happens to contain the sources.
fn git_commit(manifest_dir: &Path) {
    let git = |args: &[&str]| -> Option<String> {
        let output = Command::new("git")
            .args(args)
            .current_dir(manifest_dir)
            .output()
            .ok()?;
        let text = String::from_utf8(output.stdout).ok()?;
        let text = text.trim();
        (output.status.success() && !text.is_empty()).then(|| text.to_owned())
    };
    let workspace = fs::canonicalize(manifest_dir.join("..")).ok();
    let ours = git(&["rev-parse", "--show-toplevel"])
        .and_then(|top| fs::canonicalize(top).ok())
        .is_some_and(|top| Some(top) == workspace);
    let commit = ours
        .then(|| git(&["rev-parse", "--short", "HEAD"]))
        .flatten()
        .filter(|c| c.chars().all(|ch| ch.is_ascii_hexdigit()))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=GPUMEM_GIT_COMMIT={commit}");
    if !ours {
        return;
    }
    // Rebuild when HEAD moves: HEAD itself (a checkout), the branch it names (a commit)
    // and packed-refs (where a branch lives after `git gc`). Only existing files are
    // named: cargo reruns a build script on every build for a missing one.
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            let path = manifest_dir.join(path);
            if path.is_file() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
