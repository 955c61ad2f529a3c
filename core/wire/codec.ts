// msgpack encoding of control frame bodies, and the shape checks applied to every frame that
// arrives, before anything else looks at it: a malformed frame becomes INVALID_ARGUMENT here.
import { Packr } from 'msgpackr';
import { Code, GdrpcError } from '../errors.ts';
import { FrameKind, WIRE_VERSION, type TensorWire } from './frames.ts';
import { ConnectionKey } from './tag.ts';

// Plain msgpack maps (no record extension) so that any msgpack library can read the frames;
// 64-bit integers decode as bigint so that addresses survive.
const packr = new Packr({ useRecords: false, int64AsType: 'bigint', mapsAsObjects: true });

/** Encodes a frame body; `v` is set here so that no sender forgets it. */
export function encodeFrame(body: Record<string, unknown>): Buffer {
  body.v = WIRE_VERSION;
  return packr.pack(body);
}

type Check = (value: unknown) => boolean;
const isUint = (value: unknown): boolean => typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
const isString = (value: unknown): boolean => typeof value === 'string';
const isBool = (value: unknown): boolean => typeof value === 'boolean';
const isBytes = (value: unknown): boolean => value instanceof Uint8Array;
const isKey = (value: unknown): boolean => ConnectionKey.valid(value);
const isMap = (value: unknown): boolean => typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
const isStringMap = (value: unknown): boolean => isMap(value) && Object.values(value as object).every(isString);

// Required fields per kind; `?` marks optional ones.
const SCHEMAS: Record<FrameKind, Record<string, Check>> = {
  [FrameKind.Hello]: { key: isKey, 'chal?': isBytes, maxFrame: isUint, maxTensor: isUint, inline: isUint, live: isUint, 'gpu?': isBool, 'stg?': isBool },
  [FrameKind.Auth]: { key: isKey, 'proof?': isBytes, 'live?': isUint, 'gpu?': isBool, 'stg?': isBool, 'maxFrame?': isUint },
  [FrameKind.Ready]: {},
  [FrameKind.Request]: { svc: isString, m: isString, 'a?': isMap, 'to?': isUint, 'md?': isStringMap, 'win?': isUint, 'mv?': isString, 'ns?': isBool },
  [FrameKind.Response]: { r: isMap },
  [FrameKind.Error]: { code: isString, msg: isString, 'det?': isMap },
  [FrameKind.Cancel]: { 'code?': isString },
  [FrameKind.StreamItem]: { seq: isUint, a: isMap },
  [FrameKind.StreamEnd]: { seq: isUint },
  [FrameKind.Keepalive]: {},
  [FrameKind.Fin]: { x: isUint },
  [FrameKind.GoAway]: {},
  [FrameKind.Credit]: { n: isUint },
};

// The schemas as [name, optional, check] rows, parsed once: this runs for every frame.
const ROWS = new Map<number, Array<[string, boolean, Check]>>(Object.entries(SCHEMAS).map(([kind, schema]) => [
  Number(kind), Object.entries(schema).map(([key, check]): [string, boolean, Check] => [key.replace('?', ''), key.endsWith('?'), check]),
]));

/** Decodes and checks a frame body of `kind`; INVALID_ARGUMENT for anything malformed. */
export function decodeFrame(kind: number, bytes: Uint8Array): Record<string, unknown> {
  const rows = ROWS.get(kind);
  if (rows === undefined) throw malformed(`unknown frame kind ${kind}`);
  let body: unknown;
  try {
    body = packr.unpack(bytes);
  } catch (error) {
    throw malformed(`frame of kind ${FrameKind[kind]} is not msgpack`, error);
  }
  if (!isMap(body)) throw malformed(`frame of kind ${FrameKind[kind]} is not a map`);
  const frame = body as Record<string, unknown>;
  if (frame.v !== WIRE_VERSION) throw malformed(`wire version ${String(frame.v)} (this peer speaks ${WIRE_VERSION})`);
  for (const [name, optional, check] of rows) {
    const value = frame[name];
    if (value === undefined || value === null) {
      if (optional) continue;
      throw malformed(`${FrameKind[kind]} frame lacks '${name}'`);
    }
    if (!check(value)) throw malformed(`${FrameKind[kind]} frame has a bad '${name}'`);
  }
  return frame;
}

/** Checks a value that claims to be a tensor descriptor (docs/wire.md); INVALID_ARGUMENT if not. */
export function checkTensorWire(value: unknown, where: string): TensorWire {
  if (!isMap(value)) throw malformed(`${where}: tensor descriptor is not a map`);
  const t = value as Record<string, unknown>;
  const ok = isString(t.dt) && Array.isArray(t.sh) && (t.sh as unknown[]).every(isUint) && isUint(t.n)
    && isString(t.mt) && (t.m === 'i' || t.m === 't' || t.m === 'r' || t.m === 'h');
  if (!ok) throw malformed(`${where}: tensor descriptor lacks dt/sh/n/mt/m`);
  const byMover = t.m === 'i' ? isBytes(t.b) && (t.b as Uint8Array).length === t.n
    : t.m === 't' ? isUint(t.x)
    : t.m === 'r' ? isUint(t.x) && typeof t.a === 'bigint' && isBytes(t.k)
    : isString(t.o) && isUint(t.x) && isBytes(t.s);
  if (!byMover) throw malformed(`${where}: tensor descriptor with mover '${String(t.m)}' lacks its fields`);
  return t as unknown as TensorWire;
}

function malformed(message: string, cause?: unknown): GdrpcError {
  return new GdrpcError(Code.INVALID_ARGUMENT, `malformed frame: ${message}`, { cause });
}
