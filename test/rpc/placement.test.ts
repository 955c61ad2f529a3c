// Receive placement: which device a received `@cuda`, `@cuda(N)` or `@host` tensor lands on for a
// given `device` option (ClientOptions, ServerOptions, Server.register), with and without a GPU;
// the option's checks; and, in this process, a call through a server and client that set it
// (on a machine without a GPU every `@cuda` lands in host memory). test/gpu/placement.test.ts
// checks the GPU side.
import { afterAll, describe, expect, it } from 'vitest';
import {
  Client, closeProcessPools, Code, cuda, GdrpcError, Server, Tensor,
  type ClientOptions, type Placement, type ServerOptions,
} from '../../core/index.ts';
import { bindPlacement, landingDevice, receiveDeviceIndex } from '../../core/rpc/call/placement.ts';
import { BareDescriptor } from '../schemas/gen/rpc/bare.ts';
import { thrown } from './fixtures/thrown.ts';

const gpu = cuda.available() && cuda.deviceCount() > 0;

const BARE: Placement = { kind: 'cuda' };
const ON_1: Placement = { kind: 'cuda', device: 1 };
const HOST: Placement = { kind: 'host' };

describe('landingDevice', () => {
  it.each<[string, Placement, number, boolean, string]>([
    ['@cuda, default device', BARE, 0, true, 'cuda:0'],
    ['@cuda, device cuda:2', BARE, 2, true, 'cuda:2'],
    ['@cuda(1), default device', ON_1, 0, true, 'cuda:1'],
    ['@cuda(1), device cuda:2 (absolute)', ON_1, 2, true, 'cuda:1'],
    ['@host, device cuda:2', HOST, 2, true, 'cpu'],
    ['@remote placement is never allocated on a GPU', { kind: 'remote' }, 2, true, 'cpu'],
    ['@cuda without a GPU', BARE, 2, false, 'cpu'],
    ['@cuda(1) without a GPU', ON_1, 0, false, 'cpu'],
    ['@host without a GPU', HOST, 0, false, 'cpu'],
  ])('%s', (_name, placement, receiveOn, hasGpu, expected) => {
    expect(landingDevice(placement, receiveOn, hasGpu)).toBe(expected);
  });
});

describe('bindPlacement (a service registered with a device)', () => {
  it('binds a bare @cuda and nothing else', () => {
    expect(bindPlacement(BARE, 3)).toEqual({ kind: 'cuda', device: 3 });
    expect(bindPlacement(ON_1, 3)).toBe(ON_1);
    expect(bindPlacement(HOST, 3)).toBe(HOST);
    expect(bindPlacement(BARE, undefined)).toBe(BARE);
  });
  it('a bound placement wins over the server default, and still falls back to host without a GPU', () => {
    expect(landingDevice(bindPlacement(BARE, 3), 0, true)).toBe('cuda:3');
    expect(landingDevice(bindPlacement(BARE, 3), 0, false)).toBe('cpu');
  });
});

describe('receiveDeviceIndex', () => {
  it('is undefined without the option', () => {
    expect(receiveDeviceIndex('ServerOptions.device', undefined, 2)).toBeUndefined();
  });
  it('takes any index without a GPU, and those of the machine with one', () => {
    expect(receiveDeviceIndex('ServerOptions.device', 'cuda:7', 0)).toBe(7);
    expect(receiveDeviceIndex('ServerOptions.device', 'cuda:1', 2)).toBe(1);
  });
  it('refuses a device past the last, naming the option', () => {
    const error = thrown(() => receiveDeviceIndex('ClientOptions.device', 'cuda:2', 2));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.rawMessage).toBe('ClientOptions.device must be a CUDA device of this machine, cuda:0 to cuda:1, got "cuda:2"');
    expect(error.details).toEqual({ option: 'ClientOptions.device' });
  });
});

const BAD_DEVICES: unknown[] = ['cpu', 'gpu', 'cuda', 'cuda:', 'cuda:-1', 'cuda:01', 'CUDA:0', 1, null, {}];
const describeBad = (value: unknown): string => JSON.stringify(value) ?? String(value);

describe('device option checks', () => {
  it.each(BAD_DEVICES.map((value) => [describeBad(value), value]))('ServerOptions.device %s', (_name, device) => {
    const error = thrown(() => Server.create({ device } as ServerOptions));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.rawMessage).toMatch(/^ServerOptions\.device must be 'cuda:N' \(where a bare @cuda tensor is received\), got /);
  });
  it.each(BAD_DEVICES.map((value) => [describeBad(value), value]))('RegisterOptions.device %s', (_name, device) => {
    const error = thrown(() => Server.create().register(BareDescriptor, bareHandlers, { device } as { device: 'cuda:0' }));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.rawMessage).toMatch(/^Server\.register\(test\.rpc\.v1\.Bare\) options\.device must be 'cuda:N' /);
  });
  it('register options that are not an object', () => {
    const error = thrown(() => Server.create().register(BareDescriptor, bareHandlers, 'cuda:1' as never));
    expect(error.rawMessage).toBe('Server.register(test.rpc.v1.Bare) options must be an object, got "cuda:1"');
  });
  it.each(BAD_DEVICES.map((value) => [describeBad(value), value]))('ClientOptions.device %s', async (_name, device) => {
    const error = await Client.connect('127.0.0.1:1', { device } as ClientOptions).then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(GdrpcError);
    expect((error as GdrpcError).code).toBe(Code.INVALID_ARGUMENT);
    expect((error as GdrpcError).rawMessage).toMatch(/^ClientOptions\.device must be 'cuda:N' /);
  });
  it.skipIf(!gpu)('a device past the last one of this machine', () => {
    const device = `cuda:${cuda.deviceCount()}` as const;
    expect(thrown(() => Server.create({ device })).rawMessage).toMatch(/^ServerOptions\.device must be a CUDA device of this machine/);
    expect(thrown(() => Server.create().register(BareDescriptor, bareHandlers, { device })).rawMessage).toMatch(/^Server\.register\(test\.rpc\.v1\.Bare\) options\.device must be a CUDA device/);
  });
});

// Bare.echo (test/schemas/rpc/bare.gdrpc): the handler reports where its arguments landed.
const { echo } = BareDescriptor.methods;
const bareHandlers = {
  echo: (args: { x: Tensor; z: Tensor; h: Tensor }) => ({ ...args, devices: [args.x.device, args.z.device, args.h.device].join(' ') }),
};

const closing: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const close of closing.reverse()) await close();
  await closeProcessPools();
});

describe.skipIf(gpu)('without a GPU: the option is accepted and @cuda lands in host memory', () => {
  it.each<[string, ServerOptions, { device?: 'cuda:1' } | undefined]>([
    ['ServerOptions.device', { device: 'cuda:1' }, undefined],
    ['RegisterOptions.device', {}, { device: 'cuda:1' }],
    ['both', { device: 'cuda:3' }, { device: 'cuda:1' }],
  ])('%s', async (_name, serverOptions, registerOptions) => {
    const server = Server.create(serverOptions).register(BareDescriptor, bareHandlers, registerOptions);
    closing.push(() => server.shutdown({ graceMs: 0 }));
    const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
    const client = await Client.connect(`127.0.0.1:${port}`, { device: 'cuda:5' });
    closing.push(() => client.close());
    const bytes = (seed: number) => Tensor.fromArray(Uint8Array.from({ length: 64 }, (_, i) => (i * 7 + seed) & 0xff));
    const [x, z, h] = [bytes(1), bytes(2), bytes(3)];
    const result = await client.unary(echo, { x, z, h });
    expect(result.devices).toBe('cpu cpu cpu');
    for (const [name, sent] of [['x', x], ['z', z], ['h', h]] as const) {
      const received = result[name] as Tensor;
      expect(received.device).toBe('cpu');
      expect(received.equals(sent)).toBe(true);
      received.release();
    }
  });
});
