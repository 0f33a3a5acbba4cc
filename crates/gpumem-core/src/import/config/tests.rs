//! The config reader's unit tests: one family's rules each, on small synthetic configs (the real published configs are the fixture cases in tests/cases).

use super::*;
use crate::arch::{CacheRuntime, MixerKind};

#[test]
fn a_field_of_the_wrong_type_is_named_with_what_was_found() {
    let base = r#""hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100"#;
    for (value, found) in [
        ("-1", "found -1"),
        ("2.5", "found 2.5"),
        (r#""32""#, r#"found "32""#),
        ("true", "found true"),
        ("[32]", "found an array"),
    ] {
        let text = format!(r#"{{{base}, "num_hidden_layers": {value}}}"#);
        let e = parse_config(&text).unwrap_err().to_string();
        assert!(
            e.contains("num_hidden_layers should be a non-negative integer") && e.contains(found),
            "{value}: {e}"
        );
    }
}

#[test]
fn qwen2_has_qkv_bias_and_sliding_layers() {
    let c = parse_config(
        r#"{"model_type":"qwen2","hidden_size":896,"num_hidden_layers":24,"num_attention_heads":14,
        "num_key_value_heads":2,"intermediate_size":4864,"vocab_size":151936,"tie_word_embeddings":true,
        "sliding_window":32768,"use_sliding_window":false,"max_window_layers":21}"#,
    )
    .unwrap();
    assert!(c.arch.qkv_bias);
    assert_eq!(c.arch.head_dim, 64);
    assert_eq!(c.sliding_window, None);
}

#[test]
fn quantization_config_names_a_format() {
    let c = parse_config(
        r#"{"model_type":"llama","hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,
        "num_key_value_heads":8,"intermediate_size":14336,"vocab_size":128256,
        "quantization_config":{"quant_method":"gptq","bits":4,"group_size":128}}"#,
    )
    .unwrap();
    assert_eq!(c.format.as_deref(), Some("gptq-4-g128"));
    assert!(!c.arch.tied_embeddings);
}

/// Which quantiser wrote the format travels with it: a compressed-tensors checkpoint
/// says so (`compressed-tensors=true`), the same `fp8-block` from `"quant_method":
/// "fp8"` does not, and nor does a compressed-tensors scheme left unmodelled.
#[test]
fn a_compressed_tensors_format_says_where_it_came_from() {
    let llama = |q: &str| {
        parse_config(&format!(
            r#"{{"model_type":"llama","hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,
            "num_key_value_heads":8,"intermediate_size":14336,"vocab_size":128256,
            "quantization_config":{q}}}"#
        ))
        .unwrap()
    };
    let ct = llama(
        r#"{"quant_method":"compressed-tensors","format":"float-quantized","ignore":["lm_head"],
        "config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float",
        "strategy":"block","block_structure":[128,128]},"input_activations":{"num_bits":8,"type":"float","dynamic":true}}}}"#,
    );
    assert_eq!(ct.format.as_deref(), Some("fp8-block"));
    assert!(ct.compressed_tensors);
    assert!(
        ct.pairs()
            .contains(&("compressed-tensors", "true".to_string()))
    );
    let fp8 = llama(r#"{"quant_method":"fp8","weight_block_size":[128,128]}"#);
    assert_eq!(fp8.format.as_deref(), Some("fp8-block"));
    assert!(!fp8.compressed_tensors);
    assert!(!fp8.pairs().iter().any(|(k, _)| *k == "compressed-tensors"));
    let unmodelled = llama(
        r#"{"quant_method":"compressed-tensors","config_groups":{"group_0":{"targets":["Linear"],
        "weights":{"num_bits":8,"type":"int","strategy":"channel"}}}}"#,
    );
    assert_eq!(unmodelled.format, None);
    assert!(!unmodelled.compressed_tensors);
}

#[test]
fn mlx_quantization_names_its_affine_format() {
    // An mlx-community checkpoint's config.json: `quantization` (and its mirror
    // `quantization_config`) with no quant_method.
    let base = r#""model_type":"llama","hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,
        "num_key_value_heads":8,"intermediate_size":14336,"vocab_size":128256"#;
    let c = parse_config(&format!(
        r#"{{{base},"quantization":{{"group_size":64,"bits":4}}}}"#
    ))
    .unwrap();
    assert_eq!(c.format.as_deref(), Some("mlx-4-g64"));
    assert_eq!(c.attention_format, None);
    let c = parse_config(&format!(
        r#"{{{base},"quantization_config":{{"group_size":32,"bits":8,"mode":"affine","model.layers.0.mlp.gate_proj":{{"group_size":64,"bits":4}}}}}}"#
    ))
    .unwrap();
    assert_eq!(c.format.as_deref(), Some("mlx-8-g32"));
    assert!(field(&c, "carry their own parameters").is_some());
    let c = parse_config(&format!(
        r#"{{{base},"quantization":{{"group_size":32,"bits":4,"mode":"mxfp4"}}}}"#
    ))
    .unwrap();
    assert_eq!(c.format.as_deref(), Some("mxfp4"));
    let c = parse_config(&format!(
        r#"{{{base},"quantization":{{"group_size":32,"bits":8,"mode":"mxfp8"}}}}"#
    ))
    .unwrap();
    assert_eq!(c.format, None);
    assert!(field(&c, "not modelled").is_some());
}

fn field<'a>(c: &'a ImportedConfig, key: &str) -> Option<&'a str> {
    c.warnings
        .iter()
        .chain(&c.notes)
        .find(|w| w.contains(key))
        .map(String::as_str)
}

#[test]
fn falcon_multi_query_has_one_kv_head_and_one_norm() {
    let c = parse_config(
        r#"{"model_type":"falcon","hidden_size":4544,"num_attention_heads":71,"num_hidden_layers":32,
        "vocab_size":65024,"multi_query":true,"parallel_attn":true,"bias":false}"#,
    )
    .unwrap();
    assert_eq!((c.arch.kv_heads, c.arch.layer_norms), (1, 1));
    assert!(c.arch.layernorm_bias && !c.arch.qkv_bias && !c.arch.gated_mlp);
    assert!(c.arch.tied_embeddings);
}

#[test]
fn falcon_new_decoder_architecture_reads_two_norms_over_the_layer_input() {
    let base = r#""model_type":"falcon","hidden_size":8192,"num_attention_heads":128,"num_hidden_layers":60,
        "vocab_size":65024,"new_decoder_architecture":true,"num_kv_heads":8,"parallel_attn":true"#;
    let c = parse_config(&format!("{{{base}}}")).unwrap();
    let a = c.arch;
    assert_eq!((a.kv_heads, a.layer_norms), (8, 2));
    // `ln_attn` and `ln_mlp` both read the layer's input.
    assert!(a.parallel_residual && a.falcon_layer);
    // One norm in parallel (`num_ln_in_parallel_attn` 1): no second norm to read it.
    let c = parse_config(&format!(r#"{{{base},"num_ln_in_parallel_attn":1}}"#)).unwrap();
    assert_eq!((c.arch.kv_heads, c.arch.layer_norms), (8, 1));
    assert!(!c.arch.parallel_residual);
}

#[test]
fn gpt2_reads_its_activation_dropout_and_softmax_with_gpt2configs_defaults() {
    let base = r#""model_type":"gpt2","n_embd":768,"n_head":12,"n_layer":12,"n_positions":1024,"vocab_size":50257"#;
    let c = parse_config(&format!("{{{base}}}")).unwrap();
    let a = c.arch;
    assert!(a.fused_qkv && a.gelu_new && a.dropout && a.softmax_in_dtype);
    assert!(a.attn_dropout && a.embedding_dropout);
    assert!(!a.parallel_residual);
    assert_eq!((a.learned_positions, a.rotary_dims), (1024, 0));
    // No dropout anywhere, an exact GELU.
    let c = parse_config(&format!(
        r#"{{{base},"embd_pdrop":0.0,"resid_pdrop":0,"attn_pdrop":0.0,"activation_function":"gelu"}}"#
    ))
    .unwrap();
    assert!(!c.arch.dropout && !c.arch.gelu_new);
    assert!(!c.arch.attn_dropout && !c.arch.embedding_dropout);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    // Each dropout is its own fact: the attention's alone keeps only its masks.
    let c = parse_config(&format!(
        r#"{{{base},"embd_pdrop":0.0,"resid_pdrop":0,"attn_pdrop":0.1}}"#
    ))
    .unwrap();
    assert!(c.arch.attn_dropout && !c.arch.dropout && !c.arch.embedding_dropout);
    // An activation the derivation does not follow is a fact, which keeps the
    // activations assumed and says why.
    let c = parse_config(&format!(r#"{{{base},"activation_function":"relu2"}}"#)).unwrap();
    assert!(c.arch.other_activation && !c.arch.gelu_new && !c.arch.relu);
    assert!(c.arch.underived().is_some());
    // ReLU keeps only its output: a fact of its own.
    let c = parse_config(&format!(r#"{{{base},"activation_function":"relu"}}"#)).unwrap();
    assert!(c.arch.relu && !c.arch.other_activation && !c.arch.gelu_new);
    // The upcast path keeps fp32 copies the derivation does not count: said.
    let c = parse_config(&format!(r#"{{{base},"reorder_and_upcast_attn":true}}"#)).unwrap();
    assert!(!c.arch.softmax_in_dtype);
    assert!(field(&c, "reorder_and_upcast_attn").is_some());
}

#[test]
fn gpt_neox_reads_its_residual_order_and_rotary_width() {
    let base = r#""model_type":"gpt_neox","hidden_size":768,"num_attention_heads":12,"num_hidden_layers":12,"intermediate_size":3072,"vocab_size":50304"#;
    // GPTNeoXConfig's defaults: parallel residual, a quarter of each head rotates,
    // an exact GELU, no dropout.
    let c = parse_config(&format!("{{{base}}}")).unwrap();
    let a = c.arch;
    assert!(a.fused_qkv && a.parallel_residual && !a.gelu_new && !a.dropout);
    assert_eq!(
        (a.head_dim, a.rotary_dims, a.learned_positions),
        (64, 16, 0)
    );
    let c = parse_config(&format!(
        r#"{{{base},"use_parallel_residual":false,"rotary_pct":1.0,"hidden_dropout":0.1}}"#
    ))
    .unwrap();
    assert!(!c.arch.parallel_residual && c.arch.dropout);
    assert_eq!(c.arch.rotary_dims, 0);
    let c = parse_config(&format!(
        r#"{{{base},"rope_parameters":{{"partial_rotary_factor":0.5,"rope_theta":10000}}}}"#
    ))
    .unwrap();
    assert_eq!(c.arch.rotary_dims, 32);
    assert!(parse_config(&format!(r#"{{{base},"rotary_pct":1.5}}"#)).is_err());
}

#[test]
fn gpt_oss_keeps_attention_in_bf16_and_counts_sinks_and_biases() {
    let c = parse_config(
        r#"{"model_type":"gpt_oss","hidden_size":2880,"num_hidden_layers":2,"num_attention_heads":64,
        "num_key_value_heads":8,"head_dim":64,"intermediate_size":2880,"vocab_size":201088,
        "num_local_experts":32,"num_experts_per_tok":4,"attention_bias":true,"tie_word_embeddings":false,
        "sliding_window":128,"layer_types":["sliding_attention","full_attention"],
        "quantization_config":{"quant_method":"mxfp4","modules_to_not_convert":["model.layers.*.self_attn"]}}"#,
    )
    .unwrap();
    assert_eq!(c.format.as_deref(), Some("mxfp4"));
    assert_eq!(c.attention_format.as_deref(), Some("bf16"));
    assert!(c.arch.attn_sinks && c.arch.mlp_bias && c.arch.moe.unwrap().router_bias);
    assert_eq!((c.sliding_window, c.sliding_layers), (Some(128), Some(1)));
}

#[test]
fn unknown_memory_fields_towers_and_quantisers_are_named() {
    let c = parse_config(
        r#"{"model_type":"mystery","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
        "vocab_size":100,"intermediate_size":128,"vision_config":{"hidden_size":32},
        "mlp_only_layers":[1],"quantization_config":{"quant_method":"hqq"}}"#,
    )
    .unwrap();
    for key in ["mystery", "vision tower", "mlp_only_layers", "hqq"] {
        assert!(
            c.warnings.iter().any(|w| w.contains(key)),
            "{key}: {:?}",
            c.warnings
        );
    }
    assert!(field(&c, "num_key_value_heads absent").is_some());
    assert!(field(&c, "tie_word_embeddings absent").is_some());
}

#[test]
fn unknown_state_layer_kinds_are_refused_with_a_reason() {
    let e =
        parse_config(r#"{"model_type":"new","layer_types":["linear_attention","full_attention"]}"#)
            .unwrap_err();
    assert!(e.to_string().contains("linear_attention"), "{e}");
}

/// The total of a shape given as `key=value` pairs, through the flags' parser.
fn total(pairs: &[(&str, String)]) -> u64 {
    let (input, errors) = crate::params::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
    assert!(errors.is_empty(), "{errors:?}");
    let a = input.arch.expect("an architecture");
    a.weights(&crate::arch::ModuleFormats {
        linear: crate::format::StorageFormat::parse("f", "bf16").unwrap(),
        attention: crate::format::StorageFormat::parse("f", "bf16").unwrap(),
        vocab: crate::format::StorageFormat::parse("f", "bf16").unwrap(),
        kept: crate::format::StorageFormat::parse("f", "bf16").unwrap(),
        experts: None,
    })
    .unwrap()
    .params()
}

#[test]
fn mamba_from_a_config_lists_its_defaults_and_matches_the_same_shape_typed_as_flags() {
    // A sparse Mamba config: MambaConfig's defaults are assumed and listed.
    let c = parse_config(
        r#"{"model_type":"mamba","hidden_size":768,"num_hidden_layers":24,"vocab_size":50280}"#,
    )
    .unwrap();
    let m = c.arch.mixer.unwrap();
    assert_eq!(
        (m.layers, m.inner, m.state, m.conv, m.dt_rank),
        (24, 1536, 16, 4, 48)
    );
    for key in [
        "state_size",
        "conv_kernel",
        "time_step_rank",
        "expand",
        "tie_word_embeddings",
    ] {
        assert!(field(&c, key).is_some(), "{key}: {:?}", c.notes);
    }
    // mamba-130m as typed on the command line: 129 135 360 parameters
    // (the published mamba-130m-hf total).
    let flags: Vec<(&str, String)> = [
        ("layers", "24"),
        ("hidden", "768"),
        ("vocab", "50280"),
        ("tied-embeddings", "true"),
        ("layer-norms", "1"),
        ("mixer", "mamba"),
        ("state-layers", "24"),
        ("mixer-inner", "1536"),
        ("mixer-state", "16"),
        ("mixer-dt-rank", "48"),
    ]
    .iter()
    .map(|(k, v)| (*k, v.to_string()))
    .collect();
    assert_eq!(total(&flags), 129_135_360);
    // A mixer without its layer count is refused, naming the key.
    let (_, errors) = crate::params::from_pairs(
        flags
            .iter()
            .filter(|(k, _)| *k != "state-layers")
            .map(|(k, v)| (*k, v.as_str())),
    );
    assert!(
        errors
            .iter()
            .any(|e| e.to_string().starts_with("state-layers:")),
        "{errors:?}"
    );
    assert_eq!(total(&c.pairs()), 129_135_360);
}

#[test]
fn mamba2_reads_heads_and_groups_and_refuses_an_inconsistent_width() {
    let c = parse_config(
        r#"{"model_type":"mamba2","hidden_size":1536,"num_hidden_layers":48,"vocab_size":50288,
        "num_heads":48,"head_dim":64,"state_size":128,"n_groups":1,"tie_word_embeddings":true}"#,
    )
    .unwrap();
    let m = c.arch.mixer.unwrap();
    assert_eq!((m.inner, m.heads, m.key_heads, m.state), (3072, 48, 1, 128));
    assert!(field(&c, "expand absent").is_some());
    // conv (3072 + 2·128) × 3 + SSM 48 × 64 × 128 values per layer (vLLM's shapes).
    assert_eq!(m.state_values().unwrap(), (3328 * 3, 48 * 64 * 128));
    // Through the flags: the same shape, 780 161 280 parameters (mamba2-780m's
    // layout, which its model page rounds to 780M).
    let (input, errors) =
        crate::params::from_pairs(c.pairs().iter().map(|(k, v)| (*k, v.as_str())));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(input.arch, Some(c.arch));
    assert_eq!(total(&c.pairs()), 780_161_280);
    let e = parse_config(
        r#"{"model_type":"mamba2","hidden_size":1536,"num_hidden_layers":2,"vocab_size":10,"num_heads":40,"head_dim":64}"#,
    )
    .unwrap_err();
    assert!(e.to_string().contains("num_heads × head_dim"), "{e}");
}

#[test]
fn nemotron_h_blocks_come_from_the_pattern_and_unknown_blocks_are_refused() {
    let base = r#""model_type":"nemotron_h","hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,
        "intermediate_size":128,"vocab_size":100,"mamba_num_heads":4,"mamba_head_dim":16,"ssm_state_size":8,"n_groups":2"#;
    let c = parse_config(&format!(
        r#"{{{base},"num_hidden_layers":6,"hybrid_override_pattern":"M-M*-M"}}"#
    ))
    .unwrap();
    assert_eq!(c.arch.mixer.unwrap().layers, 3);
    assert_eq!(
        (c.arch.attention_layers(), c.arch.mlp_layer_count()),
        (1, 2)
    );
    assert!(!c.arch.gated_mlp && c.arch.layer_norms == 1 && !c.arch.tied_embeddings);
    assert!(c.arch.moe.is_none());
    assert!(
        c.warnings
            .iter()
            .all(|w| !w.contains("hybrid_override_pattern"))
    );
    let e = parse_config(&format!(
        r#"{{{base},"num_hidden_layers":4,"hybrid_override_pattern":"MXM*"}}"#
    ))
    .unwrap_err();
    assert!(e.to_string().contains("'X'"), "{e}");
    assert!(e.to_string().contains("E/moe"), "{e}");
    let e = parse_config(&format!(
        r#"{{{base},"num_hidden_layers":5,"hybrid_override_pattern":"M-M*"}}"#
    ))
    .unwrap_err();
    assert!(e.to_string().contains("4 blocks"), "{e}");
}

/// Parameters and active parameters of an architecture, from its tensors.
fn counts(a: &Architecture) -> (u64, u64) {
    let tensors = a.tensors().unwrap();
    let all = tensors.iter().map(|t| t.params().unwrap()).sum();
    let active = tensors
        .iter()
        .map(|t| crate::units::checked_product(&[t.rows, t.cols, t.active], "test").unwrap())
        .sum();
    (all, active)
}

#[test]
fn nemotron_3_moe_blocks_hold_a_router_with_its_bias_non_gated_experts_and_a_shared_expert() {
    let base = r#""model_type":"nemotron_h","hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,
        "intermediate_size":128,"vocab_size":100,"mamba_num_heads":4,"mamba_head_dim":16,"ssm_state_size":8,
        "n_groups":2,"num_hidden_layers":5,"hybrid_override_pattern":"ME*-E","n_routed_experts":4,
        "num_experts_per_tok":2,"moe_intermediate_size":32,"moe_shared_expert_intermediate_size":48"#;
    let c = parse_config(&format!(r#"{{{base},"n_shared_experts":1}}"#)).unwrap();
    let m = c.arch.moe.expect("the E blocks are MoE");
    assert_eq!((m.experts, m.active, m.expert_intermediate), (4, 2, 32));
    assert_eq!((m.shared_experts, m.shared_intermediate), (1, 48));
    assert!(m.correction_bias && !m.router_bias && !m.shared_gate);
    // Two E blocks and one `-` block carry an MLP; the `-` one stays dense.
    assert_eq!(c.arch.mlp_layer_count(), 3);
    assert_eq!(m.moe_layers(c.arch.mlp_layer_count()), 2);
    // By hand, as modeling_nemotron_h.py stores the tensors:
    //   embeddings + lm_head 2 × 100 × 64 = 12 800; 5 block norms + norm_f 6 × 64 = 384;
    //   M: in_proj (2·64 + 2·2·8 + 4) × 64 = 10 496, conv1d 96 × 4 + 96 = 480,
    //      dt_bias/A_log/D 12, norm 64, out_proj 4 096: 15 148;
    //   *: q 4 096 + k 2 048 + v 2 048 + o 4 096 = 12 288;
    //   -: up + down 2 × 128 × 64 = 16 384;
    //   E: gate 4 × 64 + correction bias 4 = 260, experts 4 × 2 × 32 × 64 = 16 384,
    //      shared 2 × 48 × 64 = 6 144: 22 788, twice: 45 576.
    // Active: 2 of the 4 experts in each E block (− 2 × 2 × 4 096).
    assert_eq!(counts(&c.arch), (102_580, 102_580 - 16_384));
    // The same shape typed as keys gives the same count.
    assert_eq!(total(&c.pairs()), 102_580);
    let (input, errors) =
        crate::params::from_pairs(c.pairs().iter().map(|(k, v)| (*k, v.as_str())));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(input.arch, Some(c.arch));
    // Absent n_shared_experts: one shared expert, named in the notes; 0: none;
    // 2: one MLP twice as wide (vLLM's NemotronHMoE).
    let c = parse_config(&format!("{{{base}}}")).unwrap();
    assert_eq!(c.arch.moe.unwrap().shared_experts, 1);
    assert!(
        field(&c, "n_shared_experts absent").is_some(),
        "{:?}",
        c.notes
    );
    let c = parse_config(&format!(r#"{{{base},"n_shared_experts":0}}"#)).unwrap();
    assert_eq!(counts(&c.arch).0, 102_580 - 2 * 6_144);
    let c = parse_config(&format!(r#"{{{base},"n_shared_experts":2}}"#)).unwrap();
    let m = c.arch.moe.unwrap();
    assert_eq!((m.shared_experts, m.shared_intermediate), (1, 96));
    // A latent MoE (Nemotron-3 Super): fc1_latent_proj [16, 64] and fc2_latent_proj
    // [64, 16] per E block, the routed experts at width 16 (4 × 2 × 32 × 16 = 4 096
    // instead of 16 384), the router and the shared expert at 64: each E block
    // 260 + 2 × 1 024 + 4 096 + 6 144 = 12 548 instead of 22 788.
    let c = parse_config(&format!(r#"{{{base},"moe_latent_size":16}}"#)).unwrap();
    assert_eq!(c.arch.moe.unwrap().latent, 16);
    let latent_total = 102_580 - 2 * (22_788 - 12_548);
    assert_eq!(
        counts(&c.arch),
        (latent_total, latent_total - 2 * 2 * 2 * 32 * 16)
    );
    assert_eq!(total(&c.pairs()), latent_total);
    // MTP "*E" (vLLM's nemotron_h_mtp.py): an attention block (12 288) and an E
    // block (22 788), each with its norm, enorm + hnorm + final_layernorm, eh_proj
    // 64 × 128; no embedding or lm_head copies; none of it active.
    let mtp = r#""num_nextn_predict_layers":1,"mtp_hybrid_override_pattern":"*E""#;
    let c = parse_config(&format!("{{{base},{mtp}}}")).unwrap();
    assert_eq!(c.arch.mtp_layers, 1);
    let with_mtp = 102_580 + 12_288 + 22_788 + 5 * 64 + 64 * 128;
    assert_eq!(counts(&c.arch), (with_mtp, 102_580 - 16_384));
    assert_eq!(total(&c.pairs()), with_mtp);
    // Another (or no) MTP pattern is named and left out, not miscounted.
    let c = parse_config(&format!(r#"{{{base},"num_nextn_predict_layers":1}}"#)).unwrap();
    assert_eq!(c.arch.mtp_layers, 0);
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("num_nextn_predict_layers")),
        "{:?}",
        c.warnings
    );
    // A float32 SSM cache (vLLM reads the key) sets the per-layer state bytes:
    // conv (64 + 2·2·8) × 3 values in the model's 16 bits + SSM 4 × 16 × 8 in 32.
    let c = parse_config(&format!(r#"{{{base},"mamba_ssm_cache_dtype":"float32"}}"#)).unwrap();
    let bytes = 96 * 3 * 2 + 64 * 8 * 4;
    assert_eq!(c.state_bytes, Some(bytes));
    assert!(
        field(&c, "mamba_ssm_cache_dtype").is_some(),
        "{:?}",
        c.notes
    );
    assert!(c.pairs().contains(&("state-bytes", bytes.to_string())));
    let c = parse_config(&format!(
        r#"{{{base},"mamba_ssm_cache_dtype":"float32","torch_dtype":"float32"}}"#
    ))
    .unwrap();
    assert_eq!(c.state_bytes, Some(96 * 3 * 4 + 64 * 8 * 4));
    let c = parse_config(&format!("{{{base}}}")).unwrap();
    assert_eq!(c.state_bytes, None);
    // The blocks listed by name (newer configs) read the same.
    let named = format!("{{{base}}}").replace(
        r#""hybrid_override_pattern":"ME*-E""#,
        r#""layers_block_type":["mamba","moe","attention","mlp","moe"]"#,
    );
    let c = parse_config(&named).unwrap();
    assert_eq!(counts(&c.arch).0, 102_580);
    assert!(c.warnings.iter().all(|w| !w.contains("layers_block_type")));
    let e = parse_config(&named.replace(r#""mlp""#, r#""hybrid""#)).unwrap_err();
    assert!(e.to_string().contains("unknown block"), "{e}");
    // An E block needs its experts.
    let e =
        parse_config(&format!("{{{base}}}").replace(r#""n_routed_experts":4,"#, "")).unwrap_err();
    assert!(e.to_string().contains("n_routed_experts"), "{e}");
}

#[test]
fn bamba_has_attention_at_its_indices_and_mamba2_elsewhere() {
    let base = r#""model_type":"bamba","hidden_size":64,"num_hidden_layers":6,"num_attention_heads":4,
        "num_key_value_heads":2,"intermediate_size":128,"vocab_size":100,"mamba_n_heads":8,
        "mamba_d_state":16,"mamba_n_groups":1"#;
    let c = parse_config(&format!(r#"{{{base},"attn_layer_indices":[1,4,4]}}"#)).unwrap();
    let m = c.arch.mixer.unwrap();
    // expand (2, BambaConfig's default) × hidden, heads of 16 ("auto").
    assert_eq!((m.layers, m.inner, m.heads), (4, 128, 8));
    assert!(m.gated_norm && c.arch.gated_mlp && !c.arch.tied_embeddings);
    assert_eq!(
        (c.arch.attention_layers(), c.arch.mlp_layer_count()),
        (2, 6)
    );
    assert!(field(&c, "mamba_expand absent").is_some());
    let (input, errors) =
        crate::params::from_pairs(c.pairs().iter().map(|(k, v)| (*k, v.as_str())));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(input.arch, Some(c.arch));
    let e = parse_config(&format!(r#"{{{base},"attn_layer_indices":[6]}}"#)).unwrap_err();
    assert!(e.to_string().contains("below num_hidden_layers (6)"), "{e}");
    let e = parse_config(&format!(
        r#"{{{base},"attn_layer_indices":[1],"mamba_d_head":10}}"#
    ))
    .unwrap_err();
    assert!(e.to_string().contains("8 × 10"), "{e}");
}

#[test]
fn granite_moe_hybrid_reads_layer_types_experts_and_the_shared_mlp() {
    let base = r#""model_type":"granitemoehybrid","hidden_size":64,"num_hidden_layers":4,
        "num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":32,"vocab_size":100,
        "mamba_n_heads":8,"mamba_d_head":16,"mamba_d_state":16,"shared_intermediate_size":48,
        "layer_types":["mamba","attention","mamba","mamba"],"embedding_multiplier":12,
        "attention_multiplier":0.015625,"residual_multiplier":0.22,"logits_scaling":6"#;
    let c = parse_config(&format!(
        r#"{{{base},"num_local_experts":4,"num_experts_per_tok":2}}"#
    ))
    .unwrap();
    let m = c.arch.mixer.unwrap();
    assert_eq!((m.layers, m.inner, m.heads), (3, 128, 8));
    assert_eq!(c.arch.attention_layers(), 1);
    let moe = c.arch.moe.unwrap();
    assert_eq!(
        (moe.experts, moe.active, moe.expert_intermediate),
        (4, 2, 32)
    );
    assert_eq!((moe.shared_experts, moe.shared_intermediate), (1, 48));
    assert!(!moe.router_bias && !c.arch.tied_embeddings);
    // The muP multipliers hold no parameters: no warning.
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let (input, errors) =
        crate::params::from_pairs(c.pairs().iter().map(|(k, v)| (*k, v.as_str())));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(input.arch, Some(c.arch));
    // No experts: the shared MLP is the layer's dense MLP.
    let d = parse_config(&format!(r#"{{{base},"num_local_experts":0}}"#)).unwrap();
    assert_eq!((d.arch.moe, d.arch.intermediate), (None, 48));
    // Absent, GraniteMoeHybridConfig's 8 experts are assumed and said.
    let dflt = parse_config(&format!(r#"{{{base},"num_experts_per_tok":2}}"#)).unwrap();
    assert_eq!(dflt.arch.moe.unwrap().experts, 8);
    assert!(field(&dflt, "num_local_experts absent").is_some());
    let e = parse_config(&format!(
        r#"{{{base},"num_local_experts":0,"num_hidden_layers":5}}"#
    ))
    .unwrap_err();
    assert!(e.to_string().contains("4 entries"), "{e}");
}

#[test]
fn falcon_h1_runs_attention_beside_the_mixer_in_every_layer() {
    let base = r#""model_type":"falcon_h1","hidden_size":64,"num_hidden_layers":3,"num_attention_heads":4,
        "num_key_value_heads":2,"head_dim":8,"intermediate_size":128,"vocab_size":100,"mamba_n_heads":4,
        "mamba_d_state":8,"mamba_n_groups":1,"mamba_d_conv":4,"ssm_multipliers":[1,1,1,1,1],"key_multiplier":0.5"#;
    let c = parse_config(&format!(
        r#"{{{base},"mamba_d_ssm":96,"mamba_d_head":24,"mamba_rms_norm":true}}"#
    ))
    .unwrap();
    let m = c.arch.mixer.unwrap();
    // mamba_d_ssm (96), not expand × hidden (128), is the mixer's width.
    assert_eq!((m.layers, m.inner, m.heads, m.key_heads), (3, 96, 4, 1));
    assert!(m.gated_norm && c.arch.gated_mlp && !c.arch.tied_embeddings);
    assert_eq!((c.arch.attention_layers(), c.arch.layer_norms), (3, 2));
    // The multipliers are no tensors and need no warning.
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    // What --config hands the flags reads back to the same architecture.
    let (input, errors) =
        crate::params::from_pairs(c.pairs().iter().map(|(k, v)| (*k, v.as_str())));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(input.arch, Some(c.arch));
    // Without mamba_rms_norm (FalconH1Config's default) there is no gated norm,
    // and mamba_d_head "auto" is the width over the heads.
    let plain = parse_config(&format!(
        r#"{{{base},"mamba_d_ssm":96,"mamba_d_head":"auto"}}"#
    ))
    .unwrap();
    assert!(!plain.arch.mixer.unwrap().gated_norm);
    assert!(field(&plain, "mamba_rms_norm absent").is_some());
    assert_eq!(total(&c.pairs()) - total(&plain.pairs()), 3 * 96);
    // Biases that are not counted are named.
    let b = parse_config(&format!(
        r#"{{{base},"mamba_d_ssm":96,"projectors_bias":true,"mamba_proj_bias":true}}"#
    ))
    .unwrap();
    assert!(field(&b, "projectors_bias").is_some() && field(&b, "mamba_proj_bias").is_some());
    // FalconH1Config's own check: heads × head dim must be the width (here the
    // default mamba_d_ssm 1024 against 4 × 24).
    let e = parse_config(&format!(r#"{{{base},"mamba_d_head":24}}"#)).unwrap_err();
    assert!(e.to_string().contains("mamba_d_ssm (1024)"), "{e}");
}

#[test]
fn jamba_and_qwen3_next_split_layers_between_attention_and_the_mixer() {
    let j = parse_config(
        r#"{"model_type":"jamba","hidden_size":64,"num_hidden_layers":16,"num_attention_heads":4,
        "num_key_value_heads":2,"intermediate_size":128,"vocab_size":100,"num_experts":4,"num_experts_per_tok":2}"#,
    )
    .unwrap();
    // JambaConfig's defaults: attention at i % 8 == 4 (layers 4 and 12).
    assert_eq!(j.arch.mixer.unwrap().layers, 14);
    assert_eq!(j.arch.attention_layers(), 2);
    assert!(field(&j, "attn_layer_period absent").is_some());
    assert!(field(&j, "mamba_dt_rank absent").is_some());
    let q = parse_config(
        r#"{"model_type":"qwen3_next","hidden_size":64,"num_hidden_layers":8,"num_attention_heads":4,
        "num_key_value_heads":2,"head_dim":16,"intermediate_size":128,"vocab_size":100,"num_experts":4,
        "num_experts_per_tok":2,"moe_intermediate_size":32,"shared_expert_intermediate_size":32,
        "linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":8,"linear_value_head_dim":8,
        "layer_types":["linear_attention","linear_attention","linear_attention","full_attention",
        "linear_attention","linear_attention","linear_attention","full_attention"]}"#,
    )
    .unwrap();
    let m = q.arch.mixer.unwrap();
    assert_eq!((m.layers, m.heads, m.key_heads, m.inner), (6, 4, 2, 32));
    assert!(q.arch.attn_gate && q.arch.qk_norm && q.arch.moe.unwrap().shared_gate);
    assert!(field(&q, "linear_conv_kernel_dim absent").is_some());
    // The pairs read back give the same architecture (what --config hands the flags).
    let (input, errors) =
        crate::params::from_pairs(q.pairs().iter().map(|(k, v)| (*k, v.as_str())));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(input.arch, Some(q.arch));
    assert_eq!(input.state_layers, 6);
}

#[test]
fn gemma3_nests_text_config_and_defaults_head_dim() {
    let c = parse_config(
        r#"{"model_type":"gemma3","text_config":{"model_type":"gemma3_text","hidden_size":2560,
        "num_hidden_layers":34,"num_attention_heads":8,"num_key_value_heads":4,"intermediate_size":10240,
        "vocab_size":262208,"sliding_window":1024},"vision_config":{"hidden_size":1152}}"#,
    )
    .unwrap();
    assert_eq!((c.arch.head_dim, c.arch.layer_norms), (256, 4));
    assert!(c.arch.qk_norm && c.arch.tied_embeddings);
    assert_eq!(c.sliding_layers, Some(34 - 34 / 6));
    assert!(field(&c, "head_dim absent").is_some());
    assert!(field(&c, "vision tower").is_some());
}

#[test]
fn garbage_is_refused() {
    assert!(parse_config("[]").is_err());
    assert!(parse_config("{").is_err());
    assert!(parse_config(r#"{"hidden_size":-1}"#).is_err());
    assert!(
        parse_config(r#"{"hidden_size":4096}"#)
            .unwrap_err()
            .to_string()
            .contains("missing")
    );
}

#[test]
fn every_key_is_read_known_inert_or_named_and_confidence_says_so() {
    let base = r#""hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
        "intermediate_size":128,"vocab_size":100,"tie_word_embeddings":false,"rms_norm_eps":1e-5"#;
    // A known family, every key read or inert: exact.
    let c = parse_config(&format!(r#"{{"model_type":"llama",{base}}}"#)).unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    // A key no one reads is named, and the estimate is approximate because of it.
    let c = parse_config(&format!(
        r#"{{"model_type":"llama",{base},"dense_bottleneck":32}}"#
    ))
    .unwrap();
    let w = field(&c, "dense_bottleneck").unwrap();
    assert!(w.contains("is not read"), "{w}");
    assert!(
        c.confidence.starts_with("approximate: dense_bottleneck"),
        "{}",
        c.confidence
    );
    // Off (false, 0, null, empty) is not a feature turned on: no warning.
    let c = parse_config(&format!(
        r#"{{"model_type":"llama",{base},"dense_bottleneck":0,"extra":null,"flags":[]}}"#
    ))
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    // A key with a known effect that this family does not read says what it is.
    let c = parse_config(&format!(
        r#"{{"model_type":"llama",{base},"mlp_only_layers":[1]}}"#
    ))
    .unwrap();
    assert!(field(&c, "mlp_only_layers is not modelled").is_some());
    // An unknown family names itself and what it was read as.
    let c = parse_config(&format!(r#"{{"model_type":"brand_new",{base}}}"#)).unwrap();
    assert_eq!(c.confidence, "unknown family");
    let w = field(&c, "brand_new").unwrap();
    assert!(
        w.contains("generic decoder rules")
            && w.contains("Llama-style")
            && w.contains("gpumem-agent counts it exactly"),
        "{w}"
    );
    // A nested config: unread keys at both levels are named.
    let c = parse_config(&format!(
        r#"{{"model_type":"gemma3","mystery_root":1,"text_config":{{"model_type":"gemma3_text",{base},"mystery_text":2}}}}"#
    ))
    .unwrap();
    assert!(field(&c, "mystery_root").is_some() && field(&c, "mystery_text").is_some());
}

#[test]
fn olmoe_norms_queries_and_keys_over_the_whole_projection() {
    // OLMoE-1B-7B's shape (allenai/OLMoE-1B-7B-0924 config.json): q_norm and k_norm
    // are [16 × 128] each in all 16 layers: 65 536 parameters a per-head norm misses.
    let cfg = r#"{"model_type":"olmoe","hidden_size":2048,"num_hidden_layers":16,"num_attention_heads":16,
        "num_key_value_heads":16,"intermediate_size":1024,"num_experts":64,"num_experts_per_tok":8,
        "vocab_size":50304,"tie_word_embeddings":false,"clip_qkv":null,"norm_topk_prob":false}"#;
    let c = parse_config(cfg).unwrap();
    assert!(c.arch.qk_norm_whole && !c.arch.qk_norm);
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    let per_head = Architecture {
        qk_norm_whole: false,
        qk_norm: true,
        ..c.arch
    };
    assert_eq!(
        counts(&c.arch).0 - counts(&per_head).0,
        16 * 2 * (2048 - 128)
    );
}

#[test]
fn kimi_linear_puts_kda_in_its_listed_layers_and_mla_in_the_others() {
    let c = parse_config(
        r#"{"model_type":"kimi_linear","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
        "num_key_value_heads":4,"intermediate_size":128,"vocab_size":100,"kv_lora_rank":16,"q_lora_rank":null,
        "qk_nope_head_dim":8,"qk_rope_head_dim":4,"v_head_dim":8,"num_experts":4,"num_experts_per_token":2,
        "num_shared_experts":1,"moe_intermediate_size":16,"first_k_dense_replace":1,
        "moe_router_activation_func":"sigmoid","linear_attn_config":{"full_attn_layers":[4],
        "kda_layers":[1,2,3],"head_dim":8,"num_heads":4,"short_conv_kernel_size":4}}"#,
    )
    .unwrap();
    let m = c.arch.mixer.unwrap();
    assert_eq!((m.layers, m.inner, m.heads, m.state), (3, 32, 4, 8));
    assert_eq!(c.arch.attention_layers(), 1);
    let moe = c.arch.moe.unwrap();
    assert!(moe.router_bias && !moe.correction_bias && moe.shared_experts == 1);
    // KDA state per layer (vLLM's kda_state_shape): q, k, v windows 3 × 32 × 3 and
    // the recurrent 4 × 8 × 8.
    assert_eq!(m.state_values().unwrap(), (3 * 32 * 3, 4 * 8 * 8));
    let (input, errors) =
        crate::params::from_pairs(c.pairs().iter().map(|(k, v)| (*k, v.as_str())));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(input.arch, Some(c.arch));
}

#[test]
fn deepseek_v32_reads_the_indexer_and_noaux_tc_routers_keep_an_fp32_bias() {
    let base = r#""hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,
        "vocab_size":100,"kv_lora_rank":16,"q_lora_rank":24,"qk_nope_head_dim":8,"qk_rope_head_dim":4,
        "v_head_dim":8,"n_routed_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":16,
        "topk_method":"noaux_tc","index_n_heads":2,"index_head_dim":128,"index_topk":2048"#;
    let c = parse_config(&format!(r#"{{"model_type":"deepseek_v32",{base}}}"#)).unwrap();
    let x = c.arch.indexer.unwrap();
    // vLLM's fp8 keys and a scale per 128; transformers' keys in the model's bf16.
    assert_eq!(
        (x.heads, x.head_dim, x.key_bytes(CacheRuntime::Serving, 2)),
        (2, 128, 132)
    );
    assert_eq!(x.key_bytes(CacheRuntime::Transformers, 2), 256);
    assert!(c.arch.moe.unwrap().correction_bias);
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    // The same keys under deepseek_v3 (no indexer): index_* are then unread, named.
    let v3 = parse_config(&format!(r#"{{"model_type":"deepseek_v3",{base}}}"#)).unwrap();
    assert!(v3.arch.indexer.is_none());
    assert!(field(&v3, "index_n_heads is not read").is_some());
    // Per attention layer: wq_b 256 × 24, wk 128 × 64, k_norm 2 × 128, weights_proj 2 × 64.
    assert_eq!(
        counts(&c.arch).0 - counts(&v3.arch).0,
        2 * (256 * 24 + 128 * 64 + 2 * 128 + 2 * 64)
    );
    let (input, errors) =
        crate::params::from_pairs(c.pairs().iter().map(|(k, v)| (*k, v.as_str())));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(input.arch, Some(c.arch));
}

#[test]
fn glm_families_keep_an_fp32_router_bias_and_glm5_shares_its_vocabulary_with_mtp() {
    let mla = r#""hidden_size":64,"num_hidden_layers":3,"num_attention_heads":4,"intermediate_size":128,
        "vocab_size":1000,"kv_lora_rank":16,"q_lora_rank":24,"qk_nope_head_dim":8,"qk_rope_head_dim":4,
        "v_head_dim":8,"n_routed_experts":4,"n_shared_experts":1,"num_experts_per_tok":2,
        "moe_intermediate_size":16,"first_k_dense_replace":1,"num_nextn_predict_layers":1"#;
    let glm5 = parse_config(&format!(
        r#"{{"model_type":"glm_moe_dsa",{mla},"index_n_heads":2,"index_head_dim":128,"index_topk":2048,
        "mlp_layer_types":["dense","sparse","sparse"]}}"#
    ))
    .unwrap();
    assert!(glm5.arch.mtp_shared_vocab && glm5.arch.indexer.is_some());
    let m = glm5.arch.moe.unwrap();
    assert!(m.correction_bias && m.dense_layers == 1);
    assert_eq!(glm5.confidence, "exact", "{:?}", glm5.warnings);
    // The MTP layer stores no embedding or head: 2 × 1000 × 64 fewer than DeepSeek's.
    let copies = Architecture {
        mtp_shared_vocab: false,
        ..glm5.arch
    };
    assert_eq!(counts(&copies).0 - counts(&glm5.arch).0, 2 * 1000 * 64);
    let (input, errors) =
        crate::params::from_pairs(glm5.pairs().iter().map(|(k, v)| (*k, v.as_str())));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(input.arch, Some(glm5.arch));
    // GLM-4.7-Flash: MLA, the fp32 bias without topk_method.
    let flash = parse_config(&format!(r#"{{"model_type":"glm4_moe_lite",{mla}}}"#)).unwrap();
    assert!(flash.arch.moe.unwrap().correction_bias && !flash.arch.mtp_shared_vocab);
    // GLM-4.5: q/k/v biases without an o_proj bias, per-head q/k norms.
    let g45 = parse_config(
        r#"{"model_type":"glm4_moe","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
        "num_key_value_heads":2,"head_dim":16,"intermediate_size":128,"vocab_size":100,"attention_bias":true,
        "use_qk_norm":true,"partial_rotary_factor":0.5,"n_routed_experts":4,"num_experts_per_tok":2,
        "moe_intermediate_size":16,"n_shared_experts":1,"first_k_dense_replace":1}"#,
    )
    .unwrap();
    assert!(g45.arch.qkv_bias && !g45.arch.o_bias && g45.arch.qk_norm);
    assert!(g45.arch.moe.unwrap().correction_bias);
    assert_eq!(g45.confidence, "exact", "{:?}", g45.warnings);
}

#[test]
fn gemma4_global_layers_have_their_own_kv_shape_and_k_eq_v_drops_v_proj() {
    let text = r#""model_type":"gemma4_text","hidden_size":64,"num_hidden_layers":6,"num_attention_heads":4,
        "num_key_value_heads":2,"num_global_key_value_heads":1,"head_dim":16,"global_head_dim":32,
        "intermediate_size":128,"vocab_size":100,"sliding_window":8,
        "layer_types":["sliding_attention","sliding_attention","full_attention",
        "sliding_attention","sliding_attention","full_attention"]"#;
    let c = parse_config(&format!(r#"{{{text},"attention_k_eq_v":true}}"#)).unwrap();
    let g = c.arch.global_attn.unwrap();
    assert_eq!(
        (g.layers, g.kv_heads, g.head_dim, g.k_eq_v),
        (2, 1, 32, true)
    );
    assert_eq!((c.sliding_window, c.sliding_layers), (Some(8), Some(4)));
    assert!(c.arch.layer_scalars == 1 && c.arch.qk_norm && c.arch.tied_embeddings);
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    // Without k = v the global layers keep the model's KV heads and their v_proj:
    // per global layer v_proj 2 × 32 × 64 and k_proj one head wider (1 → 2).
    let kv = parse_config(&format!(r#"{{{text},"attention_k_eq_v":false}}"#)).unwrap();
    assert_eq!(kv.arch.global_attn.unwrap().kv_heads, 2);
    assert_eq!(
        counts(&kv.arch).0 - counts(&c.arch).0,
        2 * (2 * 32 * 64 + 32 * 64)
    );
    // The KV line at the prefill of 100 tokens, bf16: the 2 global layers every token
    // with 2 × 1 × 32 values (K and V both cached) and the 4 sliding layers, with
    // 2 × 2 × 16, every prompt token too (transformers' DynamicSlidingWindowLayer keeps
    // a view of the prompt's keys and values until the first decode step); after 20
    // generated tokens the sliding layers keep their window of 8, the prefill's moment
    // still the larger.
    let mut pairs = c.pairs();
    pairs.extend([("context", "100".to_string()), ("kv-dtype", "bf16".into())]);
    let (input, errors) = crate::params::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(input.arch, Some(c.arch));
    let est = crate::estimate::estimate(&input).unwrap();
    assert_eq!(est.kv_cache_bytes, (4 * 100 * 64 + 2 * 100 * 64) * 2);
    pairs.push(("generate", "20".into()));
    let (input, _) = crate::params::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
    let est = crate::estimate::estimate(&input).unwrap();
    let end = est
        .lines
        .iter()
        .find(|l| l.key == crate::estimate::LineKey::KvCache)
        .unwrap();
    assert_eq!(end.bytes, (4 * 100 * 64 + 2 * 100 * 64) * 2);
    assert!(
        end.formula
            .contains(&format!("{} B", (4 * 8 * 64 + 2 * 120 * 64) * 2))
    );
}

/// Gemma 4's KV sharing: the last `num_kv_shared_layers` layers keep no cache and
/// hold no k/v projections or k_norm, their MLP twice as wide with
/// `use_double_wide_mlp`. transformers 5.23 builds this config on the meta device
/// (`Gemma4ForCausalLM`) with 30 944 224 parameters and 12 `layer_scalar` buffers,
/// the checkpoint's 30 944 236 values; its `kv_sharing_modes` make layers 8–11 reuse
/// (sliding 8–10, full 11), so 7 sliding and 1 full layer keep a cache.
#[test]
fn gemma4_kv_shared_layers_keep_no_cache_and_no_kv_projections() {
    let text = r#""model_type":"gemma4_text","hidden_size":512,"num_hidden_layers":12,"num_attention_heads":4,
        "num_key_value_heads":1,"head_dim":64,"global_head_dim":128,"intermediate_size":1024,
        "vocab_size":1000,"vocab_size_per_layer_input":1000,"hidden_size_per_layer_input":32,
        "sliding_window":128,"max_position_embeddings":4096"#;
    let c = parse_config(&format!(
        r#"{{{text},"num_kv_shared_layers":4,"use_double_wide_mlp":true}}"#
    ))
    .unwrap();
    assert_eq!(
        c.arch.kv_share,
        Some(crate::arch::KvShare {
            layers: 4,
            global: 1,
            double_wide_mlp: true
        })
    );
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(parameters(&c), 30_944_236);
    // Narrow MLPs: 4 layers × 3 × 512 × 1024 fewer.
    let narrow = parse_config(&format!(r#"{{{text},"num_kv_shared_layers":4}}"#)).unwrap();
    assert_eq!(parameters(&c) - parameters(&narrow), 4 * 3 * 512 * 1024);
    // No sharing: the 3 sliding layers' k/v (2 × 64 × 512) and k_norm (64), the full
    // layer's (2 × 128 × 512 and 128) come back.
    let plain = parse_config(&format!(r#"{{{text}}}"#)).unwrap();
    assert_eq!(
        parameters(&plain) - parameters(&narrow),
        3 * (2 * 64 * 512 + 64) + (2 * 128 * 512 + 128)
    );
    // The KV line at the prefill of 1 024 tokens, bf16: 7 sliding layers and one full
    // layer, each holding every prompt token (the sliding layers' window of 128 is
    // kept from the first decode step on), 2 × 64 and 2 × 128 values.
    let mut pairs = c.pairs();
    pairs.extend([("context", "1024".to_string()), ("kv-dtype", "bf16".into())]);
    let (input, errors) = crate::params::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(input.arch, Some(c.arch));
    let est = crate::estimate::estimate(&input).unwrap();
    assert_eq!(est.kv_cache_bytes, (7 * 1024 * 128 + 1024 * 256) * 2);
    // Every layer shared, or a shared type no earlier layer produces: refused.
    assert!(parse_config(&format!(r#"{{{text},"num_kv_shared_layers":12}}"#)).is_err());
    assert!(parse_config(&format!(r#"{{{text},"num_kv_shared_layers":7}}"#)).is_err());
}

#[test]
fn seed_oss_biases_q_k_v_and_o_by_their_own_keys_and_smollm3_nope_layers_hold_nothing() {
    let base = r#""hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
        "intermediate_size":128,"vocab_size":100"#;
    let c = parse_config(&format!(
        r#"{{"model_type":"seed_oss",{base},"attention_bias":true,"attention_out_bias":false,"mlp_bias":false,"tie_word_embeddings":false}}"#
    ))
    .unwrap();
    assert!(c.arch.qkv_bias && !c.arch.o_bias && !c.arch.mlp_bias);
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    let s = parse_config(&format!(
        r#"{{"model_type":"smollm3",{base},"no_rope_layers":[1,0],"no_rope_layer_interval":4}}"#
    ))
    .unwrap();
    let llama = parse_config(&format!(
        r#"{{"model_type":"llama",{base},"tie_word_embeddings":true}}"#
    ))
    .unwrap();
    assert_eq!(s.arch, llama.arch);
    assert_eq!(s.confidence, "exact", "{:?}", s.warnings);
}

/// A small Qwen2 body with `extra` keys (RoPE settings) and `max_position_embeddings`.
fn rope_config(model_type: &str, max: u64, extra: &str) -> ImportedConfig {
    parse_config(&format!(
        r#"{{"model_type":"{model_type}","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
        "num_key_value_heads":2,"intermediate_size":128,"vocab_size":100,
        "max_position_embeddings":{max}{extra}}}"#
    ))
    .unwrap()
}

#[test]
fn rope_scaling_reaches_what_vllm_derives() {
    // Qwen2.5's model card: add yarn ×4 over 32 768 to serve 131 072.
    let yarn =
        r#","rope_scaling":{"type":"yarn","factor":4.0,"original_max_position_embeddings":32768}"#;
    let c = rope_config("qwen2", 32768, yarn);
    assert_eq!(c.rope_positions, Some(131_072));
    assert!(c.pairs().contains(&("rope-positions", "131072".into())));
    assert!(
        field(&c, "RoPE scaling yarn ×4")
            .unwrap()
            .contains("131072")
    );
    // transformers 5 writes the same as rope_parameters, flat or per layer type.
    let flat = r#","rope_parameters":{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768,"rope_theta":1000000.0}"#;
    assert_eq!(
        rope_config("qwen2", 32768, flat).rope_positions,
        Some(131_072)
    );
    let nested = r#","rope_parameters":{"full_attention":{"rope_type":"linear","factor":2.0},"sliding_attention":{"rope_type":"default"}}"#;
    assert_eq!(
        rope_config("qwen2", 4096, nested).rope_positions,
        Some(8192)
    );
    // Linear and dynamic multiply the trained positions.
    let linear = r#","rope_scaling":{"rope_type":"linear","factor":2.5}"#;
    assert_eq!(
        rope_config("llama", 4096, linear).rope_positions,
        Some(10_240)
    );
}

#[test]
fn rope_scaling_already_in_the_positions_adds_nothing() {
    // Llama-3.1: llama3 ×8, max_position_embeddings already 131 072.
    let llama3 = r#","rope_scaling":{"rope_type":"llama3","factor":8.0,"original_max_position_embeddings":8192}"#;
    let c = rope_config("llama", 131_072, llama3);
    assert_eq!(c.rope_positions, None);
    assert!(
        field(&c, "RoPE scaling llama3 ×8")
            .unwrap()
            .contains("already within")
    );
    // DeepSeek-V3: yarn ×40 over 4 096 = its 163 840.
    let ds =
        r#","rope_scaling":{"type":"yarn","factor":40,"original_max_position_embeddings":4096}"#;
    assert_eq!(rope_config("qwen2", 163_840, ds).rope_positions, None);
    // Gemma-3: vLLM skips the factor, its 128K includes it.
    let gemma = r#","rope_scaling":{"rope_type":"linear","factor":8.0}"#;
    assert_eq!(
        rope_config("gemma3_text", 131_072, gemma).rope_positions,
        None
    );
    // No scaling, no note; an absurd factor names nothing.
    let plain = rope_config("qwen2", 32768, "");
    assert!(plain.rope_positions.is_none() && field(&plain, "RoPE").is_none());
    let absurd = r#","rope_scaling":{"rope_type":"linear","factor":1e300}"#;
    assert_eq!(rope_config("qwen2", 32768, absurd).rope_positions, None);
}

/// Models this estimator does not cover are refused with the reason, never read as a
/// decoder: an encoder it does not count (DistilBERT), an encoder-decoder, a diffusers
/// pipeline.
#[test]
fn encoders_encoder_decoders_and_diffusion_pipelines_are_refused_naming_why() {
    let distil = r#"{"architectures": ["DistilBertModel"], "model_type": "distilbert", "dim": 768,
        "n_layers": 6, "n_heads": 12, "hidden_dim": 3072, "vocab_size": 30522}"#;
    let e = parse_config(distil).unwrap_err().to_string();
    assert!(
        e.contains("encoder-only") && e.contains("no KV cache"),
        "{e}"
    );
    let t5 = r#"{"model_type": "t5", "d_model": 512, "num_layers": 6}"#;
    assert!(
        parse_config(t5)
            .unwrap_err()
            .to_string()
            .contains("encoder-decoder")
    );
    let sd = r#"{"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.21.0",
        "unet": ["diffusers", "UNet2DConditionModel"]}"#;
    let e = parse_config(sd).unwrap_err().to_string();
    assert!(e.contains("diffusers"), "{e}");
}

#[test]
fn sliding_patterns_are_the_family_records_for_configs_and_gguf_headers_alike() {
    // Cohere2Config's default pattern (every fourth layer full) when layer_types is
    // absent, sliding_window_pattern read.
    let c = parse_config(
        r#"{"model_type":"cohere2","hidden_size":64,"num_hidden_layers":8,"num_attention_heads":4,
        "intermediate_size":128,"vocab_size":100,"sliding_window":4096,"sliding_window_pattern":4}"#,
    )
    .unwrap();
    assert_eq!((c.sliding_window, c.sliding_layers), (Some(4096), Some(6)));
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    // llama.cpp's set_swa_pattern by the records' gguf names.
    for (arch, layers, sliding) in [
        ("gemma2", 26, Some(13)),
        ("gpt-oss", 25, Some(13)),
        ("gemma3", 26, Some(22)),
        ("gemma3n", 30, Some(25)),
        ("cohere2", 40, Some(30)),
        ("llama", 32, None),
    ] {
        assert_eq!(super::gguf_sliding_layers(arch, layers), sliding, "{arch}");
    }
}

/// Parameters of an imported architecture (every tensor group).
fn parameters(c: &ImportedConfig) -> u64 {
    c.arch
        .tensors()
        .unwrap()
        .iter()
        .map(|t| t.params().unwrap())
        .sum()
}

#[test]
fn bert_is_an_encoder_with_token_types_pooler_and_no_lm_head() {
    // BERT-base's shape: 30522 × 768 words, 512 positions, 2 token types, 12 layers.
    let c = parse_config(
        r#"{"model_type":"bert","architectures":["BertModel"],"hidden_size":768,"num_hidden_layers":12,
        "num_attention_heads":12,"intermediate_size":3072,"vocab_size":30522,"max_position_embeddings":512,
        "type_vocab_size":2,"hidden_act":"gelu","layer_norm_eps":1e-12,"hidden_dropout_prob":0.1,
        "attention_probs_dropout_prob":0.1,"position_embedding_type":"absolute","pad_token_id":0}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert!(c.arch.encoder && c.arch.pooler && !c.arch.gated_mlp && c.arch.layernorm_bias);
    assert_eq!((c.arch.token_types, c.arch.learned_positions), (2, 512));
    // What transformers 5.23's BertModel holds for bert-base-uncased's config: 109 482 240.
    assert_eq!(parameters(&c), 109_482_240);
    // A task head named by `architectures` is said, and not counted.
    let head = parse_config(
        r#"{"model_type":"xlm-roberta","architectures":["XLMRobertaForSequenceClassification"],"hidden_size":64,
        "num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":100,
        "max_position_embeddings":34,"type_vocab_size":1}"#,
    )
    .unwrap();
    assert!(
        head.confidence.starts_with("approximate"),
        "{}",
        head.confidence
    );
    assert!(
        head.warnings
            .iter()
            .any(|w| w.contains("XLMRobertaForSequenceClassification"))
    );
}

#[test]
fn modernbert_has_a_gated_mlp_without_biases_and_its_norm_bias_switch() {
    let text = |bias: bool| {
        format!(
            r#"{{"model_type":"modernbert","architectures":["ModernBertModel"],"hidden_size":768,"num_hidden_layers":22,
            "num_attention_heads":12,"intermediate_size":1152,"vocab_size":50368,"max_position_embeddings":8192,
            "global_attn_every_n_layers":3,"local_attention":128,"attention_bias":false,"mlp_bias":false,"norm_bias":{bias}}}"#
        )
    };
    let c = parse_config(&text(false)).unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert!(c.arch.encoder && c.arch.gated_mlp && !c.arch.pooler && !c.arch.layernorm_bias);
    // ModernBertModel from ModernBERT-base's shape on the meta device: 149 014 272.
    assert_eq!(parameters(&c), 149_014_272);
    // norm_bias: one more vector in each of the 2 × 22 + 1 norms.
    let b = parse_config(&text(true)).unwrap();
    assert_eq!(parameters(&b), 149_014_272 + 45 * 768);
}

#[test]
fn the_other_encoders_and_the_encoder_decoders_stay_refused_naming_why() {
    for (mt, why) in [
        ("distilbert", "an encoder-only model"),
        ("deberta-v2", "an encoder-only model"),
        ("roformer", "an encoder-only model"),
        ("xlm-roberta-xl", "an encoder-only model"),
        ("t5", "an encoder-decoder model"),
        ("whisper", "an encoder-decoder model"),
        ("pegasus", "an encoder-decoder model"),
    ] {
        let e = parse_config(&format!(
            r#"{{"model_type":"{mt}","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100}}"#
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains(why), "{mt}: {e}");
    }
}

/// Encoder-decoders are read: their parameters as transformers 5.23 builds
/// `AutoModelForSeq2SeqLM` / `WhisperForConditionalGeneration` from each config on the
/// meta device (the counts below, parameters and persistent buffers: BART's
/// `final_logits_bias` included), and the decoder's shape their caches take: layers,
/// heads, head width (T5's d_kv, else d_model ÷ decoder_attention_heads) and Whisper's
/// encoder length (max_source_positions).
#[test]
fn encoder_decoders_are_read_with_the_parameters_transformers_builds() {
    for (name, text, want, shape) in [
        (
            "t5-small",
            r#"{"vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_decoder_layers": 6, "num_heads": 8, "relative_attention_num_buckets": 32, "feed_forward_proj": "relu", "tie_word_embeddings": true, "model_type": "t5"}"#,
            60_506_624,
            (6, 8, 64, 0),
        ),
        (
            "flan-t5-base",
            r#"{"vocab_size": 32128, "d_model": 768, "d_kv": 64, "d_ff": 2048, "num_layers": 12, "num_decoder_layers": 12, "num_heads": 12, "relative_attention_num_buckets": 32, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": false, "model_type": "t5"}"#,
            222_903_552,
            (12, 12, 64, 0),
        ),
        (
            "mt5-small",
            r#"{"vocab_size": 250112, "d_model": 512, "d_kv": 64, "d_ff": 1024, "num_layers": 8, "num_decoder_layers": 8, "num_heads": 6, "relative_attention_num_buckets": 32, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": true, "model_type": "mt5"}"#,
            172_119_424,
            (8, 6, 64, 0),
        ),
        (
            "umt5-small",
            r#"{"vocab_size": 256384, "d_model": 512, "d_kv": 64, "d_ff": 1024, "num_layers": 8, "num_decoder_layers": 8, "num_heads": 6, "relative_attention_num_buckets": 32, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": true, "model_type": "umt5"}"#,
            175_333_376,
            (8, 6, 64, 0),
        ),
        (
            "bart-base",
            r#"{"vocab_size": 50265, "max_position_embeddings": 1024, "encoder_layers": 6, "encoder_ffn_dim": 3072, "decoder_layers": 6, "decoder_ffn_dim": 3072, "d_model": 768, "decoder_attention_heads": 12, "tie_word_embeddings": true, "model_type": "bart"}"#,
            139_470_681,
            (6, 12, 64, 0),
        ),
        (
            "mbart-large-50",
            r#"{"vocab_size": 250054, "max_position_embeddings": 1024, "encoder_layers": 12, "encoder_ffn_dim": 4096, "decoder_layers": 12, "decoder_ffn_dim": 4096, "d_model": 1024, "decoder_attention_heads": 16, "tie_word_embeddings": true, "model_type": "mbart"}"#,
            611_129_542,
            (12, 16, 64, 0),
        ),
        (
            "whisper-small",
            r#"{"vocab_size": 51865, "num_mel_bins": 80, "encoder_layers": 12, "decoder_layers": 12, "decoder_ffn_dim": 3072, "encoder_ffn_dim": 3072, "d_model": 768, "max_source_positions": 1500, "max_target_positions": 448, "decoder_attention_heads": 12, "tie_word_embeddings": true, "model_type": "whisper"}"#,
            241_734_912,
            (12, 12, 64, 1500),
        ),
        (
            "whisper-large-v3",
            r#"{"vocab_size": 51866, "num_mel_bins": 128, "encoder_layers": 32, "decoder_layers": 32, "decoder_ffn_dim": 5120, "encoder_ffn_dim": 5120, "d_model": 1280, "max_source_positions": 1500, "max_target_positions": 448, "decoder_attention_heads": 20, "tie_word_embeddings": true, "model_type": "whisper"}"#,
            1_543_490_560,
            (32, 20, 64, 1500),
        ),
    ] {
        let c = parse_config(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let a = c.arch;
        assert_eq!(a.encdec_params, want, "{name}");
        assert_eq!(parameters(&c), want, "{name}");
        assert_eq!(
            (a.layers, a.heads, a.head_dim, a.encoder_length),
            shape,
            "{name}"
        );
        assert_eq!(
            (a.kv_heads, c.confidence.as_str()),
            (a.heads, "exact"),
            "{name}"
        );
    }
    // flan-t5's config unties lm_head: 4.x's count (the checkpoint's 247 577 856) is noted.
    let flan = r#"{"vocab_size": 32128, "d_model": 768, "d_kv": 64, "d_ff": 2048, "num_layers": 12, "num_heads": 12, "relative_attention_num_buckets": 32, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": false, "model_type": "t5"}"#;
    let c = parse_config(flan).unwrap();
    assert!(
        c.notes
            .iter()
            .any(|n| n.contains("4.x keeps the checkpoint's own: 247577856")),
        "{:?}",
        c.notes
    );
    // A key the count needs is absent: refused, without a count.
    let e = parse_config(r#"{"model_type": "whisper", "d_model": 768}"#)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("encoder-decoder") && !e.contains("builds"),
        "{e}"
    );
    // Without the decoder's heads the count is named, the caches are not estimated.
    let e = parse_config(r#"{"vocab_size": 50265, "max_position_embeddings": 1024, "encoder_layers": 6, "encoder_ffn_dim": 3072, "decoder_layers": 6, "decoder_ffn_dim": 3072, "d_model": 768, "model_type": "bart"}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("builds 139470681 parameters"), "{e}");
}

#[test]
fn qwen1_halves_its_mlp_and_biases_only_c_attn_unless_told() {
    // modeling_qwen.py: QWenMLP's w1, w2 and c_proj are intermediate_size // 2 wide;
    // c_attn always has a bias, the other linears only when no_bias is false.
    let base = r#""model_type":"qwen","hidden_size":256,"num_hidden_layers":2,"num_attention_heads":4,
        "kv_channels":64,"intermediate_size":1024,"vocab_size":1000,"seq_length":2048"#;
    let c = parse_config(&format!("{{{base},\"no_bias\":true}}")).unwrap();
    assert_eq!(c.arch.intermediate, 512);
    assert!(c.arch.qkv_bias && !c.arch.o_bias && !c.arch.mlp_bias);
    assert_eq!((c.arch.kv_heads, c.arch.head_dim), (4, 64));
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    let biased = parse_config(&format!("{{{base},\"no_bias\":false}}")).unwrap();
    // c_proj's and the MLP's biases: hidden + 2 × 512 + hidden per layer.
    assert_eq!(
        counts(&biased.arch).0 - counts(&c.arch).0,
        2 * (256 + 2 * 512 + 256)
    );
}

#[test]
fn chatglm_reads_its_groups_channels_and_padded_vocabulary() {
    // modeling_chatglm.py: query_key_value spans heads + 2 × multi_query_group_num heads
    // of kv_channels; embedding and output_layer have padded_vocab_size rows.
    let base = r#""model_type":"chatglm","hidden_size":256,"num_layers":2,"num_attention_heads":4,
        "kv_channels":64,"ffn_hidden_size":512,"padded_vocab_size":1024,"add_qkv_bias":true,
        "add_bias_linear":false,"rmsnorm":true,"post_layer_norm":true,"original_rope":true"#;
    let c = parse_config(&format!(
        "{{{base},\"multi_query_attention\":true,\"multi_query_group_num\":2}}"
    ))
    .unwrap();
    assert_eq!(
        (c.arch.kv_heads, c.arch.head_dim, c.arch.vocab),
        (2, 64, 1024)
    );
    assert!(c.arch.qkv_bias && !c.arch.o_bias && !c.arch.mlp_bias && !c.arch.tied_embeddings);
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    let mha = parse_config(&format!("{{{base},\"multi_query_attention\":false}}")).unwrap();
    assert_eq!(mha.arch.kv_heads, 4);
    // A P-tuning prefix encoder is refused rather than left out.
    assert!(parse_config(&format!("{{{base},\"pre_seq_len\":128}}")).is_err());
}

#[test]
fn hunyuan_and_cohere_qk_norms_match_what_transformers_builds() {
    // transformers 5.23 on the meta device: HunYuanDenseV1Config's defaults with
    // head_dim 128 (its default, None, builds nothing) count 8 859 684 864 parameters
    // (query_layernorm and key_layernorm of 128 in every layer); CohereConfig's with
    // use_qk_norm, 8 KV heads and 4 layers 4 915 802 112 (q_norm [64, 128], k_norm
    // [8, 128], tied embeddings).
    let hunyuan = parse_config(
        r#"{"model_type":"hunyuan_v1_dense","hidden_size":4096,"num_hidden_layers":32,
        "num_attention_heads":32,"num_key_value_heads":32,"head_dim":128,"intermediate_size":11008,
        "vocab_size":290943,"tie_word_embeddings":false,"attention_bias":false}"#,
    )
    .unwrap();
    assert_eq!(hunyuan.confidence, "exact", "{:?}", hunyuan.warnings);
    assert_eq!(counts(&hunyuan.arch).0, 8_859_684_864);
    let cohere = parse_config(
        r#"{"model_type":"cohere","hidden_size":8192,"num_hidden_layers":4,"num_attention_heads":64,
        "num_key_value_heads":8,"intermediate_size":22528,"vocab_size":256000,
        "tie_word_embeddings":true,"attention_bias":false,"use_qk_norm":true}"#,
    )
    .unwrap();
    assert_eq!(cohere.confidence, "exact", "{:?}", cohere.warnings);
    assert_eq!(counts(&cohere.arch).0, 4_915_802_112);
}

#[test]
fn ernie_moe_layers_by_start_end_and_interval_match_what_transformers_builds() {
    // transformers 5.23 on the meta device: Ernie4_5_MoeConfig with 12 layers, MoE from
    // layer 2 to layer 9 every second layer (layers 3, 5, 7, 9), 8 experts of 256 and
    // one shared expert, untied: 200 860 704 parameters and persistent buffers.
    let c = parse_config(
        r#"{"model_type":"ernie4_5_moe","hidden_size":1024,"num_hidden_layers":12,
        "num_attention_heads":8,"num_key_value_heads":2,"intermediate_size":3072,"vocab_size":32000,
        "moe_num_experts":8,"moe_k":2,"moe_intermediate_size":256,"moe_num_shared_experts":1,
        "moe_layer_start_index":2,"moe_layer_end_index":9,"moe_layer_interval":2,
        "tie_word_embeddings":false,"use_bias":false}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 200_860_704);
    assert_eq!(c.arch.moe.map(|m| m.moe_layers(12)), Some(4));
}

#[test]
fn helium_and_internlm3_biases_match_what_transformers_builds() {
    // transformers 5.23 on the meta device: HeliumConfig with attention_bias gives
    // q/k/v a bias and o_proj none (132 666 368 parameters for this shape);
    // InternLM3Config's qkv_bias and bias are Llama's attention_bias (q, k, v, o) and
    // mlp_bias (126 409 728).
    let helium = parse_config(
        r#"{"model_type":"helium","hidden_size":1024,"num_hidden_layers":4,"num_attention_heads":8,
        "num_key_value_heads":8,"head_dim":128,"intermediate_size":4096,"vocab_size":32000,
        "attention_bias":true,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(helium.confidence, "exact", "{:?}", helium.warnings);
    assert_eq!(counts(&helium.arch).0, 132_666_368);
    let internlm = parse_config(
        r#"{"model_type":"internlm3","hidden_size":1024,"num_hidden_layers":4,"num_attention_heads":8,
        "num_key_value_heads":2,"head_dim":128,"intermediate_size":4096,"vocab_size":32000,
        "qkv_bias":true,"bias":true,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(internlm.confidence, "exact", "{:?}", internlm.warnings);
    assert_eq!(counts(&internlm.arch).0, 126_409_728);
}

#[test]
fn python_infinity_and_nan_are_read_as_strings_outside_strings_only() {
    // Python's json module writes them bare (transformers' save_pretrained of a
    // Mamba-2 config: time_step_limit [0.0, Infinity]).
    let text = r#"{"a": [0.0, Infinity, -Infinity], "b": NaN, "c": "NaN \"Infinity\""}"#;
    let fixed = python_floats(text).unwrap();
    let v: Value = serde_json::from_str(&fixed).unwrap();
    assert_eq!(v["a"][1], "Infinity");
    assert_eq!(v["a"][2], "-Infinity");
    assert_eq!(v["b"], "NaN");
    assert_eq!(v["c"], "NaN \"Infinity\"");
    assert_eq!(python_floats(r#"{"a": "Infinity"}"#), None);
    // A read key holding one is no number: refused by name, not taken as absent.
    let err = parse_config(
        r#"{"model_type":"llama","hidden_size":Infinity,"num_hidden_layers":2,
        "num_attention_heads":2,"vocab_size":10,"intermediate_size":8}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("hidden_size"), "{err}");
    // An inert one changes nothing.
    let ok = parse_config(
        r#"{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":2,
        "num_key_value_heads":2,"vocab_size":10,"intermediate_size":8,"tie_word_embeddings":false,
        "time_step_limit":[0.0,Infinity]}"#,
    )
    .unwrap();
    assert_eq!(ok.confidence, "exact", "{:?}", ok.warnings);
}

#[test]
fn hyperclovax_mellum_and_solar_open_switches_match_what_transformers_builds() {
    // transformers 5.23 on the meta device, each shape built from these keys:
    // HyperCLOVAX without post norms (two RMSNorms per layer): 126 362 624;
    // Mellum with layers 0 and 3 dense (mlp_layer_types), per-head q/k norms and two
    // sliding layers: 126 380 032; Solar Open with q/k/v biases (o_proj has none),
    // two shared experts' width and the fp32 correction bias: 138 984 480.
    let hcx = parse_config(
        r#"{"model_type":"hyperclovax","hidden_size":1024,"num_hidden_layers":4,
        "num_attention_heads":8,"num_key_value_heads":2,"head_dim":128,"intermediate_size":4096,
        "vocab_size":32000,"use_post_norm":false,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(hcx.confidence, "exact", "{:?}", hcx.warnings);
    assert_eq!(counts(&hcx.arch).0, 126_362_624);
    let mellum = parse_config(
        r#"{"model_type":"mellum","hidden_size":1024,"num_hidden_layers":4,"num_attention_heads":8,
        "num_key_value_heads":2,"head_dim":128,"intermediate_size":4096,"moe_intermediate_size":512,
        "num_local_experts":8,"num_experts_per_tok":2,"vocab_size":32000,
        "mlp_layer_types":["dense","sparse","sparse","dense"],
        "layer_types":["sliding_attention","full_attention","sliding_attention","full_attention"],
        "sliding_window":512,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(mellum.confidence, "exact", "{:?}", mellum.warnings);
    assert_eq!(counts(&mellum.arch).0, 126_380_032);
    assert_eq!(
        (mellum.sliding_window, mellum.sliding_layers),
        (Some(512), Some(2))
    );
    let solar = parse_config(
        r#"{"model_type":"solar_open","hidden_size":1024,"num_hidden_layers":4,
        "num_attention_heads":8,"num_key_value_heads":2,"head_dim":128,"moe_intermediate_size":512,
        "n_routed_experts":8,"n_shared_experts":2,"num_experts_per_tok":2,"vocab_size":32000,
        "attention_bias":true,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(solar.confidence, "exact", "{:?}", solar.warnings);
    assert_eq!(counts(&solar.arch).0, 138_984_480);
}

#[test]
fn gpt_bigcode_has_one_kv_head_and_an_fp32_eager_softmax() {
    let base = r#""model_type":"gpt_bigcode","n_embd":2048,"n_head":16,"n_inner":8192,"n_layer":24,
        "n_positions":2048,"vocab_size":49280"#;
    let a = parse_config(&format!("{{{base}}}")).unwrap().arch;
    // GPTBigCodeConfig's multi_query default: one K/V head; its eager_attention_forward
    // takes the softmax in fp32 (GPT-2's in the compute dtype); dropouts 0.1.
    assert_eq!(a.kv_heads, 1);
    assert!(a.fused_qkv && !a.softmax_in_dtype && !a.gelu_new);
    assert!(a.dropout && a.attn_dropout && a.embedding_dropout);
    let a = parse_config(&format!(r#"{{{base},"multi_query":false}}"#))
        .unwrap()
        .arch;
    assert_eq!(a.kv_heads, 16);
    assert!(!a.softmax_in_dtype);
    let gpt2 = parse_config(
        r#"{"model_type":"gpt2","n_embd":768,"n_head":12,"n_layer":12,"n_positions":1024,"vocab_size":50257}"#,
    )
    .unwrap()
    .arch;
    assert!(gpt2.softmax_in_dtype);
}

#[test]
fn stablelm_reads_its_rotary_width_and_dropouts() {
    let base = r#""model_type":"stablelm","hidden_size":2560,"num_hidden_layers":32,"num_attention_heads":32,
        "intermediate_size":6912,"vocab_size":50304"#;
    let a = parse_config(&format!("{{{base}}}")).unwrap().arch;
    // StableLmConfig's partial_rotary_factor 0.25 of an 80-wide head; no dropout.
    assert_eq!(a.rotary_dims, 20);
    assert!(!a.dropout && !a.attn_dropout);
    let a = parse_config(&format!(
        r#"{{{base},"partial_rotary_factor":0.5,"hidden_dropout":0.1,"attention_dropout":0.1}}"#
    ))
    .unwrap()
    .arch;
    assert_eq!(a.rotary_dims, 40);
    assert!(a.dropout && a.attn_dropout);
}

#[test]
fn stablelm_and_granite_moe_swa_switches_match_what_transformers_builds() {
    // transformers 5.23 on the meta device: StableLmConfig with q/k/v biases,
    // per-head q/k LayerNorms and the parallel residual (one LayerNorm with bias per
    // layer): 126 374 912; GraniteMoeSWAConfig with a 2048-wide shared MLP, sinks and
    // two sliding layers, tied: 93 611 040.
    let stablelm = parse_config(
        r#"{"model_type":"stablelm","hidden_size":1024,"num_hidden_layers":4,"num_attention_heads":8,
        "num_key_value_heads":2,"intermediate_size":4096,"vocab_size":32000,"use_qkv_bias":true,
        "qk_layernorm":true,"use_parallel_residual":true,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(stablelm.confidence, "exact", "{:?}", stablelm.warnings);
    assert_eq!(counts(&stablelm.arch).0, 126_374_912);
    let granite = parse_config(
        r#"{"model_type":"granitemoe_swa","hidden_size":1024,"num_hidden_layers":4,
        "num_attention_heads":8,"num_key_value_heads":2,"intermediate_size":512,"vocab_size":32000,
        "num_local_experts":4,"num_experts_per_tok":2,"shared_intermediate_size":2048,
        "sliding_window":256,"layer_rope_theta":[10000.0,10000.0,10000.0,10000.0],
        "layer_types":["sliding_attention","full_attention","sliding_attention","full_attention"],
        "tie_word_embeddings":true}"#,
    )
    .unwrap();
    assert_eq!(granite.confidence, "exact", "{:?}", granite.warnings);
    assert_eq!(counts(&granite.arch).0, 93_611_040);
    assert_eq!(
        (granite.sliding_window, granite.sliding_layers),
        (Some(256), Some(2))
    );
}

#[test]
fn latent_attention_biases_cwm_windows_and_qwen2_moe_biases_match_what_transformers_builds() {
    // transformers 5.23 on the meta device: attention_bias puts a bias on q_a_proj,
    // kv_a_proj_with_mqa and o_proj of DeepSeek-style latent attention (MiniCPM3 with
    // q_lora_rank 256: 63 062 144; Youtu without q_lora_rank, whose q_proj has none:
    // 97 138 816); Qwen2-MoE without qkv_bias: 80 231 424.
    let mla = |mt: &str, q_lora: &str, tied: bool| {
        parse_config(&format!(
            r#"{{"model_type":"{mt}","hidden_size":1024,"num_hidden_layers":4,"num_attention_heads":8,
            "num_key_value_heads":8,"intermediate_size":2048,"vocab_size":32000,"kv_lora_rank":128,
            "q_lora_rank":{q_lora},"qk_nope_head_dim":64,"qk_rope_head_dim":32,"v_head_dim":64,
            "attention_bias":true,"tie_word_embeddings":{tied}}}"#
        ))
        .unwrap()
    };
    let minicpm = mla("minicpm3", "256", true);
    assert_eq!(minicpm.confidence, "exact", "{:?}", minicpm.warnings);
    assert_eq!(counts(&minicpm.arch).0, 63_062_144);
    let youtu = mla("youtu", "null", false);
    assert_eq!(youtu.confidence, "exact", "{:?}", youtu.warnings);
    assert_eq!(counts(&youtu.arch).0, 97_138_816);
    // CwmConfig without layer_types: layers 0 and 4 of 6 full, a window of 8192.
    let cwm = parse_config(
        r#"{"model_type":"cwm","hidden_size":1024,"num_hidden_layers":6,"num_attention_heads":8,
        "num_key_value_heads":2,"intermediate_size":2048,"vocab_size":32000,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(
        (cwm.sliding_window, cwm.sliding_layers),
        (Some(8192), Some(4))
    );
    let qwen = parse_config(
        r#"{"model_type":"qwen2_moe","hidden_size":1024,"num_hidden_layers":2,"num_attention_heads":8,
        "num_key_value_heads":2,"intermediate_size":2048,"moe_intermediate_size":256,
        "shared_expert_intermediate_size":512,"num_experts":4,"num_experts_per_tok":2,
        "vocab_size":32000,"qkv_bias":false,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(qwen.confidence, "exact", "{:?}", qwen.warnings);
    assert_eq!(counts(&qwen.arch).0, 80_231_424);
}

#[test]
fn exaone_moe_and_nanochat_switches_match_what_transformers_builds() {
    // transformers 5.23 on the meta device: ExaoneMoeConfig with layers 1 and 3
    // sparse (mlp_layer_types), two shared experts' width and three sliding layers:
    // 104 359 952; NanoChatConfig with attention_bias, tied, norms without weights:
    // 49 750 016.
    let exaone = parse_config(
        r#"{"model_type":"exaone_moe","hidden_size":1024,"num_hidden_layers":4,
        "num_attention_heads":8,"num_key_value_heads":2,"intermediate_size":2048,
        "moe_intermediate_size":256,"num_experts":8,"num_experts_per_tok":2,"num_shared_experts":2,
        "vocab_size":32000,"mlp_layer_types":["dense","sparse","dense","sparse"],
        "layer_types":["sliding_attention","sliding_attention","sliding_attention","full_attention"],
        "sliding_window":512,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(exaone.confidence, "exact", "{:?}", exaone.warnings);
    assert_eq!(counts(&exaone.arch).0, 104_359_952);
    assert_eq!(exaone.sliding_layers, Some(3));
    let nanochat = parse_config(
        r#"{"model_type":"nanochat","hidden_size":768,"num_hidden_layers":4,"num_attention_heads":6,
        "num_key_value_heads":2,"intermediate_size":3072,"vocab_size":32000,"attention_bias":true,
        "tie_word_embeddings":true}"#,
    )
    .unwrap();
    assert_eq!(nanochat.confidence, "exact", "{:?}", nanochat.warnings);
    assert_eq!(counts(&nanochat.arch).0, 49_750_016);
}

#[test]
fn nemotron_h_and_granite_hybrid_in_the_layout_transformers_5_writes() {
    // transformers 5.23 writes Nemotron-H's blocks as layers_block_type names
    // (linear_attention, full_attention, mlp, moe) without num_hidden_layers, and
    // time_step_limit with a bare Infinity; GraniteMoeHybrid's Mamba-2 layers as
    // linear_attention. On the meta device: 79 220 320 and 108 890 560.
    let nemotron = parse_config(
        r#"{"model_type":"nemotron_h","vocab_size":32000,"hidden_size":1024,
        "layers_block_type":["linear_attention","full_attention","mlp","linear_attention"],
        "num_attention_heads":8,"num_key_value_heads":2,"head_dim":128,"intermediate_size":2048,
        "mamba_num_heads":16,"mamba_head_dim":64,"n_groups":2,"ssm_state_size":64,"conv_kernel":4,
        "time_step_limit":[0.0,Infinity],"mtp_layers_block_type":["full_attention","moe"],
        "num_nextn_predict_layers":0,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(nemotron.confidence, "exact", "{:?}", nemotron.warnings);
    assert_eq!(nemotron.arch.layers, 4);
    assert_eq!(nemotron.arch.attn_layers, Some(1));
    assert_eq!(counts(&nemotron.arch).0, 79_220_320);
    let granite = parse_config(
        r#"{"model_type":"granitemoehybrid","vocab_size":32000,"hidden_size":1024,"num_hidden_layers":4,
        "num_attention_heads":8,"num_key_value_heads":2,"intermediate_size":2048,"num_local_experts":0,
        "shared_intermediate_size":2048,
        "layer_types":["linear_attention","full_attention","linear_attention","full_attention"],
        "mamba_n_heads":32,"mamba_d_head":64,"mamba_n_groups":1,"mamba_d_state":64,
        "time_step_limit":[0.0,Infinity],"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(granite.confidence, "exact", "{:?}", granite.warnings);
    assert_eq!(counts(&granite.arch).0, 108_890_560);
}

#[test]
fn llama4_in_the_layout_transformers_5_writes() {
    // transformers 5.23 writes Llama-4's RoPE layers as chunked_attention in
    // layer_types and its MoE layers as moe_layers indices; MoE at layers 1 and 3 of
    // 4 (dense layers intermediate_size_mlp wide): 104 350 720 on the meta device.
    let c = parse_config(
        r#"{"model_type":"llama4_text","vocab_size":32000,"hidden_size":1024,"num_hidden_layers":4,
        "num_attention_heads":8,"num_key_value_heads":2,"head_dim":128,"intermediate_size":512,
        "intermediate_size_mlp":2048,"num_local_experts":4,"num_experts_per_tok":1,"moe_layers":[1,3],
        "interleave_moe_layer_step":1,"attention_chunk_size":1024,"no_rope_layer_interval":4,
        "no_rope_layers":[1,1,1,0],
        "layer_types":["chunked_attention","chunked_attention","chunked_attention","full_attention"],
        "tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 104_350_720);
    assert_eq!((c.sliding_window, c.sliding_layers), (Some(1024), Some(3)));
}

#[test]
fn afmoe_dense_layers_shared_expert_and_window_pattern_match_what_transformers_builds() {
    // transformers 5.23 on the meta device: AfmoeConfig with 6 layers, the first 2
    // dense, one shared expert, the output gate, four norms per layer and no
    // layer_types (full every third layer): 128 510 496 parameters, 4 sliding layers.
    let c = parse_config(
        r#"{"model_type":"afmoe","vocab_size":32000,"hidden_size":1024,"intermediate_size":2048,
        "moe_intermediate_size":256,"num_hidden_layers":6,"num_dense_layers":2,"num_attention_heads":8,
        "num_key_value_heads":2,"head_dim":128,"num_experts":8,"num_experts_per_tok":2,
        "num_shared_experts":1,"global_attn_every_n_layers":3,"sliding_window":512,
        "tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 128_510_496);
    assert_eq!((c.sliding_window, c.sliding_layers), (Some(512), Some(4)));
}

#[test]
fn diffllama_lambdas_match_what_transformers_builds() {
    // transformers 5.23 on the meta device: DiffLlamaConfig with head_dim 128 and
    // attention_bias (q, k, v and o) and 4 × 128 lambda values per layer: 103 308 288.
    let c = parse_config(
        r#"{"model_type":"diffllama","vocab_size":32000,"hidden_size":1024,"intermediate_size":2048,
        "num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":4,"head_dim":128,
        "attention_bias":true,"lambda_std_dev":0.1,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 103_308_288);
}

#[test]
fn phi_biases_lm_head_bias_and_qk_layernorms_match_what_transformers_builds() {
    // microsoft/phi-2's config.json: transformers 5.23 on the meta device builds
    // 2 779 683 840 (q, k, v, dense, fc1 and fc2 with biases, one LayerNorm a layer,
    // an lm_head with a bias of 51 200).
    let c = parse_config(
        r#"{"_name_or_path":"microsoft/phi-2","architectures":["PhiForCausalLM"],
        "attention_dropout":0.0,"bos_token_id":50256,"embd_pdrop":0.0,"eos_token_id":50256,
        "hidden_act":"gelu_new","hidden_size":2560,"initializer_range":0.02,
        "intermediate_size":10240,"layer_norm_eps":1e-05,"max_position_embeddings":2048,
        "model_type":"phi","num_attention_heads":32,"num_hidden_layers":32,
        "num_key_value_heads":32,"partial_rotary_factor":0.4,"qk_layernorm":false,
        "resid_pdrop":0.1,"rope_scaling":null,"rope_theta":10000.0,
        "tie_word_embeddings":false,"torch_dtype":"float16","transformers_version":"4.37.0",
        "use_cache":true,"vocab_size":51200}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 2_779_683_840);
    assert!(c.arch.lm_head_bias && c.arch.dropout && c.arch.gelu_new);
    // Only resid_pdrop is on: no embedding or attention dropout masks.
    assert!(!c.arch.attn_dropout && !c.arch.embedding_dropout);
    // int(80 × 0.4) of each head rotated.
    assert_eq!(c.arch.rotary_dims, 32);
    // qk_layernorm: a LayerNorm(head_dim) with bias for q and for k in every layer
    // (4 × 64 values): transformers builds 1 567 208.
    let c = parse_config(
        r#"{"model_type":"phi","vocab_size":1000,"hidden_size":256,"intermediate_size":512,
        "num_hidden_layers":2,"num_attention_heads":4,"qk_layernorm":true,
        "tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 1_567_208);
}

#[test]
fn gptj_mlp_biases_and_lm_head_bias_match_what_transformers_builds() {
    // EleutherAI/gpt-j-6b's config.json: 6 050 882 784 on the meta device (fc_in and
    // fc_out with biases, attention without, an lm_head with a bias of 50 400).
    let c = parse_config(
        r#"{"activation_function":"gelu_new","architectures":["GPTJForCausalLM"],
        "attn_pdrop":0.0,"bos_token_id":50256,"embd_pdrop":0.0,"eos_token_id":50256,
        "gradient_checkpointing":false,"initializer_range":0.02,"layer_norm_epsilon":1e-05,
        "model_type":"gptj","n_embd":4096,"n_head":16,"n_inner":null,"n_layer":28,
        "n_positions":2048,"resid_pdrop":0.0,"rotary":true,"rotary_dim":64,
        "scale_attn_weights":true,"tie_word_embeddings":false,
        "tokenizer_class":"GPT2Tokenizer","torch_dtype":"float16",
        "transformers_version":"4.18.0.dev0","use_cache":true,"vocab_size":50400}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 6_050_882_784);
    assert_eq!(c.arch.rotary_dims, 64);
    assert!(c.arch.gelu_new && !c.arch.dropout);
    // n_inner given, rotary_dim 32, tied: 1 308 648 (the lm_head's bias stays).
    let c = parse_config(
        r#"{"model_type":"gptj","vocab_size":1000,"n_embd":256,"n_layer":2,"n_head":4,
        "n_inner":512,"rotary_dim":32,"tie_word_embeddings":true}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 1_308_648);
    assert_eq!(c.arch.rotary_dims, 32);
}

#[test]
fn opt_positions_offset_and_biases_match_what_transformers_builds() {
    // facebook/opt-6.7b's config.json: 6 658 473 984 on the meta device (2 050
    // position rows, biases everywhere, tied head).
    let opt = r#"{"_name_or_path":"facebook/opt-6.7b","_remove_final_layer_norm":false,
        "activation_dropout":0.0,"activation_function":"relu","architectures":["OPTForCausalLM"],
        "attention_dropout":0.0,"bos_token_id":2,"do_layer_norm_before":true,"dropout":0.1,
        "eos_token_id":2,"ffn_dim":16384,"hidden_size":4096,"init_std":0.02,"layerdrop":0.0,
        "max_position_embeddings":2048,"model_type":"opt","num_attention_heads":32,
        "num_hidden_layers":32,"pad_token_id":1,"prefix":"</s>","torch_dtype":"float16",
        "transformers_version":"4.20.1","use_cache":true,"vocab_size":50272,
        "word_embed_proj_dim":4096}"#;
    let c = parse_config(opt).unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 6_658_473_984);
    assert_eq!(c.arch.learned_positions, 2050);
    assert!(c.arch.dropout && !c.arch.gelu_new && c.arch.relu);
    assert!(!c.arch.attn_dropout && !c.arch.embedding_dropout && c.arch.final_norm);
    // enable_bias and layer_norm_elementwise_affine off: 1 436 160.
    let c = parse_config(
        r#"{"model_type":"opt","vocab_size":1000,"hidden_size":256,"ffn_dim":512,
        "num_hidden_layers":2,"num_attention_heads":4,"max_position_embeddings":512,
        "enable_bias":false,"layer_norm_elementwise_affine":false,"word_embed_proj_dim":256}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 1_436_160);
    // facebook/opt-350m's narrower embeddings and missing final norm are said, and the
    // count stays above the 331 196 416 transformers builds.
    let c = parse_config(
        &opt.replace("\"hidden_size\":4096", "\"hidden_size\":1024")
            .replace("\"ffn_dim\":16384", "\"ffn_dim\":4096")
            .replace("\"num_attention_heads\":32", "\"num_attention_heads\":16")
            .replace("\"num_hidden_layers\":32", "\"num_hidden_layers\":24")
            .replace(
                "\"word_embed_proj_dim\":4096",
                "\"word_embed_proj_dim\":512",
            )
            .replace(
                "\"do_layer_norm_before\":true",
                "\"do_layer_norm_before\":false",
            ),
    )
    .unwrap();
    assert!(
        c.confidence
            .starts_with("approximate: word_embed_proj_dim 512"),
        "{}",
        c.confidence
    );
    // Post-norm layers: OPTDecoder builds no final LayerNorm.
    assert!(!c.arch.final_norm);
    assert_eq!(c.arch.embed_proj, 512);
    assert_eq!(counts(&c.arch).0, 355_887_104);
}

#[test]
fn bloom_embedding_norm_and_biases_match_what_transformers_builds() {
    // bigscience/bloom-560m's config.json: 559 214 592 on the meta device.
    let c = parse_config(
        r#"{"_name_or_path":"bigscience/bloom-560m","apply_residual_connection_post_layernorm":false,
        "architectures":["BloomForCausalLM"],"attention_dropout":0.0,
        "attention_softmax_in_fp32":true,"bias_dropout_fusion":true,"bos_token_id":1,
        "eos_token_id":2,"hidden_dropout":0.0,"hidden_size":1024,"initializer_range":0.02,
        "layer_norm_epsilon":1e-05,"masked_softmax_fusion":true,"model_type":"bloom",
        "n_head":16,"n_inner":null,"n_layer":24,"offset_alibi":100,"pad_token_id":3,
        "pretraining_tp":1,"skip_bias_add":true,"skip_bias_add_qkv":false,
        "slow_but_exact":false,"transformers_version":"4.26.0","unk_token_id":0,
        "use_cache":true,"vocab_size":250880}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 559_214_592);
    assert!(c.arch.embedding_norm && c.arch.learned_positions == 0);
    // n_embed for the width, an n_inner BloomMLP ignores (4 × hidden), untied:
    // 2 092 544.
    let c = parse_config(
        r#"{"model_type":"bloom","vocab_size":1000,"n_embed":256,"n_layer":2,
        "num_attention_heads":4,"n_inner":512,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 2_092_544);
    assert_eq!(c.arch.intermediate, 1024);
}

#[test]
fn codegen_biogpt_and_persimmon_match_what_transformers_builds() {
    // Salesforce/codegen-350M-mono's shape: GPT-J's layer with one qkv_proj, an lm_head
    // with a bias: transformers 5.23 on the meta device builds 356 712 448.
    let c = parse_config(
        r#"{"activation_function":"gelu_new","architectures":["CodeGenForCausalLM"],
        "attn_pdrop":0.0,"bos_token_id":1,"embd_pdrop":0.0,"eos_token_id":50256,
        "gradient_checkpointing":false,"initializer_range":0.02,"layer_norm_epsilon":1e-05,
        "model_type":"codegen","n_ctx":2048,"n_embd":1024,"n_head":16,"n_inner":null,
        "n_layer":20,"n_positions":2048,"resid_pdrop":0.0,"rotary_dim":32,
        "scale_attn_weights":true,"summary_activation":null,"summary_first_dropout":0.1,
        "summary_proj_to_labels":true,"summary_type":"cls_index","summary_use_proj":true,
        "tie_word_embeddings":false,"tokenizer_class":"GPT2Tokenizer","torch_dtype":"float16",
        "transformers_version":"4.21.0.dev0","use_cache":true,"vocab_size":51200}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 356_712_448);
    assert!(c.arch.fused_qkv && c.arch.lm_head_bias && c.arch.rotary_dims == 32);
    // BioGPT with its dropouts off and 512 positions (+ 2 rows): 1 442 304.
    let c = parse_config(
        r#"{"model_type":"biogpt","vocab_size":1000,"hidden_size":256,"intermediate_size":512,
        "num_hidden_layers":2,"num_attention_heads":4,"max_position_embeddings":512,
        "hidden_dropout_prob":0.0,"attention_probs_dropout_prob":0.0,"scale_embedding":false}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 1_442_304);
    assert!(!c.arch.dropout && c.arch.learned_positions == 514);
    // Persimmon without its q/k LayerNorms, the whole head rotated, tied: 1 310 720.
    let c = parse_config(
        r#"{"model_type":"persimmon","vocab_size":1000,"hidden_size":256,"intermediate_size":512,
        "num_hidden_layers":2,"num_attention_heads":4,"qk_layernorm":false,
        "partial_rotary_factor":1.0,"tie_word_embeddings":true}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 1_310_720);
    assert_eq!((c.arch.layer_scalars, c.arch.rotary_dims), (0, 0));
}

#[test]
fn bitnet_sub_norms_match_what_transformers_builds() {
    // A 2B-class BitNet shape (grouped K/V, tied): attn_sub_norm (2 560) and
    // ffn_sub_norm (6 912) in each of 30 layers; transformers 5.23 on the meta device
    // builds 2 412 820 480.
    let c = parse_config(
        r#"{"architectures":["BitNetForCausalLM"],"attention_bias":false,"attention_dropout":0.0,
        "bos_token_id":128000,"eos_token_id":128001,"hidden_act":"relu2","hidden_size":2560,
        "initializer_range":0.02,"intermediate_size":6912,"max_position_embeddings":4096,
        "model_type":"bitnet","num_attention_heads":20,"num_hidden_layers":30,
        "num_key_value_heads":5,"rms_norm_eps":1e-05,"rope_theta":500000.0,
        "tie_word_embeddings":true,"torch_dtype":"bfloat16","vocab_size":128256}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 2_412_820_480);
    // The sub-norms' activations are not derived: said.
    assert!(c.arch.underived().is_some());
    // attention_bias on, untied: 1 696 000.
    let c = parse_config(
        r#"{"model_type":"bitnet","vocab_size":1000,"hidden_size":256,"intermediate_size":512,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
        "attention_bias":true,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 1_696_000);
}

#[test]
fn cohere2_moe_shared_experts_dense_prefix_and_windows_match_what_transformers_builds() {
    // transformers 5.23 on the meta device: Cohere2MoeConfig with two shared experts
    // (one MLP 2 × 128 wide), the first layer dense (first_k_dense_replace, 512 wide),
    // RMSNorm, untied: 3 465 472; without layer_types the dense prefix is windowed by
    // prefix_dense_sliding_window_pattern (1: none) and the rest by
    // sliding_window_pattern 2: layers 1 and 3 of 4.
    let c = parse_config(
        r#"{"model_type":"cohere2_moe","vocab_size":1000,"hidden_size":256,"intermediate_size":128,
        "num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,
        "num_experts":4,"num_experts_per_tok":2,"num_shared_experts":2,"first_k_dense_replace":1,
        "prefix_dense_intermediate_size":512,"sliding_window":64,"sliding_window_pattern":2,
        "rms_norm_eps":1e-5,"tie_word_embeddings":false}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 3_465_472);
    assert_eq!((c.sliding_window, c.sliding_layers), (Some(64), Some(2)));
}

#[test]
fn fuyu_counts_its_patch_embedding_beside_persimmon() {
    // transformers 5.23 on the meta device: FuyuConfig with 16-pixel patches of one
    // channel (vision_embed_tokens: 256 × 256 + 256) over a small Persimmon: 1 633 024.
    let c = parse_config(
        r#"{"model_type":"fuyu","patch_size":16,"num_channels":1,"image_size":300,
        "text_config":{"model_type":"persimmon","vocab_size":1000,"hidden_size":256,
        "intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":4}}"#,
    )
    .unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(c.arch.tower_params, 65_792);
    assert_eq!(counts(&c.arch).0, 1_633_024);
}

/// LFM2 in the vocabulary Liquid's published configs use (`block_ff_dim`,
/// `full_attn_idxs`, `tie_embedding` and its training code's keys) with LFM2-1.2B's
/// sizes: 1 170 340 608 parameters, what transformers 5.23 builds from the same config
/// on the meta device (`AutoConfig.for_model(**config)`, parameters and persistent
/// buffers).
#[test]
fn lfm2_reads_liquids_config_vocabulary() {
    let text = r#"{"model_type": "lfm2", "architectures": ["Lfm2ForCausalLM"], "block_auto_adjust_ff_dim": true,
        "block_dim": 2048, "block_ff_dim": 12288, "block_ffn_dim_multiplier": 1.0, "block_mlp_init_scale": 1.0,
        "block_multiple_of": 256, "block_norm_eps": 1e-05, "block_out_init_scale": 1.0, "block_use_swiglu": true,
        "block_use_xavier_init": true, "bos_token_id": 1, "conv_L_cache": 3, "conv_bias": false, "conv_dim": 2048,
        "conv_dim_out": 2048, "conv_use_xavier_init": true, "eos_token_id": 7, "full_attn_idxs": [2, 5, 8, 10, 12, 14],
        "hidden_size": 2048, "initializer_range": 0.02, "max_position_embeddings": 128000, "norm_eps": 1e-05,
        "num_attention_heads": 32, "num_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
        "pad_token_id": 0, "rope_theta": 1000000.0, "torch_dtype": "bfloat16", "use_cache": true,
        "use_pos_enc": true, "vocab_size": 65536}"#;
    let c = parse_config(text).unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    let m = c.arch.mixer.unwrap();
    assert_eq!(
        (m.kind, m.layers, m.inner, m.conv),
        (MixerKind::ShortConv, 10, 2048, 3)
    );
    // int(2 × 12288 / 3) = 8192, × 1.0, a multiple of 256.
    assert_eq!(c.arch.intermediate, 8192);
    assert!(c.arch.tied_embeddings && c.arch.qk_norm);
    assert_eq!(counts(&c.arch).0, 1_170_340_608);
    // The conv window vLLM keeps: hidden × (L_cache − 1).
    assert_eq!(m.state_values().unwrap(), (4096, 0));
    // A multiplier rounds up to the multiple; biases on the convolutions are named.
    let c = parse_config(
        &text
            .replace(
                r#""block_ffn_dim_multiplier": 1.0"#,
                r#""block_ffn_dim_multiplier": 1.3"#,
            )
            .replace(r#""conv_bias": false"#, r#""conv_bias": true"#),
    )
    .unwrap();
    // int(1.3 × 8192) = 10649, rounded up to 10752.
    assert_eq!(c.arch.intermediate, 10752);
    assert!(
        c.warnings.iter().any(|w| w.contains("conv_bias")),
        "{:?}",
        c.warnings
    );
}

/// Zamba2's published configs name the Mamba layers "mamba" (transformers 5.23 reads
/// them as "linear_attention"): the same model, 2 697 604 000 parameters as
/// transformers builds it. Without `layers_block_type` the layout is unknown: refused.
#[test]
fn zamba2_reads_either_name_of_its_mamba_layers() {
    let doc: Value = serde_json::from_str(include_str!(
        "../../../tests/cases/transformers/zamba2-2.7b-layout.json"
    ))
    .unwrap();
    let text = doc["config"].to_string();
    for t in [
        text.clone(),
        text.replace(r#""linear_attention""#, r#""mamba""#),
    ] {
        let c = parse_config(&t).unwrap();
        assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
        assert_eq!(counts(&c.arch).0, 2_697_604_000);
        let s = c.arch.shared_attn.unwrap();
        assert_eq!((s.blocks, s.uses, s.width), (2, 9, 5120));
        assert_eq!((c.arch.attention_layers(), c.arch.head_dim), (9, 160));
    }
    let mut d = doc["config"].clone();
    d.as_object_mut().unwrap().remove("layers_block_type");
    let e = parse_config(&d.to_string()).unwrap_err();
    assert!(e.to_string().contains("layers_block_type"), "{e}");
}

/// Llama 3.2 Vision's text model alone (MllamaForCausalLM): its cross-attention layers'
/// weights are counted (9 775 192 080 parameters, transformers 5.23's on the meta
/// device), and with no vision config to size an image, a warning says their cache is
/// not.
#[test]
fn mllama_text_model_alone_counts_its_cross_attention_layers() {
    let doc: Value = serde_json::from_str(include_str!(
        "../../../tests/cases/transformers/mllama-11b-layout.json"
    ))
    .unwrap();
    let c = parse_config(&doc["config"]["text_config"].to_string()).unwrap();
    assert_eq!(counts(&c.arch).0, 9_775_192_080);
    assert_eq!((c.arch.cross_layers, c.arch.cross_tokens), (8, 0));
    assert!(
        c.warnings.iter().any(|w| w.contains("cross-tokens")),
        "{:?}",
        c.warnings
    );
    let whole = parse_config(&doc["config"].to_string()).unwrap();
    assert_eq!(
        (whole.arch.cross_layers, whole.arch.cross_tokens),
        (8, 4 * (40 * 40 + 1))
    );
}

/// RWKV-4 read whole: RwkvConfig's defaults count 7 392 649 216 parameters, what
/// transformers 5.23 builds on the meta device (`transformers/rwkv.json`); the state is
/// five hidden-wide vectors per layer and no KV.
#[test]
fn rwkv_is_read_whole_with_its_state() {
    let doc: Value =
        serde_json::from_str(include_str!("../../../tests/cases/transformers/rwkv.json")).unwrap();
    let c = parse_config(&doc["config"].to_string()).unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, 7_392_649_216);
    let m = c.arch.mixer.unwrap();
    assert_eq!((m.kind, m.layers), (MixerKind::Rwkv, 32));
    assert_eq!(m.state_values().unwrap(), (2 * 4096, 3 * 4096));
    assert_eq!(c.arch.attention_layers(), 0);
    let e = parse_config(
        r#"{"model_type":"rwkv","hidden_size":64,"num_hidden_layers":2,"vocab_size":10,"attention_hidden_size":32}"#,
    )
    .unwrap_err();
    assert!(e.to_string().contains("attention_hidden_size"), "{e}");
}

/// Phi-4-multimodal at Phi4MultimodalConfig's defaults: Phi-3's decoder, its image
/// embedder and its audio embedder counted. transformers 5.23 builds 5 308 269 152
/// parameters and persistent buffers on the meta device (`transformers/
/// phi4_multimodal.json`), 466 432 256 parameters (its conformer, 441 254 144 in its 24
/// blocks, and four projections) and 160 buffer values (`global_mean`,
/// `global_invstd`) of them the audio embedder's.
#[test]
fn phi4_multimodal_counts_its_image_and_audio_embedders() {
    let doc: Value = serde_json::from_str(include_str!(
        "../../../tests/cases/transformers/phi4_multimodal.json"
    ))
    .unwrap();
    let c = parse_config(&doc["config"].to_string()).unwrap();
    assert_eq!(counts(&c.arch).0, 5_308_269_152);
    assert!(
        c.notes.iter().any(|n| n.starts_with("audio_config")),
        "{:?}",
        c.notes
    );
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(c.confidence, "exact");
    // Without the audio tower's 466 432 416 values, the rest is the same.
    let mut cfg = doc["config"].clone();
    cfg["audio_config"] = Value::Null;
    let text_and_image = parse_config(&cfg.to_string()).unwrap();
    assert_eq!(counts(&text_and_image.arch).0, 5_308_269_152 - 466_432_416);
    // A conformer with every option away from its default (a symmetric bias table,
    // two halvings of 81 mel bins to 21, a doubled depthwise width, a separable output
    // and GLU narrower than the hidden size, a downsampled projection input), against
    // the model transformers builds from it (`transformers/phi4_multimodal-audio.json`).
    let doc: Value = serde_json::from_str(include_str!(
        "../../../tests/cases/transformers/phi4_multimodal-audio.json"
    ))
    .unwrap();
    let c = parse_config(&doc["config"].to_string()).unwrap();
    assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
    assert_eq!(counts(&c.arch).0, doc["parameters"].as_u64().unwrap());
}

/// The new mixers by hand: a short convolution needs no state width, a Mamba mixer
/// still does (named by its key); the state line is the mixer's shape.
#[test]
fn hand_entered_mixers_need_what_their_kind_reads() {
    let base = [
        ("layers", "4"),
        ("hidden", "64"),
        ("heads", "4"),
        ("intermediate", "128"),
        ("vocab", "100"),
        ("state-layers", "3"),
        ("mixer-inner", "64"),
        ("context", "16"),
    ];
    let run = |extra: &[(&'static str, &'static str)]| {
        let pairs: Vec<(&str, &str)> = base.iter().chain(extra).copied().collect();
        crate::params::from_pairs(pairs)
    };
    let (input, errors) = run(&[("mixer", "shortconv"), ("mixer-conv", "3")]);
    assert!(errors.is_empty(), "{errors:?}");
    let est = crate::estimate::estimate(&input).unwrap();
    let state = est
        .lines
        .iter()
        .find(|l| l.key.as_str() == "kv_cache.state")
        .unwrap();
    // Without an engine, transformers' Lfm2ShortConv window: 3 layers × 64 × 3 values
    // × 2 B; a serving engine's (vLLM's `short_conv_state_shape`) one fewer.
    assert_eq!(state.bytes, 3 * 64 * 3 * 2);
    let served = crate::estimate::estimate(&crate::estimate::EstimateInput {
        runtime: CacheRuntime::Serving,
        ..input.clone()
    })
    .unwrap();
    let state = served
        .lines
        .iter()
        .find(|l| l.key.as_str() == "kv_cache.state")
        .unwrap();
    assert_eq!(state.bytes, 3 * 64 * 2 * 2);
    let (input, errors) = run(&[("mixer", "mamba"), ("mixer-dt-rank", "4")]);
    let e = if errors.is_empty() {
        crate::estimate::estimate(&input)
            .map(|_| "accepted".to_string())
            .unwrap_or_else(|e| e.to_string())
    } else {
        format!("{errors:?}")
    };
    assert!(e.contains("mixer-state"), "{e}");
}

#[test]
fn jetmoe_builds_transformers_keys_and_names_the_old_ones_it_ignores() {
    // transformers' JetMoeConfig reads num_local_experts / num_experts_per_tok (8, 2 by
    // default) and sets the heads to kv heads × top-k, whatever the config says.
    let c = parse_config(
        r#"{"model_type":"jetmoe","hidden_size":256,"num_hidden_layers":2,"num_attention_heads":99,
        "num_key_value_heads":4,"kv_channels":32,"intermediate_size":512,"vocab_size":1000,
        "moe_num_experts":16,"moe_top_k":2}"#,
    )
    .unwrap();
    let a = c.arch;
    assert_eq!((a.heads, a.kv_heads, a.head_dim), (8, 4, 32));
    assert_eq!(a.attn_experts, 8);
    let m = a.moe.unwrap();
    assert_eq!((m.experts, m.active, m.expert_intermediate), (8, 2, 512));
    assert!(m.output_bias && a.o_bias && a.tied_embeddings);
    assert!(
        c.warnings
            .iter()
            .any(|w| w.starts_with("moe_num_experts = 16 is not read")),
        "{:?}",
        c.warnings
    );
    // moe_top_k agrees with what is built: not named.
    assert!(!c.warnings.iter().any(|w| w.starts_with("moe_top_k")));
    // Per layer: router, 8 query and 8 output experts of 4 × 32, kv_proj, the mixture's
    // bias; the MLP experts (gated), their router and bias; two norms. Tied head.
    let (h, e, q, i) = (256u64, 8u64, 128u64, 512u64);
    let layer = e * h + 2 * e * q * h + 2 * q * h + h + e * 3 * i * h + e * h + h + 2 * h;
    let params: u64 = a
        .tensors()
        .unwrap()
        .iter()
        .map(|t| t.params().unwrap())
        .sum();
    assert_eq!(params, 1000 * h + 2 * layer + h);
}

#[test]
fn gpt1_has_no_final_norm_and_ctrl_a_position_buffer() {
    let g = parse_config(
        r#"{"model_type":"openai-gpt","n_embd":64,"n_layer":2,"n_head":4,"n_positions":16,"vocab_size":100}"#,
    )
    .unwrap();
    assert!(!g.arch.final_norm);
    assert!(
        !g.arch
            .tensors()
            .unwrap()
            .iter()
            .any(|t| t.name == "final norm")
    );
    // Two layers' 16 × 16 masks in bf16 and 16 int64 ids; no parameter among them.
    assert_eq!(
        g.arch.buffers(2).unwrap().iter().map(|b| b.1).sum::<u64>(),
        2 * 16 * 16 * 2 + 16 * 8
    );
    let c = parse_config(
        r#"{"model_type":"ctrl","n_embd":64,"n_layer":2,"n_head":4,"dff":128,"n_positions":50,"vocab_size":100}"#,
    )
    .unwrap();
    assert!(c.arch.final_norm && c.arch.lm_head_bias && !c.arch.gated_mlp);
    assert_eq!((c.arch.intermediate, c.arch.sinusoid_positions), (128, 50));
    assert_eq!(
        c.arch.buffers(2).unwrap().iter().map(|b| b.1).sum::<u64>(),
        50 * 64 * 4
    );
    assert!(
        !c.notes
            .iter()
            .any(|n| n.starts_with("intermediate size absent"))
    );
}

#[test]
fn gemma3s_siglip_tower_counts_its_pooling_head_where_the_config_keeps_it() {
    // SiglipVisionConfig's defaults (vision_use_head true, as transformers writes them)
    // and the published Gemma 3 layout (false): Gemma3Model builds the tower from its
    // config, the attention-pooling head included when asked.
    let with = |head: bool| {
        parse_config(&format!(
            r#"{{"model_type":"gemma3","text_config":{{"model_type":"gemma3_text","hidden_size":2560,
            "num_hidden_layers":34,"num_attention_heads":8,"num_key_value_heads":4,"intermediate_size":10240,
            "vocab_size":262208,"sliding_window":1024}},"vision_config":{{"model_type":"siglip_vision_model",
            "hidden_size":768,"intermediate_size":3072,"num_hidden_layers":12,"num_attention_heads":12,
            "image_size":224,"patch_size":16,"vision_use_head":{head}}}}}"#
        ))
        .unwrap()
    };
    let (headed, bare) = (with(true), with(false));
    assert_eq!(headed.confidence, "exact", "{:?}", headed.warnings);
    assert_eq!(bare.confidence, "exact", "{:?}", bare.warnings);
    // SiglipMultiheadAttentionPoolingHead at h 768, i 3 072: the probe (h), the packed
    // in-projection (3h² + 3h), the out-projection (h² + h), a LayerNorm (2h) and the
    // MLP (2hi + i + h): 4h² + 2hi + 8h + i.
    assert_eq!(headed.arch.tower_params - bare.arch.tower_params, 7_087_104);
}
