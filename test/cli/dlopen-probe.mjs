// Loaded with `node --import` by startup.test.ts: records every native library the process loads
// through process.dlopen (the gdrpc addon, which in turn loads UCX and the CUDA shim) and prints
// the list on stderr at exit.
const loaded = [];
const dlopen = process.dlopen;
process.dlopen = function (module, filename, ...rest) {
  loaded.push(filename);
  return dlopen.call(this, module, filename, ...rest);
};
process.on('exit', () => process.stderr.write(`dlopen: ${JSON.stringify(loaded)}\n`));
