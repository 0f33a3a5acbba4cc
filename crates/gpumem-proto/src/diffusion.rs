//! What the dimensioner and its diffusion module say to each other about a diffusers
//! pipeline, as lines of tab-separated text (the dimensioner carries no JSON reader):
//! the pipeline's files as the module read them ([`PipelineFiles`]: `model_index.json` and each
//! component's `config.json`), the workload's pairs the dimensioner sends the
//! diffusion module, and the answer it gives back ([`DiffusionAnswer`]: the lines
//! `gpumem-agent estimate --diffusers` prints, the figures in bytes, the verdict).
//!
//! Every reader is bounded: at most [`MAX_COMPONENTS`] configs, each at most
//! [`MAX_FILE_BYTES`], at most [`MAX_PAIRS`] pairs and [`MAX_LINES`] lines; a document
//! that is not one is refused in words, never a panic.

use gpumem_core::diffusion::{MAX_COMPONENTS as CORE_COMPONENTS, MAX_CONFIG_BYTES};

use crate::lookup::text::{Writer, lines};

/// First line of a [`PipelineFiles`].
pub const FILES: &str = "gpumem.diffusion-files 1";
/// First line of a workload's pairs.
pub const PAIRS: &str = "gpumem.diffusion-pairs 1";
/// First line of a [`DiffusionAnswer`] (or why there is none).
pub const ANSWER: &str = "gpumem.diffusion-answer 1";

/// The most component configs a files document carries (the core's bound).
pub const MAX_COMPONENTS: usize = CORE_COMPONENTS;
/// The most bytes one file's text may have (the core's bound).
pub const MAX_FILE_BYTES: usize = MAX_CONFIG_BYTES;
/// The most pairs a request carries.
pub const MAX_PAIRS: usize = 256;
/// The most lines (or figures) an answer carries.
pub const MAX_LINES: usize = 1024;

/// A pipeline's files as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PipelineFiles {
    /// Where they came from, in words (`org/name@main (commit 0123…)`).
    pub source: String,
    /// `model_index.json`'s text.
    pub index: String,
    /// Each component's folder name and its `config.json`'s text.
    pub configs: Vec<(String, String)>,
}

/// The answer for one pipeline run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiffusionAnswer {
    /// The verdict's key (`yes`, `borderline`, `no`) and the card's id; `None` when
    /// no catalogue card holds the run.
    pub verdict: Option<(String, String)>,
    /// The lines the command prints, in its order.
    pub lines: Vec<String>,
    /// The figures in bytes, by the names the command's `--json` gives them.
    pub figures: Vec<(String, u64)>,
}

fn file_bound(name: &str, text: &str) -> Result<(), String> {
    if text.len() > MAX_FILE_BYTES {
        return Err(format!("{name} is over {} MiB", MAX_FILE_BYTES >> 20));
    }
    Ok(())
}

/// Writes a [`PipelineFiles`].
pub fn write_files(f: &PipelineFiles) -> String {
    let mut w = Writer::new(FILES);
    w.record("source", &[&f.source]);
    w.record("index", &[&f.index]);
    for (name, text) in &f.configs {
        w.record("config", &[name, text]);
    }
    w.0
}

/// Reads a [`PipelineFiles`] written by [`write_files`].
pub fn read_files(text: &str) -> Result<PipelineFiles, String> {
    let mut f = PipelineFiles::default();
    let mut index = false;
    for line in lines(text, FILES)? {
        match line.kind {
            "source" => f.source = line.fields(1)?[0].clone(),
            "index" => {
                let t = &line.fields(1)?[0];
                file_bound("model_index.json", t)?;
                f.index = t.clone();
                index = true;
            }
            "config" => {
                let v = line.fields(2)?;
                file_bound(&format!("{}/config.json", v[0]), &v[1])?;
                if f.configs.len() >= MAX_COMPONENTS {
                    return Err(line.error(&format!("more than {MAX_COMPONENTS} configs")));
                }
                f.configs.push((v[0].clone(), v[1].clone()));
            }
            _ => return Err(line.error("an unknown record")),
        }
    }
    if !index {
        return Err("no model_index.json".into());
    }
    Ok(f)
}

/// Writes a workload's pairs (the command's flags without dashes, and the page's
/// card, `ram`, `wired-limit-mb`).
pub fn write_pairs<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> String {
    let mut w = Writer::new(PAIRS);
    for (k, v) in pairs {
        w.record("pair", &[k.as_ref(), v.as_ref()]);
    }
    w.0
}

/// Reads pairs written by [`write_pairs`].
pub fn read_pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for line in lines(text, PAIRS)? {
        if line.kind != "pair" {
            return Err(line.error("an unknown record"));
        }
        if out.len() >= MAX_PAIRS {
            return Err(line.error(&format!("more than {MAX_PAIRS} pairs")));
        }
        let v = line.fields(2)?;
        out.push((v[0].clone(), v[1].clone()));
    }
    Ok(out)
}

/// Writes an answer, or why there is none.
pub fn write_answer(a: &Result<DiffusionAnswer, String>) -> String {
    let mut w = Writer::new(ANSWER);
    match a {
        Err(why) => w.record("refused", &[why]),
        Ok(a) => {
            if let Some((key, card)) = &a.verdict {
                w.record("verdict", &[key, card]);
            }
            for l in &a.lines {
                w.record("line", &[l]);
            }
            for (name, b) in &a.figures {
                w.record("figure", &[name, &b.to_string()]);
            }
        }
    }
    w.0
}

/// Reads an answer written by [`write_answer`]: the answer or why there is none, or
/// why the text is not one.
pub fn read_answer(text: &str) -> Result<Result<DiffusionAnswer, String>, String> {
    let mut a = DiffusionAnswer::default();
    let mut refused = None;
    for line in lines(text, ANSWER)? {
        if a.lines.len() >= MAX_LINES || a.figures.len() >= MAX_LINES {
            return Err(line.error(&format!("more than {MAX_LINES} lines")));
        }
        match line.kind {
            "refused" => refused = Some(line.fields(1)?[0].clone()),
            "verdict" => {
                let v = line.fields(2)?;
                a.verdict = Some((v[0].clone(), v[1].clone()));
            }
            "line" => a.lines.push(line.fields(1)?[0].clone()),
            "figure" => {
                let v = line.fields(2)?;
                a.figures.push((v[0].clone(), line.number(&v[1])?));
            }
            _ => return Err(line.error("an unknown record")),
        }
    }
    Ok(match refused {
        Some(why) => Err(why),
        None => Ok(a),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every document reads back as written, tabs, line breaks and backslashes in its
    /// texts included.
    #[test]
    fn documents_round_trip() {
        let f = PipelineFiles {
            source: "org/sdxl@main (commit 0123)".into(),
            index: "{\n\t\"_class_name\": \"StableDiffusionXLPipeline\"\\\n}".into(),
            configs: vec![
                ("unet".into(), "{\"a\":\t1}\r\n".into()),
                ("vae".into(), String::new()),
            ],
        };
        assert_eq!(read_files(&write_files(&f)), Ok(f));
        let pairs = vec![
            ("height".to_string(), "768".to_string()),
            ("card".to_string(), "a\tb".to_string()),
        ];
        assert_eq!(read_pairs(&write_pairs(&pairs)), Ok(pairs));
        assert_eq!(read_pairs(&write_pairs::<&str, &str>(&[])), Ok(vec![]));
        let a = DiffusionAnswer {
            verdict: Some(("yes".into(), "rtx-4090".into())),
            lines: vec!["FITS on …".into(), String::new(), "  unet\t5.13 GB".into()],
            figures: vec![
                ("need_bytes".into(), u64::MAX),
                ("component.unet".into(), 0),
            ],
        };
        assert_eq!(read_answer(&write_answer(&Ok(a.clone()))), Ok(Ok(a)));
        let none = DiffusionAnswer {
            verdict: None,
            ..DiffusionAnswer::default()
        };
        assert_eq!(read_answer(&write_answer(&Ok(none.clone()))), Ok(Ok(none)));
        let why = Err("height: \"tall\" is not a whole number".to_string());
        assert_eq!(read_answer(&write_answer(&why)), Ok(why));
    }

    /// What is not a document, or goes past a bound, is refused in words.
    #[test]
    fn bad_documents_are_refused() {
        assert!(read_files("").is_err());
        assert!(read_files(FILES).unwrap_err().contains("model_index"));
        assert!(read_files(&format!("{FILES}\nindex\ta\tb")).is_err());
        assert!(read_files(&format!("{FILES}\nindex\tbad\\q")).is_err());
        assert!(read_files(&format!("{FILES}\nweights\tx")).is_err());
        let many = PipelineFiles {
            configs: (0..=MAX_COMPONENTS)
                .map(|i| (format!("c{i}"), "{}".to_string()))
                .collect(),
            ..PipelineFiles::default()
        };
        assert!(
            read_files(&write_files(&many))
                .unwrap_err()
                .contains("more than")
        );
        let big = PipelineFiles {
            index: "x".repeat(MAX_FILE_BYTES + 1),
            ..PipelineFiles::default()
        };
        assert!(read_files(&write_files(&big)).unwrap_err().contains("MiB"));
        let pairs: Vec<(String, String)> = (0..=MAX_PAIRS)
            .map(|i| (i.to_string(), String::new()))
            .collect();
        assert!(read_pairs(&write_pairs(&pairs)).is_err());
        assert!(read_pairs(&format!("{PAIRS}\npair\tonly")).is_err());
        assert!(read_answer("nonsense").is_err());
        assert!(read_answer(&format!("{ANSWER}\nfigure\tneed_bytes\t-1")).is_err());
        assert!(read_answer(&format!("{ANSWER}\nverdict\tyes")).is_err());
        let long = format!("{ANSWER}{}", "\nline\tx".repeat(MAX_LINES + 1));
        assert!(read_answer(&long).is_err());
    }
}
