#!/usr/bin/env bash
# Runs on the GPU machine (no network, no pip): unpacks .nixl-pack/nixl.tar.xz (made by
# scripts/nixl-pack.sh) into a fresh folder under /tmp, points Python, the loader, NIXL and UCX at
# it, checks that what the UCX backend loads is there, and runs bench/nixl_kv_bench.py.
# Usage: bash scripts/nixl-run.sh <results-dir> [bench args...]
#   writes <results-dir>/nixl-kv.json (the result), nixl-kv.log (its output) and
#   nixl-ucx-modules.txt (which UCX modules loaded, and why not).
#   NIXL_PYTHON: the Python to use (python3); NIXL_PACK: the tarball (.nixl-pack/nixl.tar.xz);
#   NIXL_BENCH_TIMEOUT: seconds the benchmark may run (540).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: nixl-run.sh <results-dir> [bench args...]}
shift
mkdir -p "$out" || { echo "nixl-run: FAILED: cannot make $out" >&2; exit 1; }
pack=${NIXL_PACK:-.nixl-pack/nixl.tar.xz}
python=${NIXL_PYTHON:-python3}
fail() { echo "nixl-run: FAILED: $*" >&2; exit 1; }
host_only=0
for a in "$@"; do [ "$a" = --host ] && host_only=1; done

[ -f "$pack" ] || fail "$pack missing (run scripts/nixl-pack.sh on a machine with pip, and carry .nixl-pack)"
command -v "$python" >/dev/null || fail "$python not found"
"$python" -c 'import numpy' 2>/dev/null || fail "$python cannot import numpy (NIXL's Python API needs it)"

dir=$(mktemp -d /tmp/nixl-run-XXXXXX) || fail "mktemp under /tmp"
trap 'rm -rf "$dir"' EXIT
xz -dc "$pack" | tar -xf - -C "$dir" || fail "unpacking $pack into $dir"
pkg=$(cd "$dir" && ls -d nixl_cu1[0-9] 2>/dev/null | head -n1)
[ -n "$pkg" ] && [ -f "$dir/$pkg/__init__.py" ] || fail "$pack holds no nixl_cu1x package"
meson="$dir/.$pkg.mesonpy.libs"
libs="$dir/$pkg.libs"
[ -f "$meson/plugins/libplugin_UCX.so" ] || fail "$pack lacks the UCX plugin (.$pkg.mesonpy.libs/plugins/libplugin_UCX.so)"
ls "$libs"/libucp-*.so* >/dev/null 2>&1 || fail "$pack lacks the bundled UCX ($pkg.libs/libucp-*.so)"

# The bindings are built for one Python version.
want=$(cd "$dir/$pkg" && ls _bindings.*.so | sed -E 's/^_bindings\.([a-z]+-[0-9]+)-.*/\1/')
have=$("$python" -c 'import sys; print(sys.implementation.cache_tag)')
[ "$want" = "$have" ] || fail "the pack's bindings are for $want but $python is $have (pack the matching wheel)"

export PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$meson:$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NIXL_PLUGIN_DIR="$meson/plugins"
export UCX_MODULE_DIR="$libs/ucx"

# UCX's CUDA memory hooks (libucm_cuda) need libcudart of the CUDA major version UCX was built for;
# PyTorch's CUDA wheels carry one. Without it UCX only loses the hooks, not the CUDA transports.
cudart=$(ldd "$libs"/ucx/libucm_cuda.so* 2>/dev/null | awk '/libcudart\.so\.[0-9]+ => not found/ {print $1; exit}')
if [ -n "$cudart" ]; then
  found=$("$python" - "$cudart" <<'PY'
import glob, os, site, sys
name = sys.argv[1]
roots = [p for p in site.getsitepackages() + [site.getusersitepackages()] if os.path.isdir(p)]
hits = [h for r in roots for h in glob.glob(os.path.join(r, "nvidia", "**", name + "*"), recursive=True)]
hits += glob.glob("/usr/local/cuda*/lib64/" + name + "*") + glob.glob("/usr/local/cuda*/targets/*/lib/" + name + "*")
print(os.path.dirname(sorted(hits)[0]) if hits else "")
PY
)
  if [ -n "$found" ]; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$found"
    echo "nixl-run: $cudart from $found"
  else
    echo "nixl-run: warning: $cudart not found (UCX's CUDA memory hooks, libucm_cuda, will not load)" >&2
  fi
fi

echo "nixl-run: NIXL from $dir ($(cd "$dir" && ls -d *.dist-info 2>/dev/null))"
echo "nixl-run: PYTHONPATH=$PYTHONPATH"
echo "nixl-run: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
echo "nixl-run: NIXL_PLUGIN_DIR=$NIXL_PLUGIN_DIR UCX_MODULE_DIR=$UCX_MODULE_DIR"

# Every packed library must find what it needs; the CUDA transports only matter with a GPU.
missing=$(find "$dir" -name '*.so*' -type f | while read -r f; do
  ldd "$f" 2>/dev/null | awk -v f="${f#"$dir"/}" '/not found/ {print "  " $1 " (needed by " f ")"}'
done | sort -u)
if [ -n "$missing" ]; then
  echo "nixl-run: libraries not found:" >&2
  printf '%s\n' "$missing" >&2
  core=$(printf '%s\n' "$missing" | grep -v -e '/ucx/' || true)
  [ -z "$core" ] || fail "NIXL's own libraries cannot load (above)"
  cuda=$(printf '%s\n' "$missing" | grep -e 'ucx/libuct_cuda' || true)
  [ -z "$cuda" ] || [ "$host_only" = 1 ] || fail "UCX's CUDA transports (cuda_copy, cuda_ipc in libuct_cuda) cannot load (above): GPU memory cannot move"
fi

# Which UCX modules load here (UCX logs it at debug level when the NIXL agent starts UCX).
UCX_LOG_LEVEL=debug UCX_PROTO_INFO=n timeout 120 "$python" -c "
import $pkg as nixl
a = nixl.nixl_agent('nixl-run-probe', nixl.nixl_agent_config(backends=['UCX']))
print('nixl-run: plugins', a.get_plugin_list(), 'UCX memory', a.get_backend_mem_types('UCX'))
" > "$out/nixl-probe.log" 2>&1
probe=$?
grep -E 'module\.c.*(loaded /|dlopen\(.*failed)' "$out/nixl-probe.log" | sed -E 's/^.*UCX +DEBUG +//' > "$out/nixl-ucx-modules.txt"
grep -E '^nixl-run: plugins' "$out/nixl-probe.log"
echo "nixl-run: UCX modules:"; sed 's/^/  /' "$out/nixl-ucx-modules.txt"
if [ "$probe" -ne 0 ]; then
  tail -n 30 "$out/nixl-probe.log" >&2
  fail "starting a NIXL agent with the UCX backend (exit $probe; $out/nixl-probe.log)"
fi
rm -f "$out/nixl-probe.log"
if [ "$host_only" = 0 ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 \
  && ! grep -q 'loaded .*libuct_cuda' "$out/nixl-ucx-modules.txt"; then
  fail "UCX did not load its CUDA module (libuct_cuda; see $out/nixl-ucx-modules.txt)"
fi

timeout -k 10 "${NIXL_BENCH_TIMEOUT:-540}" "$python" bench/nixl_kv_bench.py --json "$out/nixl-kv.json" "$@" 2>&1 \
  | tee "$out/nixl-kv.log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || fail "bench/nixl_kv_bench.py exited $status (see $out/nixl-kv.log)"
echo "nixl-run: wrote $out/nixl-kv.json"
