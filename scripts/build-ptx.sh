#!/usr/bin/env bash
# Compiles native/kernels/*.cu to PTX with nvcc (run it where the CUDA toolkit is: the GPU
# machine). The PTX is committed; its first line records the SHA-256 of the source it came from,
# which test/compute/ptx.test.ts compares with the source on every run (stale PTX fails).
#   bash scripts/build-ptx.sh [out-dir]      (default: native/kernels)
# The PTX ISA version follows nvcc's release and a driver loads only versions it knows: build with
# an nvcc no newer than the oldest driver to support (the committed PTX: nvcc 13.0, driver 580).
# Without a toolkit, the PyPI wheels nvidia-cuda-nvcc, nvidia-nvvm, nvidia-cuda-crt,
# nvidia-cuda-cccl and nvidia-cuda-runtime of one release, unpacked into one folder, make one:
# NVCC=<folder>/nvidia/cu13/bin/nvcc.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-native/kernels}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { echo "build-ptx: no nvcc (set NVCC or put the CUDA toolkit on PATH)" >&2; exit 1; }
# compute_80: JIT-compiled by the driver for Ampere, Hopper and later.
ARCH=${GDRPC_PTX_ARCH:-compute_80}
mkdir -p "$out"
for source in native/kernels/*.cu; do
  name=$(basename "$source" .cu)
  sum=$(sha256sum "$source" | cut -d' ' -f1)
  tmp=$(mktemp)
  "$NVCC" -ptx -O3 -arch="$ARCH" -o "$tmp" "$source"
  { echo "// gdrpc-source-sha256: $sum"; echo "// gdrpc-source: $source (nvcc -ptx -O3 -arch=$ARCH)"; cat "$tmp"; } > "$out/$name.ptx"
  rm -f "$tmp"
  echo "build-ptx: $source -> $out/$name.ptx ($(wc -c < "$out/$name.ptx") bytes, $("$NVCC" --version | tail -1))"
done
