// A stream's flow control at its receiving end (core/rpc/call/stream.ts ReceiveWindow), as both a
// server reading a client stream and a client reading a server stream keep it.
import { describe, expect, it } from 'vitest';
import { ReceiveWindow } from '../../core/rpc/call/stream.ts';

describe('ReceiveWindow', () => {
  it('lets the window arrive, refuses the item past it, and names both counts', () => {
    const window = new ReceiveWindow(4);
    for (let i = 0; i < 4; i += 1) expect(window.arrived()).toBeUndefined();
    expect(window.arrived()).toBe('5 stream items where the window allowed 4 (win + CREDIT)');
  });

  it('grants half a window back each time that many were taken, and lets that many more arrive', () => {
    const window = new ReceiveWindow(4);
    for (let i = 0; i < 4; i += 1) window.arrived();
    expect([window.took(), window.took(), window.took(), window.took()]).toEqual([0, 2, 0, 2]);
    for (let i = 0; i < 4; i += 1) expect(window.arrived()).toBeUndefined();
    expect(window.arrived()).toMatch(/^9 stream items where the window allowed 8/);
  });

  it('grants one at a time for a window of one', () => {
    const window = new ReceiveWindow(1);
    expect(window.arrived()).toBeUndefined();
    expect(window.took()).toBe(1);
    expect(window.arrived()).toBeUndefined();
    expect(window.arrived()).toBeDefined();
  });
});
