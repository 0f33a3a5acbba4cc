//! Entry point of the dimensioner page (`/`): everything else is in the library.
//!
//! No Rust `main` in the page: it starts from wasm-bindgen's start function, as a
//! `main` would have been called, without std's runtime around it (its stdout buffer,
//! thread naming and I/O error texts, which nothing on the page could show). A native
//! build (the crate's unit tests) keeps a `main` calling the same function.

#![cfg_attr(target_arch = "wasm32", no_main)]

use wasm_bindgen::prelude::*;

/// Called once by wasm-bindgen's glue when the module is instantiated.
#[cfg_attr(target_arch = "wasm32", wasm_bindgen(start))]
fn start() {
    gpumem_web::start();
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    start();
}

/// Benchmark hook for the budget script: estimates the query `iterations` times
/// and returns the mean milliseconds per estimate (`window.wasmBindings.gpumem_bench`).
/// The estimate of this page's own module: inference's (a training query is refused at
/// once; the training module estimates those). Here, not in the library, so the agent &
/// sheet page does not carry it.
#[wasm_bindgen]
pub fn gpumem_bench(query_string: &str, iterations: u32) -> f64 {
    let pairs = gpumem_web::query::parse(query_string);
    let (input, _) = gpumem_core::params::from_pairs(
        pairs
            .iter()
            .filter(|(k, _)| gpumem_core::params::keys().any(|p| p == k))
            .map(|(k, v)| (k.as_str(), v.as_str())),
    );
    let n = iterations.max(1);
    let t0 = gpumem_web::now_ms();
    let mut sink = 0u64;
    for _ in 0..n {
        if let Ok(e) = gpumem_core::estimate::estimate_inference(std::hint::black_box(&input)) {
            sink = sink.wrapping_add(e.total_bytes);
        }
    }
    std::hint::black_box(sink);
    (gpumem_web::now_ms() - t0) / f64::from(n)
}
