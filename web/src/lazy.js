// Loads the page's lookup module (web/lookup: file and Hub readers) on first use, once.
// A wasm-bindgen snippet of the dimensioner: dynamic import() is the one way to load a
// second module lazily; its URL (a content-hashed folder) comes from the build.
let loading = null;

export function load_lookup(url) {
  if (loading === null) {
    loading = import(url).then(async (m) => {
      const init = m["default"];
      await init();
      return m;
    });
    // A failed load (offline) may be tried again.
    loading.catch(() => { loading = null; });
  }
  return loading;
}

// Cancels the lookup under way (no lookup runs before the module is loaded). Deferred
// to a task of its own: a click while the module is still loading must reach the
// lookup that the page's waiting call starts once it is loaded (in a microtask), not
// come before it.
export function cancel_lookup() {
  if (loading !== null) {
    loading.then((m) => setTimeout(() => m.cancel(), 0), () => {});
  }
}

// Loads the page's engine module (web/engine: the serving engines' rules) once; its
// functions are then called synchronously. A failed load may be tried again.
let engine = null;

export function load_engine(url) {
  if (engine === null) {
    engine = import(url).then(async (m) => {
      await m["default"]();
      return m;
    });
    engine.catch(() => { engine = null; });
  }
  return engine;
}
