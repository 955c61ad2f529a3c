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

/** `host` as an address Endpoint.connect takes without a lookup: an address as it is, a name
 *  resolved to its IPv4 address. Rejects INVALID_ARGUMENT for a name that does not resolve,
 *  UNAVAILABLE when the lookup takes longer than `timeoutMs` (it goes on in its thread, its
 *  answer unused). */
export async function resolveHost(host: string, timeoutMs: number): Promise<string> {
  if (isIP(host) !== 0) return host;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new GdrpcError(Code.UNAVAILABLE, `no address for host ${host} within ${timeoutMs} ms (its name servers did not answer)`)), timeoutMs);
  });
  try {
    return await Promise.race([hostLookup.ipv4(host).catch((error: NodeJS.ErrnoException) => {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `cannot resolve host ${host}: ${error.code ?? error.message}`);
    }), late]);
  } finally {
    clearTimeout(timer);
  }
}
