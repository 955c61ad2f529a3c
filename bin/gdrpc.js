#!/usr/bin/env node
// The gdrpc command: runs the compiled CLI from dist/ (built by `npm run build:ts`, and by
// prepare/prepack for git and tarball installs).
const { main } = await import('../dist/core/cli/main.js');
process.exitCode = await main(process.argv.slice(2));
