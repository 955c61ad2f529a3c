// Public surface of core/tensor.
export { Tensor, type AllocateOptions, type TensorPoolLike } from './tensor.ts';
export { PoolShare, TensorPool, type PoolWaitOptions, type TensorPoolOptions, type TensorPoolStats } from './pool.ts';
export { DTYPES, isDType, elementSize, type DType, type TypedArray } from './dtype.ts';
export { parseDevice, type Device, type DeviceKind } from './device.ts';
export { checkShape, type ShapeInfo } from './shape.ts';
export { tensorMeta, parseTensorMeta, type TensorMeta } from './meta.ts';
export { fromBf16, fromHalf, toBf16, toHalf } from './half.ts';
