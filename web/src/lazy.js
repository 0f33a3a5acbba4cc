// Loads the page's lazily loaded modules — the lookup module (web/lookup: file and Hub
// readers) on first use, the engine module (web/engine: the serving engines' rules)
// once the first screen is up, the training module (web/training: the training
// estimator) when a training run is first asked about, the diffusion module
// (web/diffusion) when a pipeline is first read — each once. A wasm-bindgen snippet of the dimensioner:
// dynamic import() is the one way to load a second module lazily; their URLs (content-
// hashed folders) come from the build.
const modules = new Map();

// A load the page started before its first module (the engine module: dist/index.html's
// inline script, written by scripts/build-web.sh) is taken over, once.
function load(url) {
  if (!modules.has(url)) {
    const early = globalThis.gpumemEarly;
    const started = early && early[url];
    if (started) delete early[url];
    const loading = started || import(url).then(async (m) => {
      await m["default"]();
      return m;
    });
    // A failed load (offline) may be tried again.
    loading.catch(() => { modules.delete(url); });
    modules.set(url, loading);
  }
  return modules.get(url);
}

let lookup = null;

export function load_lookup(url) {
  lookup = load(url);
  return lookup;
}

// Cancels the lookup under way (no lookup runs before the module is loaded). Deferred
// to a task of its own: a click while the module is still loading must reach the
// lookup that the page's waiting call starts once it is loaded (in a microtask), not
// come before it.
export function cancel_lookup() {
  if (lookup !== null) {
    lookup.then((m) => setTimeout(() => m.cancel(), 0), () => {});
  }
}

// The engine module's functions are then called synchronously (web/src/rules.rs).
export function load_engine(url) {
  return load(url);
}

// The training module's functions too (web/src/training.rs).
export function load_training(url) {
  return load(url);
}

// And the diffusion module's (web/src/diffusion.rs), loaded when a pipeline is first read.
export function load_diffusion(url) {
  return load(url);
}
