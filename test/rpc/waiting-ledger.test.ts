// The runtime's count of what its connections hold for peers (core/rpc/runtime/waiting.ts), past
// its limit: answers waiting for room go before connections, in the order the peers last took
// something, and a holder whose peer has taken nothing for SHED_IDLE_MS is closed in its turn
// before a later holder loses any answer.
import { describe, expect, it } from 'vitest';
import { SHED_IDLE_MS, WaitingLedger, type WaitingHolder } from '../../core/rpc/runtime/waiting.ts';

/** A holder of `messages` bytes and `answers` bytes of answers it can drop; records what befell it. */
function holder(ledger: WaitingLedger, name: string, events: string[], messages: number, answers: number): WaitingHolder & { answers: number } {
  const h = {
    answers,
    relieve: () => {
      if (h.answers === 0) return;
      events.push(`${name} answers dropped`);
      h.answers = 0;
      ledger.set(h, messages);
    },
    shed: () => { events.push(`${name} closed`); },
  };
  return h;
}

const settle = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 0));

describe('WaitingLedger past its limit', () => {
  it("closes a peer that holds messages alone and has taken nothing for a second before an active peer's answers are dropped", async () => {
    const ledger = new WaitingLedger(1000);
    const events: string[] = [];
    const idle = holder(ledger, 'idle', events, 600, 0);
    ledger.set(idle, 600);
    await new Promise((resolve) => setTimeout(resolve, SHED_IDLE_MS + 100));
    const active = holder(ledger, 'active', events, 100, 500);
    ledger.set(active, 600, true);
    await settle();
    expect(events).toEqual(['idle closed']);
  });

  it("drops an active peer's answers rather than close it, and closes only if that was not enough", async () => {
    const ledger = new WaitingLedger(1000);
    const events: string[] = [];
    const a = holder(ledger, 'a', events, 300, 500);
    const b = holder(ledger, 'b', events, 300, 500);
    ledger.set(a, 800, true);
    ledger.set(b, 800, true);
    await settle();
    // a went longest without taking: its answers go first; still over (300 + 800), b's go too.
    expect(events).toEqual(['a answers dropped', 'b answers dropped']);
    expect(ledger.total).toBe(600);
    const c = holder(ledger, 'c', events, 900, 0);
    ledger.set(c, 900, true);
    await settle();
    // Nothing left to drop: closed in order, a first.
    expect(events.slice(2)).toEqual(['a closed', 'b closed']);
  });
});
