//! One set of caching-allocator rules: the estimator's model
//! (`gpumem_core::allocator::Allocator`) and the trace's (`gpumem_trace.Allocator`, in
//! the probe the agent runs) are driven with the same requests and frees — small,
//! medium and large sizes, with and without expandable segments — and must reserve the
//! same bytes after every one.
#![allow(clippy::disallowed_macros)] // the test harness captures test output

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use gpumem_core::allocator::{Allocator, Handle, round_size};

/// A deterministic sequence: `Some(bytes)` allocates, `None` frees one live request
/// chosen by the next number.
fn ops(seed: u64, n: usize) -> Vec<(Option<u64>, u64)> {
    let mut x = seed;
    let mut next = move || {
        // Knuth's MMIX linear congruential generator.
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        x >> 11
    };
    (0..n)
        .map(|_| {
            let r = next();
            if r % 10 < 6 {
                let size = match next() % 4 {
                    0 => 1 + next() % 4096,
                    1 => 1024 + next() % (1 << 20),
                    2 => (1 << 20) + next() % (9 << 20),
                    _ => (10 << 20) + next() % (300 << 20),
                };
                (Some(size), 0)
            } else {
                (None, next())
            }
        })
        .collect()
}

/// Reserved bytes after each op, by the core's model.
fn rust_reserved(seq: &[(Option<u64>, u64)], expandable: bool) -> Vec<u64> {
    let mut a = Allocator::new(expandable);
    let mut live: Vec<Handle> = Vec::new();
    let mut out = Vec::with_capacity(seq.len());
    for (op, pick) in seq {
        match op {
            Some(bytes) => live.push(a.malloc(*bytes)),
            None if !live.is_empty() => {
                let i = (*pick % live.len() as u64) as usize;
                a.free(live.swap_remove(i));
            }
            None => {}
        }
        out.push(a.reserved());
    }
    out
}

/// Reserved bytes after each op, by the trace's model (the same choices of which
/// request to free).
fn python_reserved(
    python: &std::path::Path,
    seq: &[(Option<u64>, u64)],
    expandable: bool,
) -> Vec<u64> {
    let probe = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python");
    let script = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
import gpumem_trace as gt
req = json.loads(sys.stdin.read())
a = gt.Allocator(req["expandable"])
live, out = [], []
for size, pick in req["ops"]:
    if size is not None:
        live.append(a.malloc(gt.round_size(size)))
    elif live:
        i = pick % len(live)
        live[i], live[-1] = live[-1], live[i]
        a.release(live.pop())
    out.append(a.reserved)
print(json.dumps(out))
"#;
    let mut child = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(&probe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python runs");
    let request = serde_json::json!({
        "expandable": expandable,
        "ops": seq.iter().map(|(s, p)| serde_json::json!([s, p])).collect::<Vec<_>>(),
    });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "python failed");
    serde_json::from_slice(&out.stdout).expect("a JSON list")
}

#[test]
fn the_estimators_and_the_traces_allocator_reserve_the_same_bytes() {
    let Some(python) = gpumem_e2e::torch_python("allocator_parity") else {
        return;
    };
    assert_eq!(round_size(1), 512);
    for (seed, expandable) in [(1, false), (2, false), (3, true), (4, true)] {
        let seq = ops(seed, 3000);
        let rust = rust_reserved(&seq, expandable);
        let py = python_reserved(&python, &seq, expandable);
        assert_eq!(rust.len(), py.len());
        if let Some(i) = (0..rust.len()).find(|&i| rust[i] != py[i]) {
            panic!(
                "seed {seed} (expandable {expandable}): after op {i} ({:?}) the core reserves {} B, the trace {} B",
                seq[i], rust[i], py[i]
            );
        }
        // The sequence does exercise the cache: reserved ends above what is live.
        assert!(rust.last().unwrap() > &0);
    }
}
