// The worker's polling after work (native/src/poll_window.h): adaptive by default, a fixed window
// or none when asked, reported in stats(); an idle worker never spins. How much it buys is a
// benchmark (npm run bench -- poll), not a test: on a loaded machine the window closes by design.
import { afterAll, describe, expect, it } from 'vitest';
import { Context, Worker, type WorkerOptions } from '../../core/ucx/index.ts';
import { Code, GdrpcError } from '../../core/errors.ts';
import { NativePeer } from './fixture.ts';
import { disposePeers } from '../support/peer.ts';
import { connect, EXACT, TRANSPORTS } from './local.ts';

afterAll(disposePeers);
const context = Context.create({ config: TRANSPORTS.tcp });
afterAll(() => context.close());

type SpinVariable = 'GDRPC_DEVICE_SPIN_US' | 'GDRPC_STUCK_SPIN_US';
type SpinLimit = 'deviceSpinLimitUs' | 'stuckSpinLimitUs';

/** `limit` of a worker created while the variable `name` is `value` (undefined: unset); the
 *  variable is put back as it was. */
async function limitUnder(name: SpinVariable, limit: SpinLimit, value: string | undefined, options: WorkerOptions = {}): Promise<number> {
  const saved = process.env[name];
  if (value === undefined) delete process.env[name];
  else process.env[name] = value;
  try {
    const worker = Worker.create(context, options);
    const stats = worker.stats();
    await worker.close();
    return stats[limit];
  } finally {
    if (saved === undefined) delete process.env[name];
    else process.env[name] = saved;
  }
}

/** A worker is refused while `name` is `bad`: INVALID_ARGUMENT, the message naming the variable. */
async function expectRefused(name: SpinVariable, limit: SpinLimit, bad: string): Promise<void> {
  const error = await limitUnder(name, limit, bad).then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(GdrpcError);
  expect((error as GdrpcError).code).toBe(Code.INVALID_ARGUMENT);
  expect((error as GdrpcError).message).toContain(`${name} must be an integer number of microseconds from 0 to 10000000, got ${JSON.stringify(bad)}`);
}

describe('polling after work', () => {
  it('is adaptive by default; a number is a fixed window, 0 none', async () => {
    const cases: Array<[Worker, boolean, number]> = [
      [Worker.create(context), true, 0],
      [Worker.create(context, { busyPollUs: 'adaptive' }), true, 0],
      [Worker.create(context, { busyPollUs: 250 }), false, 250],
      [Worker.create(context, { busyPollUs: 0 }), false, 0],
    ];
    for (const [worker, adaptive, windowUs] of cases) {
      expect(worker.stats()).toMatchObject({ pollAdaptive: adaptive, pollWindowUs: windowUs, pollSpins: 0, pollMisses: 0, pollPreempted: 0, pollBusyMachine: 0 });
      await worker.close();
    }
  });

  it('bounds the polling for device transfers by options.deviceSpinUs, else GDRPC_DEVICE_SPIN_US, else 5 ms; busyPollUs 0 turns it off; a bad value is refused', async () => {
    const limitWith = (value: string | undefined, options: WorkerOptions = {}): Promise<number> => limitUnder('GDRPC_DEVICE_SPIN_US', 'deviceSpinLimitUs', value, options);
    expect(await limitWith(undefined)).toBe(5000);
    expect(await limitWith('250')).toBe(250);
    expect(await limitWith('0')).toBe(0);
    expect(await limitWith('10000000')).toBe(10_000_000);
    expect(await limitWith('250', { deviceSpinUs: 40 })).toBe(40);
    expect(await limitWith('250', { busyPollUs: 0 })).toBe(0);
    // Not a count of µs, or past 10 s (read by the addon itself, "-1" once meant centuries of spinning).
    for (const bad of ['-1', '5ms', '1e3', '10000001', '18446744073709551615']) await expectRefused('GDRPC_DEVICE_SPIN_US', 'deviceSpinLimitUs', bad);
    for (const bad of [-1, 1.5, 10_000_001, '5' as unknown as number]) {
      expect(() => Worker.create(context, { deviceSpinUs: bad })).toThrow(/options.deviceSpinUs/);
    }
  });

  it('takes the spell on a stuck transport from GDRPC_STUCK_SPIN_US, else 200 us; a bad value is refused naming it', async () => {
    const limitWith = (value: string | undefined): Promise<number> => limitUnder('GDRPC_STUCK_SPIN_US', 'stuckSpinLimitUs', value);
    expect(await limitWith(undefined)).toBe(200);
    expect(await limitWith('0')).toBe(0);
    expect(await limitWith(' 750 ')).toBe(750);
    expect(await limitWith('10000000')).toBe(10_000_000);
    for (const bad of ['-1', '5ms', '1e3', '10000001']) await expectRefused('GDRPC_STUCK_SPIN_US', 'stuckSpinLimitUs', bad);
  });

  it('after a burst of echoes, an idle worker starts no spin and uses next to no CPU', async () => {
    const worker = Worker.create(context);
    try {
      const peer = await NativePeer.start(TRANSPORTS.tcp);
      const ep = await connect(worker, peer.port);
      const buffer = Buffer.alloc(64);
      const reflected = peer.call('reflect', { tag: '7000', size: 64, count: 300 });
      await peer.event('posted');
      for (let i = 0; i < 300; i += 1) {
        const back = worker.tagRecv(buffer, 7001n, EXACT);
        await ep.tagSend(7000n, buffer);
        await back;
      }
      await reflected;
      await ep.close();
      await peer.kill();
      const busy = worker.stats();
      console.log(`after 300 echoes: window ${busy.pollWindowUs} us, ${busy.pollSpins} spins, ${busy.pollMisses} ran out, ${busy.pollPreempted} preempted, ${busy.pollBusyMachine} not begun (no idle core)`);
      expect(busy.pollWindowUs).toBeGreaterThanOrEqual(0);
      // The adaptive window's ceiling (native/src/poll_window.h): 1 ms.
      expect(busy.pollWindowUs).toBeLessThanOrEqual(1000);
      expect(busy.pollMisses).toBeLessThanOrEqual(busy.pollSpins);
      // Host memory only: no polling for device transfers (native/src/device_wait.h).
      expect(busy).toMatchObject({ deviceInFlight: 0, deviceSpins: 0, deviceSpinLimits: 0 });
      // Nothing to do from here on: no spin begins, and the process idles.
      await new Promise((resolve) => setTimeout(resolve, 200));
      const before = worker.stats().pollSpins;
      const cpu = process.cpuUsage();
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const used = process.cpuUsage(cpu);
      expect(worker.stats().pollSpins).toBe(before);
      // A spinning worker would use a whole core; an idle one a few milliseconds (bound generous
      // for a busy machine: it is the spin it catches, not a figure).
      expect((used.user + used.system) / 1e6).toBeLessThan(0.5);
    } finally {
      await worker.close();
    }
  }, 60_000);
});
