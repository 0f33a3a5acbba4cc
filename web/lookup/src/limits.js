// Every request of the page's Hub lookup ends: a timer aborts it `ms` milliseconds
// after it was sent, and the Cancel button aborts every request of the lookup under
// way. The abort's reason names which, and `fetch` (or a read of the body) rejects
// with it. Plain JavaScript, so the lookup module's wasm carries no AbortController
// bindings (its size is budgeted).
let lookup = new AbortController();

export function begin() {
  lookup = new AbortController();
}

export function cancel() {
  lookup.abort(new DOMException("the lookup was cancelled", "AbortError"));
}

export function fetch_limited(request, ms) {
  const own = new AbortController();
  const stop = () => own.abort(lookup.signal.reason);
  if (lookup.signal.aborted) {
    stop();
  } else {
    lookup.signal.addEventListener("abort", stop, { once: true });
  }
  setTimeout(() => own.abort(new DOMException(
    `no complete answer within ${Math.round(ms / 1000)} s (timed out): the Hub is slow or unreachable; try again`,
    "TimeoutError")), ms);
  return fetch(request, { signal: own.signal });
}
