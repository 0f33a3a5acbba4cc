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
/// The estimate as this page makes it: the engine module's (the request written, the
/// estimate made there and its document read back), for inference (the training
/// module estimates training runs). Infinite while the module is not loaded, so no
/// budget passes on a figure not measured. Here, not in the library, so the agent &
/// sheet page does not carry it.
#[wasm_bindgen]
pub fn gpumem_bench(query_string: &str, iterations: u32) -> f64 {
    let pairs: Vec<(&'static str, String)> = gpumem_web::query::parse(query_string)
        .into_iter()
        .filter_map(|(k, v)| Some((gpumem_core::params::keys().find(|p| *p == k)?, v)))
        .collect();
    let request = gpumem_web::rules::request(&pairs, &[], None);
    let n = iterations.max(1);
    let t0 = gpumem_web::now_ms();
    let mut sink = 0u64;
    for _ in 0..n {
        let Ok(text) = gpumem_web::rules::estimate_now(std::hint::black_box(&request)) else {
            return f64::INFINITY;
        };
        if let Ok(Ok(e)) = gpumem_proto::training::read_figures(&text) {
            sink = sink.wrapping_add(e.total_bytes);
        }
    }
    std::hint::black_box(sink);
    (gpumem_web::now_ms() - t0) / f64::from(n)
}
