// A call finds its struct and enum declarations in the method descriptor it is given. Two
// revisions of one service (same fully qualified name, different declarations of the struct it
// takes) used to share one process-wide entry, so the service registered last decided how every
// call of either was encoded; here each is served by its own in-process server and called in turn.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client, closeProcessPools, Code, GdrpcError, Server, Tensor,
  type MethodDescriptor, type ServiceDescriptor, type StructDescriptor, type UnaryHandler,
} from '../../core/index.ts';
import { byteSum, patterned } from './fixtures/tensors.ts';

const STORE = 'test.rpc.v1.Store';
const ITEM = 'test.rpc.v1.Item';

/** Store.put(item: Item) -> (summary: string), with Item declared as `item` says (inline types). */
function store(item: StructDescriptor): ServiceDescriptor {
  const put: MethodDescriptor = {
    name: 'put', service: STORE, clientStreaming: false, serverStreaming: false,
    args: [{ name: 'item', type: { kind: 'struct', name: ITEM } }],
    results: [{ name: 'summary', type: { kind: 'scalar', name: 'string' } }],
    types: { [ITEM]: item },
  };
  return { name: STORE, methods: { put } };
}

/** Revision 1: an item holds a tensor, which only its declaration says is one. */
const WithTensor = store({
  kind: 'struct', name: ITEM, fields: [
    { name: 'label', type: { kind: 'scalar', name: 'string' } },
    { name: 'data', type: { kind: 'tensor', dtype: 'u8', shape: [{ kind: 'symbol', name: 'n' }], placement: { kind: 'host' } } },
  ],
});
/** Revision 2: the same names, scalars only. */
const WithCount = store({
  kind: 'struct', name: ITEM, fields: [
    { name: 'label', type: { kind: 'scalar', name: 'string' } },
    { name: 'count', type: { kind: 'scalar', name: 'u32' } },
  ],
});

const servers: Server[] = [];
let withTensor: Client;
let withCount: Client;

async function serve(service: ServiceDescriptor, put: UnaryHandler): Promise<Client> {
  const server = Server.create();
  servers.push(server);
  server.register(service, { put });
  const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
  return Client.connect(`127.0.0.1:${port}`);
}

beforeAll(async () => {
  // Registered in this order, the old registry kept WithCount's Item for both revisions.
  withTensor = await serve(WithTensor, (args: { item: { label: string; data: Tensor } }) =>
    ({ summary: `${args.item.label}:${args.item.data.byteLength}:${byteSum(args.item.data)}` }));
  withCount = await serve(WithCount, (args: { item: { label: string; count: number } }) => ({ summary: `${args.item.label}x${args.item.count}` }));
});

afterAll(async () => {
  await withTensor?.close();
  await withCount?.close();
  for (const server of servers) await server.shutdown({ graceMs: 0 });
  await closeProcessPools();
});

describe('two services of one name', () => {
  it('each call is encoded with the declarations of its own descriptor, in either order', async () => {
    const data = patterned(300);
    for (let round = 0; round < 2; round += 1) {
      expect(await withCount.unary(WithCount.methods.put!, { item: { label: 'c', count: 7 } })).toEqual({ summary: 'cx7' });
      expect(await withTensor.unary(WithTensor.methods.put!, { item: { label: 't', data } })).toEqual({ summary: `t:300:${byteSum(data)}` });
    }
  });

  it("a struct is checked against its own descriptor's declaration before anything is sent", async () => {
    const error = await withCount.unary(WithCount.methods.put!, { item: { label: 'c', data: patterned(4) } }).then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(GdrpcError);
    expect((error as GdrpcError).code).toBe(Code.INVALID_ARGUMENT);
    expect((error as GdrpcError).message).toMatch(/item\.count is missing/);
  });

  it('a descriptor whose types leave out a struct it names fails loudly, naming the struct', async () => {
    const bare: MethodDescriptor = { ...WithTensor.methods.put!, types: {} };
    const error = await withTensor.unary(bare, { item: { label: 't', data: patterned(4) } }).then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(GdrpcError);
    expect((error as GdrpcError).code).toBe(Code.INTERNAL);
    expect((error as GdrpcError).message).toContain(`types do not declare ${ITEM}`);
  });
});
