// Collections of live objects kept as a linked list (LiveList) or as an array behind a Map of small
// integers (IdTable), instead of a Set or a Map of the objects, for long-lived owners (a pool, a
// connection) whose members come and go with every call. Measured with Node 20's V8
// (bench/results/gc-hash-churn-cpu.txt): once the process holds 64 MiB or more of ArrayBuffers (a
// host tensor pool of that size is one), a long-lived Set or Map of young objects kept what passed
// through it alive through every scavenge, to be promoted and freed by the next full collection:
// with 64 tensor calls of 4 KiB in flight the server spent a fifth of its time in GC, and did 41-49k
// calls/s against 66-71k without. Adding and removing cost O(1); a removed member keeps nothing
// alive (its links are cleared).

/** Where a member sits in its list: what `remove` takes. */
export interface LiveNode<T> {
  readonly value: T;
  /** @internal */ prev: LiveNode<T> | undefined;
  /** @internal */ next: LiveNode<T> | undefined;
  /** @internal */ list: LiveList<T> | undefined;
}

/** An insertion-ordered collection of live members. */
export class LiveList<T> {
  #head: LiveNode<T> | undefined;
  #tail: LiveNode<T> | undefined;
  #size = 0;

  get size(): number { return this.#size; }

  /** Adds `value` at the end; the node removes it again. */
  add(value: T): LiveNode<T> {
    const node: LiveNode<T> = { value, prev: this.#tail, next: undefined, list: this };
    if (this.#tail === undefined) this.#head = node;
    else this.#tail.next = node;
    this.#tail = node;
    this.#size += 1;
    return node;
  }

  /** Removes the member at `node`; a node removed already (or of another list) is left alone. */
  remove(node: LiveNode<T>): void {
    if (node.list !== this) return;
    if (node.prev === undefined) this.#head = node.next;
    else node.prev.next = node.next;
    if (node.next === undefined) this.#tail = node.prev;
    else node.next.prev = node.prev;
    node.prev = undefined;
    node.next = undefined;
    node.list = undefined;
    this.#size -= 1;
  }

  /** Removes every member, oldest first, calling `fn` with each while it is still a member: one
   *  that an earlier call removed is skipped; one added meanwhile is left in the list. */
  drain(fn: (value: T) => void): void {
    const nodes: Array<LiveNode<T>> = [];
    for (let node = this.#head; node !== undefined; node = node.next) nodes.push(node);
    for (const node of nodes) {
      if (node.list !== this) continue;
      this.remove(node);
      fn(node.value);
    }
  }

  /** The members now, oldest first (a copy: removing members while going through it is fine). */
  values(): T[] {
    const out: T[] = [];
    for (let node = this.#head; node !== undefined; node = node.next) out.push(node.value);
    return out;
  }
}

/** A Map from integer ids (call ids, transfer ids) to live objects, for the same owners and the
 *  same reason as LiveList: the V8 Map inside holds only small integers (an id and its slot), the
 *  objects sit in a plain array, which a scavenge treats as it should. Ids are expected within
 *  V8's small-integer range (31 bits); larger ones still work, only without the benefit.
 *  Iteration goes in the order the ids were added, as a Map's. */
export class IdTable<V> {
  readonly #slots = new Map<number, number>();
  readonly #values: Array<V | undefined> = [];
  readonly #free: number[] = [];

  get size(): number { return this.#slots.size; }

  has(id: number): boolean { return this.#slots.has(id); }

  get(id: number): V | undefined {
    const slot = this.#slots.get(id);
    return slot === undefined ? undefined : this.#values[slot];
  }

  set(id: number, value: V): this {
    const slot = this.#slots.get(id);
    if (slot !== undefined) {
      this.#values[slot] = value;
      return this;
    }
    const fresh = this.#free.pop() ?? this.#values.length;
    this.#slots.set(id, fresh);
    this.#values[fresh] = value;
    return this;
  }

  delete(id: number): boolean {
    const slot = this.#slots.get(id);
    if (slot === undefined) return false;
    this.#slots.delete(id);
    this.#values[slot] = undefined;
    this.#free.push(slot);
    return true;
  }

  clear(): void {
    this.#slots.clear();
    this.#values.length = 0;
    this.#free.length = 0;
  }

  /** The ids now, in the order they were added (a copy). */
  keys(): number[] { return [...this.#slots.keys()]; }

  /** The id added first of those present, if any. */
  firstId(): number | undefined { return this.#slots.keys().next().value; }

  /** [id, value] pairs now, in the order the ids were added (a copy). */
  entries(): Array<[number, V]> {
    const out: Array<[number, V]> = [];
    for (const [id, slot] of this.#slots) out.push([id, this.#values[slot]!]);
    return out;
  }

  /** The values now, in the order their ids were added (a copy: changing the table while going
   *  through it is fine). */
  values(): V[] {
    const out: V[] = [];
    for (const slot of this.#slots.values()) out.push(this.#values[slot]!);
    return out;
  }
}
