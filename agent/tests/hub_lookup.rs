//! `gpumem-agent estimate --model ORG/NAME` against a local Hub stand-in
//! (`gpumem_e2e::hub_standin`): exact bytes from header-only files read by ranged requests, the
//! body never asked for, shards read concurrently, the cache, the token kept off the
//! CDN, and the refusals (gated, not found, a header over the limit, a 429 retried).

#![allow(clippy::disallowed_macros)] // the test harness captures test output

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use gpumem_core::import::gguf;
use gpumem_e2e::hub_standin::{Blob, Repo, StTensor, StandIn, safetensors_blob};
use serde_json::Value;

const CONFIG: &str = r#"{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
"num_key_value_heads":2,"intermediate_size":128,"vocab_size":256,"torch_dtype":"bfloat16"}"#;

/// The agent with only the stand-in's environment (no token, a fresh cache, no proxy).
fn agent(hub: &StandIn, home: &Path, token: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"));
    cmd.arg("estimate")
        .args(args)
        .env("HF_ENDPOINT", hub.endpoint())
        .env("HOME", home)
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("HF_HOME", home.join("hf"));
    for v in [
        "HF_TOKEN",
        "HF_TOKEN_PATH",
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env_remove(v);
    }
    if let Some(t) = token {
        cmd.env("HF_TOKEN", t);
    }
    cmd.output().expect("the agent binary runs")
}

fn json_ok(out: &Output) -> Value {
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

/// A header-only safetensors file: its header and the size it claims, and the sum of
/// its tensor bytes computed from dtype × shape (independently of the parser).
fn shard(tensors: &[(&str, &'static str, &[u64])]) -> (Blob, u64) {
    let t: Vec<StTensor> = tensors
        .iter()
        .map(|(n, d, s)| (n.to_string(), *d, s.to_vec()))
        .collect();
    safetensors_blob(&t)
}

fn text(s: &str) -> Blob {
    Blob::Text(s.as_bytes().to_vec())
}

/// The single-file model and its exact tensor bytes.
fn single_repo() -> (Repo, u64, usize) {
    let (blob, bytes) = shard(&[
        ("model.embed_tokens.weight", "BF16", &[256, 64]),
        ("model.layers.0.self_attn.q_proj.weight", "BF16", &[64, 64]),
        ("model.layers.0.mlp.up_proj.weight", "BF16", &[128, 64]),
        ("model.layers.1.mlp.down_proj.weight", "F32", &[64, 128]),
        ("model.norm.weight", "BF16", &[64]),
        ("lm_head.weight", "BF16", &[256, 64]),
    ]);
    let Blob::Head { head, .. } = &blob else {
        unreachable!()
    };
    let head_len = head.len();
    let mut files = BTreeMap::new();
    files.insert("config.json".to_string(), text(CONFIG));
    files.insert("model.safetensors".to_string(), blob);
    (Repo { files, token: None }, bytes, head_len)
}

/// Largest byte asked of the CDN (exclusive end of the highest range).
fn largest_byte_asked(hub: &StandIn) -> u64 {
    hub.log()
        .iter()
        .filter_map(|l| l.range.map(|(_, b)| b + 1))
        .max()
        .unwrap_or(0)
}

#[test]
fn single_file_exact_bytes_by_ranged_reads_then_from_the_cache() {
    let (repo, bytes, head_len) = single_repo();
    let hub = StandIn::start(
        BTreeMap::from([("tiny/single".to_string(), repo)]),
        Duration::ZERO,
        &[],
    );
    let home = tempfile::tempdir().expect("temp dir");
    let args = ["--json", "--model", "tiny/single", "--reserve-gib", "0"];
    let v = json_ok(&agent(&hub, home.path(), None, &args));
    assert_eq!(v["weights_bytes"], bytes);
    // The architecture came from config.json.
    assert_eq!(v["input"]["hidden"], "64", "{}", v["input"]);
    let log = hub.log();
    println!(
        "single file: weights_bytes {bytes}, {} requests: {:?}",
        log.len(),
        log.iter()
            .map(|l| (l.server, l.status, l.range))
            .collect::<Vec<_>>()
    );
    // config.json, the index (404), the resolve (302), 8 bytes, then the header.
    assert_eq!(log.len(), 5, "{log:?}");
    assert_eq!(largest_byte_asked(&hub), head_len as u64);
    assert!(log.iter().all(|l| l.status < 500), "{log:?}");

    hub.clear();
    let out = agent(&hub, home.path(), None, &args);
    let v = json_ok(&out);
    assert_eq!(v["weights_bytes"], bytes);
    assert!(
        hub.log().is_empty(),
        "a cached lookup asks nothing: {:?}",
        hub.log()
    );
    assert!(
        stderr(&out).contains("0 HTTP request(s)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn sixty_one_shards_are_read_concurrently_in_a_few_round_trips() {
    const SHARDS: usize = 61;
    const DELAY: Duration = Duration::from_millis(100);
    let mut files = BTreeMap::new();
    let mut weight_map = serde_json::Map::new();
    let mut expected = 0u64;
    let mut header_len: BTreeMap<String, u64> = BTreeMap::new();
    let names: Vec<String> = (0..SHARDS)
        .map(|i| format!("model.layers.{i}.mlp.up_proj.weight"))
        .collect();
    for (i, name) in names.iter().enumerate() {
        let file = format!("model-{:05}-of-{SHARDS:05}.safetensors", i + 1);
        let cols = 64 + i as u64;
        let (blob, bytes) = shard(&[
            (name, "BF16", &[128, cols]),
            ("model.norm.weight", "F32", &[cols]),
        ]);
        if let Blob::Head { head, .. } = &blob {
            header_len.insert(file.clone(), head.len() as u64);
        }
        expected += bytes;
        weight_map.insert(name.clone(), Value::String(file.clone()));
        files.insert(file, blob);
    }
    let index = serde_json::json!({"metadata": {"total_size": expected}, "weight_map": weight_map});
    files.insert(
        "model.safetensors.index.json".into(),
        text(&index.to_string()),
    );
    files.insert("config.json".into(), text(CONFIG));
    let hub = StandIn::start(
        BTreeMap::from([("big/sharded".to_string(), Repo { files, token: None })]),
        DELAY,
        &[],
    );
    let home = tempfile::tempdir().expect("temp dir");
    let args = ["--json", "--model", "big/sharded", "--reserve-gib", "0"];
    let t = Instant::now();
    let v = json_ok(&agent(&hub, home.path(), None, &args));
    let wall = t.elapsed();
    assert_eq!(v["weights_bytes"], expected);
    let requests = hub.log().len();
    let sequential = DELAY * (SHARDS as u32) * 2;
    println!(
        "61 shards: weights_bytes {expected}, {requests} requests, wall {wall:.2?} with {DELAY:?} per response \
         (≈ {:.1} sequential rounds; 61 × 2 × 100 ms sequential = {sequential:.2?})",
        wall.as_secs_f64() / DELAY.as_secs_f64()
    );
    // config + index, then per shard: resolve (302), 8 bytes, the header (CDN direct).
    assert_eq!(requests, 2 + SHARDS * 3);
    // Each file: exactly its header was read, nothing past it.
    for (file, len) in &header_len {
        let end = hub
            .log()
            .iter()
            .filter(|l| l.server == "cdn" && l.path.contains(file.as_str()))
            .filter_map(|l| l.range.map(|(_, b)| b + 1))
            .max();
        assert_eq!(end, Some(*len), "{file}");
    }
    // 61 files on 16 workers: 4 files × 3 responses + 2 (config and index together)
    // ≈ 1.4 s; bounded loosely for a loaded machine, still far from sequential.
    assert!(wall < sequential / 3, "{wall:?}");

    hub.clear();
    let v = json_ok(&agent(&hub, home.path(), None, &args));
    assert_eq!(v["weights_bytes"], expected);
    assert!(hub.log().is_empty(), "{:?}", hub.log());
}

#[test]
fn a_gated_repo_needs_the_token_which_never_reaches_the_cdn() {
    let (mut repo, bytes, _) = single_repo();
    repo.token = Some("hf_standin_secret".into());
    let hub = StandIn::start(
        BTreeMap::from([("org/gated".to_string(), repo)]),
        Duration::ZERO,
        &[],
    );
    let args = ["--json", "--model", "org/gated", "--reserve-gib", "0"];
    let home = tempfile::tempdir().expect("temp dir");
    let out = agent(&hub, home.path(), None, &args);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("accept the licence") && err.contains("HF_TOKEN") && !err.contains("panicked"),
        "{err}"
    );

    hub.clear();
    let v = json_ok(&agent(&hub, home.path(), Some("hf_standin_secret"), &args));
    assert_eq!(v["weights_bytes"], bytes);
    let log = hub.log();
    assert!(log.iter().any(|l| l.server == "cdn"), "{log:?}");
    for l in &log {
        match l.server {
            "hub" => assert_eq!(l.auth.as_deref(), Some("Bearer hf_standin_secret")),
            _ => assert_eq!(l.auth, None, "the token reached the CDN: {l:?}"),
        }
    }

    // The token file of huggingface_hub ($HF_HOME/token), with a fresh cache.
    let home = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(home.path().join("hf")).expect("mkdir");
    std::fs::write(home.path().join("hf/token"), "hf_standin_secret\n").expect("write");
    let v = json_ok(&agent(&hub, home.path(), None, &args));
    assert_eq!(v["weights_bytes"], bytes);
}

#[test]
fn unknown_repos_files_and_revisions_are_not_found() {
    let (repo, _, _) = single_repo();
    let hub = StandIn::start(
        BTreeMap::from([
            ("tiny/single".to_string(), repo),
            ("tiny/weightless".to_string(), Repo::default()),
        ]),
        Duration::ZERO,
        &[],
    );
    let home = tempfile::tempdir().expect("temp dir");
    for args in [
        vec!["--model", "nobody/nothing"],
        vec!["--model", "tiny/single", "--revision", "v9"],
        vec!["--model", "tiny/single", "--model-file", "absent.gguf"],
    ] {
        let out = agent(&hub, home.path(), None, &args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("not found") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    // A repository without config.json or safetensors: the message names --model-file.
    let out = agent(&hub, home.path(), None, &["--model", "tiny/weightless"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("not found") && err.contains("--model-file"),
        "{err}"
    );
    let out = agent(&hub, home.path(), None, &["--model", "../etc/passwd"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(hub.log().iter().all(|l| !l.path.contains("etc")));
}

#[test]
fn a_429_and_a_503_are_retried() {
    let (repo, bytes, _) = single_repo();
    let hub = StandIn::start(
        BTreeMap::from([("tiny/single".to_string(), repo)]),
        Duration::ZERO,
        &[
            "tiny/single/model.safetensors",
            "503 tiny/single/config.json",
        ],
    );
    let home = tempfile::tempdir().expect("temp dir");
    let t = Instant::now();
    let v = json_ok(&agent(
        &hub,
        home.path(),
        None,
        &["--json", "--model", "tiny/single", "--reserve-gib", "0"],
    ));
    assert_eq!(v["weights_bytes"], bytes);
    let log = hub.log();
    assert_eq!(log.iter().filter(|l| l.status == 429).count(), 1, "{log:?}");
    assert_eq!(log.iter().filter(|l| l.status == 503).count(), 1, "{log:?}");
    // Retry-After: 1 was honoured.
    assert!(t.elapsed() >= Duration::from_secs(1));
}

#[test]
fn a_header_over_the_safetensors_limit_is_refused_unread() {
    let mut head = 200_000_000u64.to_le_bytes().to_vec();
    head.extend_from_slice(b"{}");
    let mut files = BTreeMap::new();
    files.insert("config.json".to_string(), text(CONFIG));
    files.insert(
        "model.safetensors".to_string(),
        Blob::Head {
            head,
            size: 300_000_000_000,
        },
    );
    let hub = StandIn::start(
        BTreeMap::from([("bad/huge".to_string(), Repo { files, token: None })]),
        Duration::ZERO,
        &[],
    );
    let home = tempfile::tempdir().expect("temp dir");
    let out = agent(&hub, home.path(), None, &["--model", "bad/huge"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert_eq!(largest_byte_asked(&hub), 8, "{:?}", hub.log());
}

#[test]
fn a_gguf_file_is_read_by_name_without_a_config() {
    let head = gguf::build_header("llama", &[("blk.0.ffn_up.weight", &[4096, 14336], 12)]);
    let bytes = 4096u64 / 256 * 144 * 14336;
    let mut files = BTreeMap::new();
    files.insert(
        "m-Q4_K_M.gguf".to_string(),
        Blob::Head {
            size: head.len() as u64 + bytes,
            head,
        },
    );
    let hub = StandIn::start(
        BTreeMap::from([("q/gguf".to_string(), Repo { files, token: None })]),
        Duration::ZERO,
        &[],
    );
    let home = tempfile::tempdir().expect("temp dir");
    let v = json_ok(&agent(
        &hub,
        home.path(),
        None,
        &[
            "--json",
            "--model",
            "q/gguf",
            "--model-file",
            "m-Q4_K_M.gguf",
            "--reserve-gib",
            "0",
        ],
    ));
    assert_eq!(v["weights_bytes"], bytes);
    // The read policy's first GGUF read, not the file.
    assert!(largest_byte_asked(&hub) <= gpumem_core::import::read_policy::GGUF_FIRST_READ);
}

#[test]
fn an_unreachable_hub_is_named_quickly() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let home = tempfile::tempdir().expect("temp dir");
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .args(["estimate", "--model", "org/name"])
        .env("HF_ENDPOINT", format!("http://127.0.0.1:{port}"))
        .env("HOME", home.path())
        .env("XDG_CACHE_HOME", home.path())
        .env_remove("HF_TOKEN")
        .output()
        .expect("the agent binary runs");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("could not reach") && err.contains("HF_ENDPOINT"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}
