//! `estimate --gguf/--safetensors` read headers through the core's one read policy
//! (`gpumem_core::import::read_policy`): a GGUF header longer than the first read is
//! fetched in growing reads and counted exactly as if read whole; a file that ends
//! inside its header, or claims a header larger than itself, is refused with a
//! message and exit 2 — never a panic, never a read of the whole file.

use std::process::{Command, Output};

use gpumem_core::import::read_policy::GGUF_FIRST_READ;
use gpumem_core::import::{gguf, safetensors};
use serde_json::Value;

fn agent(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .args(args)
        .output()
        .expect("the agent binary runs")
}

fn refused(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "the agent panicked: {err}");
    assert_ne!(out.status.code(), Some(0), "accepted: {err}");
    err
}

#[test]
fn a_gguf_header_longer_than_the_first_read_is_counted_as_if_read_whole() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("long.gguf");
    // A tensor name longer than the first read forces at least one more read.
    let long_name = format!(
        "blk.0.ffn_up.{}",
        "x".repeat(GGUF_FIRST_READ as usize + 4096)
    );
    let mut file = gguf::build_header(
        "llama",
        &[
            ("token_embd.weight", &[4096, 32000], 1),
            (&long_name, &[4096, 14336], 12),
        ],
    );
    let header = file.len();
    assert!(header as u64 > GGUF_FIRST_READ);
    // Weights after the header, which must not matter.
    file.resize(header + 3 * GGUF_FIRST_READ as usize, 0x77);
    std::fs::write(&path, &file).expect("write");
    let whole = gguf::parse_header(&file).expect("the built header parses");
    let out = agent(&["estimate", "--gguf", path.to_str().unwrap(), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        v["weights_bytes"].as_u64(),
        Some(whole.tensors.total.bytes),
        "{v}"
    );
}

#[test]
fn a_gguf_file_ending_inside_its_header_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("cut.gguf");
    let file = gguf::build_header("llama", &[("token_embd.weight", &[4096, 32000], 1)]);
    std::fs::write(&path, &file[..file.len() - 5]).expect("write");
    let err = refused(&agent(&["estimate", "--gguf", path.to_str().unwrap()]));
    assert!(err.contains("ends inside its header"), "{err}");
}

#[test]
fn a_safetensors_header_longer_than_its_file_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("cut.safetensors");
    let file = safetensors::build_header(&[("model.embed_tokens.weight", "BF16", &[32000, 4096])]);
    std::fs::write(&path, &file[..file.len() - 3]).expect("write");
    let err = refused(&agent(&[
        "estimate",
        "--safetensors",
        path.to_str().unwrap(),
    ]));
    assert!(err.contains("ends inside its header"), "{err}");
    // A length beyond the format's 100 MB limit is refused from the first 8 bytes.
    std::fs::write(&path, 200_000_000u64.to_le_bytes()).expect("write");
    let err = refused(&agent(&[
        "estimate",
        "--safetensors",
        path.to_str().unwrap(),
    ]));
    assert!(err.contains("limit"), "{err}");
}
