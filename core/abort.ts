// One 'abort' listener per AbortSignal, however many operations wait on it. EventTarget looks
// through a signal's listeners on every add, so a listener per operation makes n operations under
// one signal cost O(n²) to start: 16,384 listeners took 765 ms to add on the CPU box, and a
// connection's receives, or a caller's calls under one AbortController, are that many.
import { LiveList } from './live-list.ts';

/** The callbacks waiting on each signal. A signal's waiters are the signal's: weakly keyed, gone
 *  with it, shared by every worker, runtime and call that uses it. */
const waiting = new WeakMap<AbortSignal, LiveList<() => void>>();

/** Runs `fn` once when `signal` aborts (check `signal.aborted` first: an aborted signal never
 *  fires again); returns what takes it back. Adding and taking back cost O(1). A callback that
 *  throws does not keep the others from running: its error is rethrown in a microtask of its own,
 *  as EventTarget reports a listener's. */
export function whenAborted(signal: AbortSignal, fn: () => void): () => void {
  const callbacks = callbacksOf(signal);
  const node = callbacks.add(fn);
  return () => { callbacks.remove(node); };
}

/** The callbacks of `signal`, with its one listener added the first time (a list: a connection's
 *  signal lives as long as the connection, its callbacks one receive each; core/live-list.ts). */
function callbacksOf(signal: AbortSignal): LiveList<() => void> {
  const known = waiting.get(signal);
  if (known !== undefined) return known;
  const callbacks = new LiveList<() => void>();
  waiting.set(signal, callbacks);
  signal.addEventListener('abort', () => {
    waiting.delete(signal);
    // A callback may take back one not yet run: each runs only while it is still a member.
    callbacks.drain((callback) => {
      try {
        callback();
      } catch (error) {
        queueMicrotask(() => { throw error; });
      }
    });
  }, { once: true });
  return callbacks;
}
