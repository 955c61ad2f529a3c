// The GPU bench's goal notes (bench/gpu-goals.ts): a small call against ucx_perftest's round trip.
import { describe, expect, it } from 'vitest';
import { smallCallNote } from '../../bench/gpu-goals.ts';

describe('smallCallNote', () => {
  it('says what gdrpc adds when its call is the slower', () => {
    expect(smallCallNote(95.5, 20.25)).toBe('ucx_perftest tag round trip (8 B, CUDA memory) is 20.3 us; gdrpc adds 75.3 us (msgpack frames both ways, dispatch, handler, event-loop wake-ups)');
  });

  it('says how much less it takes when the call is the faster (no negative "adds")', () => {
    const note = smallCallNote(41.1, 542.9);
    expect(note).toBe("ucx_perftest tag round trip (8 B, CUDA memory) is 542.9 us; gdrpc's call, which carries no tensor, takes 501.8 us less");
    expect(note).not.toContain('-');
  });
});
