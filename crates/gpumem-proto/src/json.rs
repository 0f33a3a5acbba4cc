//! Typed reading of an owned [`serde_json::Value`], as `serde_json::from_value` does,
//! except that a struct is read from a JSON object only.
//!
//! serde's derive gives every struct two readers, one for a JSON object (`visit_map`)
//! and one for an array of its fields in order (`visit_seq`), and `serde_json`'s
//! `Value` calls either. No gpumem document writes a struct as an array, so the page
//! never needs the second: read through [`from_value`], each struct's array reader is
//! never called and stays out of the wasm (the agent & sheet page reads every wire
//! message, sheet and workload document this way). A struct given as an array is
//! refused as "invalid type: sequence, expected struct …", the words serde uses for
//! any other wrong type. Everything else — numbers, strings, options, enums, sequences,
//! maps, and `Value` itself — reads exactly as with `serde_json::from_value`, errors
//! included (tested below).

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess,
    Unexpected, Visitor,
};
use serde_json::{Error, Map, Value};

/// Reads a `T` from `value`; see the module's documentation.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, Error> {
    T::deserialize(Owned(value))
}

/// A value being read.
struct Owned(Value);

/// How serde names a value in "invalid type: …" (as `serde_json` does).
fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Unexpected::Unsigned(u),
            (None, Some(i), _) => Unexpected::Signed(i),
            (None, None, Some(f)) => Unexpected::Float(f),
            (None, None, None) => Unexpected::Other("number"),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

fn visit_array<'de, V: Visitor<'de>>(array: Vec<Value>, visitor: V) -> Result<V::Value, Error> {
    let len = array.len();
    let mut seq = Seq(array.into_iter());
    let out = visitor.visit_seq(&mut seq)?;
    if seq.0.len() == 0 {
        Ok(out)
    } else {
        Err(de::Error::invalid_length(len, &"fewer elements in array"))
    }
}

fn visit_object<'de, V: Visitor<'de>>(
    object: Map<String, Value>,
    visitor: V,
) -> Result<V::Value, Error> {
    let len = object.len();
    let mut map = Object {
        iter: object.into_iter(),
        value: None,
    };
    let out = visitor.visit_map(&mut map)?;
    if map.iter.len() == 0 {
        Ok(out)
    } else {
        Err(de::Error::invalid_length(len, &"fewer elements in map"))
    }
}

/// The primitives: read by the value's own deserializer (their visitors read no
/// nested value, so nothing below them goes back to `serde_json`'s struct reader).
macro_rules! forward {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.0.$method(visitor)
        }
    )*};
}

impl<'de> Deserializer<'de> for Owned {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(a) => visit_array(a, visitor),
            Value::Object(o) => visit_object(o, visitor),
            other => other.deserialize_any(visitor),
        }
    }

    forward! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char deserialize_str
        deserialize_string deserialize_bytes deserialize_byte_buf deserialize_unit
        deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            other => visitor.visit_some(Owned(other)),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.0.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(a) => visit_array(a, visitor),
            other => Err(de::Error::invalid_type(unexpected(&other), &visitor)),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(o) => visit_object(o, visitor),
            other => Err(de::Error::invalid_type(unexpected(&other), &visitor)),
        }
    }

    /// Objects only: the one difference from `serde_json`'s `Value`.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_map(visitor)
    }

    /// The gpumem enums read here are unit variants (strings); a variant with content
    /// would be read by `serde_json`'s own `Value` reader.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.0.deserialize_enum(name, variants, visitor)
    }
}

/// The elements of an array.
struct Seq(std::vec::IntoIter<Value>);

impl<'de> SeqAccess<'de> for Seq {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        match self.0.next() {
            Some(value) => seed.deserialize(Owned(value)).map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

/// The entries of an object.
struct Object {
    iter: <Map<String, Value> as IntoIterator>::IntoIter,
    value: Option<Value>,
}

impl<'de> MapAccess<'de> for Object {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.iter.next() {
            Some((key, value)) => {
                self.value = Some(value);
                seed.deserialize(IntoDeserializer::<Error>::into_deserializer(key))
                    .map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(Owned(value)),
            None => Err(de::Error::custom("value is missing")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::fmt::Debug;

    use serde_json::json;

    use super::*;
    use crate::results::{Dtype, ResultsFile};
    use crate::wire::MeasureRequest;
    use crate::workload::WorkloadFile;

    /// The same value or the same words as `serde_json::from_value`.
    fn same<T: DeserializeOwned + PartialEq + Debug>(value: Value) {
        let ours = from_value::<T>(value.clone()).map_err(|e| e.to_string());
        let theirs = serde_json::from_value::<T>(value.clone()).map_err(|e| e.to_string());
        assert_eq!(ours, theirs, "{value}");
    }

    #[test]
    fn whole_documents_read_as_with_serde_json() {
        let results: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/measurements/synthetic-seed-dims.json"
        ))
        .expect("the results fixture is JSON");
        let workload: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/workloads/synthetic-train_adamw.json"
        ))
        .expect("the workload fixture is JSON");
        assert!(from_value::<ResultsFile>(results.clone()).is_ok());
        assert!(from_value::<WorkloadFile>(workload.clone()).is_ok());
        same::<ResultsFile>(results);
        same::<WorkloadFile>(workload);
    }

    #[test]
    fn refusals_use_serde_jsons_words() {
        let good = serde_json::to_value(MeasureRequest::SEED_EXAMPLE).expect("serialisable");
        same::<MeasureRequest>(good.clone());
        let with = |key: &str, v: Option<Value>| {
            let mut m = good.clone();
            let o = m.as_object_mut().expect("an object");
            match v {
                Some(v) => o.insert(key.into(), v),
                None => o.remove(key),
            };
            m
        };
        let cases = [
            with("trim_between_repeats", None), // a default
            with("batch", None),                // a missing field
            with("batch", Some(json!("2"))),    // a wrong type
            with("batch", Some(json!(-1))),
            with("batch", Some(json!(1.5))),
            with("dtype", Some(json!("float8"))), // an unknown variant
            with("dtype", Some(json!({"float32": null}))),
            with("unknown", Some(json!([1, {"a": null}]))), // ignored
        ];
        for case in cases {
            same::<MeasureRequest>(case);
        }
        same::<MeasureRequest>(json!("batch"));
        same::<MeasureRequest>(json!(null));
        same::<Dtype>(json!("bfloat16"));
        same::<Option<u32>>(json!(null));
        same::<Option<u32>>(json!(7));
        same::<u32>(json!(u64::MAX));
        same::<Vec<String>>(json!(["a", "b"]));
        same::<Vec<String>>(json!("a"));
        same::<(u32, u32)>(json!([1, 2]));
        same::<(u32, u32)>(json!([1, 2, 3]));
        same::<BTreeMap<String, u64>>(json!({"a": 1, "b": 2}));
        same::<BTreeMap<String, u64>>(json!([["a", 1]]));
        same::<Value>(json!({"a": [1, -2, 3.5, null, true, "x", {"b": {}}]}));
    }

    #[test]
    fn a_struct_is_read_from_an_object_only() {
        let array = json!([2, 128, 1024, 4, "float32", 3, 5, false]);
        // serde_json's own reader takes the fields in order; this one says no.
        assert_eq!(
            serde_json::from_value::<MeasureRequest>(array.clone()).ok(),
            Some(MeasureRequest::SEED_EXAMPLE)
        );
        let e = from_value::<MeasureRequest>(array).expect_err("refused");
        assert_eq!(
            e.to_string(),
            "invalid type: sequence, expected struct MeasureRequest"
        );
    }
}
