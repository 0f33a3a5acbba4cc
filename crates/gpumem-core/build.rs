//! Writes the family registry: every file of `src/import/config/families/` (but
//! `mod.rs`) is one model family whose records are its `FAMILIES`, so a new family is
//! its file alone — no list to edit. `$OUT_DIR/families.rs` holds, sorted by file name,
//! one `mod` item per file (by its absolute path) and `REGISTRY`, one row per file;
//! `families/mod.rs` includes it. Records are found by `model_type` (or GGUF
//! architecture), which no two records share, so the order is only the file names'.
// Build scripts talk to cargo through stdout. The library is pure (no file, no
// environment: clippy.toml); its build script runs on the build host, reads this
// crate's own source folder and writes into OUT_DIR.
#![allow(clippy::disallowed_macros, clippy::disallowed_methods)]

use std::fmt::Write as _;
use std::path::PathBuf;
use std::{env, fs};

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let dir = manifest_dir.join("src/import/config/families");
    // Cargo rescans a directory given here for any change inside it (a file added or
    // removed included).
    println!("cargo:rerun-if-changed=src/import/config/families");
    println!("cargo:rerun-if-changed=build.rs");

    let mut names: Vec<String> = match fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|f| f.strip_suffix(".rs").map(str::to_owned))
            .filter(|n| n != "mod")
            .collect(),
        Err(e) => panic!("reading {}: {e}", dir.display()),
    };
    names.sort();

    let mut out = String::from("// Written by build.rs from the files of this folder.\n\n");
    for name in &names {
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "a family file's name is a Rust module name (lowercase, digits, `_`): {name}.rs"
        );
        let path = dir.join(format!("{name}.rs"));
        let _ = writeln!(
            out,
            "#[path = {:?}]\nmod {name};",
            path.display().to_string()
        );
    }
    out.push_str(
        "\n/// Every family file's records, one row per file (the `model_type`s of one record\n\
         /// never appear in another's).\n\
         pub(crate) const REGISTRY: &[&[&Family]] = &[\n",
    );
    for name in &names {
        let _ = writeln!(out, "    {name}::FAMILIES,");
    }
    out.push_str("];\n");

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default());
    if let Err(e) = fs::write(out_dir.join("families.rs"), out) {
        panic!("writing families.rs into OUT_DIR: {e}");
    }
}
