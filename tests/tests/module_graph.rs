//! No import circle between the top-level modules of the core, the agent and the page's
//! crates: each crate's shipped code (test modules aside) must form layers, so a module
//! can be read, moved or replaced knowing only what is below it. Inside the core's
//! `engine/`, the same for the modules every engine shares, and no engine's folder
//! reads another's: only the registry names an engine.
//!
//! The graph is read from the sources: a module `a` depends on `b` when any file under
//! `a` (outside `#[cfg(test)]` modules and `tests.rs` files) names `crate::b` — in a
//! path, or in a `crate::{b, …}` group. A circle fails with every edge of it and the
//! files that make each edge, so the message says where to cut.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Crates checked, by their source folder relative to the workspace root.
const CRATES: [&str; 5] = [
    "crates/gpumem-core/src",
    "crates/gpumem-proto/src",
    "agent/src",
    "web/src",
    "web/lookup/src",
];

type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the test crate sits in the workspace")
        .to_path_buf()
}

/// The crate's top-level modules: `name.rs` and `name/` beside the crate root.
fn top_modules(src: &Path) -> BTreeSet<String> {
    let mut tops = BTreeSet::new();
    for entry in std::fs::read_dir(src).expect("read the source folder") {
        let entry = entry.expect("read an entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().is_dir() {
            tops.insert(name);
        } else if let Some(stem) = name.strip_suffix(".rs")
            && !matches!(stem, "lib" | "main")
        {
            tops.insert(stem.to_owned());
        }
    }
    tops
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("read an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The shipped part of a file: comments dropped, and everything from a `#[cfg(test)]`
/// attribute that opens a module (after any further attributes or comments) cut off.
fn shipped_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let mut kept = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_start();
        if line.starts_with("#[cfg(test)]") {
            let mut j = i + 1;
            while j < lines.len() {
                let next = lines[j].trim_start();
                if next.starts_with("#[") || next.starts_with("//") {
                    j += 1;
                } else {
                    break;
                }
            }
            let opens_module = lines.get(j).is_some_and(|l| {
                let l = l.trim_start();
                l.starts_with("mod ")
                    || l.starts_with("pub mod ")
                    || l.starts_with("pub(crate) mod ")
            });
            if opens_module {
                break;
            }
        }
        kept.push(match lines[i].find("//") {
            Some(at) => &lines[i][..at],
            None => lines[i],
        });
        i += 1;
    }
    kept
}

fn identifier(rest: &str) -> &str {
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// The top-level modules a line names through `crate::`.
fn named_modules(line: &str, tops: &BTreeSet<String>, into: &mut BTreeSet<String>) {
    named_after(line, "crate::", tops, into);
}

/// The modules of `tops` a line names right after `prefix` (`crate::`,
/// `crate::engine::`, `super::`), in a path or a `{a, b}` group.
fn named_after(line: &str, prefix: &str, tops: &BTreeSet<String>, into: &mut BTreeSet<String>) {
    let mut rest = line;
    while let Some(at) = rest.find(prefix) {
        // `super::super::x` is not `super::x`: the caller asks for each depth.
        if prefix == "super::" && rest[..at].ends_with("super::") {
            rest = &rest[at + prefix.len()..];
            continue;
        }
        rest = &rest[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            for part in inner.split(',') {
                let name = identifier(part.trim());
                if tops.contains(name) {
                    into.insert(name.to_owned());
                }
            }
        } else {
            let name = identifier(rest);
            if tops.contains(name) {
                into.insert(name.to_owned());
            }
        }
    }
}

fn graph(src: &Path) -> Graph {
    let tops = top_modules(src);
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut g = Graph::new();
    for top in &tops {
        g.entry(top.clone()).or_default();
    }
    for file in files {
        let rel = file.strip_prefix(src).expect("under the source folder");
        let file_name = rel.file_name().unwrap_or_default().to_string_lossy();
        if file_name == "tests.rs" {
            continue;
        }
        let first = rel.components().next().expect("a component");
        let top = first.as_os_str().to_string_lossy();
        let top = top.strip_suffix(".rs").unwrap_or(&top).to_owned();
        if !tops.contains(&top) {
            continue; // lib.rs / main.rs
        }
        let text = std::fs::read_to_string(&file).expect("read a source file");
        let mut named = BTreeSet::new();
        for line in shipped_lines(&text) {
            named_modules(line, &tops, &mut named);
        }
        named.remove(&top);
        for dep in named {
            g.entry(top.clone())
                .or_default()
                .entry(dep)
                .or_default()
                .insert(rel.display().to_string());
        }
    }
    g
}

/// One circle of the graph, if any: a path a → … → a found by depth-first search.
fn find_circle(g: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        g: &Graph,
        node: &str,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(node.to_owned(), Mark::Open);
        path.push(node.to_owned());
        for dep in g.get(node).into_iter().flat_map(|d| d.keys()) {
            match marks.get(dep.as_str()) {
                Some(Mark::Open) => {
                    let from = path.iter().position(|p| p == dep).expect("on the path");
                    let mut circle = path[from..].to_vec();
                    circle.push(dep.clone());
                    return Some(circle);
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(c) = visit(g, dep, marks, path) {
                        return Some(c);
                    }
                }
            }
        }
        path.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in g.keys() {
        if !marks.contains_key(node)
            && let Some(c) = visit(g, node, &mut marks, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_crate_has_an_import_circle_between_its_top_level_modules() {
    let root = workspace_root();
    let mut failures = Vec::new();
    for krate in CRATES {
        let g = graph(&root.join(krate));
        assert!(g.len() > 1, "{krate}: expected several top-level modules");
        if let Some(circle) = find_circle(&g) {
            let mut msg = format!("{krate}: {}", circle.join(" → "));
            for pair in circle.windows(2) {
                let files = &g[&pair[0]][&pair[1]];
                msg.push_str(&format!(
                    "\n    {} → {} in {}",
                    pair[0],
                    pair[1],
                    files.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
            failures.push(msg);
        }
    }
    assert!(
        failures.is_empty(),
        "import circles:\n{}",
        failures.join("\n")
    );
}

/// The core's serving engines: `engine/` holds one folder per engine and the modules
/// every engine shares (files). The shared modules form layers; no engine's folder
/// reads another's; and no shared module names an engine's folder: only the registry's
/// list in the front door (`engine/mod.rs`, `engines!`) does.
#[test]
fn the_engines_are_apart_and_their_shared_modules_form_layers() {
    let dir = workspace_root().join("crates/gpumem-core/src/engine");
    let mut nodes = BTreeSet::new();
    let mut folders = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("read engine/") {
        let entry = entry.expect("an entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().is_dir() {
            folders.insert(name.clone());
            nodes.insert(name);
        } else if let Some(stem) = name.strip_suffix(".rs")
            && !matches!(stem, "mod" | "tests")
        {
            nodes.insert(stem.to_owned());
        }
    }
    assert!(folders.len() >= 5, "one folder per engine: {folders:?}");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let mut g = Graph::new();
    for node in &nodes {
        g.entry(node.clone()).or_default();
    }
    for file in files {
        let rel = file.strip_prefix(&dir).expect("under engine/");
        let depth = rel.components().count();
        let name = rel.file_name().unwrap_or_default().to_string_lossy();
        let first = rel.components().next().expect("a component");
        let owner = first.as_os_str().to_string_lossy();
        let owner = owner.strip_suffix(".rs").unwrap_or(&owner).to_owned();
        if name == "tests.rs" || !nodes.contains(&owner) {
            continue;
        }
        // `super::` from engine/x.rs and engine/x/mod.rs is engine/; deeper files
        // reach it through `super::super::`.
        let relative = match (depth, name.as_ref()) {
            (1, _) | (2, "mod.rs") => "super::",
            (2, _) | (3, "mod.rs") => "super::super::",
            _ => "super::super::super::",
        };
        let text = std::fs::read_to_string(&file).expect("read a source file");
        let mut named = BTreeSet::new();
        for line in shipped_lines(&text) {
            named_after(line, "crate::engine::", &nodes, &mut named);
            if relative == "super::" {
                named_after(line, "super::", &nodes, &mut named);
            } else {
                let mut rest = line;
                while let Some(at) = rest.find(relative) {
                    named_after(&rest[at..], relative, &nodes, &mut named);
                    rest = &rest[at + relative.len()..];
                }
            }
        }
        named.remove(&owner);
        for dep in named {
            g.entry(owner.clone())
                .or_default()
                .entry(dep)
                .or_default()
                .insert(rel.display().to_string());
        }
    }
    let mut failures = Vec::new();
    if let Some(circle) = find_circle(&g) {
        failures.push(format!("a circle: {}", circle.join(" → ")));
    }
    for (from, deps) in &g {
        for (to, files) in deps {
            let files: Vec<_> = files.iter().cloned().collect();
            if folders.contains(to) {
                failures.push(format!(
                    "{from} reads the engine {to} ({}): only the registry's list names an engine",
                    files.join(", ")
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The reader sees what it must: an engine reads the shared modules, and the list
    // names every folder.
    let front = std::fs::read_to_string(dir.join("mod.rs")).expect("engine/mod.rs");
    assert!(
        folders
            .iter()
            .all(|f| front.contains(&format!("    {f}::"))),
        "every engine's folder is a line of the registry's list"
    );
    assert!(
        g["vllm"].contains_key("pool") && g["vllm"].contains_key("contract"),
        "{:?}",
        g["vllm"]
    );
}

#[test]
fn the_reader_sees_a_circle_and_ignores_test_modules() {
    let tops: BTreeSet<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    let mut named = BTreeSet::new();
    named_modules("use crate::{a::X, b, zz};", &tops, &mut named);
    named_modules("let v = crate::c::f();", &tops, &mut named);
    assert_eq!(named, tops);

    let text = "use crate::a;\n// crate::b in a comment\n#[cfg(test)]\n#[allow(x)]\nmod tests {\n use crate::c;\n}\n";
    let kept = shipped_lines(text);
    let mut named = BTreeSet::new();
    for l in kept {
        named_modules(l, &tops, &mut named);
    }
    assert_eq!(named.into_iter().collect::<Vec<_>>(), ["a"]);

    let mut g = Graph::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a")] {
        g.entry(a.into())
            .or_default()
            .entry(b.into())
            .or_default()
            .insert("f.rs".into());
    }
    assert_eq!(
        find_circle(&g).expect("a circle"),
        ["a", "b", "c", "a"].map(String::from)
    );
    g.get_mut("c").expect("c").clear();
    assert_eq!(find_circle(&g), None);
}
