//! Fuzz target: the header parsers (safetensors, GGUF, config.json) must return a
//! result or an error for any bytes — never panic, never allocate without bound.
#![no_main]

use gpumem_core::import::{config, gguf, safetensors};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = safetensors::parse_header(data);
    let _ = gguf::parse_header(data);
    // Also reach past the magic and version checks.
    let mut g = b"GGUF\x03\0\0\0".to_vec();
    g.extend_from_slice(data);
    let _ = gguf::parse_header(&g);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = config::parse_config(text);
    }
});
