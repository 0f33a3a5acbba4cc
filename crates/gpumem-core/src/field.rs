//! What one input key is: [`Field`] — its group, kind, unit, label, placeholder,
//! help and choices. The table of every key is [`crate::fields::FIELDS`]; the
//! architecture's keys are rows of [`crate::arch`]'s facts table, whose `Field` each
//! carries. (A leaf module, so that both tables can use the type.)
//!
//! The type is plain `&'static str` data (no allocation), so the page pays only for
//! the text.

/// Which part of the input a key belongs to (the page's sections follow it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldGroup {
    /// Parameter-count mode: `parameters`, `bits`.
    Model,
    /// The decoder's shape.
    Architecture,
    /// Mixture-of-experts shape.
    Moe,
    /// Attention variants and extra tensors (MLA, norms, MTP, towers).
    Variants,
    /// Storage and compute formats.
    Format,
    /// The workload's dimensions (the page has three workloads of these).
    Workload,
    /// The KV cache's dtype and allocation.
    Cache,
    /// Shape keys that describe the cache rather than the weights (sliding window,
    /// recurrent state, trained positions): a preset sets them, the count mode keeps them.
    CacheShape,
    /// Inference transients (assumed).
    Transients,
    /// Training.
    Training,
    /// Devices, split and reserve.
    Devices,
    /// Serving-engine budget (`crate::engine`): not part of [`crate::params`].
    Engine,
}

impl FieldGroup {
    /// Whether a preset sets keys of this group (picking one clears the others).
    pub const fn is_shape(self) -> bool {
        matches!(
            self,
            FieldGroup::Architecture
                | FieldGroup::Moe
                | FieldGroup::Variants
                | FieldGroup::CacheShape
        )
    }

    /// Whether the keys describe the architecture (the page's architecture mode only).
    pub const fn is_arch(self) -> bool {
        matches!(
            self,
            FieldGroup::Architecture | FieldGroup::Moe | FieldGroup::Variants
        )
    }
}

/// How a value is typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// A whole number, typed freely (`7e9`, `7 000 000 000`).
    Count,
    /// true/false, and what an absent key means.
    Bool(bool),
    /// One of [`Field::choices`]; an absent key is the default (the choice whose value is "").
    Choice,
    /// Free text; [`Field::choices`] are suggestions (formats, dtypes).
    Text,
    /// A decimal fraction in (0, 1], e.g. 0.9.
    Fraction,
    /// A GPU card of [`crate::catalogue::CATALOGUE`], by id or name.
    Card,
}

/// The unit of a value, when the label does not make it obvious.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// None, or obvious from the label.
    None,
    /// Bytes.
    Bytes,
    /// MiB (2^20 bytes).
    Mib,
    /// GiB (2^30 bytes).
    Gib,
    /// Tokens.
    Tokens,
}

impl Unit {
    /// How the page writes it after the label ("" for none).
    pub const fn name(self) -> &'static str {
        match self {
            Unit::None => "",
            Unit::Bytes => "bytes",
            Unit::Mib => "MiB",
            Unit::Gib => "GiB",
            Unit::Tokens => "tokens",
        }
    }
}

/// One input key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// The key: the CLI flag without dashes, the URL key.
    pub key: &'static str,
    /// Its part of the input.
    pub group: FieldGroup,
    /// How it is typed.
    pub kind: FieldKind,
    /// A short label (the page's field label).
    pub label: &'static str,
    /// The unit of the value: the page appends it to the label, the CLI names the
    /// value after it. (An enum, not text: the table is part of the page's wasm.)
    pub unit: Unit,
    /// What an empty value means (the default, or what stands in for it), shown in the
    /// empty field and as `[default: …]` in `--help`; "" when nothing to say.
    pub placeholder: &'static str,
    /// One sentence of help: `--help` and the page's hint. It names neither the
    /// default nor the choices: both are generated from the fields below.
    pub help: &'static str,
    /// (value, label): the values of a [`FieldKind::Choice`] ("" = the default, its
    /// label naming it; where shown, "(default)" is added to it), or
    /// suggestions of a [`FieldKind::Text`].
    pub choices: &'static [(&'static str, &'static str)],
}

pub(crate) const fn f(
    key: &'static str,
    group: FieldGroup,
    kind: FieldKind,
    label: &'static str,
    placeholder: &'static str,
    help: &'static str,
) -> Field {
    Field {
        key,
        group,
        kind,
        label,
        unit: Unit::None,
        placeholder,
        help,
        choices: &[],
    }
}

impl Field {
    pub(crate) const fn unit(mut self, unit: Unit) -> Field {
        self.unit = unit;
        self
    }

    pub(crate) const fn choices(
        mut self,
        choices: &'static [(&'static str, &'static str)],
    ) -> Field {
        self.choices = choices;
        self
    }

    /// Whether the key belongs to the engine flags ([`crate::engine::from_pairs`]).
    pub fn is_engine(&self) -> bool {
        self.group == FieldGroup::Engine
    }
}

/// A value of the field's kind that its parser must accept (the field tables' tests:
/// [`crate::fields`]' and [`crate::inputs`]').
#[cfg(test)]
pub(crate) fn sample(f: &Field) -> &'static str {
    match f.kind {
        // Not any count's default (layer-norms is 2 by default).
        FieldKind::Count => "3",
        FieldKind::Bool(d) => {
            if d {
                "false"
            } else {
                "true"
            }
        }
        FieldKind::Choice => f
            .choices
            .iter()
            .map(|c| c.0)
            .find(|v| !v.is_empty())
            .unwrap_or(""),
        FieldKind::Text if f.key == "lora-targets" => "q,v",
        FieldKind::Text if f.key == "draft-model" => "llama-3.2-1b",
        // The last suggestion: the first is usually the default.
        FieldKind::Text => f.choices.last().map_or("", |c| c.0),
        FieldKind::Fraction => "0.85",
        FieldKind::Card => crate::catalogue::CATALOGUE[0].id,
    }
}
