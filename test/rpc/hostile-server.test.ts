// A server that sends what no gdrpc server does, from a raw server (fixtures/raw-server.ts): the
// client fails what it must, tells the application through 'error', and never hangs on it.
import { afterEach, describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import { Client, Code, type GdrpcError } from '../../core/index.ts';
import { MAX_MALFORMED_FRAMES } from '../../core/rpc/connection/connection.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { packMessage } from '../../core/wire/message.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { RawServer } from './fixtures/raw-server.ts';

const packr = new Packr({ useRecords: false });
const notMsgpack = (call: number) => ({ kind: FrameKind.Response, call, body: new Uint8Array([0xc1]) });

const opened: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const thing of opened.splice(0).reverse()) await thing.close();
});

/** A client admitted by a raw server, with its 'error' events collected, and one call in flight. */
async function connected(): Promise<{ raw: RawServer; client: Client; errors: GdrpcError[]; call: Promise<Record<string, unknown>>; callId: number }> {
  const raw = RawServer.listen();
  opened.push(raw);
  const connecting = Client.connect(raw.address, { poolBytes: 0 });
  // A failed admission is the error to see, not the connect it leaves rejected.
  connecting.catch(() => {});
  await raw.admit();
  const client = await connecting;
  opened.push(client);
  const errors: GdrpcError[] = [];
  client.on('error', (error) => errors.push(error));
  const call = client.unary(EchoDescriptor.methods.ping, { n: 7 });
  call.catch(() => {});
  const request = (await raw.receive())?.find((f) => f.kind === FrameKind.Request);
  if (request === undefined) throw new Error('no REQUEST reached the raw server');
  return { raw, client, errors, call, callId: request.call };
}

describe('a hostile server', () => {
  it(`${MAX_MALFORMED_FRAMES} malformed frames in one message: an 'error' each, and the call in flight is still answered`, async () => {
    const { raw, errors, call, callId } = await connected();
    await raw.sendMessage(packMessage(Array.from({ length: MAX_MALFORMED_FRAMES }, (_, i) => notMsgpack(1000 + i))));
    await raw.sendMessage(packMessage([{ kind: FrameKind.Response, call: callId, body: packr.pack({ v: 2, r: { n: 7 } }) }]));
    expect((await call).n).toBe(7);
    expect(errors.length).toBe(MAX_MALFORMED_FRAMES);
  });

  it('more malformed frames than that in one message: the client drops the connection, the call fails INTERNAL at once, and the rest raise no event', async () => {
    const { raw, client, errors, call } = await connected();
    const disconnected = new Promise<GdrpcError>((resolve) => client.once('disconnect', resolve));
    await raw.sendMessage(packMessage(Array.from({ length: 1000 }, (_, i) => notMsgpack(1000 + i))));
    const failure = await call.then(() => undefined, (error: GdrpcError) => error);
    expect(failure?.code).toBe(Code.INTERNAL);
    expect(failure?.message).toMatch(/more than 16 malformed frames in one message/);
    expect((await disconnected).code).toBe(Code.INTERNAL);
    expect(errors.length).toBe(MAX_MALFORMED_FRAMES + 1);
  });
});
