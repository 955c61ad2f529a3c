// Public surface of gdrpc. Each area keeps its own index; this file only gathers them.
export * from './errors.ts';
export * from './ucx/index.ts';
export * from './cuda.ts';
export * from './compute/index.ts';
export * from './tensor/index.ts';
export * from './schema/descriptor.ts';
export * from './rpc/index.ts';
