//! Placeholder until the page lands.
fn main() {}
