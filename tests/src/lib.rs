//! End-to-end tests live in `tests/`; this library holds the one rule every test of
//! the workspace follows when it cannot run here ([`skip`]), and the local Hugging
//! Face Hub stand-in the agent's and the page's lookup tests share ([`hub_standin`]).
//!
//! A test that returns early without saying so counts as passed, which is a lie. So a
//! test that lacks something calls [`skip`] and returns, and [`skip`] decides:
//!
//! - a missing **tool** ([`Missing::Tool`]: chromedriver, Chromium, `dist/`, a
//!   binary the test script builds) fails the test under the test script
//!   (`scripts/test.sh` exports `GPUMEM_REQUIRE_TOOLS=1`) and in CI (`CI=true`),
//!   because there its absence is a broken set-up, not a reason to pass;
//! - elsewhere (a developer's plain `cargo test`), and for a check that needs another
//!   kind of **machine** ([`Missing::Machine`]: a GPU-only check on a CPU machine, a
//!   no-driver check where a driver is present), it prints one
//!   `SKIPPED: <test>: <reason>` line, which `scripts/test.sh` counts as skipped —
//!   never as passed — in its closing summary.

use std::io::Write;

pub mod hub_standin;

/// The variable `scripts/test.sh` sets so that a missing tool fails the run.
pub const REQUIRE_TOOLS: &str = "GPUMEM_REQUIRE_TOOLS";

/// What a test lacks on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// A tool the test script installs or builds: fails under the test script and CI.
    Tool,
    /// The wrong kind of machine for this check (GPU or no GPU): always a visible skip.
    Machine,
}

/// Whether a missing tool must fail the run: `GPUMEM_REQUIRE_TOOLS` or `CI` set to
/// anything but empty, `0` or `false`.
pub fn tools_required() -> bool {
    let on = |name: &str| {
        std::env::var(name)
            .map(|v| {
                let v = v.trim().to_ascii_lowercase();
                !(v.is_empty() || v == "0" || v == "false")
            })
            .unwrap_or(false)
    };
    on(REQUIRE_TOOLS) || on("CI")
}

/// The decision, without side effects: `Err(message)` when the test must fail,
/// `Ok(line)` with the `SKIPPED` line to print otherwise.
pub fn decide(
    test: &str,
    missing: Missing,
    reason: &str,
    required: bool,
) -> Result<String, String> {
    match missing {
        Missing::Tool if required => Err(format!(
            "{test}: {reason}; the test script and CI require every tool \
             (install it with scripts/install-tools.sh, or unset {REQUIRE_TOOLS}/CI to skip)"
        )),
        _ => Ok(format!("SKIPPED: {test}: {reason}")),
    }
}

/// Call when `test` cannot run here, then return from the test. Panics (fails the
/// test) for a missing tool under the test script or CI; otherwise prints
/// `SKIPPED: <test>: <reason>` on its own line.
///
/// The line is written straight to the process's stderr, not through `println!`:
/// libtest captures the output of passing tests, and a skip must stay visible.
pub fn skip(test: &str, missing: Missing, reason: &str) {
    match decide(test, missing, reason, tools_required()) {
        Err(message) => panic!("{message}"),
        Ok(line) => {
            // One write of the whole line, starting on a fresh line, so that libtest's
            // progress dots on the same stream never split it (grep '^SKIPPED: ').
            let _ = std::io::stderr().write_all(format!("\n{line}\n").as_bytes());
        }
    }
}

/// The Python of the torch venv that `scripts/install-tools.sh` makes
/// (`$GPUMEM_TOOLS/torch-venv`, by default under `~/.cache/gpumem-tools`; torch,
/// transformers and peft for CPU use), or `None` after [`skip`]: the venv is a tool
/// like the browser, so under the test script and CI its absence fails the test.
pub fn torch_python(test: &str) -> Option<std::path::PathBuf> {
    let tools = std::env::var_os("GPUMEM_TOOLS")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| std::path::PathBuf::from(h).join(".cache/gpumem-tools"))
        });
    match tools.map(|t| t.join("torch-venv/bin/python")) {
        Some(p) if p.is_file() => Some(p),
        _ => {
            skip(
                test,
                Missing::Tool,
                "no $GPUMEM_TOOLS/torch-venv (scripts/install-tools.sh installs it)",
            );
            None
        }
    }
}

/// Whether a GPU is present here (an NVIDIA or AMD device node); when it is, `test`
/// (a check of the no-GPU path) is skipped as the wrong machine.
pub fn gpu_present(test: &str) -> bool {
    let present = std::path::Path::new("/dev/nvidiactl").exists()
        || std::path::Path::new("/dev/kfd").exists();
    if present {
        skip(
            test,
            Missing::Machine,
            "a GPU is present; this test checks the no-GPU path",
        );
    }
    present
}

/// Checks a generated file (a JSON Schema made from the types) against its checked-in
/// copy at `path`, or, with `GPUMEM_BLESS` set, writes it there. `regenerate` is the
/// command that blesses it, named in the failure so the fix is one copy-paste away.
pub fn check_generated(path: &std::path::Path, fresh: &str, regenerate: &str) {
    if std::env::var_os("GPUMEM_BLESS").is_some() {
        std::fs::write(path, fresh).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        return;
    }
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "{} is stale or missing; regenerate it with GPUMEM_BLESS=1 {regenerate}",
        path.display()
    );
}

#[cfg(test)]
mod tests {
    use super::{Missing, decide};

    #[test]
    fn a_missing_tool_fails_only_when_tools_are_required() {
        let fail = decide("t", Missing::Tool, "chromedriver not found", true).unwrap_err();
        assert!(fail.contains("t: chromedriver not found"), "{fail}");
        assert_eq!(
            decide("t", Missing::Tool, "chromedriver not found", false),
            Ok("SKIPPED: t: chromedriver not found".to_string())
        );
    }

    #[test]
    fn the_wrong_machine_is_a_skip_even_when_tools_are_required() {
        assert_eq!(
            decide("t", Missing::Machine, "no GPU", true),
            Ok("SKIPPED: t: no GPU".to_string())
        );
    }
}
