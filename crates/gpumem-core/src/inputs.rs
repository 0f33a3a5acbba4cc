//! Every input key as one table: the estimate's ([`crate::fields::FIELDS`]) then the
//! serving engines' ([`crate::engine::FIELDS`], read from the engines' registry), in
//! the order the agent's `estimate --help` and the page's form show them. The agent's
//! flags and the page's form, URL keys and hints are generated from it. (Two slices
//! read as one, not a joined copy: the page's wasm carries each row once.)

use crate::fields::{Field, FieldGroup};

/// The table a group's fields are in: the engine group's, or the estimate's.
pub fn table(group: FieldGroup) -> &'static [Field] {
    if group == FieldGroup::Engine {
        crate::engine::FIELDS
    } else {
        crate::fields::FIELDS
    }
}

/// Every field, the estimate's then the engine's.
pub fn fields() -> impl Iterator<Item = &'static Field> + Clone {
    crate::fields::FIELDS.iter().chain(crate::engine::FIELDS)
}

/// The field of a key, if it is one.
pub fn field(key: &str) -> Option<&'static Field> {
    crate::fields::field(key).or_else(|| crate::engine::field_of(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::sample;
    use crate::fields::FieldKind;

    /// The errors of `key=value` beside a Mac's card (which `wired-limit-mb` needs and
    /// every other key leaves alone; `card` itself replaces it).
    fn engine_errors(key: &str, value: &str) -> Vec<String> {
        crate::engine::from_pairs([("card", "m3-max-128gb"), (key, value)])
            .1
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    /// Every key once across both tables; every engine field described, its sample,
    /// its choices and the default of a switch read by the engine's parser, and a value
    /// not of its kind refused naming the key. (The estimate's fields are checked the
    /// same way in `fields`.)
    #[test]
    fn one_table_every_engine_field_parses() {
        for f in fields() {
            assert!(table(f.group).iter().any(|g| g.key == f.key), "{}", f.key);
        }
        let all: Vec<&Field> = fields().collect();
        for (i, f) in all.iter().enumerate() {
            assert!(all[..i].iter().all(|g| g.key != f.key), "{} twice", f.key);
            assert_eq!(field(f.key).map(|g| g.key), Some(f.key));
        }
        assert_eq!(
            all.len(),
            crate::fields::FIELDS.len() + crate::engine::FIELDS.len()
        );
        for f in crate::engine::FIELDS {
            assert!(f.is_engine(), "{}", f.key);
            assert!(!f.label.trim().is_empty() && !f.help.trim().is_empty());
            let v = sample(f);
            assert!(!v.is_empty(), "{}: no sample value", f.key);
            assert_eq!(
                engine_errors(f.key, v),
                Vec::<String>::new(),
                "{}={v}",
                f.key
            );
            for (value, label) in f.choices {
                assert!(!label.is_empty(), "{}: a choice without a label", f.key);
                if !value.is_empty() {
                    assert_eq!(engine_errors(f.key, value), Vec::<String>::new());
                }
            }
            match f.kind {
                FieldKind::Choice => assert!(
                    f.choices.iter().any(|c| c.0.is_empty()) && f.choices.len() > 1,
                    "{}",
                    f.key
                ),
                FieldKind::Count | FieldKind::Bool(_) | FieldKind::Fraction | FieldKind::Card => {
                    assert!(f.choices.is_empty(), "{}", f.key)
                }
                FieldKind::Text => {}
            }
            if !matches!(f.kind, FieldKind::Text) {
                let bad = engine_errors(f.key, "x?");
                assert!(
                    bad.iter().any(|e| e.starts_with(&format!("{}:", f.key))),
                    "{}: {bad:?}",
                    f.key
                );
            }
            // An engine's switches are off unless given, and a switch's default written
            // back is what an absent key means.
            if let FieldKind::Bool(d) = f.kind {
                assert!(!d, "{}: an engine switch is off by default", f.key);
                let (p, errors) = crate::engine::from_pairs([(f.key, "false")]);
                assert!(errors.is_empty() && p.is_empty(), "{}: {errors:?}", f.key);
            }
        }
    }
}
