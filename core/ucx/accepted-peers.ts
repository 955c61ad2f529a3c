// The endpoints a worker's listeners accepted, by their peer's address, until each ends ('close'),
// closing or not, and whether its listener still listens or not: an endpoint of the same worker
// whose local address is among them is connected to its own worker (Endpoint.close says why that
// matters).
/** What is kept of an accepted endpoint. */
export interface AcceptedEndpoint { readonly peer: string; once(event: 'close', fn: () => void): unknown }

export class AcceptedPeers {
  readonly #byPeer = new Map<string, Set<AcceptedEndpoint>>();

  /** A listener accepted `endpoint`: known until it ends. */
  add(endpoint: AcceptedEndpoint): void {
    let same = this.#byPeer.get(endpoint.peer);
    if (same === undefined) this.#byPeer.set(endpoint.peer, same = new Set());
    const set = same;
    set.add(endpoint);
    endpoint.once('close', () => {
      set.delete(endpoint);
      if (set.size === 0 && this.#byPeer.get(endpoint.peer) === set) this.#byPeer.delete(endpoint.peer);
    });
  }

  /** Whether an endpoint accepted from `address` ("host:port") has not ended. */
  has(address: string): boolean {
    return this.#byPeer.has(address);
  }
}
