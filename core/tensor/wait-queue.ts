// The queue of a TensorPool's waiting allocations: every waiter in arrival order, and each
// claimant's (a PoolShare's) own waiters in arrival order. Joining, leaving and asking whether a
// waiter is still queued cost O(1), and choosing who goes next costs O(claimants waiting): a peer
// that queues tens of thousands of allocations (one frame may announce 16,384 tensors) must not
// make each later join, release or cancel walk all of them.

/** Whose allocation it is (a PoolShare): whether it may have `bytes` more now. */
export interface Claimant {
  admits(bytes: number): boolean;
}

/** One waiting allocation. */
export interface QueuedWaiter {
  readonly bytes: number;
  readonly share: Claimant | undefined;
}

interface Node<W> {
  readonly waiter: W;
  /** Arrival number: earlier waiters have smaller ones. */
  readonly seq: number;
  prev: Node<W> | undefined;
  next: Node<W> | undefined;
  sharePrev: Node<W> | undefined;
  shareNext: Node<W> | undefined;
}

interface Line<W> { head: Node<W>; tail: Node<W> }

export class WaitQueue<W extends QueuedWaiter> {
  readonly #nodes = new Map<W, Node<W>>();
  #head: Node<W> | undefined;
  #tail: Node<W> | undefined;
  /** Each claimant's waiters (those without a share under `undefined`). */
  readonly #lines = new Map<Claimant | undefined, Line<W>>();
  #seq = 0;

  get size(): number { return this.#nodes.size; }

  has(waiter: W): boolean { return this.#nodes.has(waiter); }

  push(waiter: W): void {
    if (this.#nodes.has(waiter)) return;
    const node: Node<W> = { waiter, seq: this.#seq++, prev: this.#tail, next: undefined, sharePrev: undefined, shareNext: undefined };
    if (this.#tail === undefined) this.#head = node;
    else this.#tail.next = node;
    this.#tail = node;
    const line = this.#lines.get(waiter.share);
    if (line === undefined) {
      this.#lines.set(waiter.share, { head: node, tail: node });
    } else {
      node.sharePrev = line.tail;
      line.tail.shareNext = node;
      line.tail = node;
    }
    this.#nodes.set(waiter, node);
  }

  /** Takes `waiter` out; false when it was not queued. */
  delete(waiter: W): boolean {
    const node = this.#nodes.get(waiter);
    if (node === undefined) return false;
    this.#nodes.delete(waiter);
    if (node.prev === undefined) this.#head = node.next;
    else node.prev.next = node.next;
    if (node.next === undefined) this.#tail = node.prev;
    else node.next.prev = node.prev;
    const line = this.#lines.get(waiter.share)!;
    if (node.sharePrev === undefined) line.head = node.shareNext!;
    else node.sharePrev.shareNext = node.shareNext;
    if (node.shareNext === undefined) line.tail = node.sharePrev!;
    else node.shareNext.sharePrev = node.sharePrev;
    if (node.sharePrev === undefined && node.shareNext === undefined) this.#lines.delete(waiter.share);
    return true;
  }

  /** Whose turn it is: the earliest waiter among the first waiters of claimants under their
   *  share (or with none), else the earliest of all; undefined when empty. Each claimant's own
   *  waiters go in their order. */
  next(): W | undefined {
    let pick: Node<W> | undefined;
    for (const [share, line] of this.#lines) {
      const first = line.head;
      if ((share === undefined || share.admits(first.waiter.bytes)) && (pick === undefined || first.seq < pick.seq)) pick = first;
    }
    return (pick ?? this.#head)?.waiter;
  }

  /** Every waiter, in arrival order (a copy: the caller may take them out as it goes). */
  all(): W[] {
    const list: W[] = [];
    for (let node = this.#head; node !== undefined; node = node.next) list.push(node.waiter);
    return list;
  }
}
