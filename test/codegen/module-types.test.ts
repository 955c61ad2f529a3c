// Each generated module carries its own types: one `types` constant with the declarations of its
// schema file, the imported modules' constants spread in (each declaration is written once, in
// its own module), and every method descriptor pointing at it. So a descriptor alone is enough
// for a call: no generated client has to exist first (none is constructed in this file).
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError, Tensor } from 'gdrpc';
import { compile } from '../../codegen/compile.ts';
import { emitModules } from '../../codegen/emit/module.ts';
import { declIndex } from '../../codegen/model.ts';
import { Mode, types as blockTypes } from './fixtures/imports/expected/common/block.ts';
import { PipelineDescriptor, types as pipelineTypes } from './fixtures/imports/expected/pipeline.ts';
import { disposePeers, spawnPeer } from '../support/peer.ts';
import { compileFixture, fixturesDir, here, repoRoot } from './fixture-files.ts';

/** Where a module writes a declaration: its fully qualified name as a key of the table. */
const declared = (fullName: string): string => `'${fullName}': {`;

describe('generated text', () => {
  it.each([
    ['the imports fixture', () => compileFixture(path.join(fixturesDir, 'imports')).ir],
    ['schemas/', () => compile([path.join(repoRoot, 'schemas/kv_transfer.gdrpc')], { root: path.join(repoRoot, 'schemas') }).ir],
  ])('%s: every struct and enum is written once, in the module of its own schema file', (_, ir) => {
    const set = ir();
    const files = new Map(emitModules(set).map((f) => [f.path.replace(/\.ts$/, '.gdrpc'), f.text]));
    for (const [fullName, { file }] of declIndex(set)) {
      const writers = [...files].filter(([, text]) => text.includes(declared(fullName))).map(([p]) => p);
      expect(writers, fullName).toEqual([file.path]);
    }
  });

  it('a module spreads the types of the modules it imports instead of declaring them again', () => {
    const files = emitModules(compileFixture(path.join(fixturesDir, 'imports')).ir);
    const pipeline = files.find((f) => f.path === 'pipeline.ts')!.text;
    expect(pipeline).toContain("types as block_types } from './common/block.js';");
    expect(pipeline).toMatch(/export const types: TypeTable = \{\n {2}\.\.\.block_types,\n/);
    expect(pipeline).not.toContain(declared('fixtures.common.v1.Mode'));
    expect(pipeline).not.toContain(declared('fixtures.common.v1.Block'));
    // The validators read the same table as the descriptors.
    expect(pipeline).toContain('validateFields(PipelineDescriptor.methods.run.args, values, types, ');
  });

  it('the composed table holds the imported declarations themselves, not copies', () => {
    const run = PipelineDescriptor.methods.run;
    expect(run.types).toBe(pipelineTypes);
    expect(pipelineTypes['fixtures.common.v1.Block']).toBe(blockTypes['fixtures.common.v1.Block']);
    expect(pipelineTypes['fixtures.common.v1.Mode']).toBe(blockTypes['fixtures.common.v1.Mode']);
    expect(Object.keys(pipelineTypes).sort()).toEqual(['fixtures.common.v1.Block', 'fixtures.common.v1.Mode', 'fixtures.pipeline.v1.Block']);
  });
});

describe('a descriptor used before any generated client exists', () => {
  let client: Client;

  beforeAll(async () => {
    const server = await spawnPeer<{ port: number }>(path.join(here, 'behaviour/fixtures-server.ts'));
    client = await Client.connect(`127.0.0.1:${server.ready.port}`);
  });

  afterAll(async () => {
    await client?.close();
    await disposePeers();
  });

  const block = (rows: number, cols: number) => ({ data: Tensor.zeros([rows, cols], 'f16') });

  it('encodes a struct holding a tensor (imported from another module) with its declaration', async () => {
    const args = { blocks: [{ inner: block(2, 4), mode: Mode.FAST }, { inner: block(1, 3), mode: Mode.SAFE }], first: block(2, 5) };
    expect(await client.unary(PipelineDescriptor.methods.run, args)).toEqual({ mode: Mode.SAFE });
  });

  it("checks that struct's tensor before sending: a wrong rank is the caller's INVALID_ARGUMENT", async () => {
    const error = await client.unary(PipelineDescriptor.methods.run, { blocks: [], first: { data: Tensor.zeros([4], 'f16') } })
      .then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(GdrpcError);
    expect((error as GdrpcError).code).toBe(Code.INVALID_ARGUMENT);
    expect((error as GdrpcError).message).toMatch(/first\.data: rank 1/);
  });
});
