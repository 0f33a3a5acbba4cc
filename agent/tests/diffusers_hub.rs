//! `gpumem-agent estimate --diffusers ORG/NAME` against a local Hub stand-in
//! (`gpumem_e2e::hub_standin`): a pipeline's `model_index.json` and its components'
//! `config.json` read from the Hub give the same answer, figure for figure, as the
//! same files in a folder; nothing else is asked for (no listing, no weights); a
//! gated pipeline needs the token, which reaches only the Hub; a missing folder that
//! is no Hub id, and `--revision` beside a folder, are refused.

#![allow(clippy::disallowed_macros)] // the test harness captures test output

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use gpumem_e2e::hub_standin::{COMMIT, Repo, StandIn, TEST_TOKEN, isolated_agent, pipeline_repo};
use serde_json::Value;

const SDXL: &str = "stabilityai/stable-diffusion-xl-base-1.0";
const FLUX: &str = "black-forest-labs/FLUX.1-dev";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/gpumem-core/tests/diffusion/pipelines")
        .join(name)
}

/// A fixture pipeline's repository and the number of its components' configs.
fn repo_of(dir: &Path, token: Option<&str>) -> (Repo, usize) {
    let repo = pipeline_repo(dir, token);
    let configs = repo.files.len() - 1;
    (repo, configs)
}

/// The agent with only the stand-in's environment (no token unless given, a fresh
/// cache, no proxy).
fn agent(hub: &StandIn, home: &Path, token: Option<&str>, args: &[&str]) -> Output {
    isolated_agent(
        Path::new(env!("CARGO_BIN_EXE_gpumem-agent")),
        &hub.endpoint(),
        home,
        token,
    )
    .arg("estimate")
    .args(args)
    .output()
    .expect("the agent binary runs")
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn standin() -> (StandIn, usize, usize) {
    let (sdxl, sdxl_configs) = repo_of(&fixture("stable-diffusion-xl-base-1.0"), None);
    let (flux, flux_configs) = repo_of(&fixture("FLUX.1-dev"), Some(TEST_TOKEN));
    let repos = BTreeMap::from([(SDXL.to_string(), sdxl), (FLUX.to_string(), flux)]);
    (
        StandIn::start(repos, Duration::ZERO, &[]),
        sdxl_configs,
        flux_configs,
    )
}

#[test]
fn a_pipeline_from_the_hub_answers_as_its_folder_does() {
    let (hub, sdxl_configs, _) = standin();
    let home = tempfile::tempdir().expect("temp dir");
    let flags = [
        "--json",
        "--card",
        "4090",
        "--offload",
        "model",
        "--images",
        "2",
    ];
    let folder = fixture("stable-diffusion-xl-base-1.0");
    let local = json_of(&agent(
        &hub,
        home.path(),
        None,
        &[&["--diffusers", folder.to_str().unwrap()][..], &flags].concat(),
    ));
    assert!(hub.log().is_empty(), "a folder sends nothing");
    let out = agent(
        &hub,
        home.path(),
        None,
        &[&["--diffusers", SDXL][..], &flags].concat(),
    );
    let remote = json_of(&out);
    assert_eq!(remote, local, "the Hub's files answer as the folder's");
    assert!(local["need_bytes"].as_u64().unwrap() > 0, "{local}");
    // model_index.json, then each component's config.json: nothing else.
    let log = hub.log();
    println!(
        "{SDXL}: {} request(s): {:?}",
        log.len(),
        log.iter().map(|l| &l.path).collect::<Vec<_>>()
    );
    assert_eq!(log.len(), 1 + sdxl_configs, "{log:?}");
    assert!(
        log.iter()
            .all(|l| l.path.ends_with("/model_index.json") || l.path.ends_with("/config.json")),
        "{log:?}"
    );
    assert!(log.iter().all(|l| l.range.is_none() && l.auth.is_none()));
    assert!(
        stderr(&out).contains(&format!("{SDXL}@main (commit {})", &COMMIT[..12])),
        "{}",
        stderr(&out)
    );
    // A revision the Hub has answers the same; one it lacks is named.
    let at_commit = agent(
        &hub,
        home.path(),
        None,
        &[&["--diffusers", SDXL, "--revision", COMMIT][..], &flags].concat(),
    );
    assert_eq!(json_of(&at_commit), local);
    let missing = agent(
        &hub,
        home.path(),
        None,
        &[
            "--diffusers",
            SDXL,
            "--revision",
            "no-such-branch",
            "--json",
        ],
    );
    assert!(!missing.status.success());
    assert!(
        stderr(&missing).to_lowercase().contains("revision"),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn a_gated_pipeline_needs_the_token() {
    let (hub, _, flux_configs) = standin();
    let home = tempfile::tempdir().expect("temp dir");
    let flags = ["--json", "--height", "768", "--width", "1360"];
    let refused = agent(
        &hub,
        home.path(),
        None,
        &[&["--diffusers", FLUX][..], &flags].concat(),
    );
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("HF_TOKEN"),
        "{}",
        stderr(&refused)
    );
    assert!(refused.stdout.is_empty());
    let folder = fixture("FLUX.1-dev");
    let local = json_of(&agent(
        &hub,
        home.path(),
        None,
        &[&["--diffusers", folder.to_str().unwrap()][..], &flags].concat(),
    ));
    let before = hub.log().len();
    let remote = json_of(&agent(
        &hub,
        home.path(),
        Some(TEST_TOKEN),
        &[&["--diffusers", FLUX][..], &flags].concat(),
    ));
    assert_eq!(remote, local);
    let log = hub.log();
    assert_eq!(log.len() - before, 1 + flux_configs, "{log:?}");
    let bearer = format!("Bearer {TEST_TOKEN}");
    assert!(
        log[before..]
            .iter()
            .all(|l| l.server == "hub" && l.auth.as_deref() == Some(bearer.as_str())),
        "{log:?}"
    );
}

#[test]
fn neither_a_folder_nor_a_hub_id_is_refused() {
    let (hub, _, _) = standin();
    let home = tempfile::tempdir().expect("temp dir");
    let missing = home.path().join("no-such-pipeline");
    for (args, words) in [
        (
            vec!["--diffusers", missing.to_str().unwrap()],
            "no such folder or file",
        ),
        (vec!["--diffusers", "../x/y"], "no such folder or file"),
        (
            vec![
                "--diffusers",
                fixture("FLUX.1-dev").to_str().unwrap(),
                "--revision",
                "main",
            ],
            "is a local path",
        ),
        (vec!["--diffusers", "some-org/no-such-repo"], "not found"),
    ] {
        let out = agent(&hub, home.path(), None, &args);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            stderr(&out).to_lowercase().contains(words),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(out.stdout.is_empty());
    }
}
