#!/usr/bin/env node
// The gdrpc command: runs the compiled CLI from dist/ (built by `npm run build:ts`, and by
// prepare/prepack for git and tarball installs).
// A reader that stops early (`gdrpc gen --ir | head`) closes the pipe: the command's output is
// done with, which is no error (it was an unhandled EPIPE with a stack trace).
process.stdout.on('error', (error) => {
  if (error.code === 'EPIPE') process.exit(process.exitCode ?? 0);
  throw error;
});
const { main } = await import('../dist/core/cli/main.js');
process.exitCode = await main(process.argv.slice(2));
