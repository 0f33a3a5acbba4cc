//! A `config.json` object read key by key, remembering every key it was asked
//! for: what was never read is then known, so an unread key that may change memory
//! is named in a warning instead of being ignored silently.

use std::cell::RefCell;

use serde_json::Value;

use crate::error::EstimateError;

use super::FORMAT;

/// An error in the config's words.
pub(crate) fn parse(reason: String) -> EstimateError {
    EstimateError::Parse {
        format: FORMAT,
        reason,
    }
}

/// One JSON object of the config (the root, or the language model's `text_config`)
/// and the keys read from it so far.
pub(crate) struct Cfg<'a> {
    v: &'a Value,
    read: RefCell<Vec<&'a str>>,
}

impl<'a> Cfg<'a> {
    pub(crate) fn new(v: &'a Value) -> Self {
        Cfg {
            v,
            read: RefCell::new(Vec::new()),
        }
    }

    /// The value of `key` (null included), and the key marked read.
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        let (k, x) = self.v.as_object()?.get_key_value(key)?;
        let mut read = self.read.borrow_mut();
        if !read.contains(&k.as_str()) {
            read.push(k.as_str());
        }
        Some(x)
    }

    /// Marks keys as read without using them (a family's keys that change nothing
    /// in memory are listed instead; this is for keys a hook consumed as a whole).
    pub(crate) fn touch(&self, keys: &[&str]) {
        for k in keys {
            self.get(k);
        }
    }

    /// Whether `key` was read.
    pub(crate) fn was_read(&self, key: &str) -> bool {
        self.read.borrow().contains(&key)
    }

    /// Calls `f` with every key never read (here, nor through `also`, a second view
    /// of the same object) whose value is set (not null, false, 0 or empty).
    pub(crate) fn each_unread(&self, also: Option<&Cfg>, f: &mut dyn FnMut(&'a str)) {
        let Some(o) = self.v.as_object() else { return };
        let read = self.read.borrow();
        for (k, x) in o {
            let k = k.as_str();
            if set(x) && !read.contains(&k) && !also.is_some_and(|a| a.was_read(k)) {
                f(k);
            }
        }
    }

    /// An integer key; `None` when absent or null, an error naming what was found
    /// when it is not a non-negative integer.
    pub(crate) fn uint(&self, key: &str) -> Result<Option<u64>, EstimateError> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x.as_u64().map(Some).ok_or_else(|| {
                parse(format!(
                    "{key} should be a non-negative integer, found {}",
                    shown(x)
                ))
            }),
        }
    }

    /// The first of `keys` present, or an error naming them all.
    pub(crate) fn need(&self, keys: &[&str]) -> Result<u64, EstimateError> {
        for k in keys {
            if let Some(x) = self.uint(k)? {
                return Ok(x);
            }
        }
        Err(parse(format!("missing {}", keys.join(" / "))))
    }

    /// The first of `keys` present.
    pub(crate) fn any(&self, keys: &[&str]) -> Result<Option<u64>, EstimateError> {
        for k in keys {
            if let Some(x) = self.uint(k)? {
                return Ok(Some(x));
            }
        }
        Ok(None)
    }

    /// A boolean key.
    pub(crate) fn flag(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(Value::as_bool)
    }

    /// A string key.
    pub(crate) fn str(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(Value::as_str)
    }

    /// A list key.
    pub(crate) fn list(&self, key: &str) -> Option<&'a Vec<Value>> {
        self.get(key).and_then(Value::as_array)
    }

    /// True when `key` holds something other than null, false, 0 or an empty list.
    pub(crate) fn present(&self, key: &str) -> bool {
        self.get(key).is_some_and(set)
    }

    /// An integer key with the family's default, the default listed in `notes`
    /// when assumed.
    pub(crate) fn or_default(
        &self,
        key: &str,
        default: u64,
        class: &str,
        notes: &mut Vec<String>,
    ) -> Result<u64, EstimateError> {
        match self.uint(key)? {
            Some(x) => Ok(x),
            None => {
                notes.push(format!(
                    "{key} absent: {default} assumed ({class}'s default)"
                ));
                Ok(default)
            }
        }
    }

    /// The checkpoint's dtype as the config names it (`torch_dtype`, or `dtype` in
    /// newer transformers).
    pub(crate) fn dtype(&self) -> Option<&'a str> {
        let t = self.str("torch_dtype");
        let d = self.str("dtype");
        t.or(d)
    }

    /// Count of the list entries of `key` equal to `kind`.
    pub(crate) fn count_of(&self, key: &str, kind: &str) -> Option<u64> {
        self.list(key)
            .map(|l| l.iter().filter(|x| x.as_str() == Some(kind)).count() as u64)
    }
}

/// Whether a value turns something on: not null, false, 0 or an empty list.
fn set(x: &Value) -> bool {
    match x {
        Value::Null | Value::Bool(false) => false,
        Value::Array(a) => !a.is_empty(),
        Value::Number(n) => n.as_u64() != Some(0),
        _ => true,
    }
}

/// A scalar as the config wrote it, a container by its kind: without `Value`'s
/// `Display`, which would bring a JSON writer into the page's wasm.
pub(crate) fn shown(x: &Value) -> String {
    match x {
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}
