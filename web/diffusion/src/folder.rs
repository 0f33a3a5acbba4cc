//! A pipeline's folder from this browser's disk, picked or dropped: the same files
//! `gpumem-agent estimate --diffusers DIR` reads from a folder — `model_index.json`,
//! then the `config.json` of each component with weights — and nothing else (no
//! weights are opened, nothing is uploaded). Which files those are is decided here
//! from their paths ([`index_of`], [`config_of`]), so a picked folder, a dropped one
//! and a folder dropped with its parent read alike.

use gpumem_core::diffusion::components_of;
use gpumem_proto::diffusion::{MAX_FILE_BYTES, PipelineFiles};
use js_sys::{Array, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// The most files (and, for a drop, folders) looked at: a pipeline has a few dozen.
pub const MAX_FOLDER_ENTRIES: usize = 100_000;

/// The pipeline's index file.
const INDEX_FILE: &str = "model_index.json";

#[wasm_bindgen(module = "/src/folder.js")]
extern "C" {
    #[wasm_bindgen(catch)]
    async fn walk(entries: Array, most: u32) -> Result<JsValue, JsValue>;
}

/// A path as the browser gives it (`FLUX.1-dev/unet/config.json`, or `/FLUX.1-dev/…`
/// for a dropped entry), without its leading slash.
fn clean(path: &str) -> &str {
    path.trim_start_matches('/')
}

/// The shallowest `model_index.json` among `paths`: its position and its folder
/// (`""` or `NAME/`, ending in a slash), the pipeline's root.
pub fn index_of(paths: &[String]) -> Result<(usize, String), String> {
    paths
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let p = clean(p);
            let root = p.strip_suffix(INDEX_FILE)?;
            (root.is_empty() || root.ends_with('/')).then(|| (i, root.to_string()))
        })
        .min_by_key(|(_, root)| root.matches('/').count())
        .ok_or_else(|| {
            let some: Vec<&str> = paths.iter().take(3).map(|p| clean(p)).collect();
            format!(
                "no {INDEX_FILE} among the {} file(s) given{}: pick or drop the pipeline's folder",
                paths.len(),
                if some.is_empty() {
                    String::new()
                } else {
                    format!(" ({}…)", some.join(", "))
                }
            )
        })
}

/// The position of component `name`'s `config.json` under `root`, if given.
pub fn config_of(paths: &[String], root: &str, name: &str) -> Option<usize> {
    let want = format!("{root}{name}/config.json");
    paths.iter().position(|p| clean(p) == want)
}

/// A file's text, refused in words when over the bound (its size is read first, so a
/// large file is never read whole).
async fn text_of(file: &JsValue, path: &str) -> Result<String, String> {
    let size = Reflect::get(file, &"size".into())
        .ok()
        .and_then(|s| s.as_f64())
        .ok_or_else(|| format!("{path}: not a file"))?;
    if size > MAX_FILE_BYTES as f64 {
        return Err(format!("{path} is over {} MiB", MAX_FILE_BYTES >> 20));
    }
    let promise: Promise = Reflect::get(file, &"text".into())
        .ok()
        .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
        .and_then(|f| f.call0(file).ok())
        .and_then(|p| p.dyn_into().ok())
        .ok_or_else(|| format!("{path}: cannot be read"))?;
    JsFuture::from(promise)
        .await
        .ok()
        .and_then(|t| t.as_string())
        .ok_or_else(|| format!("{path}: cannot be read as text"))
}

/// The pipeline's files among `(path, File)` pairs.
async fn pipeline(found: Vec<(String, JsValue)>, say: &dyn Fn(&str)) -> Result<String, String> {
    let paths: Vec<String> = found.iter().map(|(p, _)| p.clone()).collect();
    let (at, root) = index_of(&paths)?;
    let index = text_of(&found[at].1, clean(&paths[at])).await?;
    // The core names the components with weights (bounded in count) and refuses a
    // name that is not one plain folder name.
    let (_, named, _) = components_of(&index).map_err(|e| e.to_string())?;
    say(&format!(
        "Reading the config.json of {} component(s)…",
        named.len()
    ));
    let mut configs = Vec::new();
    for (name, _) in &named {
        // A component without its config is named by the core's reader, as the
        // agent's folder without it is.
        if let Some(i) = config_of(&paths, &root, name) {
            configs.push((name.clone(), text_of(&found[i].1, clean(&paths[i])).await?));
        }
    }
    let folder = root.trim_end_matches('/');
    let source = if folder.is_empty() {
        "the files given (this browser's disk)".to_string()
    } else {
        format!("{folder} (this browser's disk)")
    };
    say(&format!(
        "Read {INDEX_FILE} and {} config.json file(s) from {source}.",
        configs.len()
    ));
    Ok(gpumem_proto::diffusion::write_files(&PipelineFiles {
        source,
        index,
        configs,
    }))
}

fn progress_of(progress: js_sys::Function) -> impl Fn(&str) {
    move |t: &str| {
        let _ = progress.call1(&JsValue::NULL, &JsValue::from(t));
    }
}

/// A picked folder (`list`: an `<input webkitdirectory>`'s `FileList`, each file
/// with its `webkitRelativePath`): a [`PipelineFiles`] document, or why not in words.
#[wasm_bindgen]
pub async fn folder_files(list: JsValue, progress: js_sys::Function) -> Result<String, JsValue> {
    let length = Reflect::get(&list, &"length".into())
        .ok()
        .and_then(|l| l.as_f64())
        .ok_or("not a list of files")?;
    if length > MAX_FOLDER_ENTRIES as f64 {
        return Err(format!("more than {MAX_FOLDER_ENTRIES} files picked").into());
    }
    let mut found = Vec::new();
    for i in 0..length as u32 {
        let Ok(file) = Reflect::get(&list, &i.into()) else {
            continue;
        };
        let path = Reflect::get(&file, &"webkitRelativePath".into())
            .ok()
            .and_then(|p| p.as_string())
            .filter(|p| !p.is_empty())
            .or_else(|| Reflect::get(&file, &"name".into()).ok()?.as_string());
        if let Some(path) = path {
            found.push((path, file));
        }
    }
    Ok(pipeline(found, &progress_of(progress)).await?)
}

/// A dropped folder (`entries`: the drop's `webkitGetAsEntry()` entries, taken while
/// the drop event ran): a [`PipelineFiles`] document, or why not in words.
#[wasm_bindgen]
pub async fn folder_entries(entries: Array, progress: js_sys::Function) -> Result<String, JsValue> {
    let say = progress_of(progress);
    say("Listing the dropped folder…");
    let walked = walk(entries, MAX_FOLDER_ENTRIES as u32)
        .await
        .map_err(|e| {
            js_sys::Error::from(e)
                .message()
                .as_string()
                .unwrap_or_else(|| "the drop could not be read".into())
        })?;
    let found = Array::from(&walked)
        .iter()
        .filter_map(|pair| {
            let pair = Array::from(&pair);
            Some((pair.get(0).as_string()?, pair.get(1)))
        })
        .collect();
    Ok(pipeline(found, &say).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    /// A picked folder's paths name the folder; a dropped one's start with a slash;
    /// files dropped loose have no folder; the shallowest index is the pipeline's.
    #[test]
    fn the_index_and_configs_are_found_by_path() {
        let picked = paths(&[
            "FLUX.1-dev/transformer/diffusion_pytorch_model.safetensors",
            "FLUX.1-dev/transformer/config.json",
            "FLUX.1-dev/model_index.json",
            "FLUX.1-dev/vae/config.json",
        ]);
        assert_eq!(index_of(&picked).unwrap(), (2, "FLUX.1-dev/".into()));
        assert_eq!(config_of(&picked, "FLUX.1-dev/", "transformer"), Some(1));
        assert_eq!(config_of(&picked, "FLUX.1-dev/", "vae"), Some(3));
        assert_eq!(config_of(&picked, "FLUX.1-dev/", "text_encoder"), None);

        let dropped = paths(&[
            "/models/sdxl/unet/config.json",
            "/models/sdxl/model_index.json",
        ]);
        assert_eq!(index_of(&dropped).unwrap(), (1, "models/sdxl/".into()));
        assert_eq!(config_of(&dropped, "models/sdxl/", "unet"), Some(0));

        let loose = paths(&["/unet/config.json", "/model_index.json"]);
        assert_eq!(index_of(&loose).unwrap(), (1, String::new()));
        assert_eq!(config_of(&loose, "", "unet"), Some(0));

        // A nested copy does not win over the pipeline's own index.
        let nested = paths(&["p/old/model_index.json", "p/model_index.json"]);
        assert_eq!(index_of(&nested).unwrap(), (1, "p/".into()));
    }

    /// No index, or a file merely ending in its name, is refused in words.
    #[test]
    fn without_an_index_it_says_so() {
        let e = index_of(&paths(&["a/unet/config.json", "a/my_model_index.json"])).unwrap_err();
        assert!(e.contains("model_index.json"), "{e}");
        assert!(index_of(&[]).is_err());
    }
}
