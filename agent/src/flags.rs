//! The estimator's flags, generated from the field table
//! ([`gpumem_core::params::FIELDS`]): one place that turns a field into a clap
//! argument, used by `estimate` and by its engine flags (`engine_cli`) alike, so
//! neither reaches into the other for it.

use clap::{Arg, ArgMatches, Command};
use gpumem_core::catalogue::CATALOGUE;
use gpumem_core::fields::{FieldGroup, Unit};
use gpumem_core::params::{Field, FieldKind};

/// The flag of one field of the table: its help, a value name from its kind and
/// unit, and a choice field's choices as possible values (shown in `--help` and
/// offered by the completions). The value itself is still checked by the core's parser, which
/// accepts aliases (`flash_attention_2`, `llamacpp`) and gives the field's message.
pub fn flag_of(f: &'static Field) -> Arg {
    let name = match f.kind {
        FieldKind::Count => match f.unit {
            Unit::None => "N",
            Unit::Gib => "GIB",
            Unit::Mib => "MIB",
            Unit::Bytes => "BYTES",
            Unit::Tokens => "TOKENS",
        },
        FieldKind::Bool(_) => "BOOL",
        FieldKind::Choice => "NAME",
        // A size (`--ram 64GiB`), read as `--card` capacities are.
        FieldKind::Text if f.key == "ram" => "SIZE",
        // llama.cpp's projector file (its header read into the key's pairs).
        FieldKind::Text if f.key == "mmproj" => "FILE",
        FieldKind::Text if !f.choices.is_empty() => "NAME",
        FieldKind::Text => "TEXT",
        FieldKind::Fraction => "FRACTION",
        FieldKind::Card => "CARD",
    };
    let arg = Arg::new(f.key).long(f.key).value_name(name);
    // A switch is spelled as the engines spell theirs: `--enforce-eager` alone is true,
    // `--enforce-eager false` still reads its value.
    let arg = match f.kind {
        FieldKind::Bool(_) => arg.num_args(0..=1).default_missing_value("true"),
        _ => arg.allow_hyphen_values(true),
    };
    arg.value_parser(Offered(f))
        // A card's ids and a text field's suggestions go to the completions only:
        // they are not all the field accepts (`--card 24GiB`, `--format q4_k_m`).
        .hide_possible_values(matches!(f.kind, FieldKind::Card | FieldKind::Text))
        .help(help_of(f))
        .help_heading(heading_of(f))
        // `-h` shows the questions people ask first; `--help` every flag.
        .hide_short_help(!COMMON.contains(&f.key))
}

/// The flags `-h` shows: the workload, the card, the engine, the training method and
/// the split, the first questions of anyone sizing a run.
pub const COMMON: &[&str] = &[
    "context",
    "sequences",
    "generate",
    "card",
    "engine",
    "train",
    "format",
    "parameters",
    "kv-dtype",
    "gpus",
    "tp",
    "pp",
    "reserve-gib",
    "lora-rank",
    "optimizer",
    "max-model-len",
    "gpu-memory-utilization",
];

/// The `--help` heading of a field: the workload first, the architecture last.
pub fn heading_of(f: &Field) -> &'static str {
    match f.group {
        FieldGroup::Workload | FieldGroup::Cache | FieldGroup::Transients => "Workload",
        FieldGroup::Devices => "Card and devices",
        FieldGroup::Engine if f.key == "card" => "Card and devices",
        FieldGroup::Engine => "Serving engine",
        FieldGroup::Training => "Training",
        FieldGroup::Format | FieldGroup::Model => "Model and format",
        FieldGroup::Architecture
        | FieldGroup::Moe
        | FieldGroup::Variants
        | FieldGroup::CacheShape => "Architecture (a config.json, --model or a preset sets these)",
    }
}

/// The field's help, with what the table says beside it: a text field's suggestions
/// and the default (a switch's, or what an empty field means).
fn help_of(f: &Field) -> String {
    let mut help = f.help.to_string();
    if matches!(f.kind, FieldKind::Text) && !f.choices.is_empty() {
        let names: Vec<&str> = f.choices.iter().map(|(v, _)| *v).collect();
        help.push_str(&format!(" (e.g. {}, …)", names.join(", ")));
    }
    match f.kind {
        FieldKind::Bool(d) => help.push_str(&format!(" [default: {d}]")),
        FieldKind::Card => help.push_str(" (`gpumem-agent cards` lists them)"),
        // The engine's empty choice is "no engine" here (the page shows every engine).
        FieldKind::Choice if f.is_engine() => {}
        FieldKind::Choice => {
            if let Some((_, label)) = f.choices.iter().find(|(v, _)| v.is_empty()) {
                help.push_str(&format!(" [default: {label}]"));
            }
        }
        _ if !f.placeholder.is_empty() => help.push_str(&format!(
            " [default: {}]",
            f.placeholder.trim_start_matches("= ")
        )),
        _ => {}
    }
    help
}

/// A value parser that takes any text and offers the field's choices.
#[derive(Clone)]
struct Offered(&'static Field);

impl clap::builder::TypedValueParser for Offered {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &Command,
        arg: Option<&Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let choices: Box<dyn Iterator<Item = clap::builder::PossibleValue>> = match self.0.kind {
            FieldKind::Bool(_) => Box::new(
                ["true", "false"]
                    .into_iter()
                    .map(clap::builder::PossibleValue::new),
            ),
            // For the completions (hidden from the help: see `flag_of`).
            FieldKind::Card => Box::new(
                CATALOGUE
                    .iter()
                    .map(|c| clap::builder::PossibleValue::new(c.id).help(c.name)),
            ),
            FieldKind::Text if !self.0.choices.is_empty() => Box::new(
                self.0
                    .choices
                    .iter()
                    .map(|(v, _)| clap::builder::PossibleValue::new(*v)),
            ),
            FieldKind::Choice => Box::new(
                self.0
                    .choices
                    .iter()
                    .filter(|(v, _)| !v.is_empty())
                    .map(|(v, l)| {
                        let p = clap::builder::PossibleValue::new(*v);
                        if l == v { p } else { p.help(*l) }
                    }),
            ),
            _ => return None,
        };
        Some(choices)
    }
}

/// The `key=value` pairs of the field flags `keys` given on the command line, in the
/// order they were typed (a later flag overrides an earlier one, as in a link).
pub fn typed_pairs<'a>(
    m: &ArgMatches,
    keys: impl IntoIterator<Item = &'a str>,
) -> Vec<(String, String)> {
    let mut pairs: Vec<(usize, String, String)> = Vec::new();
    for key in keys {
        if let (Some(values), Some(indices)) = (m.get_many::<String>(key), m.indices_of(key)) {
            for (v, i) in values.zip(indices) {
                pairs.push((i, key.to_string(), v.clone()));
            }
        }
    }
    pairs.sort_by_key(|(i, _, _)| *i);
    pairs.into_iter().map(|(_, k, v)| (k, v)).collect()
}
