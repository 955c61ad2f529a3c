// Errors users met, each one actionable now: bad options are INVALID_ARGUMENT naming the option
// (never a TypeError), scalar ranges (f32 included) are enforced with messages naming the method
// and the field, a handler's plain Error is reported on the server and hidden from the client, and
// RESOURCE_EXHAUSTED for memory says whose pool or limit and which option to raise.
// Servers and clients share this process: the server's events and stderr can be observed.
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  Client, closeProcessPools, Code, createPool, GdrpcError, processPool, Server, Tensor, TensorPool, validateFields,
  type CallOptions, type ClientOptions, type MethodDescriptor, type ServerOptions, type ServiceDescriptor, type UnaryHandler,
} from '../../core/index.ts';
import { chooseMover } from '../../core/rpc/movers/choose.ts';
import { CLIENT_OPTIONS, SERVER_OPTIONS } from '../../core/rpc/call/options.ts';
import { Echo, EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { GainDescriptor } from '../schemas/gen/rpc/gain.ts';
import { patterned } from './fixtures/tensors.ts';
import { thrown } from './fixtures/thrown.ts';

const MiB = 1 << 20;
const F32_MAX = 3.4028234663852886e38;

// Gain.apply (test/schemas/rpc/gain.gdrpc). GainLoose is written by hand because it disagrees
// with the server on purpose: it declares factor f64, as an older client might, so only the
// server's check stands between 1e300 and the handler.
const { apply } = GainDescriptor.methods;
const GainLoose: MethodDescriptor = {
  ...apply,
  args: apply.args.map((field) => field.name === 'factor' ? { name: 'factor', type: { kind: 'scalar', name: 'f64' } } : field),
};

/** How Echo.ping's handler fails, by `n`. */
const PING_FAILURES: Record<number, () => never | undefined> = {
  1: () => { throw new Error('secret db password wrong'); },
  2: () => { throw new GdrpcError(Code.FAILED_PRECONDITION, 'model not loaded', { details: { model: 'llama', retryAfterMs: 50 } }); },
  3: () => undefined,  // returns nothing: bad results
  4: () => { throw 'a bare string'; },  // eslint-disable-line no-throw-literal
};

function echoHandlers(): Record<string, UnaryHandler> {
  const handlers: Record<string, UnaryHandler> = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, () => { throw new GdrpcError(Code.UNIMPLEMENTED, name); }]));
  handlers.echo = (args: { x: Tensor; tag: string }) => ({ y: args.x, tag: args.tag });
  handlers.ping = (args: { n: number }) => {
    const fail = PING_FAILURES[args.n];
    return fail === undefined ? { n: args.n } : fail() as never;
  };
  // Server streaming: one item, then a plain Error.
  (handlers as Record<string, unknown>).count = async function* () {
    yield { i: 0 };
    throw new Error('stream broke');
  };
  return handlers;
}

/** An in-process server with Echo and Gain; its `error` events are collected in `errors`. */
async function startLocal(options: ServerOptions = {}): Promise<{ server: Server; address: string; errors: GdrpcError[] }> {
  const server = Server.create(options);
  server.register(EchoDescriptor, echoHandlers());
  server.register(GainDescriptor, { apply: (args: { factor: number }) => ({ factor: args.factor }) });
  const errors: GdrpcError[] = [];
  server.on('error', (error) => errors.push(error));
  const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
  return { server, address: `127.0.0.1:${port}`, errors };
}

async function failure(promise: Promise<unknown>): Promise<GdrpcError> {
  const error = await promise.then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(GdrpcError);
  return error as GdrpcError;
}


let local: Awaited<ReturnType<typeof startLocal>>;
let client: Client;

beforeAll(async () => {
  local = await startLocal();
  client = await Client.connect(local.address);
});
afterEach(() => {
  local.errors.length = 0;
  vi.restoreAllMocks();
});
afterAll(async () => {
  await client?.close();
  await local?.server.shutdown({ graceMs: 0 });
  await closeProcessPools();
});

describe('options: every bad value is INVALID_ARGUMENT naming the option', () => {
  it.each(Object.keys(SERVER_OPTIONS))('ServerOptions.%s of the wrong type', (name) => {
    const error = thrown(() => Server.create({ [name]: { wrong: 'type' } } as ServerOptions));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.rawMessage).toMatch(new RegExp(`^ServerOptions\\.${name} must be .+, got an object$`));
  });

  it.each<[ServerOptions, RegExp]>([
    [{ poolBytes: -1 }, /ServerOptions\.poolBytes must be a non-negative integer number of bytes, got -1/],
    [{ maxTensorBytes: NaN }, /ServerOptions\.maxTensorBytes must be .*, got NaN/],
    [{ maxCalls: 1.5 }, /ServerOptions\.maxCalls must be a positive integer, got 1\.5/],
    [{ maxCallsPerConnection: 0 }, /ServerOptions\.maxCallsPerConnection must be a positive integer, got 0/],
    [{ poolWaitMs: Infinity }, /ServerOptions\.poolWaitMs must be milliseconds from 0 to 2147483647, got Infinity/],
    [{ livenessMs: 0 }, /ServerOptions\.livenessMs must be milliseconds greater than 0/],
    [{ allowPoolOverflow: 'yes' as unknown as boolean }, /ServerOptions\.allowPoolOverflow must be true or false, got "yes"/],
    [{ token: '' }, /ServerOptions\.token must be a non-empty string, got ""/],
    [{ busyPollUs: -1 }, /ServerOptions\.busyPollUs must be 'adaptive' or an integer number of microseconds from 0 to 10000000, got -1/],
  ])('ServerOptions %o', (options, message) => {
    expect(thrown(() => Server.create(options)).rawMessage).toMatch(message);
  });

  it('ServerOptions that are not an object', () => {
    expect(thrown(() => Server.create(null as unknown as ServerOptions)).rawMessage).toBe('ServerOptions must be an object, got null');
  });

  it.each(Object.keys(CLIENT_OPTIONS))('ClientOptions.%s of the wrong type, before connecting', async (name) => {
    const error = await failure(Client.connect('127.0.0.1:1', { [name]: { wrong: 'type' } } as ClientOptions));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.rawMessage).toMatch(new RegExp(`^ClientOptions\\.${name} must be .+, got an object$`));
  });

  it('ClientOptions with negative and NaN values, and a bad address', async () => {
    expect((await failure(Client.connect('127.0.0.1:1', { poolBytes: -1 }))).rawMessage).toMatch(/ClientOptions\.poolBytes must be a non-negative integer/);
    expect((await failure(Client.connect('127.0.0.1:1', { connectTimeoutMs: NaN }))).rawMessage).toMatch(/ClientOptions\.connectTimeoutMs must be milliseconds .*, got NaN/);
    expect((await failure(Client.connect(undefined as unknown as string))).code).toBe(Code.INVALID_ARGUMENT);
  });

  it.each([
    ['127.0.0.1:99999', 'the port must be an integer from 1 to 65535, got "99999"'],
    ['127.0.0.1:http', 'the port must be an integer from 1 to 65535, got "http"'],
    ['gdrpc://127.0.0.1:5000', 'expected "host:port", with no scheme'],
    ['[::1]:5000', 'gdrpc connects over IPv4: give an IPv4 address or a host name that has one'],
    ['::1:5000', 'gdrpc connects over IPv4: give an IPv4 address or a host name that has one'],
    ['localhost', 'expected "host:port"'],
    ['2001:db8::1', 'gdrpc connects over IPv4: give an IPv4 address or a host name that has one'],
    ['::1', 'gdrpc connects over IPv4: give an IPv4 address or a host name that has one'],
    ['h:80:90', 'gdrpc connects over IPv4: give an IPv4 address or a host name that has one'],
    ['127.0.0.1: 80', 'the port must be an integer from 1 to 65535, got " 80"'],
    ['127.0.0.1:0x50', 'the port must be an integer from 1 to 65535, got "0x50"'],
    ['127.0.0.1:80.0', 'the port must be an integer from 1 to 65535, got "80.0"'],
    [{ host: '127.0.0.1', port: '80' }, 'the port must be an integer from 1 to 65535, got "80" (string)'],
    [{ host: '::1', port: 80 }, 'gdrpc connects over IPv4: give an IPv4 address or a host name that has one'],
  ])('an address %j says what is wrong with it (a helper session using the package met "expected host:port" for a port out of range)', async (address, why) => {
    const error = await failure(Client.connect(address as string));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.rawMessage).toBe(`bad address ${JSON.stringify(address)}: ${why}`);
  });

  it("CallOptions.mover 'bogus' names the option and the movers there are (it was a TypeError)", async () => {
    const error = await failure(client.unary(EchoDescriptor.methods.echo, { x: patterned(64 * 1024), tag: 'm' }, { mover: 'bogus' as 'tag' }));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.rawMessage).toBe(`CallOptions.mover must be one of 'auto', 'inline', 'tag', 'rma', got "bogus"`);
    expect(error.details).toEqual({ option: 'CallOptions.mover' });
    // Where movers are chosen, too, for callers that reach it another way.
    expect(thrown(() => chooseMover('bogus' as 'tag', 64 * 1024, 'host', { inline: 4096, maxFrame: MiB })).code).toBe(Code.INVALID_ARGUMENT);
  });

  const badCalls: Array<[string, CallOptions, RegExp]> = [
    ['a NaN deadline', { deadline: NaN }, /CallOptions\.deadline must be .*, got NaN/],
    ['an invalid Date', { deadline: new Date('not a date') }, /CallOptions\.deadline must be .*valid Date, got a Date/],
    ['a signal that is not an AbortSignal', { signal: {} as AbortSignal }, /CallOptions\.signal must be an AbortSignal, got an object/],
    ['metadata with a number', { metadata: { attempt: 1 } as unknown as Record<string, string> }, /CallOptions\.metadata must be an object whose values are strings/],
    ['noStaging as a string', { noStaging: 'yes' as unknown as boolean }, /CallOptions\.noStaging must be true or false, got "yes"/],
    ['options that are null', null as unknown as CallOptions, /CallOptions must be an object, got null/],
  ];
  it.each(badCalls)('CallOptions with %s: unary, serverStream and clientStream all reject', async (_, options, message) => {
    expect((await failure(client.unary(EchoDescriptor.methods.ping, { n: 5 }, options))).rawMessage).toMatch(message);
    const iterate = async (): Promise<void> => { for await (const _item of client.serverStream(EchoDescriptor.methods.count, { upTo: 1, delayMs: 0 }, options)) { /* none */ } };
    expect((await failure(iterate())).rawMessage).toMatch(message);
    expect((await failure(client.clientStream(EchoDescriptor.methods.sum, [], options))).rawMessage).toMatch(message);
  });

  it('a missing method descriptor, or one called through the wrong API, says what to call', async () => {
    expect((await failure(client.unary(undefined as unknown as MethodDescriptor, {}))).rawMessage).toMatch(/^Client\.unary: expected a method descriptor/);
    expect((await failure(client.unary(EchoDescriptor.methods.count, { upTo: 1, delayMs: 0 }))).rawMessage)
      .toBe('Echo.count is server-streaming: call it with Client.serverStream, not Client.unary');
    expect((await failure(client.clientStream(EchoDescriptor.methods.sum, 5 as unknown as []))).rawMessage).toMatch(/Echo\.sum: clientStream takes an iterable/);
  });

  it('tensor and pool options', async () => {
    expect(thrown(() => Tensor.empty([2], 'u8', { pool: {} as TensorPool })).rawMessage).toBe('Tensor allocation options.pool must be a TensorPool, got an object');
    expect(thrown(() => Tensor.zeros([2], 'u8', null as unknown as object)).rawMessage).toBe('Tensor allocation options must be an object, got null');
    expect(thrown(() => Tensor.empty([2], 'u8', { device: 'gpu' as 'cpu' })).rawMessage).toMatch(/options\.device must be 'cpu' or 'cuda:N', got "gpu"/);
    expect(thrown(() => Tensor.fromArray(new Uint8Array(4), { dtype: 'float' as 'f32' })).rawMessage).toMatch(/Tensor\.fromArray options\.dtype must be one of bool, u8/);
    expect(thrown(() => patterned(4).to('cpu', { pool: 'p' as unknown as TensorPool })).rawMessage).toMatch(/Tensor\.to options\.pool must be a TensorPool/);
    expect(thrown(() => createPool({ device: 'cpu', bytes: 4096, allowOverflow: 'yes' as unknown as boolean })).rawMessage).toMatch(/TensorPoolOptions\.allowOverflow must be true or false/);
    expect(thrown(() => processPool('cpu', { bytes: -1 })).rawMessage).toMatch(/processPool options\.bytes must be a positive integer number of bytes, got -1/);
    const pool = createPool({ device: 'cpu', bytes: 4096 });
    try {
      expect((await failure(pool.allocateWhenFree([1], 'u8', { maxWaitMs: NaN }))).rawMessage).toMatch(/PoolWaitOptions\.maxWaitMs must be milliseconds/);
      expect((await failure(pool.allocateWhenFree([1], 'u8', {} as { maxWaitMs: number }))).rawMessage).toMatch(/PoolWaitOptions\.maxWaitMs must be milliseconds .*, got undefined/);
    } finally {
      pool.close();
    }
  });

  it('a misspelt option is refused naming the option meant (a call with `dedline` had no deadline at all); other extra keys are left alone', async () => {
    const misspelt = await failure(client.unary(EchoDescriptor.methods.ping, { n: 1 }, { dedline: 5 } as unknown as CallOptions));
    expect(misspelt.code).toBe(Code.INVALID_ARGUMENT);
    expect(misspelt.rawMessage).toBe('CallOptions.dedline is not an option: did you mean deadline?');
    expect((await failure(client.unary(EchoDescriptor.methods.ping, { n: 1 }, { Deadline: 5 } as unknown as CallOptions))).rawMessage).toBe('CallOptions.Deadline is not an option: did you mean deadline?');
    expect(thrown(() => Server.create({ maxCall: 3 } as unknown as ServerOptions)).rawMessage).toBe('ServerOptions.maxCall is not an option: did you mean maxCalls?');
    expect(thrown(() => Server.create({ exposureHoldMsec: 3 } as unknown as ServerOptions)).rawMessage).toBe('ServerOptions.exposureHoldMsec is not an option: did you mean exposureHoldMs?');
    expect((await failure(Client.connect(local.address, { tokn: 'x' } as unknown as ClientOptions))).rawMessage).toBe('ClientOptions.tokn is not an option: did you mean token?');
    // Keys that are no option's near miss pass (an object that carries more), and short ones.
    expect((await client.unary(EchoDescriptor.methods.ping, { n: 42 }, { deadline: 30_000, traceId: 'abc', x: 1 } as unknown as CallOptions)).n).toBe(42);
  });

  it('a register that throws serves nothing of the service, and a service is registered once', async () => {
    const server = Server.create();
    const ping: UnaryHandler = (args: { n: number }) => ({ n: args.n });
    // One handler missing: Echo.ping must not be served meanwhile (it was, and answered calls).
    expect(thrown(() => server.register(EchoDescriptor, { ping })).rawMessage).toMatch(/^no handler for test\.rpc\.v1\.Echo\//);
    // Every missing one is named, not the first alone (a helper session using the package).
    const missing = Object.keys(EchoDescriptor.methods).filter((name) => name !== 'ping');
    const error = thrown(() => server.register(EchoDescriptor, { ping }));
    expect(error.rawMessage).toBe(`no handler for ${missing.map((name) => `test.rpc.v1.Echo/${name}`).join(', ')}`);
    expect(error.details).toEqual({ missing });
    // A handler named after no method of the service, besides all of them: refused, nothing served.
    const all = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, ping]));
    expect(thrown(() => server.register(EchoDescriptor, { ...all, pong: ping })).rawMessage).toBe('test.rpc.v1.Echo has no method pong');
    const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
    const caller = await Client.connect({ host: '127.0.0.1', port });
    try {
      expect((await failure(caller.unary(EchoDescriptor.methods.ping, { n: 1 }))).code).toBe(Code.NOT_FOUND);
      server.register(EchoDescriptor, all);
      expect((await caller.unary(EchoDescriptor.methods.ping, { n: 2 })).n).toBe(2);
      const again = thrown(() => server.register(EchoDescriptor, all));
      expect(again.code).toBe(Code.FAILED_PRECONDITION);
      expect(again.rawMessage).toBe('Server.register: test.rpc.v1.Echo is already served by this server');
      expect(thrown(() => server.register({ name: 'gdrpc.Owner', methods: {} }, {})).rawMessage).toBe('Server.register: gdrpc.Owner is already served by this server (the service of remote tensors)');
    } finally {
      await caller.close();
      await server.shutdown({ graceMs: 0 });
    }
    // The generated register passes a missing handler on as missing (it wrapped it in an arrow
    // that failed each call INTERNAL "handlers.x is not a function"): refused, nothing served.
    const generated = Server.create();
    expect(thrown(() => Echo.register(generated, { ping } as unknown as Parameters<typeof Echo.register>[1])).rawMessage).toMatch(/^no handler for test\.rpc\.v1\.Echo\//);
    await generated.shutdown({ graceMs: 0 });
    // Listening after a shutdown says so (it said "already listening").
    expect(thrown(() => server.bind({ host: '127.0.0.1', port: 0 })).rawMessage).toBe('server has been shut down');
  });

  it('Server.register and Server.shutdown options', async () => {
    const server = Server.create();
    expect(thrown(() => server.register(undefined as unknown as ServiceDescriptor, {})).rawMessage).toMatch(/^Server\.register: expected a service descriptor/);
    expect(thrown(() => server.register(GainDescriptor, null as unknown as Record<string, UnaryHandler>)).rawMessage).toMatch(/^Server\.register\(test\.rpc\.v1\.Gain\): expected an object of handlers/);
    expect((await failure(server.shutdown({ graceMs: -1 }))).rawMessage).toMatch(/Server\.shutdown options\.graceMs must be milliseconds/);
    await server.shutdown();
  });
});

describe('scalar ranges, with messages naming the method and the field', () => {
  const fields = apply.args;
  const check = (values: Record<string, unknown>): void => validateFields(fields, values, {}, 'Gain.apply arguments');

  it.each([1e300, -1e300, 3.5e38, -Number.MAX_VALUE])('f32 %d is out of range', (factor) => {
    const error = thrown(() => check({ factor, count: 1 }));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.rawMessage).toBe(`Gain.apply arguments.factor: ${factor} is out of range for f32 (finite f32 values lie within ±${F32_MAX})`);
  });

  // The largest f32, also as printed with f32 precision (3.4028235e38 rounds to it, not to
  // Infinity); NaN and the infinities are f32 values; tiny numbers round towards zero.
  it.each([0, -1.5, F32_MAX, -F32_MAX, 3.4028235e38, NaN, Infinity, -Infinity, 1e-50])('f32 %d is accepted', (factor) => {
    expect(() => check({ factor, count: 1 })).not.toThrow();
  });

  it('f64 takes what f32 refuses', () => {
    expect(() => validateFields(GainLoose.args, { factor: 1e300, count: 1 }, {}, 'Gain.apply arguments')).not.toThrow();
  });

  const INTEGERS: Array<[string, number | bigint, number | bigint]> = [
    ['i8', -128, 127], ['u8', 0, 255], ['i16', -32768, 32767], ['u16', 0, 65535],
    ['i32', -2147483648, 2147483647], ['u32', 0, 4294967295],
    ['i64', -(1n << 63n), (1n << 63n) - 1n], ['u64', 0n, (1n << 64n) - 1n],
  ];
  it.each(INTEGERS)('%s takes %s to %s and refuses one past either end', (name, min, max) => {
    const field = [{ name: 'v', type: { kind: 'scalar' as const, name: name as 'u8' } }];
    const at = (v: unknown): void => validateFields(field, { v }, {}, 'M.m arguments');
    const past = (v: number | bigint, step: number): number | bigint => (typeof v === 'bigint' ? v + BigInt(step) : v + step);
    at(min);
    at(max);
    for (const bad of [past(min, -1), past(max, 1)]) {
      const shown = typeof bad === 'bigint' ? `${bad}n` : String(bad);
      expect(thrown(() => at(bad)).rawMessage).toBe(`M.m arguments.v: ${shown} is out of range for ${name} (${min} to ${max})`);
    }
  });

  it('says what an integer field wants when it gets something else', () => {
    expect(thrown(() => check({ factor: 1, count: 1.5 })).rawMessage).toBe('Gain.apply arguments.count: expected u8 (an integer), got number 1.5');
    expect(thrown(() => check({ factor: 1, count: 1, offset: 2 ** 60 })).rawMessage)
      .toMatch(/^Gain\.apply arguments\.offset: expected i64 as a bigint \(a number is exact only up to 2\^53 - 1\), got number/);
    expect(thrown(() => check({ factor: '2', count: 1 })).rawMessage).toBe('Gain.apply arguments.factor: expected f32 (a number), got "2"');
  });

  it('a call names its method: arguments missing altogether, and a range the server enforces', async () => {
    const missing = await failure(client.unary(apply, undefined as unknown as Record<string, unknown>));
    expect(missing.rawMessage).toBe('Gain.apply arguments: expected an object with the fields { factor, count, offset }, got undefined');
    const caller = await failure(client.unary(apply, { factor: 1e300, count: 1 }));
    expect(caller.rawMessage).toMatch(/^Gain\.apply arguments\.factor: 1e\+300 is out of range for f32/);
    // A client that declares f64 sends it; the server refuses it before the handler runs.
    const server = await failure(client.unary(GainLoose, { factor: 1e300, count: 1 }));
    expect(server.code).toBe(Code.INVALID_ARGUMENT);
    expect(server.rawMessage).toMatch(/^Gain\.apply arguments\.factor: 1e\+300 is out of range for f32/);
    expect((await client.unary(apply, { factor: 0.5, count: 1 })).factor).toBe(0.5);
  });
});

describe('handler failures', () => {
  it("a plain Error: the server emits 'error' with method and call id; the client gets a generic INTERNAL", async () => {
    const error = await failure(client.unary(EchoDescriptor.methods.ping, { n: 1 }));
    expect(error.code).toBe(Code.INTERNAL);
    expect(error.rawMessage).toMatch(/^internal error in handler Echo\.ping \(the server logged the cause; ServerOptions\.exposeErrorMessages/);
    expect(error.message).not.toMatch(/secret/);
    expect(JSON.stringify(error.details)).not.toMatch(/secret/);
    // Reported before the ERROR was sent: no waiting needed.
    expect(local.errors).toHaveLength(1);
    const [report] = local.errors;
    expect(report!.code).toBe(Code.INTERNAL);
    expect(report!.rawMessage).toBe('handler Echo.ping failed: secret db password wrong');
    expect(report!.details).toMatchObject({ method: 'Echo.ping', service: EchoDescriptor.name, call: expect.any(Number), peer: expect.any(String) });
    expect((report!.cause as Error).message).toBe('secret db password wrong');
  });

  it('a GdrpcError thrown on purpose reaches the client as thrown, and is not reported', async () => {
    const error = await failure(client.unary(EchoDescriptor.methods.ping, { n: 2 }));
    expect(error.code).toBe(Code.FAILED_PRECONDITION);
    expect(error.rawMessage).toBe('model not loaded');
    expect(error.details).toMatchObject({ model: 'llama', retryAfterMs: 50 });
    expect(local.errors).toEqual([]);
  });

  it('results that do not match the schema, a thrown string, a failing stream: reported, and the caller told', async () => {
    const bad = await failure(client.unary(EchoDescriptor.methods.ping, { n: 3 }));
    expect(bad.code).toBe(Code.INTERNAL);
    expect(bad.rawMessage).toBe('handler Echo.ping returned bad results: Echo.ping results: expected an object with the fields { n }, got undefined');
    const bare = await failure(client.unary(EchoDescriptor.methods.ping, { n: 4 }));
    expect(bare.rawMessage).toMatch(/^internal error in handler Echo\.ping /);
    const items: unknown[] = [];
    const stream = await failure((async () => { for await (const item of client.serverStream(EchoDescriptor.methods.count, { upTo: 3, delayMs: 0 })) items.push(item); })());
    expect(items).toEqual([{ i: 0 }]);
    expect(stream.rawMessage).toMatch(/^internal error in handler Echo\.count /);
    expect(local.errors.map((e) => e.rawMessage)).toEqual([
      bad.rawMessage, 'handler Echo.ping failed: a bare string', 'handler Echo.count failed: stream broke',
    ]);
  });

  it("without an 'error' listener the failure goes to stderr, with method, call and stack", async () => {
    const { server, address } = await startLocal();
    server.removeAllListeners('error');
    const caller = await Client.connect(address);
    const written: string[] = [];
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => { written.push(String(chunk)); return true; });
    try {
      expect((await failure(caller.unary(EchoDescriptor.methods.ping, { n: 1 }))).code).toBe(Code.INTERNAL);
      await failure(caller.unary(EchoDescriptor.methods.ping, { n: 2 }));  // deliberate: not printed
    } finally {
      vi.restoreAllMocks();
      await caller.close();
      await server.shutdown({ graceMs: 0 });
    }
    expect(written).toHaveLength(1);
    expect(written[0]).toMatch(/^gdrpc server: handler Echo\.ping failed \(call \d+ from [\d.]+:\d+\): Error: secret db password wrong\n\s+at /);
  });

  it('ServerOptions.exposeErrorMessages sends the message of a plain Error to the client', async () => {
    const { server, address, errors } = await startLocal({ exposeErrorMessages: true });
    const caller = await Client.connect(address);
    try {
      const error = await failure(caller.unary(EchoDescriptor.methods.ping, { n: 1 }));
      expect(error.code).toBe(Code.INTERNAL);
      expect(error.rawMessage).toBe('internal error in handler Echo.ping: secret db password wrong');
      expect(errors).toHaveLength(1);
    } finally {
      await caller.close();
      await server.shutdown({ graceMs: 0 });
    }
  });
});

describe('RESOURCE_EXHAUSTED for memory says whose pool or limit, and which option to raise', () => {
  it("an argument larger than the server's pool (under maxTensorBytes): the server pool, poolBytes and allowPoolOverflow", async () => {
    const { server, address, errors } = await startLocal({ poolBytes: MiB });
    const caller = await Client.connect(address);
    try {
      const error = await failure(caller.unary(EchoDescriptor.methods.echo, { x: patterned(2 * MiB), tag: 'big' }));
      expect(error.code).toBe(Code.RESOURCE_EXHAUSTED);
      expect(error.rawMessage).toBe('server tensor pool on cpu: Echo.echo arguments.x can never fit: 2097152 bytes (2 MiB) requested, '
        + 'pool capacity 1048576 bytes (1 MiB); raise ServerOptions.poolBytes (1048576), or set allowPoolOverflow: true '
        + '(maxTensorBytes 1073741824 admits the tensor: the pool is the limit)');
      expect(error.details).toMatchObject({ side: 'server', device: 'cpu', requested: 2 * MiB, capacity: MiB, options: ['poolBytes', 'allowPoolOverflow'], retryable: false });
      expect(errors).toEqual([]);  // the caller's problem, not a handler's
    } finally {
      await caller.close();
      await server.shutdown({ graceMs: 0 });
    }
  });

  it("a tensor over the server's maxTensorBytes is refused by the client before sending, naming the option", async () => {
    const { server, address } = await startLocal({ maxTensorBytes: 64 * 1024 });
    const caller = await Client.connect(address);
    try {
      const error = await failure(caller.unary(EchoDescriptor.methods.echo, { x: patterned(MiB), tag: 'big' }));
      expect(error.code).toBe(Code.RESOURCE_EXHAUSTED);
      expect(error.rawMessage).toBe("Echo.echo arguments.x: a tensor of 1048576 bytes (1 MiB) exceeds the server's limit of 65536 bytes (64 KiB) (ServerOptions.maxTensorBytes)");
      expect(error.details).toEqual({ side: 'server', requested: MiB, capacity: 64 * 1024, limit: 'maxTensorBytes', options: ['maxTensorBytes'], retryable: false });
    } finally {
      await caller.close();
      await server.shutdown({ graceMs: 0 });
    }
  });

  it("a result larger than the client's process pool made without overflow: the client pool and its options", async () => {
    // Replace whatever process pool earlier tests made with a small one that does not overflow.
    processPool('cpu').close({ force: true });
    const small = processPool('cpu', { bytes: MiB, allowOverflow: false });
    try {
      const error = await failure(client.unary(EchoDescriptor.methods.echo, { x: patterned(2 * MiB), tag: 'back' }));
      expect(error.code).toBe(Code.RESOURCE_EXHAUSTED);
      expect(error.rawMessage).toMatch(/^client tensor pool on cpu \(the process pool results are received into\) can never fit Echo\.echo results\.y: 2097152 bytes \(2 MiB\) requested/);
      expect(error.rawMessage).toMatch(/raise ClientOptions\.poolBytes/);
      expect(error.details).toMatchObject({ side: 'client', device: 'cpu', requested: 2 * MiB, capacity: MiB, options: ['poolBytes', 'allowOverflow'], retryable: false });
      // The refused bytes left nothing behind: the next call works.
      expect((await client.unary(EchoDescriptor.methods.ping, { n: 9 })).n).toBe(9);
    } finally {
      small.close({ force: true });
    }
  });
});
