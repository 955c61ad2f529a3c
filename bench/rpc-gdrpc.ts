// The gdrpc side of the rpc benchmarks (bench/rpc.ts, bench/poll.ts): a Client against a
// bench/rpc-peer.ts server in another process. Kept apart from the grpc-js side, whose package the
// GPU machine's pack does not carry.
import { fileURLToPath } from 'node:url';
import { Client, Runtime, type Tensor } from '../core/index.ts';
import { BenchDescriptor } from './schemas/gen/rpc_bench.ts';
import { spawnPeer, type Peer } from '../test/support/peer.ts';

const MiB = 1 << 20;

/** A system under test: one call without a body, one call that carries `bytes`. */
export interface System {
  name: string;
  /** The serving process, for its CPU time (bench/poll.ts). */
  peerPid?: number;
  /** The client worker's counters (gdrpc: Worker.stats()). */
  workerStats?: () => Record<string, unknown>;
  ping(): Promise<void>;
  sink(bytes: number, mover?: 'inline' | 'tag' | 'rma'): Promise<void>;
  close(): Promise<void>;
}

export function startPeer(mode: string, env: Record<string, string> = {}): Promise<Peer<{ port: number }>> {
  return spawnPeer(fileURLToPath(new URL('./rpc-peer.ts', import.meta.url)), { args: [mode], env });
}

/** gdrpc with the default progress model (the adaptive polling window), with polling after work
 *  off (0), or with both processes busy-polling a fixed `busyPollUs` after each event (trading
 *  CPU for wake-up latency). `peerEnv` is added to the serving process's environment. Both
 *  processes talk over shared memory with `sharedMemory` (RuntimeOptions.sharedMemory, trusted
 *  peers) and over TCP loopback without, whatever UCX_MM_ERROR_HANDLING says; the client on a
 *  runtime of its own, closed with the system. */
export async function gdrpcSystem(busyPollUs: number | 'adaptive' = 'adaptive', options: { peerEnv?: Record<string, string>; sharedMemory?: boolean } = {}): Promise<System> {
  const sharedMemory = options.sharedMemory === true;
  // The peer's default runtime takes its choice from the environment.
  const peer = await startPeer('gdrpc', { GDRPC_BUSY_POLL_US: String(busyPollUs), UCX_MM_ERROR_HANDLING: sharedMemory ? 'y' : 'n', ...options.peerEnv });
  const runtime = Runtime.create({ busyPollUs, sharedMemory });
  let client: Client;
  try {
    client = await Client.connect(`127.0.0.1:${peer.ready.port}`, { poolBytes: 300 * MiB, runtime });
  } catch (error) {
    await runtime.close();
    await peer.end(5000);
    throw error;
  }
  // Sources come from the client's mapped pool: registration paid once, as the design intends.
  const sources = new Map<number, Tensor>();
  const source = (bytes: number): Tensor => {
    let tensor = sources.get(bytes);
    if (tensor === undefined) {
      // The largest tensors leave room in the pool for one source only.
      if (bytes >= 64 * MiB) for (const [size, t] of sources) { t.release(); sources.delete(size); }
      tensor = client.pool().allocate([bytes], 'u8');
      tensor.bytes().fill(7);
      sources.set(bytes, tensor);
    }
    return tensor;
  };
  return {
    name: `${busyPollUs === 'adaptive' ? 'gdrpc' : busyPollUs > 0 ? `gdrpc-busypoll-${busyPollUs}us` : 'gdrpc-poll-off'}${sharedMemory ? '-shm' : ''}`,
    peerPid: peer.pid,
    workerStats: () => ({ ...runtime.worker.stats() }),
    ping: async () => { await client.unary(BenchDescriptor.methods.ping, {}); },
    sink: async (bytes, mover) => {
      const x = source(bytes);
      await client.unary(BenchDescriptor.methods.sink, { x }, mover === undefined ? {} : { mover });
    },
    close: async () => {
      for (const tensor of sources.values()) tensor.release();
      await client.close();
      await runtime.close();
      // Closing its stdin ends the peer; one that lingers is killed.
      await peer.end(5000);
    },
  };
}

