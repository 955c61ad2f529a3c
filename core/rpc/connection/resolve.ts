// Host names of the servers a client dials, resolved off the JavaScript thread. Endpoint.connect
// would resolve a name with a blocking getaddrinfo, and a name can take as long as its name
// servers like: a server's result may name owners (@remote handles) on any host it chooses.
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { Code, GdrpcError } from '../../errors.ts';

/** The name lookup (a seam for tests): the IPv4 address of `host`, from libuv's thread pool. */
export const hostLookup = {
  async ipv4(host: string): Promise<string> {
    return (await lookup(host, { family: 4 })).address;
  },
};

/** Lookups in flight at once, process-wide. libuv's pool has 4 threads (unless
 *  UV_THREADPOOL_SIZE says more) and also does the file system, crypto and zlib work: a result
 *  naming hosts whose name servers never answer occupies at most these, each until its resolver
 *  gives up. */
export const LOOKUPS_AT_ONCE = 2;
let lookupsRunning = 0;
const lookupQueue: Array<() => void> = [];

/** A lookup's place: taken at once (undefined) while fewer than LOOKUPS_AT_ONCE run, else a
 *  promise that resolves when a finished lookup hands its place over. */
function lookupPlace(): { waiting: Promise<void>; wake: () => void } | undefined {
  if (lookupsRunning < LOOKUPS_AT_ONCE) {
    lookupsRunning += 1;
    return undefined;
  }
  let wake!: () => void;
  const waiting = new Promise<void>((resolve) => { wake = resolve; });
  lookupQueue.push(wake);
  return { waiting, wake };
}

/** A place given back: to the next waiting lookup, if any. */
function releasePlace(): void {
  const next = lookupQueue.shift();
  if (next !== undefined) next();
  else lookupsRunning -= 1;
}

/** Answers that say the name has no address; anything else (a name server that failed or did
 *  not answer) may pass, and is UNAVAILABLE. */
const NO_SUCH_NAME = new Set(['ENOTFOUND', 'ENODATA', 'EAI_NONAME', 'EAI_NODATA']);

/** `host` as an address Endpoint.connect takes without a lookup: an address as it is, a name
 *  resolved to its IPv4 address. Rejects INVALID_ARGUMENT for a name that has no address,
 *  UNAVAILABLE when the lookup fails otherwise or takes longer than `timeoutMs` (waiting for a
 *  turn included; a lookup under way goes on in its thread, its answer unused), CANCELLED when
 *  `signal` aborts. */
export async function resolveHost(host: string, timeoutMs: number, signal?: AbortSignal): Promise<string> {
  if (isIP(host) !== 0) return host;
  if (signal?.aborted === true) throw GdrpcError.from(signal.reason, Code.CANCELLED);
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const stop = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new GdrpcError(Code.UNAVAILABLE, `no address for host ${host} within ${timeoutMs} ms (its name servers did not answer)`)), timeoutMs);
    if (signal === undefined) return;
    onAbort = () => reject(GdrpcError.from(signal.reason, Code.CANCELLED));
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
  const place = lookupPlace();
  let placed = place === undefined;
  try {
    if (place !== undefined) {
      await Promise.race([place.waiting, stop]);
      placed = true;
    }
    const looked = Promise.resolve().then(() => hostLookup.ipv4(host)).catch((error: NodeJS.ErrnoException) => {
      const code = error.code ?? error.message;
      throw new GdrpcError(NO_SUCH_NAME.has(code) ? Code.INVALID_ARGUMENT : Code.UNAVAILABLE, `cannot resolve host ${host}: ${code}`);
    });
    // The lookup's thread stays taken until it answers, whoever waits for it.
    void looked.catch(() => {}).finally(releasePlace);
    return await Promise.race([looked, stop]);
  } finally {
    clearTimeout(timer);
    if (onAbort !== undefined) signal!.removeEventListener('abort', onAbort);
    if (!placed && place !== undefined) {
      const at = lookupQueue.indexOf(place.wake);
      if (at >= 0) lookupQueue.splice(at, 1);
      // Its place came as it gave up: the next one's.
      else releasePlace();
    }
  }
}
