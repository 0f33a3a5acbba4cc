//! Local import of model files: a `config.json`, one or more `.safetensors`
//! shards, or `.gguf` files. Only header bytes are read, through `File.slice`; nothing
//! leaves the browser. The reads follow [`gpumem_core::import::read_policy`], the same
//! bounds and growth as the agent's `estimate --safetensors/--gguf` and the Hub lookup.

use gpumem_core::engine::mmproj::Projector;
use gpumem_core::import::TensorSummary;
use gpumem_core::import::config::parse_config;
use gpumem_core::import::read_policy::{Header, HeaderFormat, HeaderRead, Step};
use gpumem_proto::lookup::{LookupOutcome, TensorsRead};
use js_sys::Uint8Array;
use wasm_bindgen_futures::JsFuture;
use web_sys::File;

use crate::{config_read, gguf_read, js_message};

/// A config.json larger than this is not a config.
const MAX_CONFIG_BYTES: f64 = 8.0 * 1024.0 * 1024.0;

fn js_err(e: wasm_bindgen::JsValue) -> String {
    js_message(&e, "the browser could not read the file")
}

/// Bytes `[start, end)` of `file`, read locally.
async fn read_range(file: &File, start: u64, end: u64) -> Result<Vec<u8>, String> {
    let blob = file
        .slice_with_f64_and_f64(start as f64, end as f64)
        .map_err(js_err)?;
    let buf = JsFuture::from(blob.array_buffer()).await.map_err(js_err)?;
    Ok(Uint8Array::new(&buf).to_vec())
}

/// Reads only `file`'s header, as the read policy asks; the weights are never read.
async fn read_header(file: &File, format: HeaderFormat) -> Result<Header, String> {
    let name = file.name();
    let policy = HeaderRead::new(format, file.size() as u64);
    let mut prefix: Vec<u8> = Vec::new();
    loop {
        match policy
            .next_read(&prefix)
            .map_err(|e| format!("{name}: {e}"))?
        {
            Step::Done(header) => return Ok(header),
            Step::Need(range) => {
                let bytes = read_range(file, range.start, range.end).await?;
                if bytes.is_empty() {
                    return Err(format!("{name}: the file ended inside its header"));
                }
                prefix.extend_from_slice(&bytes);
            }
        }
    }
}

/// Reads a batch of files. A config.json gives a shape; safetensors shards (or GGUF
/// files) give tensors. Mixed batches are refused with a message saying why.
pub async fn read_files(files: Vec<File>) -> Result<LookupOutcome, String> {
    let lower: Vec<String> = files
        .iter()
        .map(|f| f.name().to_ascii_lowercase())
        .collect();
    let all = |ext: &str| !lower.is_empty() && lower.iter().all(|n| n.ends_with(ext));
    if lower.len() == 1 && lower[0].ends_with(".json") {
        let file = &files[0];
        if file.size() > MAX_CONFIG_BYTES {
            return Err(format!("{}: too large for a config.json", file.name()));
        }
        let text = JsFuture::from(file.text()).await.map_err(js_err)?;
        let text = text.as_string().unwrap_or_default();
        let c = parse_config(&text).map_err(|e| format!("{}: {e}", file.name()))?;
        return Ok(LookupOutcome {
            config: Some(config_read(file.name(), &c)),
            ..LookupOutcome::default()
        });
    }
    let format = if all(".safetensors") {
        HeaderFormat::Safetensors
    } else if all(".gguf") {
        HeaderFormat::Gguf
    } else if files.is_empty() {
        return Err("no file was given".into());
    } else {
        return Err(
            "drop one config.json, or the .safetensors shards of one checkpoint, or .gguf files — one kind at a time"
                .into(),
        );
    };
    let mut read = Vec::with_capacity(files.len());
    let mut config = None;
    for f in &files {
        let header = read_header(f, format).await?;
        // A llama.cpp multimodal projector (general.architecture "clip") dropped alone:
        // the `mmproj` engine key, not the model's weights.
        if let Header::Gguf(h) = &header
            && h.architecture.as_deref() == Some("clip")
        {
            if files.len() != 1 {
                return Err(format!(
                    "{}: an mmproj projector file; drop it alone (its figures go to llama.cpp's mmproj field)",
                    f.name()
                ));
            }
            let p = Projector::from_header(h).map_err(|e| format!("{}: {e}", f.name()))?;
            return Ok(LookupOutcome {
                mmproj: Some((f.name(), p.to_text())),
                ..LookupOutcome::default()
            });
        }
        // A GGUF file alone gives the KV cache its shape (the first file of a split
        // set holds the metadata).
        if let (None, Header::Gguf(h)) = (&config, &header) {
            config = gguf_read(&f.name(), h);
        }
        read.push(header.into_tensors());
    }
    let summary = TensorSummary::merge_all(read)
        .map_err(|e| e.to_string())?
        .ok_or("no file was given")?;
    Ok(LookupOutcome {
        config,
        tensors: Some(TensorsRead {
            files: files.iter().map(File::name).collect(),
            summary,
        }),
        ..LookupOutcome::default()
    })
}
