#!/usr/bin/env bash
# Runs on the GPU machine (no Node.js, no network): unpacks .gpu-pack/ made by gpu-pack.sh, then
# runs the GPU test suite and the GPU benchmarks, writing results into the folder given.
# Usage: bash scripts/gpu-run.sh <results-dir> [phases] [extra vitest args...]
#   phases: a comma-separated list of tests, consumer, bench, tp (the tensor-parallel MLP against
#   PyTorch + NCCL), kv (KV blocks: RemoteTensor.pullAll against a pull each and the raw copy), ptx (recompile the kernels with this machine's nvcc into <results-dir>/ptx and
#   use that PTX for the phases after it); all = tests,consumer,bench.
#   GDRPC_GPU_TESTS replaces the list of test files and folders that `tests` runs.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gpu-run.sh <results-dir> [tests|bench|all]}
what=${2:-all}
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$out"
pack=.gpu-pack
[ -d "$pack" ] || { echo "gpu-run: $pack missing (run scripts/gpu-pack.sh where Node.js is, and carry it)" >&2; exit 1; }

# Unpacked afresh on every call: carried paths replace what a warm machine had, so an earlier
# call's addon or modules must not survive.
# node_modules is replaced only where this script unpacked it before (its marker file is there):
# run by mistake in a development checkout, it refuses instead of deleting the installed modules.
if [ -d node_modules ] && [ ! -f node_modules/.gdrpc-gpu-run ]; then
  echo "gpu-run: node_modules was not unpacked by gpu-run.sh; run this on the GPU machine's copy of the tree" >&2; exit 1
fi
rm -rf /tmp/gdrpc-node .deps/python build/Release node_modules dist
mkdir -p /tmp/gdrpc-node && xz -dc "$pack/node.xz" > /tmp/gdrpc-node/node && chmod +x /tmp/gdrpc-node/node
mkdir -p .deps/python && xz -dc "$pack/ucx.tar.xz" | tar -xf - -C .deps/python
mkdir -p build/Release && cp "$pack/gdrpc.node" "$pack/gdrpc_env.node" build/Release/ && cp "$pack/gdrpc-build.json" build/
xz -dc "$pack/node_modules.tar.xz" | tar -xf - && touch node_modules/.gdrpc-gpu-run
# dist/ as built beside the addon (the compiler is not carried): the CLI and the tests use it as is.
xz -dc "$pack/dist.tar.xz" | tar -xf -
export GDRPC_DIST_PREBUILT=1
# bench/ucx-call.c, built where the UCX headers are (this machine has none).
export GDRPC_UCX_CALL=$PWD/$pack/ucx-call
rm -rf /tmp/gdrpc-consumer && mkdir -p /tmp/gdrpc-consumer && xz -dc "$pack/consumer.tar.xz" | tar -xf - -C /tmp/gdrpc-consumer
# The addons were linked against the wheel in the packing machine's cache; here it lies in .deps.
export LD_LIBRARY_PATH=$PWD/.deps/python/libucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/tmp/gdrpc-node:$PATH
# NVLink multicast stays off on shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$out/gpus.csv" 2>&1 || true
# At most 8 files come back from the device machine: keep to gpus.csv, info.json, doctor.txt,
# tests.json, tests.log (the consumer run is appended to it), bench-gpu.json, bench-gpu.svg, bench.log.
timeout 60 node bin/gdrpc.js info --json > "$out/info.json"; cat "$out/info.json"
timeout 120 node bin/gdrpc.js doctor > "$out/doctor.txt" 2>&1; cat "$out/doctor.txt"

# Every phase is bounded (the device allows 10 minutes per command): a hung peer ends the phase,
# and `timeout` kills the whole process group it started.
tests_limit=${GDRPC_GPU_TESTS_TIMEOUT:-420}
has() { case ",$what," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
[ "$what" = all ] && what=tests,consumer,bench
if has ptx; then
  # The committed PTX may come from another nvcc than the driver here can load; this one can.
  bash scripts/build-ptx.sh "$out/ptx" 2>&1 | tee -a "$out/tests.log" && cp "$out/ptx/gdrpc.ptx" native/kernels/gdrpc.ptx
fi
bench_limit=${GDRPC_GPU_BENCH_TIMEOUT:-420}
status=0
if has tests; then
  # shellcheck disable=SC2086 # a list of paths
  timeout -k 10 "$tests_limit" node node_modules/vitest/vitest.mjs run ${GDRPC_GPU_TESTS:-test/gpu test/native test/tensor test/compute test/rpc/cuda.test.ts} --reporter=default \
    --reporter=json --outputFile.json="$out/tests.json" "$@" 2>&1 | tee -a "$out/tests.log"
  status=${PIPESTATUS[0]}
fi
if has consumer; then
  # The packed package installed in a consumer project, run with plain node on host and GPU memory.
  devices="cpu cuda:0"; [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ] && devices="$devices cuda:1"
  (cd /tmp/gdrpc-consumer && timeout -k 10 120 node "$OLDPWD/scripts/gpu-consumer.mjs" . $devices) 2>&1 | tee -a "$out/tests.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if has tp; then
  timeout -k 10 "$bench_limit" node --import tsx --import ./bench/on-dist.mjs bench/main.ts tp-mlp --json "$out/bench-tp.json" 2>&1 | tee "$out/tp.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if has kv; then
  timeout -k 10 "$bench_limit" node --import tsx --import ./bench/on-dist.mjs bench/main.ts kv-blocks --json "$out/bench-kv.json" 2>&1 | tee "$out/kv.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if has bench; then
  timeout -k 10 "$bench_limit" node --import tsx --import ./bench/on-dist.mjs bench/main.ts gpu --json "$out/bench-gpu.json" 2>&1 | tee "$out/bench.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  [ -f "$out/bench-gpu.json" ] && timeout 60 node --import tsx bench/chart.ts "$out/bench-gpu.json" "$out/bench-gpu.svg"
fi
exit $status
