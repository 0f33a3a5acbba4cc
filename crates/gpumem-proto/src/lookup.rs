//! What the page's lazily loaded lookup module (`web/lookup`, crate `gpumem-lookup`)
//! hands back to the dimensioner: a model's shape from its `config.json` and the exact
//! tensors from its weight files' headers, read from dropped files or from the Hub.
//!
//! The two wasm modules share no memory: the answer crosses as this JSON document,
//! so the dimensioner carries none of the readers (config, safetensors, GGUF, HTTP).

use gpumem_core::import::TensorSummary;
use serde::{Deserialize, Serialize};

/// A Hub lookup asked by the page. The token lives only in the page's memory and in
/// this request: never in the URL or in storage.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LookupRequest {
    /// `org/name`.
    pub model: String,
    /// Branch, tag or commit ("main" when empty).
    #[serde(default)]
    pub revision: String,
    /// A weight file to read instead of the checkpoint (a `.gguf` of a GGUF repository).
    #[serde(default)]
    pub file: Option<String>,
    /// An access token for a gated or private repository.
    #[serde(default)]
    pub token: Option<String>,
}

/// A model's shape, read from its `config.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigRead {
    /// Where it came from (a file name, or `org/name@revision/config.json`).
    pub name: String,
    /// `model_type`.
    pub model_type: String,
    /// The shape as `key=value` pairs of the field table.
    pub pairs: Vec<(String, String)>,
    /// Defaults the reader assumed.
    pub notes: Vec<String>,
    /// Fields that change memory and are not modelled.
    pub warnings: Vec<String>,
    /// `exact`, `approximate: <why>` or `unknown family` (the reader's own summary).
    #[serde(default)]
    pub confidence: String,
}

/// Tensors read from weight-file headers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorsRead {
    /// The files read (names only).
    pub files: Vec<String>,
    /// Their tensors, merged.
    pub summary: TensorSummary,
}

/// What a read gave: a shape, tensors, or both (a Hub lookup).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LookupOutcome {
    /// The shape, when a config was read.
    pub config: Option<ConfigRead>,
    /// The tensors, when weight files were read.
    pub tensors: Option<TensorsRead>,
    /// HTTP requests sent (0 for local files).
    pub requests: u32,
    /// Sequential rounds of requests (the latency a lookup costs: requests sent
    /// together count once).
    pub round_trips: u32,
    /// The commit the Hub answered with, when it said.
    pub commit: Option<String>,
    /// A llama.cpp multimodal projector (an `mmproj` GGUF) dropped alone: its file
    /// name and the `mmproj` key's value (`gpumem_core::engine::mmproj`).
    #[serde(default)]
    pub mmproj: Option<(String, String)>,
}

/// The lookup documents as lines of tab-separated text, for the two pages.
///
/// The dimensioner reads the lookup module's answer, sends it requests and keeps the
/// imported tensors in local storage; JSON for these few flat records brought all of
/// serde_json's reader and writer and a deserializer per type into its wasm (21 KB
/// gzip, measured), so the pages speak this instead. The agent never sees it.
///
/// A document is a first line naming it and its version, then one record per line:
/// a kind, then its fields, separated by tabs; in every field `\` `\t` `\n` `\r`
/// are written `\\` `\t` `\n` `\r`. A reader refuses an unknown kind, a missing or
/// extra field, a bad number and a record out of place, with the line it stopped at.
pub mod text {
    use std::collections::BTreeMap;

    use gpumem_core::import::{Tally, TensorSummary};

    use super::{ConfigRead, LookupOutcome, LookupRequest, TensorsRead};

    /// First line of a [`LookupOutcome`].
    pub const OUTCOME: &str = "gpumem.lookup 1";
    /// First line of a [`LookupRequest`].
    pub const REQUEST: &str = "gpumem.lookup-request 1";
    /// First line of a [`TensorsRead`] on its own (the pages' stored import).
    pub const TENSORS: &str = "gpumem.tensors 1";

    fn escape_into(out: &mut String, field: &str) {
        for c in field.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                c => out.push(c),
            }
        }
    }

    fn unescape(field: &str) -> Option<String> {
        let mut out = String::with_capacity(field.len());
        let mut chars = field.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            out.push(match chars.next()? {
                '\\' => '\\',
                't' => '\t',
                'n' => '\n',
                'r' => '\r',
                _ => return None,
            });
        }
        Some(out)
    }

    /// A document being written.
    pub(crate) struct Writer(pub(crate) String);

    impl Writer {
        pub(crate) fn new(head: &str) -> Writer {
            Writer(head.to_string())
        }

        pub(crate) fn record(&mut self, kind: &str, fields: &[&str]) {
            self.0.push('\n');
            self.0.push_str(kind);
            for f in fields {
                self.0.push('\t');
                escape_into(&mut self.0, f);
            }
        }

        pub(crate) fn tensors(&mut self, t: &TensorsRead) {
            let s = &t.summary;
            let (files, count, bytes) = (
                s.files.to_string(),
                s.total.tensors.to_string(),
                s.total.bytes.to_string(),
            );
            self.record("tensors", &[&s.source, &files, &count, &bytes]);
            for f in &t.files {
                self.record("file", &[f]);
            }
            for (kind, map) in [("class", &s.by_class), ("dtype", &s.by_dtype)] {
                for (name, tally) in map {
                    let (n, b) = (tally.tensors.to_string(), tally.bytes.to_string());
                    self.record(kind, &[name, &n, &b]);
                }
            }
        }
    }

    /// One record of a document being read.
    pub(crate) struct Line<'a> {
        /// Its 1-based line number, for errors.
        pub(crate) number: usize,
        pub(crate) kind: &'a str,
        pub(crate) fields: Vec<String>,
    }

    impl Line<'_> {
        pub(crate) fn error(&self, what: &str) -> String {
            format!("line {} ({}): {what}", self.number, self.kind)
        }

        /// The fields, exactly `n` of them.
        pub(crate) fn fields(&self, n: usize) -> Result<&[String], String> {
            if self.fields.len() == n {
                Ok(&self.fields)
            } else {
                Err(self.error(&format!("{} field(s), expected {n}", self.fields.len())))
            }
        }

        pub(crate) fn number(&self, text: &str) -> Result<u64, String> {
            text.parse()
                .map_err(|_| self.error(&format!("{text:?} is not a count")))
        }

        fn tally(&self, fields: &[String]) -> Result<Tally, String> {
            Ok(Tally {
                tensors: self.number(&fields[0])?,
                bytes: self.number(&fields[1])?,
            })
        }
    }

    /// The records of `text`, after checking its first line is `head`.
    pub(crate) fn lines<'a>(text: &'a str, head: &str) -> Result<Vec<Line<'a>>, String> {
        let mut all = text.split('\n');
        if all.next() != Some(head) {
            return Err(format!("not a {head:?} document"));
        }
        all.enumerate()
            .map(|(i, line)| {
                let mut parts = line.split('\t');
                let kind = parts.next().unwrap_or_default();
                let number = i.saturating_add(2);
                let fields = parts
                    .map(|f| unescape(f).ok_or_else(|| format!("line {number}: a bad escape")))
                    .collect::<Result<Vec<String>, String>>()?;
                Ok(Line {
                    number,
                    kind,
                    fields,
                })
            })
            .collect()
    }

    /// Reads a `tensors`, `file`, `class` or `dtype` record into `into` (a `tensors`
    /// record starts it); false for another kind.
    pub(crate) fn tensor_record(
        line: &Line,
        into: &mut Option<TensorsRead>,
    ) -> Result<bool, String> {
        if line.kind == "tensors" {
            if into.is_some() {
                return Err(line.error("a second tensors record"));
            }
            let f = line.fields(4)?;
            *into = Some(TensorsRead {
                files: Vec::new(),
                summary: TensorSummary {
                    source: f[0].clone(),
                    files: line.number(&f[1])?,
                    total: line.tally(&f[2..])?,
                    by_class: BTreeMap::new(),
                    by_dtype: BTreeMap::new(),
                },
            });
            return Ok(true);
        }
        if !matches!(line.kind, "file" | "class" | "dtype") {
            return Ok(false);
        }
        let t = into
            .as_mut()
            .ok_or_else(|| line.error("before the tensors record"))?;
        if line.kind == "file" {
            t.files.push(line.fields(1)?[0].clone());
        } else {
            let f = line.fields(3)?;
            let map = if line.kind == "class" {
                &mut t.summary.by_class
            } else {
                &mut t.summary.by_dtype
            };
            map.insert(f[0].clone(), line.tally(&f[1..])?);
        }
        Ok(true)
    }

    /// The config record a `pair`, `note` or `warning` record belongs to.
    fn config_of<'o>(o: &'o mut LookupOutcome, line: &Line) -> Result<&'o mut ConfigRead, String> {
        o.config
            .as_mut()
            .ok_or_else(|| line.error("before the config record"))
    }

    /// Writes a [`LookupOutcome`].
    pub fn write_outcome(o: &LookupOutcome) -> String {
        let mut w = Writer::new(OUTCOME);
        let (requests, rounds) = (o.requests.to_string(), o.round_trips.to_string());
        w.record("requests", &[&requests, &rounds]);
        if let Some(commit) = &o.commit {
            w.record("commit", &[commit]);
        }
        if let Some(c) = &o.config {
            w.record("config", &[&c.name, &c.model_type, &c.confidence]);
            for (k, v) in &c.pairs {
                w.record("pair", &[k, v]);
            }
            for n in &c.notes {
                w.record("note", &[n]);
            }
            for n in &c.warnings {
                w.record("warning", &[n]);
            }
        }
        if let Some(t) = &o.tensors {
            w.tensors(t);
        }
        if let Some((name, pairs)) = &o.mmproj {
            w.record("mmproj", &[name, pairs]);
        }
        w.0
    }

    /// Reads a [`LookupOutcome`] written by [`write_outcome`].
    pub fn read_outcome(text: &str) -> Result<LookupOutcome, String> {
        let mut o = LookupOutcome::default();
        for line in lines(text, OUTCOME)? {
            if tensor_record(&line, &mut o.tensors)? {
                continue;
            }
            match line.kind {
                "requests" => {
                    let f = line.fields(2)?;
                    let small = |t: &str| {
                        u32::try_from(line.number(t)?).map_err(|_| line.error("too large"))
                    };
                    o.requests = small(&f[0])?;
                    o.round_trips = small(&f[1])?;
                }
                "commit" => o.commit = Some(line.fields(1)?[0].clone()),
                "mmproj" => {
                    let f = line.fields(2)?;
                    o.mmproj = Some((f[0].clone(), f[1].clone()));
                }
                "config" => {
                    let f = line.fields(3)?;
                    o.config = Some(ConfigRead {
                        name: f[0].clone(),
                        model_type: f[1].clone(),
                        confidence: f[2].clone(),
                        ..ConfigRead::default()
                    });
                }
                "pair" => {
                    let f = line.fields(2)?;
                    config_of(&mut o, &line)?
                        .pairs
                        .push((f[0].clone(), f[1].clone()));
                }
                "note" => {
                    let f = line.fields(1)?[0].clone();
                    config_of(&mut o, &line)?.notes.push(f);
                }
                "warning" => {
                    let f = line.fields(1)?[0].clone();
                    config_of(&mut o, &line)?.warnings.push(f);
                }
                _ => return Err(line.error("an unknown record")),
            }
        }
        Ok(o)
    }

    /// Writes a [`LookupRequest`].
    pub fn write_request(r: &LookupRequest) -> String {
        let mut w = Writer::new(REQUEST);
        w.record("model", &[&r.model, &r.revision]);
        if let Some(f) = &r.file {
            w.record("file", &[f]);
        }
        if let Some(t) = &r.token {
            w.record("token", &[t]);
        }
        w.0
    }

    /// Reads a [`LookupRequest`] written by [`write_request`].
    pub fn read_request(text: &str) -> Result<LookupRequest, String> {
        let mut r = LookupRequest::default();
        let mut model = false;
        for line in lines(text, REQUEST)? {
            match line.kind {
                "model" => {
                    let f = line.fields(2)?;
                    (r.model, r.revision) = (f[0].clone(), f[1].clone());
                    model = true;
                }
                "file" => r.file = Some(line.fields(1)?[0].clone()),
                "token" => r.token = Some(line.fields(1)?[0].clone()),
                _ => return Err(line.error("an unknown record")),
            }
        }
        if !model {
            return Err("no model record".into());
        }
        Ok(r)
    }

    /// Writes a [`TensorsRead`] on its own.
    pub fn write_tensors(t: &TensorsRead) -> String {
        let mut w = Writer::new(TENSORS);
        w.tensors(t);
        w.0
    }

    /// Reads a [`TensorsRead`] written by [`write_tensors`].
    pub fn read_tensors(text: &str) -> Result<TensorsRead, String> {
        let mut t = None;
        for line in lines(text, TENSORS)? {
            if !tensor_record(&line, &mut t)? {
                return Err(line.error("an unknown record"));
            }
        }
        t.ok_or_else(|| "no tensors record".into())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use gpumem_core::import::{Tally, TensorSummary};
    use proptest::prelude::*;

    use super::text::*;
    use super::*;

    fn tally(tensors: u64, bytes: u64) -> Tally {
        Tally { tensors, bytes }
    }

    fn outcome(field: &str, n: u64) -> LookupOutcome {
        LookupOutcome {
            config: Some(ConfigRead {
                name: format!("org/{field}@main/config.json"),
                model_type: field.to_string(),
                pairs: vec![
                    ("layers".into(), n.to_string()),
                    (field.into(), field.into()),
                ],
                notes: vec![field.to_string(), String::new()],
                warnings: vec![format!("a warning with {field}")],
                confidence: "approximate: ".to_string() + field,
            }),
            tensors: Some(TensorsRead {
                files: vec![field.to_string(), "model-00001-of-00002.safetensors".into()],
                summary: TensorSummary {
                    source: "safetensors".into(),
                    files: 2,
                    total: tally(n, u64::MAX),
                    by_class: BTreeMap::from([
                        ("mlp".into(), tally(n, 7)),
                        (field.into(), tally(0, 0)),
                    ]),
                    by_dtype: BTreeMap::from([("BF16".into(), tally(1, n))]),
                },
            }),
            requests: u32::MAX,
            round_trips: 3,
            commit: Some(field.to_string()),
            mmproj: Some((format!("mmproj-{field}.gguf"), format!("bytes={n}"))),
        }
    }

    #[test]
    fn an_outcome_a_request_and_tensors_read_back_whole() {
        let o = outcome("llama\t\\x\n\r", 12);
        assert_eq!(read_outcome(&write_outcome(&o)), Ok(o.clone()));
        let empty = LookupOutcome::default();
        assert_eq!(write_outcome(&empty), "gpumem.lookup 1\nrequests\t0\t0");
        assert_eq!(read_outcome(&write_outcome(&empty)), Ok(empty));
        let t = o.tensors.unwrap();
        assert_eq!(read_tensors(&write_tensors(&t)), Ok(t));
        let r = LookupRequest {
            model: "org/name".into(),
            revision: String::new(),
            file: Some("a b.gguf".into()),
            token: Some("hf_\tsecret".into()),
        };
        assert_eq!(read_request(&write_request(&r)), Ok(r));
    }

    #[test]
    fn malformed_documents_are_refused_with_the_line() {
        let bad = [
            ("", "not a"),
            ("{\"config\":null}", "not a"),
            (
                "gpumem.lookup 1\nrequests\t1",
                "line 2 (requests): 1 field(s), expected 2",
            ),
            ("gpumem.lookup 1\nrequests\t1\tx", "is not a count"),
            ("gpumem.lookup 1\nrequests\t1\t4294967296", "too large"),
            ("gpumem.lookup 1\npair\ta\tb", "before the config record"),
            ("gpumem.lookup 1\nfile\ta", "before the tensors record"),
            ("gpumem.lookup 1\nsurprise", "an unknown record"),
            ("gpumem.lookup 1\ncommit\ta\\q", "a bad escape"),
            ("gpumem.lookup 1\ncommit\ta\\", "a bad escape"),
            (
                "gpumem.lookup 1\ntensors\ts\t1\t1\t1\ntensors\ts\t1\t1\t1",
                "a second tensors record",
            ),
            ("gpumem.lookup 1\n", "an unknown record"),
        ];
        for (text, why) in bad {
            let e = read_outcome(text).expect_err(text);
            assert!(e.contains(why), "{text:?}: {e}");
        }
        assert!(read_request("gpumem.lookup-request 1").is_err());
        assert!(read_tensors("gpumem.tensors 1").is_err());
        assert!(read_tensors("gpumem.tensors 1\nrequests\t1\t1").is_err());
    }

    proptest! {
        #[test]
        fn any_text_reads_back(field in "\\PC*|[\\\\\t\n\r]{0,8}", n in any::<u64>()) {
            let o = outcome(&field, n);
            prop_assert_eq!(read_outcome(&write_outcome(&o)), Ok(o));
        }

        #[test]
        fn any_input_is_answered_without_a_panic(text in "gpumem\\.lookup 1(\n[a-z]{0,8}(\t[^\t\n]{0,6}){0,4}){0,6}") {
            let _ = read_outcome(&text);
            let _ = read_tensors(&text);
            let _ = read_request(&text);
        }
    }
}
