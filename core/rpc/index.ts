// Public surface of the RPC runtime (contract: docs/runtime-api.md "Client and server").
export { Client } from './client.ts';
export { Server, serveRemoteTensors, shutdownOwner } from './server.ts';
export type { CallOptions, ClientOptions, ServerOptions, RegisterOptions } from './options.ts';
export type { CudaDevice } from './placement.ts';
export type { CallContext, UnaryHandler, ServerStreamHandler, ClientStreamHandler } from './server-call.ts';
export { CALL_INFO, callInfo, type CallInfo } from './call-info.ts';
export type { TransferInfo, MoverName, TransferPath } from './movers/mover.ts';
export { Runtime, moverStats, type RuntimeOptions } from './runtime.ts';
export type { MoverStats } from './movers/memory.ts';
export { processPool, createPool, closeProcessPools, DEFAULT_PROCESS_POOL_BYTES } from './process-pool.ts';
export { validateFields } from './validate.ts';
export { RemoteTensor, remoteExposures } from './remote.ts';
export { DEFAULT_LIVENESS_MS } from './liveness.ts';
