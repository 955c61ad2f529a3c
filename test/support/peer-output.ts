// What a peer prints, kept as it arrives: the whole text, the complete lines, and waiters woken
// on each line or on the peer's end, so that no one polls.
import type { Readable } from 'node:stream';

/** One stream of a peer (stdout or stderr), collected into text and lines. */
export class PeerOutput {
  #text = '';
  #partial = '';
  #closed = false;
  readonly #lines: string[] = [];
  readonly #waiters = new Set<() => void>();

  /** Collects `stream`; `onLine` sees each complete line first (the ready line is found there). */
  constructor(stream: Readable, onLine: (line: string) => void = () => {}, echo?: NodeJS.WritableStream) {
    stream.setEncoding('utf8').on('data', (chunk: string) => {
      echo?.write(chunk);
      this.#text += chunk;
      const parts = (this.#partial + chunk).split('\n');
      this.#partial = parts.pop()!;
      for (const line of parts) { this.#lines.push(line); onLine(line); }
      this.#wake();
    });
    stream.on('end', () => {
      if (this.#partial !== '') { this.#lines.push(this.#partial); onLine(this.#partial); this.#partial = ''; }
      this.close();
    });
  }

  /** Everything printed so far. */
  text(): string { return this.#text; }

  /** The complete lines printed so far. */
  get lines(): readonly string[] { return this.#lines; }

  /** The last `chars` characters, for error messages. */
  tail(chars = 2000): string { return this.#text.length > chars ? `...${this.#text.slice(-chars)}` : this.#text; }

  /** Marks the stream ended (the peer exited): waiters fail instead of waiting out their time. */
  close(): void { this.#closed = true; this.#wake(); }

  /** The first line from index `from` on that matches `pattern`; fails when the peer exits first
   *  or after `timeoutMs`. `what` names the peer in the error. */
  async waitFor(pattern: RegExp, what: string, timeoutMs: number, from = 0): Promise<string> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const line = this.#lines.slice(from).find((l) => pattern.test(l));
      if (line !== undefined) return line;
      if (this.#closed) throw new Error(`${what} exited before printing ${pattern}; it printed:\n${this.tail()}`);
      const left = until - Date.now();
      if (left <= 0) throw new Error(`${what} did not print ${pattern} within ${timeoutMs} ms; it printed:\n${this.tail()}`);
      await this.#changed(left);
    }
  }

  #changed(limitMs: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => { clearTimeout(timer); this.#waiters.delete(done); resolve(); };
      const timer = setTimeout(done, limitMs);
      this.#waiters.add(done);
    });
  }

  #wake(): void { for (const waiter of [...this.#waiters]) waiter(); }
}
