#!/usr/bin/env bash
# Packs NIXL (the nixl-cu13 wheel, slimmed to what its UCX backend needs) into .nixl-pack/nixl.tar.xz
# (git-ignored, at most 40 MiB) for a GPU machine with Python 3.12 but no network or pip.
# scripts/nixl-run.sh unpacks it there and runs bench/nixl_kv_bench.py.
#
# Kept: the nixl_cu13 Python package and its bindings, the dist-info METADATA (for the version),
# libnixl and friends, the UCX plugin, the bundled UCX (libucs/ucp/uct/ucm) with its modules for
# shared memory (cma) and CUDA (cuda: cuda_copy + cuda_ipc; ucm_cuda), and every bundled shared
# library those load (DT_NEEDED, followed recursively). Dropped: the other NIXL plugins (GDS,
# GPUNETIO, INFINIA, LIBFABRIC, OBJ/S3, Azure, ...), telemetry and trace plugins, nixl_ep (the torch
# extensions), the InfiniBand/EFA UCX modules, perftest, scripts and headers.
#
# Usage: bash scripts/nixl-pack.sh [--wheel FILE] [--out DIR]
#   --wheel FILE  use this wheel instead of downloading the cp312 one (e.g. a cp311 build, to test)
#   --out DIR     write nixl.tar.xz and MANIFEST.txt there instead of .nixl-pack
# The download is cached in ${XDG_CACHE_HOME:-~/.cache}/gdrpc-nixl; the tarball is made
# reproducibly (sorted, fixed times and owners), so a second run gives the same bytes.
set -euo pipefail
cd "$(dirname "$0")/.."

version=1.5.1
pyver=3.12
limit_mib=40
wheel=
out=.nixl-pack
while [ $# -gt 0 ]; do
  case "$1" in
    --wheel) wheel=${2:?--wheel takes a file}; shift 2 ;;
    --out) out=${2:?--out takes a folder}; shift 2 ;;
    *) echo "nixl-pack: unknown argument $1 (usage: nixl-pack.sh [--wheel FILE] [--out DIR])" >&2; exit 2 ;;
  esac
done
for tool in python3 readelf xz tar; do
  command -v "$tool" >/dev/null || { echo "nixl-pack: $tool is needed" >&2; exit 1; }
done

if [ -z "$wheel" ]; then
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/gdrpc-nixl
  mkdir -p "$cache"
  tag=cp${pyver/./}
  wheel=$(ls "$cache"/nixl_cu13-"$version"-"$tag"-"$tag"-manylinux_2_28_x86_64.whl 2>/dev/null | head -n1 || true)
  if [ -z "$wheel" ]; then
    echo "nixl-pack: downloading nixl-cu13==$version for Python $pyver into $cache"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$pyver" \
      --platform manylinux_2_28_x86_64 --dest "$cache" "nixl-cu13==$version" \
      || { echo "nixl-pack: pip download of nixl-cu13==$version failed" >&2; exit 1; }
    wheel=$(ls "$cache"/nixl_cu13-"$version"-"$tag"-"$tag"-manylinux_2_28_x86_64.whl | head -n1)
  fi
fi
[ -f "$wheel" ] || { echo "nixl-pack: wheel $wheel not found" >&2; exit 1; }
echo "nixl-pack: wheel $wheel ($(du -h "$wheel" | cut -f1))"

stage=$(mktemp -d -t nixl-pack-XXXXXX)
trap 'rm -rf "$stage"' EXIT
python3 -m zipfile -e "$wheel" "$stage/full"
echo "nixl-pack: unpacked $(du -sh "$stage/full" | cut -f1)"

# Chooses the files: the roots below, then every NEEDED library found among the wheel's own
# library folders, recursively. Libraries not in the wheel (libc, libstdc++, libcuda, ...) must come
# from the machine; they are listed in MANIFEST.txt.
python3 - "$stage/full" "$stage/keep.txt" "$stage/system.txt" <<'PY'
import glob, os, re, subprocess, sys
root, keep_out, system_out = sys.argv[1:4]
os.chdir(root)
pkg = [d for d in glob.glob("nixl_cu1*") if os.path.isfile(os.path.join(d, "__init__.py"))]
if len(pkg) != 1:
    sys.exit("nixl-pack: expected one nixl_cu1x package in the wheel, found %s" % pkg)
pkg = pkg[0]
mesonlibs, libs = "." + pkg + ".mesonpy.libs", pkg + ".libs"
roots = glob.glob(pkg + "/*.so") + [mesonlibs + "/plugins/libplugin_UCX.so"]
roots += [p for p in glob.glob(libs + "/lib*.so*") if re.match(r"lib(ucs|ucp|uct|ucm)-", os.path.basename(p))]
# UCX modules: shared memory (cma) and CUDA; UCX loads them from <dir of libucs>/ucx.
roots += [libs + "/ucx/" + m for m in os.listdir(libs + "/ucx")
          if re.match(r"lib(uct_cma|uct_cuda|uct_cuda_gdrcopy|ucm_cuda)\.so", m)]
missing = [r for r in roots if not os.path.isfile(r)]
if missing or not any("libplugin_UCX" in r for r in roots):
    sys.exit("nixl-pack: the wheel lacks %s" % missing)
search = [mesonlibs, mesonlibs + "/plugins", libs, libs + "/ucx"]
keep, system, todo = set(), {}, list(roots)
while todo:
    f = todo.pop()
    if f in keep:
        continue
    keep.add(f)
    dyn = subprocess.run(["readelf", "-d", f], capture_output=True, text=True, check=True).stdout
    for name in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn):
        found = [os.path.join(d, name) for d in search if os.path.isfile(os.path.join(d, name))]
        if found:
            todo.append(os.path.normpath(found[0]))
        else:
            system.setdefault(name, set()).add(f)
# The Python side, the dist-info METADATA that importlib.metadata reads the version from, and the
# licences.
keep.update(p for p in glob.glob(pkg + "/*.py"))
keep.update(glob.glob("*.dist-info/METADATA") + glob.glob("*.dist-info/licenses/**", recursive=True))
keep = {k for k in keep if os.path.isfile(k)}
with open(keep_out, "w") as fh:
    fh.write("\n".join(sorted(keep)) + "\n")
with open(system_out, "w") as fh:
    for name in sorted(system):
        users = sorted(os.path.basename(x) for x in system[name])
        more = " and %d more" % (len(users) - 3) if len(users) > 3 else ""
        fh.write("%s  (needed by %s%s)\n" % (name, ", ".join(users[:3]), more))
PY

mkdir -p "$stage/nixl"
(cd "$stage/full" && tar -cf - -T "$stage/keep.txt") | tar -xf - -C "$stage/nixl"
echo "nixl-pack: kept $(wc -l < "$stage/keep.txt") files, $(du -sh "$stage/nixl" | cut -f1) (of $(du -sh "$stage/full" | cut -f1))"

# Every kept ELF file must resolve its libraries from the pack or from the system, except the
# driver and CUDA runtime, which only the GPU machine has.
export LD_LIBRARY_PATH
LD_LIBRARY_PATH=$(find "$stage/nixl" -type d \( -name '*.libs' -o -name plugins -o -name ucx \) | sort | paste -sd:)
gpu_only='^(libcuda\.so\.1|libcudart\.so\.[0-9]+|libnvidia-ml\.so\.1)$'
unresolved=$(cd "$stage/nixl" && while read -r f; do
  case "$f" in *.so|*.so.*) ldd "$f" 2>/dev/null | awk -v f="$f" '/not found/ {print $1 "  (needed by " f ")"}' ;; esac
done < "$stage/keep.txt" | sort -u)
unexpected=$(printf '%s\n' "$unresolved" | awk -v ok="$gpu_only" 'NF && $1 !~ ok')
if [ -n "$unexpected" ]; then
  echo "nixl-pack: these libraries resolve neither in the pack nor on this system:" >&2
  printf '%s\n' "$unexpected" >&2
  exit 1
fi
[ -z "$unresolved" ] || { echo "nixl-pack: left to the GPU machine:"; printf '%s\n' "$unresolved" | sed 's/^/  /'; }
unset LD_LIBRARY_PATH

# The Python modules must import only the standard library, numpy, torch (optional: nixl imports it
# only when the caller already has) and the package itself.
python3 - "$stage/nixl" <<'PY'
import ast, glob, os, sys
pkg = os.path.dirname(glob.glob(os.path.join(sys.argv[1], "nixl_cu1*", "__init__.py"))[0])
allowed = {"__future__", "pickle", "sys", "os", "enum", "typing", "logging", "numpy", "torch"}
seen = set()
for path in glob.glob(os.path.join(pkg, "*.py")):
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            seen.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            seen.add(node.module.split(".")[0])
others = sorted(seen - allowed)
if others:
    sys.exit("nixl-pack: the Python package imports modules not checked here: %s" % others)
print("nixl-pack: the Python package imports %s" % ", ".join(sorted(seen)))
PY

mkdir -p "$out"
{
  echo "nixl-cu13 $version from $(basename "$wheel") (sha256 $(sha256sum "$wheel" | cut -d' ' -f1))"
  echo "made by scripts/nixl-pack.sh; unpack with scripts/nixl-run.sh"
  echo; echo "libraries the machine must provide:"; sed 's/^/  /' "$stage/system.txt"
  echo; echo "files:"; (cd "$stage/nixl" && find . -type f -printf '%10s  %P\n' | sort -k2)
} > "$out/MANIFEST.txt.tmp"
tar -C "$stage/nixl" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - . \
  | xz -T0 -9e > "$out/nixl.tar.xz.tmp"
mv "$out/MANIFEST.txt.tmp" "$out/MANIFEST.txt"
mv "$out/nixl.tar.xz.tmp" "$out/nixl.tar.xz"
size=$(stat -c %s "$out/nixl.tar.xz")
du -h "$out"/*
echo "nixl-pack: $out/nixl.tar.xz is $size bytes ($((size / 1048576)) MiB; limit $limit_mib MiB)"
[ "$size" -le $((limit_mib * 1048576)) ] || { echo "nixl-pack: $out/nixl.tar.xz is over $limit_mib MiB" >&2; exit 1; }
