#!/usr/bin/env node
// The gdrpc command. The runtime is TypeScript run through tsx, so the command needs no build step.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../core/cli/main.ts');
process.exitCode = await main(process.argv.slice(2));
