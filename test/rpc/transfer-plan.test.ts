// The transfer plan as data in, data out: mover, landing memory, staging and why, predicted path
// and the noStaging refusal, for the sender (planSend) and the receiver before and after it
// allocates (planArrival, planReceive). Fake endpoints and facts: no UCX object, no GPU.
import { describe, expect, it } from 'vitest';
import { Code, GdrpcError } from '../../core/errors.ts';
import type { Placement } from '../../core/schema/descriptor.ts';
import type { Endpoint } from '../../core/ucx/index.ts';
import { planArrival, planReceive, planSend, moverOf, type ArrivalFacts, type ReceiveFacts, type SendFacts, type TransferPlan } from '../../core/rpc/movers/plan.ts';
import { rmaMover } from '../../core/rpc/movers/rma.ts';
import type { TransferScope } from '../../core/rpc/movers/mover.ts';
import { Tensor } from '../../core/tensor/index.ts';

const KiB = 1024;
const MiB = 1024 * KiB;
const HOST: Placement = { kind: 'host' };
const CUDA: Placement = { kind: 'cuda' };
const INLINE = 4096;
const POOL_REASON = 'its pool on cuda:0 is not mapped by UCX: test';

/** An endpoint whose lanes are `transports`; with none given, asking for its lanes fails the test. */
function endpoint(...transports: string[]): Endpoint {
  return {
    transports: () => {
      if (transports.length === 0) throw new Error('the lanes were asked');
      return transports.map((transport) => ({ transport, device: 'x' }));
    },
  } as unknown as Endpoint;
}

const SHM = endpoint('tcp', 'sysv');
const IPC = endpoint('cuda_ipc', 'sysv');
const UNASKED = endpoint();

interface SendOverrides extends Partial<Omit<SendFacts, 'receiver' | 'policy' | 'stagingReason'>> {
  receiver?: Partial<SendFacts['receiver']>;
  policy?: Partial<SendFacts['policy']>;
  reason?: string;
}

function send(overrides: SendOverrides): SendFacts {
  const { receiver, policy, reason, ...rest } = overrides;
  return {
    where: 'x', bytes: 64 * KiB, from: 'host', placement: HOST,
    receiver: { name: 'peer', endpoint: SHM, inlineBytes: INLINE, maxFrame: MiB, gpu: true, stages: false, ...receiver },
    policy: { mover: 'auto', noStaging: false, ...policy },
    stagingReason: () => reason,
    ...rest,
  };
}

function thrown(fn: () => unknown): GdrpcError {
  try { fn(); } catch (error) { return error as GdrpcError; }
  throw new Error('did not throw');
}

type Expected = Partial<Pick<TransferPlan, 'mover' | 'from' | 'to' | 'bounce' | 'staged' | 'path' | 'deferProducer'>> & { refusal?: string };

/** The plan's fields that `expected` names, the refusal as its message. */
function shape(plan: TransferPlan, expected: Expected): Expected {
  const seen: Record<string, unknown> = {};
  for (const key of Object.keys(expected)) {
    seen[key] = key === 'refusal' ? plan.refusal?.rawMessage : plan[key as keyof TransferPlan];
  }
  return seen as Expected;
}

describe('planSend', () => {
  const cases: Array<[string, SendOverrides, Expected]> = [
    ['0 bytes go inline, whatever the memory', { bytes: 0, from: 'cuda', placement: CUDA }, { mover: 'inline', path: 'inline', staged: undefined }],
    ['host at the inline threshold - 1', { bytes: INLINE - 1 }, { mover: 'inline', path: 'inline' }],
    ['host at the inline threshold', { bytes: INLINE }, { mover: 'inline', path: 'inline' }],
    ['host one byte past the threshold', { bytes: INLINE + 1 }, { mover: 'tag', path: 'shm', deferProducer: true }],
    ['a small CUDA tensor never goes inline on auto', { bytes: 100, from: 'cuda', placement: CUDA, receiver: { endpoint: IPC } },
      { mover: 'tag', from: 'cuda', to: 'cuda', path: 'cuda_ipc', staged: undefined }],
    ['cuda -> @host: the lanes predict a bounce of UCX\'s own', { from: 'cuda', receiver: { endpoint: IPC } },
      { mover: 'tag', to: 'host', path: 'staged', staged: undefined, refusal: undefined }],
    ['@cuda at a receiver without a GPU lands in host memory', { placement: CUDA, receiver: { gpu: false } }, { to: 'host', path: 'shm' }],
    ['a receiver that stages @cuda', { placement: CUDA, receiver: { stages: true } },
      { mover: 'tag', to: 'cuda', bounce: undefined, staged: 'peer cannot receive into CUDA memory without staging', path: 'staged' }],
    ['a receiver that stages: inline is the frame\'s copy, not staging', { bytes: 100, placement: CUDA, receiver: { stages: true } },
      { mover: 'inline', staged: undefined, path: 'staged' }],
    ['memory this UCX cannot map goes through a bounce', { from: 'cuda', placement: CUDA, reason: POOL_REASON, receiver: { endpoint: IPC } },
      { mover: 'tag', bounce: POOL_REASON, staged: POOL_REASON, path: 'staged', deferProducer: false }],
    ['the bounce reason outranks the receiver\'s', { from: 'cuda', placement: CUDA, reason: POOL_REASON, receiver: { stages: true } },
      { staged: POOL_REASON }],
    ['forced inline of a CUDA tensor that fits a frame', { bytes: 100, from: 'cuda', policy: { mover: 'inline' }, reason: POOL_REASON },
      { mover: 'inline', bounce: undefined, path: 'staged', deferProducer: false }],
    ['forced tag below the threshold', { bytes: 100, policy: { mover: 'tag' } }, { mover: 'tag', path: 'shm' }],
    ['forced rma on host memory', { policy: { mover: 'rma' } }, { mover: 'rma', path: 'shm', deferProducer: false }],
    ['forced rma on GPU memory without RDMA', { from: 'cuda', placement: CUDA, policy: { mover: 'rma' }, receiver: { endpoint: endpoint('tcp') } },
      { mover: 'rma', path: 'staged', staged: undefined }],
    ['noStaging on a direct path', { from: 'cuda', placement: CUDA, policy: { noStaging: true }, receiver: { endpoint: IPC } },
      { path: 'cuda_ipc', refusal: undefined }],
    ['noStaging refuses a local bounce', { from: 'cuda', placement: CUDA, reason: POOL_REASON, policy: { noStaging: true } },
      { refusal: `x: cuda -> cuda over peer would stage through host memory (noStaging): ${POOL_REASON}` }],
    ['noStaging refuses a receiver that stages', { placement: CUDA, policy: { noStaging: true }, receiver: { stages: true } },
      { refusal: 'x: host -> cuda over peer would stage through host memory (noStaging): peer cannot receive into CUDA memory without staging' }],
    ['noStaging refuses a path the lanes predict staged', { from: 'cuda', placement: CUDA, policy: { noStaging: true } },
      { refusal: 'x: cuda -> cuda over peer would stage through host memory (noStaging)' }],
    ['noStaging refuses inline to GPU memory', { bytes: 100, placement: CUDA, policy: { noStaging: true } },
      { mover: 'inline', refusal: 'x: host -> cuda over peer would stage through host memory (noStaging)' }],
  ];

  it.each(cases)('%s', (_name, overrides, expected) => {
    const plan = planSend(send(overrides));
    expect(shape(plan, expected)).toEqual(expected);
    expect(Object.isFrozen(plan)).toBe(true);
    if (plan.refusal !== undefined) {
      expect(plan.refusal.code).toBe(Code.FAILED_PRECONDITION);
      expect(plan.refusal.path).toBe('staged');
    }
  });

  it('asks whether this UCX maps the memory only for movers that hand it to UCX', () => {
    let asked = 0;
    const facts = (bytes: number): SendFacts => ({ ...send({ bytes, from: 'cuda', placement: CUDA }), stagingReason: () => { asked += 1; return undefined; } });
    planSend(facts(0));
    planSend({ ...facts(100), policy: { mover: 'inline', noStaging: false } });
    expect(asked).toBe(0);
    planSend({ ...facts(100), receiver: { ...facts(100).receiver, endpoint: IPC } });
    expect(asked).toBe(1);
  });

  it('throws for a forced inline tensor the peer\'s frame cannot hold', () => {
    const error = thrown(() => planSend(send({ bytes: MiB, policy: { mover: 'inline' } })));
    expect(error.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(error.rawMessage).toBe(`inline tensor of ${MiB} bytes exceeds the peer's ${MiB}-byte frame limit (its maxFrameBytes): use mover 'auto' or 'tag' for it`);
    expect(error.details).toEqual({ requested: MiB, capacity: MiB, limit: 'maxFrameBytes' });
    // 1 KiB of slack for the rest of the frame.
    expect(planSend(send({ bytes: MiB - 1024, policy: { mover: 'inline' } })).mover).toBe('inline');
  });

  it('throws for a mover that does not exist', () => {
    expect(thrown(() => planSend(send({ policy: { mover: 'bogus' as 'tag' } }))).code).toBe(Code.INVALID_ARGUMENT);
  });

  it('keeps a forced rma in a process without GDRPC_UNSAFE_RMA: the mover refuses when it prepares', () => {
    expect(planSend(send({ policy: { mover: 'rma' } })).refusal).toBeUndefined();
    const scope = { connection: { runtime: { rma: false } }, call: 1 } as unknown as TransferScope;
    const error = thrown(() => rmaMover.prepare(Tensor.zeros([16], 'u8'), scope));
    expect(error.code).toBe(Code.FAILED_PRECONDITION);
    expect(error.rawMessage).toMatch(/^the rma mover is disabled/);
  });
});

interface ArrivalOverrides extends Partial<Omit<ArrivalFacts, 'wire' | 'gpu' | 'mapsCuda'>> {
  wire?: Partial<ArrivalFacts['wire']>;
  gpu?: boolean;
  mapsCuda?: boolean;
}

function arrival(overrides: ArrivalOverrides): ArrivalFacts {
  const { wire, gpu = true, mapsCuda = true, ...rest } = overrides;
  return {
    where: 'x', wire: { m: 't', n: 64 * KiB, mt: 'host', ...wire }, placement: HOST,
    sender: { name: 'peer', endpoint: SHM }, noStaging: false, gpu: () => gpu, mapsCuda: () => mapsCuda, ...rest,
  };
}

describe('planArrival', () => {
  const NO_CUDA_UCX = 'this UCX cannot register CUDA memory';
  const cases: Array<[string, ArrivalOverrides, Expected]> = [
    ['tag bytes into host memory', {}, { mover: 'tag', from: 'host', to: 'host', path: 'shm', bounce: undefined }],
    ['@cuda without a GPU here lands in host memory', { placement: CUDA, gpu: false, mapsCuda: false }, { to: 'host', bounce: undefined, path: 'shm' }],
    ['@cuda into a UCX that cannot map CUDA', { placement: CUDA, mapsCuda: false }, { to: 'cuda', bounce: NO_CUDA_UCX, staged: NO_CUDA_UCX, path: 'staged' }],
    ['inline bytes into GPU memory are copied from the frame', { placement: CUDA, mapsCuda: false, wire: { m: 'i', n: 100 } },
      { mover: 'inline', bounce: undefined, path: 'staged' }],
    ['rma from GPU memory', { placement: CUDA, wire: { m: 'r', mt: 'cuda' }, sender: { name: 'peer', endpoint: endpoint('rc_mlx5') } },
      { mover: 'rma', from: 'cuda', path: 'rdma' }],
    ['0 bytes move nothing', { placement: CUDA, mapsCuda: false, wire: { n: 0 } }, { bounce: undefined, path: 'inline' }],
    ['the sender\'s staging is its own call\'s business here', { noStaging: true, wire: { st: true } }, { staged: undefined, path: 'shm', refusal: undefined }],
    ['noStaging refuses a bounce here', { placement: CUDA, mapsCuda: false, noStaging: true },
      { refusal: `x: host -> cuda from peer would stage through host memory (noStaging): ${NO_CUDA_UCX}` }],
    ['noStaging refuses a path the lanes predict staged', { placement: CUDA, noStaging: true, wire: { mt: 'cuda' } },
      { refusal: 'x: cuda -> cuda from peer would stage through host memory (noStaging)' }],
    ['noStaging on a direct path', { placement: CUDA, noStaging: true, wire: { mt: 'cuda' }, sender: { name: 'peer', endpoint: IPC } },
      { path: 'cuda_ipc', refusal: undefined }],
  ];

  it.each(cases)('%s', (_name, overrides, expected) => {
    const plan = planArrival(arrival(overrides));
    expect(shape(plan, expected)).toEqual(expected);
    expect(plan.deferProducer).toBe(false);
    expect(Object.isFrozen(plan)).toBe(true);
  });

  it('asks the lanes, the GPU and the UCX context only when a decision needs them', () => {
    const facts: ArrivalFacts = {
      ...arrival({ sender: { name: 'peer', endpoint: UNASKED } }),
      gpu: () => { throw new Error('the GPU was asked'); },
      mapsCuda: () => { throw new Error('the context was asked'); },
    };
    const plan = planArrival(facts);
    expect(plan.to).toBe('host');
    expect(() => plan.path).toThrow('the lanes were asked');
  });
});

interface ReceiveOverrides extends Partial<Omit<ReceiveFacts, 'wire' | 'stagingReason'>> {
  wire?: Partial<ReceiveFacts['wire']>;
  reason?: string;
}

function receive(overrides: ReceiveOverrides): ReceiveFacts {
  const { wire, reason, ...rest } = overrides;
  return {
    where: 'x', wire: { m: 't', n: 64 * KiB, mt: 'host', ...wire }, device: 'cpu',
    sender: { name: 'peer', endpoint: SHM }, noStaging: false, stagingReason: () => reason, ...rest,
  };
}

describe('planReceive', () => {
  const cases: Array<[string, ReceiveOverrides, Expected]> = [
    ['into host memory', {}, { mover: 'tag', to: 'host', staged: undefined, path: 'shm' }],
    ['from GPU memory into host memory', { wire: { mt: 'cuda' }, sender: { name: 'peer', endpoint: IPC } }, { from: 'cuda', to: 'host', path: 'staged', staged: undefined }],
    ['into GPU memory', { device: 'cuda:1', wire: { mt: 'cuda' }, sender: { name: 'peer', endpoint: IPC } }, { to: 'cuda', path: 'cuda_ipc' }],
    ['the sender staged it', { wire: { st: true }, noStaging: true }, { staged: 'peer staged it through host memory', bounce: undefined, path: 'staged', refusal: undefined }],
    ['a destination this UCX cannot map', { device: 'cuda:0', reason: POOL_REASON }, { bounce: POOL_REASON, staged: POOL_REASON, path: 'staged', refusal: undefined }],
    ['inline bytes need no mapping', { device: 'cuda:0', reason: POOL_REASON, wire: { m: 'i', n: 100 } }, { mover: 'inline', bounce: undefined }],
    ['noStaging refuses a bounce here', { device: 'cuda:0', reason: POOL_REASON, noStaging: true },
      { refusal: `x: receiving into cuda:0 would stage through host memory (noStaging): ${POOL_REASON}` }],
  ];

  it.each(cases)('%s', (_name, overrides, expected) => {
    const plan = planReceive(receive(overrides));
    expect(shape(plan, expected)).toEqual(expected);
    expect(Object.isFrozen(plan)).toBe(true);
    if (plan.refusal !== undefined) expect([plan.refusal.code, plan.refusal.path]).toEqual([Code.FAILED_PRECONDITION, 'staged']);
  });

  it('predicts the path only when it is read', () => {
    const plan = planReceive(receive({ sender: { name: 'peer', endpoint: UNASKED } }));
    expect(plan.bounce).toBeUndefined();
    expect(() => plan.path).toThrow('the lanes were asked');
  });

  it('names the mover of each kind of descriptor', () => {
    expect([moverOf({ m: 'i' }), moverOf({ m: 't' }), moverOf({ m: 'r' })]).toEqual(['inline', 'tag', 'rma']);
  });
});
