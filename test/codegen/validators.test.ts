// The generated validators, run against real tensors: they accept what the schema declares and
// reject wrong dtypes, ranks, fixed sizes, symbolic dimensions that disagree, missing fields,
// bad enum values and bad scalars with INVALID_ARGUMENT naming the field. A struct's dimension
// names bind per struct value (each list element on its own).
import { Code, GdrpcError, Tensor, type DType } from 'gdrpc';
import { describe, expect, it } from 'vitest';
import { RequestState, validateDecodeWorkerAcceptArgs, validateDecodeWorkerGenerateResults, validatePrefillWorkerPrefillArgs } from '../../schemas/gen/kv_transfer.ts';
import { Precision, validateShardWorkerForwardArgs, validateShardWorkerReduceArgs } from '../../schemas/gen/tensor_parallel.ts';
import { validateEchoEchoArgs } from '../../schemas/gen/echo.ts';
import { validateMoeDispatchArgs } from './fixtures/struct_dims/expected/struct_dims.ts';

const t = (shape: number[], dtype: DType = 'f16'): Tensor => Tensor.zeros(shape, dtype);

/** The error a validator throws for `values`, or undefined when it accepts them. */
function rejection(validate: (v: Record<string, unknown>) => void, values: Record<string, unknown>): GdrpcError | undefined {
  try {
    validate(values);
    return undefined;
  } catch (e) {
    return e as GdrpcError;
  }
}

function expectInvalid(validate: (v: Record<string, unknown>) => void, values: Record<string, unknown>, mentions: RegExp): void {
  const error = rejection(validate, values);
  expect(error, 'expected a rejection').toBeInstanceOf(GdrpcError);
  expect(error!.code).toBe(Code.INVALID_ARGUMENT);
  expect(error!.message).toMatch(mentions);
}

// ShardWorker.forward(x: f16[batch, model = 4096] @cuda, residual: f16[batch, model] @cuda, layer: u32, scale: f32)
const forward = { x: t([2, 4096]), residual: t([2, 4096]), layer: 3, scale: 0.5 };

describe('ShardWorker.forward arguments (4 arguments, 2 tensors)', () => {
  it('accepts what the schema declares, for any batch', () => {
    expect(rejection(validateShardWorkerForwardArgs, forward)).toBeUndefined();
    expect(rejection(validateShardWorkerForwardArgs, { ...forward, x: t([1, 4096]), residual: t([1, 4096]) })).toBeUndefined();
  });

  it.each([
    ['a wrong dtype', { x: t([2, 4096], 'f32') }, /ShardWorker\.forward arguments\.x: dtype f32, declared f16/],
    ['a wrong rank', { residual: t([2, 4096, 1]) }, /\.residual: rank 3 .*declared rank 2/],
    ['a wrong fixed size (model = 4096)', { x: t([2, 1024]), residual: t([2, 1024]) }, /\.x: dimension 1 is 1024, declared 4096/],
    ['symbolic dimensions that disagree (batch)', { residual: t([3, 4096]) }, /\.residual: dimension 0 \(batch\) is 3, but .*x dimension 0 bound batch = 2/],
    ['a missing tensor', { residual: undefined }, /\.residual is missing/],
    ['a missing scalar', { layer: undefined }, /\.layer is missing/],
    ['a scalar out of range (u32)', { layer: -1 }, /\.layer: -1 is out of range for u32/],
    ['a non-tensor for a tensor', { x: new Uint16Array(8) }, /\.x: expected a tensor<f16>/],
  ])('rejects %s with INVALID_ARGUMENT', (_, change, mentions) => {
    expectInvalid(validateShardWorkerForwardArgs, { ...forward, ...change }, mentions);
  });
});

describe('structs, lists and enums', () => {
  const partial = (batch: number, model = 4096) => ({ rank: 0, y: t([batch, model]) });

  it('checks tensors inside structs inside lists, each element binding its own dimension names', () => {
    expect(rejection(validateShardWorkerReduceArgs, { partials: [partial(2), partial(2)] })).toBeUndefined();
    expect(rejection(validateShardWorkerReduceArgs, { partials: [partial(2), partial(5)] })).toBeUndefined();
    expectInvalid(validateShardWorkerReduceArgs, { partials: [partial(2, 8)] }, /partials\[0\]\.y: dimension 1 is 8, declared 4096/);
    expectInvalid(validateShardWorkerReduceArgs, { partials: [{ y: t([2, 4096]) }] }, /partials\[0\]\.rank is missing/);
  });

  it('checks enum values', () => {
    const args = { requestId: 'r', tokens: t([7], 'i32'), precision: Precision.BF16, decodeWorker: '127.0.0.1:1' };
    expect(rejection(validatePrefillWorkerPrefillArgs, args)).toBeUndefined();
    expectInvalid(validatePrefillWorkerPrefillArgs, { ...args, precision: 9 }, /precision: number 9 is not a value of enum gdrpc\.tp\.v1\.Precision/);
    expectInvalid(validateDecodeWorkerGenerateResults, { token: 1, state: 42 }, /state: number 42 is not a value of enum gdrpc\.kv\.v1\.RequestState/);
    expect(rejection(validateDecodeWorkerGenerateResults, { token: 1, state: RequestState.DONE })).toBeUndefined();
  });

  it('checks the sized dimensions of a KV block (blockSize = 16, headDim = 128) and the heads binding within each block', () => {
    const block = (heads: number, blockSize = 16) => ({ layer: 0, index: 0, keys: t([heads, blockSize, 128], 'bf16'), values: t([heads, blockSize, 128], 'bf16') });
    expect(rejection(validateDecodeWorkerAcceptArgs, { requestId: 'r', blocks: [block(8)], firstToken: 1 })).toBeUndefined();
    expectInvalid(validateDecodeWorkerAcceptArgs, { requestId: 'r', blocks: [block(8, 32)], firstToken: 1 }, /blocks\[0\]\.keys: dimension 1 is 32, declared 16/);
    expect(rejection(validateDecodeWorkerAcceptArgs, { requestId: 'r', blocks: [block(8), block(4)], firstToken: 1 })).toBeUndefined();
    const mixed = { ...block(8), values: t([4, 16, 128], 'bf16') };
    expectInvalid(validateDecodeWorkerAcceptArgs, { requestId: 'r', blocks: [block(8), mixed], firstToken: 1 }, /blocks\[1\]\.values: dimension 0 \(heads\) is 4, but .*blocks\[1\]\.keys dimension 0 bound heads = 8/);
  });

  it('lets optional fields be left out, but checks them when present', () => {
    expect(rejection(validateEchoEchoArgs, { text: 'hi' })).toBeUndefined();
    expect(rejection(validateEchoEchoArgs, { text: 'hi', payload: t([5], 'u8') })).toBeUndefined();
    expectInvalid(validateEchoEchoArgs, { text: 'hi', payload: t([5], 'i8') }, /payload: dtype i8, declared u8/);
    expectInvalid(validateEchoEchoArgs, { payload: t([5], 'u8') }, /\.text is missing/);
  });
});

// Moe.dispatch(hidden: bf16[n, d], routes: list<Route>), Route { tokens: i64[n]; weights: f32[n] }
describe('struct-scoped dimension names (fixture struct_dims)', () => {
  const route = (n: number, weights = n) => ({ tokens: t([n], 'i64'), weights: t([weights], 'f32') });
  const hidden = t([128, 4], 'bf16');

  it.each([
    ['routes of other sizes than hidden', [route(3)]],
    ['each element its own n', [route(3), route(7), route(1)]],
    ['size 0 and the method\'s size', [route(0), route(128)]],
    ['no routes', []],
  ])('accepts %s', (_, routes) => {
    expect(rejection(validateMoeDispatchArgs, { hidden, routes })).toBeUndefined();
  });

  it.each([
    ['a route whose two tensors disagree', [route(3), route(5, 4)], /Moe\.dispatch arguments\.routes\[1\]\.weights: dimension 0 \(n\) is 4, but Moe\.dispatch arguments\.routes\[1\]\.tokens dimension 0 bound n = 5/],
    ['the first route disagreeing with itself', [route(2, 3)], /routes\[0\]\.weights: dimension 0 \(n\) is 3/],
  ])('rejects %s with INVALID_ARGUMENT naming the field path', (_, routes, mentions) => {
    expectInvalid(validateMoeDispatchArgs, { hidden, routes }, mentions);
  });
});
