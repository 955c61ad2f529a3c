#!/usr/bin/env bash
# ucx_perftest's tag round trip with CUDA memory under UCX settings gdrpc could choose, one line
# each: where a CUDA tensor's per-message latency comes from, without gdrpc in the way. Run on the
# GPU machine after scripts/gpu-run.sh has unpacked the UCX runtime (.deps/python/libucx):
#   bash bench/ucx-cuda-latency.sh [size]     (default 65536 bytes)
# Prints "<setting>: lat_us <one-way latency> bw_MBs <bandwidth>" per setting. With
# UCX_CUDA_LATENCY_DIAG=1 it first prints what UCX logs about its hooks and caches under each
# memory-event setting (=only: just that).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/python/libucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
P=.deps/python/libucx/bin/ucx_perftest
[ -x "$P" ] || { echo "ucx-cuda-latency: $P missing (unpack with scripts/gpu-run.sh first)" >&2; exit 1; }
size=${1:-65536}
# gdrpc's other defaults (core/native.ts UCX_DEFAULTS), so that only the setting named differs.
base=(UCX_RNDV_PIPELINE_ERROR_HANDLING=y UCX_TCP_PUT_ENABLE=n UCX_WARN_UNUSED_ENV_VARS=n)
run() {  # label, VAR=value..., --, perftest arguments
  local label=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local port=$((20000 + RANDOM % 10000))
  env "${base[@]}" "${envs[@]}" timeout 60 "$P" -p "$port" > /dev/null 2>&1 &
  sleep 1
  echo "$label: $(env "${base[@]}" "${envs[@]}" timeout 60 "$P" 127.0.0.1 -p "$port" "$@" -f 2>&1 | tail -1 | awk '{print "lat_us", $3, "bw_MBs", $6}')"
  wait
}
lat=(-t tag_lat -m cuda -s "$size" -n 1000)
if [ -n "${UCX_CUDA_LATENCY_DIAG:-}" ]; then
  # What UCX says about its hooks and caches under each memory-event setting (client side).
  for envs in "UCX_MEM_EVENTS=no" "UCX_MEM_EVENTS=yes" \
      "UCX_MEM_EVENTS=yes UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=n" \
      "UCX_MEM_EVENTS=yes UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=n UCX_MEM_CUDA_HOOK_MODE=none"; do
    port=$((20000 + RANDOM % 10000))
    env "${base[@]}" $envs timeout 60 "$P" -p "$port" > /dev/null 2>&1 &
    sleep 1
    echo "== $envs"
    env "${base[@]}" $envs UCX_LOG_LEVEL=diag UCX_MEM_LOG_LEVEL=info timeout 60 "$P" 127.0.0.1 -p "$port" "${lat[@]}" -n 100 -f 2>&1 | grep -i -E "cache|hook|event" | sed 's/^.*UCX  //' | sort | uniq -c | head -20
    wait
  done
  [ "$UCX_CUDA_LATENCY_DIAG" = only ] && exit 0
fi
run "cuda, UCX_MEM_EVENTS=no (gdrpc's default)" UCX_MEM_EVENTS=no -- "${lat[@]}"
run "cuda, UCX_MEM_EVENTS=yes" UCX_MEM_EVENTS=yes -- "${lat[@]}"
run "cuda, UCX_MEMTYPE_CACHE=n" UCX_MEM_EVENTS=no UCX_MEMTYPE_CACHE=n -- "${lat[@]}"
run "cuda, UCX_PROTO_ENABLE=n" UCX_MEM_EVENTS=no UCX_PROTO_ENABLE=n -- "${lat[@]}"
run "cuda, UCX_RNDV_THRESH=1024" UCX_MEM_EVENTS=no UCX_RNDV_THRESH=1024 -- "${lat[@]}"
run "cuda, UCX_RNDV_SCHEME=get_zcopy" UCX_MEM_EVENTS=no UCX_RNDV_SCHEME=get_zcopy -- "${lat[@]}"
run "cuda, UCX_TLS=cuda_ipc,cuda_copy,tcp,self" UCX_MEM_EVENTS=no UCX_TLS=cuda_ipc,cuda_copy,tcp,self -- "${lat[@]}"
run "cuda, UCX_RNDV_PIPELINE_ERROR_HANDLING=n" UCX_MEM_EVENTS=no UCX_RNDV_PIPELINE_ERROR_HANDLING=n -- "${lat[@]}"
# Memory events without some of the process-wide hooks that crashed Node (docs/binding.md).
run "cuda, UCX_MEM_EVENTS=yes UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=n" UCX_MEM_EVENTS=yes UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=n -- "${lat[@]}"
run "cuda, UCX_MEM_EVENTS=yes UCX_MEM_MMAP_HOOK_MODE=none" UCX_MEM_EVENTS=yes UCX_MEM_MMAP_HOOK_MODE=none -- "${lat[@]}"
run "cuda, UCX_MEM_EVENTS=yes UCX_MEM_CUDA_HOOK_MODE=none" UCX_MEM_EVENTS=yes UCX_MEM_CUDA_HOOK_MODE=none -- "${lat[@]}"
# No hook at all (events on, every hook mode off): which of UCX's caches the gain needs.
nohooks=(UCX_MEM_EVENTS=yes UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=n UCX_MEM_CUDA_HOOK_MODE=none)
run "cuda, events on, no hooks" "${nohooks[@]}" -- "${lat[@]}"
run "cuda, events on, no hooks, UCX_RCACHE_ENABLE=n" "${nohooks[@]}" UCX_RCACHE_ENABLE=n -- "${lat[@]}"
run "cuda, events on, no hooks, UCX_MEMTYPE_CACHE=n" "${nohooks[@]}" UCX_MEMTYPE_CACHE=n -- "${lat[@]}"
run "cuda, UCX_MEM_EVENTS=yes UCX_RCACHE_ENABLE=n" UCX_MEM_EVENTS=yes UCX_RCACHE_ENABLE=n -- "${lat[@]}"
run "cuda, UCX_MEM_EVENTS=yes UCX_MEMTYPE_CACHE=n" UCX_MEM_EVENTS=yes UCX_MEMTYPE_CACHE=n -- "${lat[@]}"
run "cuda, UCX_MEM_EVENTS=no UCX_CUDA_IPC_CACHE=y" UCX_MEM_EVENTS=no UCX_CUDA_IPC_CACHE=y -- "${lat[@]}"
run "cuda, events on, no hooks, 16 MiB" "${nohooks[@]}" -- -t tag_lat -m cuda -s 16777216 -n 200
run "cuda, UCX_MEM_EVENTS=no, 16 MiB" UCX_MEM_EVENTS=no -- -t tag_lat -m cuda -s 16777216 -n 200
run "host (reference)" UCX_MEM_EVENTS=no -- -t tag_lat -m host -s "$size" -n 1000
