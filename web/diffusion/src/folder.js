// A folder dropped on the page's pipeline section, walked: the files a diffusers
// pipeline's answer reads (`model_index.json` and each `config.json`) within two
// folders of what was dropped, as [path, File] pairs. A wasm-bindgen snippet of the
// diffusion module: the entries API (webkitGetAsEntry, readEntries) is callback-based.
// Bounded: at most `most` entries are looked at in all, each folder's listing included.

function listing(dir) {
  const reader = dir.createReader();
  const all = [];
  return new Promise((resolve, reject) => {
    const next = () => reader.readEntries((batch) => {
      if (batch.length === 0) { resolve(all); return; }
      all.push(...batch);
      next();
    }, reject);
    next();
  });
}

function file(entry) {
  return new Promise((resolve, reject) => entry.file(resolve, reject));
}

export async function walk(entries, most) {
  const out = [];
  let seen = 0;
  const visit = async (entry, depth) => {
    seen += 1;
    if (seen > most) throw new Error(`more than ${most} files and folders dropped`);
    if (entry.isFile) {
      if (entry.name === "model_index.json" || entry.name === "config.json") {
        out.push([entry.fullPath, await file(entry)]);
      }
    } else if (entry.isDirectory && depth < 3) {
      for (const child of await listing(entry)) await visit(child, depth + 1);
    }
  };
  for (const e of entries) await visit(e, 0);
  return out;
}
