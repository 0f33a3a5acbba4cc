//! BitNet b1.58 (`bitnet`, BitNetConfig; transformers 5.23
//! `models/bitnet/modeling_bitnet.py`): Llama's layers with two more RMSNorms, one
//! over the attention's output before `o_proj` (`attn_sub_norm`, hidden wide) and one
//! over the MLP's intermediate before `down_proj` (`ffn_sub_norm`); checked against
//! the model transformers builds from the class's defaults (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family};

/// BitNet.
pub(crate) const BITNET: Family = Family {
    types: "bitnet",
    class: "BitNetConfig",
    arch: Architecture {
        sub_norms: true,
        ..Architecture::BASE
    },
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&BITNET];
