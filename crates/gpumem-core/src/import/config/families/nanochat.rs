//! nanochat (`nanochat`, NanoChatConfig: Karpathy's nanochat models; transformers
//! 5.23 `models/nanochat/modeling_nanochat.py`): `NanoChatRMSNorm` holds no weight (the
//! layers' two norms, the final one and the q/k norms), the MLP is not gated (`fc1`,
//! ReLU², `fc2`, no biases), attention biases under `attention_bias`, the final logits
//! soft-capped; checked against the model transformers builds from the class's
//! defaults (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family};

/// nanochat.
pub(crate) const NANOCHAT: Family = Family {
    types: "nanochat",
    class: "NanoChatConfig",
    arch: Architecture {
        gated_mlp: false,
        nonparametric_norms: true,
        ..Architecture::BASE
    },
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&NANOCHAT];
