//! How much of a model file to read for its header: one policy, without I/O, for the
//! agent (which reads files) and the page (which slices a dropped `File`).
//!
//! The host owns the bytes and the reading; this module only answers, for the prefix
//! read so far, "read this range next" or "done". Both hosts therefore grow their
//! reads the same way and stop at the same bounds:
//!
//! - safetensors: 8 bytes, then exactly the JSON header they announce — never more
//!   than the format's 100 MB limit ([`safetensors::MAX_HEADER_BYTES`]), and never
//!   past the end of the file;
//! - GGUF: a first read of [`GGUF_FIRST_READ`], then, while the parser says the header
//!   goes on, at least what it needs and at least twice what was read, bounded by the
//!   bytes the file has and by [`GGUF_MAX_HEADER`] (so a corrupt length never makes a
//!   host load a whole multi-gigabyte file).
//!
//! Every [`Step::Need`] starts where the prefix ends and asks for at least one byte, so
//! a host that appends what it reads always makes progress, and the loop ends.

#![deny(clippy::arithmetic_side_effects)]

use std::ops::Range;

use super::{TensorSummary, gguf, safetensors};
use crate::error::EstimateError;

/// First read of a GGUF file: the fixed part and most metadata of small files.
pub const GGUF_FIRST_READ: u64 = 1 << 20;
/// Largest GGUF header read. The metadata of the largest vocabularies (token strings,
/// scores, types, merges) takes tens of MB; a header claiming more is refused (the
/// refusal names this limit as "256 MiB").
pub const GGUF_MAX_HEADER: u64 = 256 << 20;
/// safetensors: the 8-byte length that precedes the JSON header.
const SAFETENSORS_PREFIX: u64 = 8;

/// The two header formats read from a file's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderFormat {
    /// A `.safetensors` file (one shard).
    Safetensors,
    /// A `.gguf` file.
    Gguf,
}

/// A header read to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// Every tensor of a safetensors file.
    Safetensors(TensorSummary),
    /// A GGUF header (tensors, architecture, numeric metadata).
    Gguf(Box<gguf::GgufHeader>),
}

impl Header {
    /// The tensors counted, whichever the format.
    pub fn into_tensors(self) -> TensorSummary {
        match self {
            Header::Safetensors(t) => t,
            Header::Gguf(h) => h.tensors,
        }
    }
}

/// What the host does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Read these bytes of the file (`start` is the length of the prefix so far; the
    /// range is never empty) and append them, then ask again.
    Need(Range<u64>),
    /// The header is complete.
    Done(Header),
}

/// The read policy for one file of `file_size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRead {
    format: HeaderFormat,
    file_size: u64,
    /// [`GGUF_FIRST_READ`]; smaller in tests so that small files exercise the growth.
    gguf_first_read: u64,
}

impl HeaderRead {
    /// The policy for a file of this format and size.
    pub fn new(format: HeaderFormat, file_size: u64) -> Self {
        HeaderRead {
            format,
            file_size,
            gguf_first_read: GGUF_FIRST_READ,
        }
    }

    /// Given the file's first bytes read so far (`prefix` starts at byte 0), what to
    /// read next, or the parsed header, or why the file cannot be read. Pure: the same
    /// prefix always gives the same answer. A host may append fewer bytes than asked
    /// (a short read); only an empty read must stop it (the file shrank).
    pub fn next_read(&self, prefix: &[u8]) -> Result<Step, EstimateError> {
        // A prefix longer than `file_size` (a file that grew while read) needs no case
        // of its own: every range asked for stays within `file_size`, and a header not
        // complete within it is refused as truncated.
        let have = prefix.len() as u64;
        match self.format {
            HeaderFormat::Safetensors => self.safetensors(prefix, have),
            HeaderFormat::Gguf => self.gguf(prefix, have),
        }
    }

    fn truncated(&self, format: &'static str, needed: u64) -> EstimateError {
        EstimateError::Truncated {
            format,
            have: self.file_size,
            needed,
        }
    }

    /// `have..end`, or an error when the file ends first.
    fn need(&self, format: &'static str, have: u64, end: u64) -> Result<Step, EstimateError> {
        if end > self.file_size {
            return Err(self.truncated(format, end));
        }
        Ok(Step::Need(have..end))
    }

    fn safetensors(&self, prefix: &[u8], have: u64) -> Result<Step, EstimateError> {
        if have < SAFETENSORS_PREFIX {
            return self.need("safetensors", have, SAFETENSORS_PREFIX);
        }
        // header_len refuses lengths above the format's limit, so `end` is bounded.
        let n = safetensors::header_len(prefix)?;
        let end = n
            .checked_add(SAFETENSORS_PREFIX)
            .ok_or(EstimateError::Overflow {
                what: "safetensors header end",
            })?;
        if have < end {
            return self.need("safetensors", have, end);
        }
        // parse_header reads the first `end` bytes and ignores what follows.
        safetensors::parse_header(prefix).map(|t| Step::Done(Header::Safetensors(t)))
    }

    fn gguf(&self, prefix: &[u8], have: u64) -> Result<Step, EstimateError> {
        let first = self.gguf_first_read.min(self.file_size);
        if have < first {
            return Ok(Step::Need(have..first));
        }
        let needed = match gguf::parse_header(prefix) {
            Ok(h) => return Ok(Step::Done(Header::Gguf(Box::new(h)))),
            Err(EstimateError::Truncated { needed, .. }) => needed,
            Err(e) => return Err(e),
        };
        // A parser asking for bytes it already has would loop forever: refused like a
        // header beyond the limit.
        if needed <= have || needed > GGUF_MAX_HEADER {
            return Err(EstimateError::Parse {
                format: "gguf",
                reason: "the header is longer than the 256 MiB limit: a corrupt file?".into(),
            });
        }
        if needed > self.file_size {
            return Err(self.truncated("gguf", needed));
        }
        // Grow at least geometrically so a long metadata section costs few reads.
        let end = needed
            .max(have.saturating_mul(2))
            .min(self.file_size)
            .min(GGUF_MAX_HEADER);
        Ok(Step::Need(have..end))
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    fn safetensors_file(header: &str, data: usize) -> Vec<u8> {
        let mut f = (header.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(header.as_bytes());
        f.resize(f.len() + data, 0xAB);
        f
    }

    /// Reads a header from an in-memory file through the policy, `chunk` bytes at most
    /// per read (a host's short reads), as the agent and the page do; also counts reads.
    #[cfg(not(target_arch = "wasm32"))]
    fn read_all(
        format: HeaderFormat,
        file: &[u8],
        chunk: usize,
        first_read: u64,
    ) -> Result<(Header, usize), EstimateError> {
        let policy = HeaderRead {
            gguf_first_read: first_read.max(1),
            ..HeaderRead::new(format, file.len() as u64)
        };
        let mut prefix: Vec<u8> = Vec::new();
        let mut reads: usize = 0;
        loop {
            match policy.next_read(&prefix)? {
                Step::Done(h) => return Ok((h, reads)),
                Step::Need(r) => {
                    let start = usize::try_from(r.start).unwrap_or(usize::MAX);
                    let end = usize::try_from(r.end).unwrap_or(usize::MAX);
                    let end = end.min(start.saturating_add(chunk.max(1)));
                    let Some(bytes) = file.get(start..end) else {
                        return Err(policy.truncated("file", r.end));
                    };
                    prefix.extend_from_slice(bytes);
                    reads = reads.saturating_add(1);
                }
            }
        }
    }

    const ST: &str = r#"{"a.weight":{"dtype":"BF16","shape":[4,8],"data_offsets":[0,64]},"lm_head.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[64,80]}}"#;

    #[test]
    fn safetensors_reads_8_bytes_then_exactly_the_header() {
        let file = safetensors_file(ST, 80);
        let p = HeaderRead::new(HeaderFormat::Safetensors, file.len() as u64);
        assert_eq!(p.next_read(&[]).unwrap(), Step::Need(0..8));
        let end = 8 + ST.len() as u64;
        assert_eq!(p.next_read(&file[..8]).unwrap(), Step::Need(8..end));
        match p.next_read(&file[..end as usize]).unwrap() {
            Step::Done(Header::Safetensors(t)) => assert_eq!(t.total.tensors, 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn safetensors_refuses_a_header_longer_than_the_file_or_the_format() {
        let mut file = safetensors_file(ST, 0);
        file.truncate(20);
        let p = HeaderRead::new(HeaderFormat::Safetensors, 20);
        assert!(matches!(
            p.next_read(&file[..8]),
            Err(EstimateError::Truncated { .. })
        ));
        let huge = (safetensors::MAX_HEADER_BYTES + 1).to_le_bytes();
        let p = HeaderRead::new(HeaderFormat::Safetensors, u64::MAX);
        assert!(matches!(
            p.next_read(&huge),
            Err(EstimateError::Parse { .. })
        ));
        // A file shorter than the length prefix.
        let p = HeaderRead::new(HeaderFormat::Safetensors, 3);
        assert!(p.next_read(&[0, 0, 0]).is_err());
    }

    #[test]
    fn gguf_grows_geometrically_within_the_file() {
        let file = gguf::build_header("llama", &[("token_embd.weight", &[8, 4], 1)]);
        let size = file.len() as u64;
        let p = HeaderRead::new(HeaderFormat::Gguf, size);
        // A small file is read whole at once.
        assert_eq!(p.next_read(&[]).unwrap(), Step::Need(0..size));
        assert!(matches!(
            p.next_read(&file).unwrap(),
            Step::Done(Header::Gguf(_))
        ));
        // A prefix that ends inside the header: ask for at least twice as much.
        let p = HeaderRead::new(HeaderFormat::Gguf, 10 * GGUF_FIRST_READ);
        let Step::Need(r) = p.next_read(&file[..30]).unwrap() else {
            panic!("a 30-byte prefix is not a header");
        };
        assert_eq!(r.start, 30);
        assert!(r.end >= 60);
    }

    #[test]
    fn gguf_refuses_a_header_beyond_the_limit_without_reading_it() {
        // A metadata string claiming 1 TB: the parser needs more than the limit.
        let mut file = b"GGUF".to_vec();
        file.extend_from_slice(&3u32.to_le_bytes());
        file.extend_from_slice(&0u64.to_le_bytes());
        file.extend_from_slice(&1u64.to_le_bytes());
        file.extend_from_slice(&(1u64 << 40).to_le_bytes());
        let p = HeaderRead::new(HeaderFormat::Gguf, 1 << 41);
        let mut prefix = file.clone();
        prefix.resize(GGUF_FIRST_READ as usize, 0);
        let e = p.next_read(&prefix).unwrap_err();
        // The message names the limit in words: keep the two in step.
        assert_eq!(GGUF_MAX_HEADER, 256 * crate::units::MIB);
        assert!(e.to_string().contains("256 MiB limit"), "{e}");
    }

    #[test]
    fn a_file_that_grew_while_read_still_ends() {
        // Announced as 30 bytes; the host appended more than that: still refused.
        let file = gguf::build_header("llama", &[("token_embd.weight", &[8, 4], 1)]);
        let p = HeaderRead::new(HeaderFormat::Gguf, 30);
        assert!(matches!(
            p.next_read(&file[..40]),
            Err(EstimateError::Truncated { .. })
        ));
    }

    /// Property tests (native only: proptest does not build for wasm32).
    #[cfg(not(target_arch = "wasm32"))]
    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// ggml types whose block layout the core knows (F32, F16, Q4_0, Q8_0, Q4_K, BF16).
        const TYPES: [u32; 6] = [0, 1, 2, 8, 12, 30];

        fn tensors() -> impl Strategy<Value = Vec<(String, Vec<u64>, u32)>> {
            prop::collection::vec(
                (
                    "[a-z_.]{1,40}",
                    prop::collection::vec(1u64..5, 1..3).prop_map(|d| {
                        // Multiples of 256 so every block layout divides the row.
                        d.into_iter().map(|x| x * 256).collect::<Vec<u64>>()
                    }),
                    prop::sample::select(TYPES.to_vec()),
                ),
                0..40,
            )
        }

        fn gguf_file(t: &[(String, Vec<u64>, u32)], tail: usize) -> Vec<u8> {
            let refs: Vec<(&str, &[u64], u32)> = t
                .iter()
                .map(|(n, d, ty)| (n.as_str(), d.as_slice(), *ty))
                .collect();
            let mut f = gguf::build_header("llama", &refs);
            f.resize(f.len() + tail, 0x5A);
            f
        }

        fn safetensors_json(t: &[(String, Vec<u64>, u32)]) -> String {
            let mut offset = 0u64;
            let entries: Vec<String> = t
                .iter()
                .enumerate()
                .map(|(i, (n, d, _))| {
                    let bytes = d.iter().product::<u64>() * 2;
                    let e = format!(
                        r#""{n}{i}":{{"dtype":"BF16","shape":{d:?},"data_offsets":[{offset},{}]}}"#,
                        offset + bytes
                    );
                    offset += bytes;
                    e
                })
                .collect();
            format!("{{{}}}", entries.join(","))
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

            /// Any chunking of the reads gives the header parsed from the whole file.
            #[test]
            fn gguf_any_chunking_reads_the_same_header(
                t in tensors(), tail in 0usize..2048, chunk in 1usize..4096, first in 1u64..512,
            ) {
                let file = gguf_file(&t, tail);
                let whole = gguf::parse_header(&file).expect("a built header parses");
                let (h, reads) = read_all(HeaderFormat::Gguf, &file, chunk, first).expect("reads");
                prop_assert_eq!(h, Header::Gguf(Box::new(whole)));
                // Bounded: geometric growth and at most `chunk` bytes a read.
                prop_assert!(reads <= file.len() / chunk + 64);
            }

            #[test]
            fn safetensors_any_chunking_reads_the_same_header(
                t in tensors(), tail in 0usize..2048, chunk in 1usize..4096,
            ) {
                let json = safetensors_json(&t);
                let file = safetensors_file(&json, tail);
                let whole = safetensors::parse_header(&file).expect("a built header parses");
                let (h, _) = read_all(HeaderFormat::Safetensors, &file, chunk, 1).expect("reads");
                prop_assert_eq!(h, Header::Safetensors(whole));
            }

            /// Garbage: the loop ends, never panics, and agrees with reading it whole.
            #[test]
            fn garbage_ends_and_agrees_with_a_whole_read(
                body in prop::collection::vec(any::<u8>(), 0..600),
                gguf_magic in any::<bool>(), chunk in 1usize..256, first in 1u64..128,
            ) {
                let mut file = if gguf_magic {
                    let mut f = b"GGUF".to_vec();
                    f.extend_from_slice(&3u32.to_le_bytes());
                    f
                } else {
                    Vec::new()
                };
                file.extend_from_slice(&body);
                let whole_g = gguf::parse_header(&file).ok().map(|h| Header::Gguf(Box::new(h)));
                let read_g = read_all(HeaderFormat::Gguf, &file, chunk, first).ok().map(|r| r.0);
                prop_assert_eq!(read_g, whole_g);
                let whole_s = safetensors::parse_header(&file).ok().map(Header::Safetensors);
                let read_s = read_all(HeaderFormat::Safetensors, &file, chunk, 1).ok().map(|r| r.0);
                prop_assert_eq!(read_s, whole_s);
            }
        }
    }
}
