// The one line a peer program prints when it is ready: `{"ready": <info>}` on stdout, where info
// is what the test needs from it (its port, its pid, a secret). Peers import only this file, so
// that announcing costs them nothing beyond a stdout write.

const PREFIX = '{"ready":';

/** Prints the ready line with `info`; call it once, when the peer can take work. */
export function announceReady(info: Record<string, unknown> = {}): void {
  process.stdout.write(`${JSON.stringify({ ready: info })}\n`);
}

/** The info of a ready line, or undefined for any other line; a malformed ready line throws. */
export function readyInfo(line: string): Record<string, unknown> | undefined {
  if (!line.startsWith(PREFIX)) return undefined;
  const parsed = JSON.parse(line) as { ready?: unknown };
  if (typeof parsed.ready !== 'object' || parsed.ready === null) throw new Error(`malformed ready line: ${line}`);
  return parsed.ready as Record<string, unknown>;
}
