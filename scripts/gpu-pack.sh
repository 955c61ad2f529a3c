#!/usr/bin/env bash
# Packs what a GPU run needs into .gpu-pack/ (git-ignored, at most 64 MiB), for a machine that
# has a GPU but no Node.js and no network: the node binary, the UCX runtime from the wheel, the
# built addon and the runtime node_modules, and a consumer project that installed the tarball of
# `npm pack` (dist/, the way another project uses gdrpc). scripts/gpu-run.sh unpacks it there.
# Usage: bash scripts/gpu-pack.sh   (after npm install)
set -euo pipefail
cd "$(dirname "$0")/.."
pack=.gpu-pack
for f in gdrpc.node gdrpc_env.node; do
  [ -f build/Release/$f ] || { echo "gpu-pack: build/Release/$f missing: run npm install first" >&2; exit 1; }
done
# The wheel folder in the per-user cache that the build used (build/gdrpc-build.json).
ucx=$(node -p "require('path').dirname(require('./build/gdrpc-build.json').ucxHome)")
[ -d "$ucx/libucx/lib" ] && [ -d "$ucx/libucx_cu13.libs" ] || { echo "gpu-pack: $ucx is not the libucx-cu13 wheel: this pack carries the wheel (unset GDRPC_UCX_HOME and run npm install)" >&2; exit 1; }
rm -rf "$pack"; mkdir -p "$pack"

echo "gpu-pack: node $(node -v)"
xz -T2 -6 -c "$(command -v node)" > "$pack/node.xz"

echo "gpu-pack: UCX runtime"
# Only what runs: shared objects (not the static archives), modules, the two tools and headers-free.
( cd "$ucx" && tar -cf - \
    libucx/lib/*.so* libucx/lib/ucx/*.so* libucx/bin/ucx_info libucx/bin/ucx_perftest \
    libucx/share/ucx/perftest libucx/etc libucx_cu13.libs ) | xz -T2 -6 > "$pack/ucx.tar.xz"

echo "gpu-pack: bench/ucx-call.c and bench/cuda-copies.c (the machine there has no UCX headers)"
bash scripts/build-bench-c.sh ucx-call "$pack/ucx-call" "$ucx/libucx"
# A tool for runs by hand (docs/gpu.md "Allocation sizes"): the pack goes on without it.
bash scripts/build-bench-c.sh cuda-copies "$pack/cuda-copies.so" "$(node -p "require('./build/gdrpc-build.json').cudaInclude")" \
  || echo "gpu-pack: bench/cuda-copies.c did not build; packing without it" >&2

echo "gpu-pack: addon, dist and runtime node_modules"
cp build/Release/gdrpc.node build/Release/gdrpc_env.node build/gdrpc-build.json "$pack/"
node scripts/build-dist.mjs >/dev/null
tar -cf - dist | xz -T2 -6 > "$pack/dist.tar.xz"
tar -cf - --exclude='node_modules/@typescript' --exclude='node_modules/typescript' \
  --exclude='node_modules/@types' --exclude='node_modules/cmake-js' --exclude='node_modules/node-api-headers' \
  --exclude='node_modules/node-addon-api' --exclude='node_modules/@grpc' --exclude='node_modules/@ts-morph' --exclude='node_modules/ts-morph' --exclude='node_modules/protobufjs' \
  node_modules | xz -T2 -6 > "$pack/node_modules.tar.xz"

echo "gpu-pack: consumer project from npm pack"
work=$(mktemp -d -t gdrpc-gpu-consumer-XXXXXX)
trap 'rm -rf "$work"' EXIT
npm pack --silent --pack-destination "$work" >/dev/null
mkdir -p "$work/consumer" && cp -r test/consumer/fixtures/esm-ts/. "$work/consumer/"
# The consumer compiles with the TypeScript, Node types and ts-morph this repository pins.
dev=$(node -p "const d = require('./package.json').devDependencies; ['typescript', '@types/node', 'ts-morph'].map((n) => n + '@' + d[n]).join(' ')")
( cd "$work/consumer" \
  && printf '{ "name": "gpu-consumer", "private": true, "type": "module", "allowScripts": { "gdrpc": true } }\n' > package.json \
  && npm install --silent --no-audit --no-fund "$work"/gdrpc-*.tgz \
  && npm install --silent --no-audit --no-fund --save-dev $dev \
  && node_modules/.bin/gdrpc gen schemas --out src/gen --quiet \
  && node_modules/.bin/tsc --target es2022 --module nodenext --strict --types node --outDir out --rootDir src src/*.ts src/gen/*.ts ) \
  || { echo "gpu-pack: building the consumer project failed" >&2; exit 1; }
tar -cf - -C "$work/consumer" --exclude='node_modules/typescript' --exclude='node_modules/@typescript' \
  --exclude='node_modules/ts-morph' --exclude='node_modules/@ts-morph' --exclude='node_modules/@types' \
  --exclude='node_modules/gdrpc/build/CMakeFiles' out node_modules package.json \
  | xz -T2 -6 > "$pack/consumer.tar.xz"

du -sh "$pack"/*
total=$(du -sk "$pack" | cut -f1)
[ "$total" -le $((64 * 1024 - 4096)) ] || { echo "gpu-pack: $pack is ${total} KiB, over the 60 MiB budget (64 MiB with the tree)" >&2; exit 1; }
echo "gpu-pack: ${total} KiB in $pack"
