#!/usr/bin/env bash
# Builds one of the C programs the benchmarks use beside gdrpc, with the flags kept here only
# (bench/ucx-call.ts builds on this machine, scripts/gpu-pack.sh for the GPU machine):
#   ucx-call    <out> <UCX home>      bench/ucx-call.c, the same call in C over UCX
#   cuda-copies <out> <CUDA include>  bench/cuda-copies.c, an LD_PRELOAD library timing UCX's device copies
# CC picks the compiler (cc).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
what=${1:?usage: build-bench-c.sh ucx-call|cuda-copies <out> <dir>}
out=${2:?output path}
dir=${3:?UCX home or CUDA include folder}
case "$what" in
  ucx-call) exec "${CC:-cc}" -O2 -Wall -o "$out" "$root/bench/ucx-call.c" -I"$dir/include" -L"$dir/lib" -lucp -lucs -ldl ;;
  cuda-copies) exec "${CC:-cc}" -O2 -Wall -shared -fPIC -o "$out" "$root/bench/cuda-copies.c" -I"$dir" -ldl -lpthread ;;
  *) echo "build-bench-c: unknown program '$what' (ucx-call, cuda-copies)" >&2; exit 2 ;;
esac
