// Public surface of the RPC runtime (contract: docs/runtime-api.md "Client and server").
export { Client } from './client/client.ts';
export { Server, serveRemoteTensors, shutdownOwner } from './server/server.ts';
export type { CallOptions, ClientOptions, ServerOptions, RegisterOptions } from './call/options.ts';
export type { CudaDevice } from './call/placement.ts';
export type { CallContext, Handler, UnaryHandler, ServerStreamHandler, ClientStreamHandler } from './server/handler-context.ts';
export type { TensorWire } from '../wire/frames.ts';
export { callInfo, confirmedCallInfo, confirmTransfers, type CallInfo } from './movers/call-info.ts';
export type { TransferInfo, MoverName, TransferPath, PathSource } from './movers/mover.ts';
export { Runtime, moverStats, type RuntimeOptions } from './runtime/runtime.ts';
export type { MoverStats } from './runtime/memory-support.ts';
export { processPool, createPool, closeProcessPools, DEFAULT_PROCESS_POOL_BYTES } from './runtime/process-pool.ts';
export { validateFields } from './call/validate.ts';
export { DEFAULT_PULLS_IN_FLIGHT, RemoteTensor, remoteExposures, type PullAllOptions, type PullOptions } from './remote/remote.ts';
export { OwnerConnection } from './remote/owner-client.ts';
export type { PullBlocksOptions } from './remote/block-table.ts';
export { DEFAULT_LIVENESS_MS } from './connection/liveness.ts';
