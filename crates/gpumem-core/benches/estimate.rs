//! Benchmarks: a full estimate (architecture mode with KV cache and fit table) and
//! the safetensors header parser on 1 000- and 100 000-tensor headers. Budgets: a
//! full estimate under 10 µs natively; 100k tensors well under a second.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gpumem_core::estimate::estimate;
use gpumem_core::fit::fit_table;
use gpumem_core::import::safetensors::{build_header, parse_header};
use gpumem_core::params::from_pairs;

fn full_estimate(c: &mut Criterion) {
    let (input, errors) = from_pairs([
        ("layers", "32"),
        ("hidden", "4096"),
        ("heads", "32"),
        ("kv-heads", "8"),
        ("head-dim", "128"),
        ("intermediate", "14336"),
        ("vocab", "128256"),
        ("format", "gptq-4-g128"),
        ("context", "8192"),
        ("generate", "512"),
        ("sequences", "4"),
        ("gpus", "2"),
        ("tp", "2"),
    ]);
    assert!(errors.is_empty());
    c.bench_function("estimate/llama3-8b-gptq-kv-tp2", |b| {
        b.iter(|| estimate(black_box(&input)))
    });
    let e = estimate(&input).expect("valid input");
    c.bench_function("fit_table/catalogue", |b| {
        b.iter(|| fit_table(black_box(&e)))
    });
}

fn header_parsing(c: &mut Criterion) {
    let names: Vec<String> = (0..1000)
        .map(|i| format!("model.layers.{}.mlp.down_proj.weight_{i}", i / 10))
        .collect();
    let tensors: Vec<(&str, &str, &[u64])> = names
        .iter()
        .map(|n| (n.as_str(), "BF16", &[4096u64, 4096][..]))
        .collect();
    let header = build_header(&tensors);
    c.bench_function("safetensors/header-1000-tensors", |b| {
        b.iter(|| parse_header(black_box(&header)))
    });
    // A large MoE checkpoint's scale: ~100k tensors, well under a second.
    let names: Vec<String> = (0..100_000)
        .map(|i| {
            format!(
                "model.layers.{}.mlp.experts.{}.down_proj.weight",
                i / 1000,
                i % 1000
            )
        })
        .collect();
    let tensors: Vec<(&str, &str, &[u64])> = names
        .iter()
        .map(|n| (n.as_str(), "BF16", &[2048u64, 7168][..]))
        .collect();
    let header = build_header(&tensors);
    let mut group = c.benchmark_group("safetensors-large");
    group.sample_size(10);
    group.bench_function("header-100k-tensors", |b| {
        b.iter(|| parse_header(black_box(&header)))
    });
    group.finish();
}

criterion_group!(benches, full_estimate, header_parsing);
criterion_main!(benches);
