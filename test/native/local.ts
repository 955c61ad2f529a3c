// The test process's own UCX side: a context and worker per transport, closed after the suite.
import { afterAll } from 'vitest';
import { Context, Endpoint, Worker, type WorkerOptions } from '../../core/ucx/index.ts';

/** Transports the suites run over: UCX config for both processes. */
export const TRANSPORTS = {
  tcp: { TLS: 'tcp' },
  // Shared memory for the data. UCX's client-server wire-up cannot complete without a tcp
  // transport in the list ("Destination is unreachable"), so tcp stays in; the endpoint then puts
  // its lanes on posix/sysv (checked by the first test) with MM_ERROR_HANDLING=y, which gdrpc's
  // runtime leaves off (core/native.ts): these peers are the test's own.
  shm: { TLS: 'posix,sysv,cma,self,tcp', MM_ERROR_HANDLING: 'y' },
} as const satisfies Record<string, Record<string, string>>;
export type TransportName = keyof typeof TRANSPORTS;

export interface Local { context: Context; worker: Worker }

/** Creates a context and worker; closes them (and checks nothing is left) after all tests of the file. */
export function localSide(config: Record<string, string>, options: WorkerOptions = {}): Local {
  const context = Context.create({ config });
  const worker = Worker.create(context, options);
  afterAll(async () => {
    await worker.close();
    context.close();
  });
  return { context, worker };
}

/** Resolves once the endpoint can carry data (or rejects with its error). */
export async function connect(worker: Worker, port: number): Promise<Endpoint> {
  const ep = Endpoint.connect(worker, { host: '127.0.0.1', port });
  await ep.flush();
  return ep;
}

export const EXACT = (1n << 64n) - 1n;
