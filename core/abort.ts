// One 'abort' listener per AbortSignal, however many operations wait on it. EventTarget looks
// through a signal's listeners on every add, so a listener per operation makes n operations under
// one signal cost O(n²) to start: 16,384 listeners took 765 ms to add on the CPU box, and a
// connection's receives, or a caller's calls under one AbortController, are that many.

/** The callbacks waiting on each signal. A signal's waiters are the signal's: weakly keyed, gone
 *  with it, shared by every worker, runtime and call that uses it. */
const waiting = new WeakMap<AbortSignal, Set<() => void>>();

/** Runs `fn` once when `signal` aborts (check `signal.aborted` first: an aborted signal never
 *  fires again); returns what takes it back. Adding and taking back cost O(1). A callback that
 *  throws does not keep the others from running: its error is rethrown in a microtask of its own,
 *  as EventTarget reports a listener's. */
export function whenAborted(signal: AbortSignal, fn: () => void): () => void {
  const callbacks = callbacksOf(signal);
  callbacks.add(fn);
  return () => { callbacks.delete(fn); };
}

/** The callbacks of `signal`, with its one listener added the first time. */
function callbacksOf(signal: AbortSignal): Set<() => void> {
  const known = waiting.get(signal);
  if (known !== undefined) return known;
  const callbacks = new Set<() => void>();
  waiting.set(signal, callbacks);
  signal.addEventListener('abort', () => {
    waiting.delete(signal);
    // A callback may take back one not yet run (a Set skips entries deleted during iteration).
    for (const callback of callbacks) {
      try {
        callback();
      } catch (error) {
        queueMicrotask(() => { throw error; });
      }
    }
    callbacks.clear();
  }, { once: true });
  return callbacks;
}
