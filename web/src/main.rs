//! Entry point of the dimensioner page (`/`): everything else is in the library.
//!
//! No Rust `main` in the page: it starts from wasm-bindgen's start function, as a
//! `main` would have been called, without std's runtime around it (its stdout buffer,
//! thread naming and I/O error texts, which nothing on the page could show). A native
//! build (the crate's unit tests) keeps a `main` calling the same function.

#![cfg_attr(target_arch = "wasm32", no_main)]

/// Called once by wasm-bindgen's glue when the module is instantiated.
#[cfg_attr(target_arch = "wasm32", wasm_bindgen::prelude::wasm_bindgen(start))]
fn start() {
    gpumem_web::start();
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    start();
}
