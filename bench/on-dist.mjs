// `node --import tsx --import ./bench/on-dist.mjs <bench>`: the benches measure the compiled package
// (dist/, what users run), not tsx's on-the-fly transform of core/ and codegen/: tsx keeps function
// names by wrapping every function it creates, which costs a defineProperty per closure on the call
// path (about a quarter of the small-call rate, measured with bench/on-dist.mjs off and on). Every
// import that resolves to core/**/*.ts or codegen/**/*.ts is sent to its dist/**/*.js twin when that
// exists; npm run bench builds dist/ first. Child processes (peers) inherit the hook through
// NODE_OPTIONS.
import { register } from 'node:module';
import { fileURLToPath } from 'node:url';

register('./dist-hooks.mjs', import.meta.url);
const self = `--import=${fileURLToPath(import.meta.url)}`;
if (!(process.env.NODE_OPTIONS ?? '').includes(self)) process.env.NODE_OPTIONS = `${process.env.NODE_OPTIONS ?? ''} ${self}`.trim();
