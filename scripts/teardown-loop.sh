#!/usr/bin/env bash
# Runs test/native/thread-teardown-child.ts N times with two CPU hogs beside it (the setting in
# which its rare heap abort was seen), counts the runs that did not end as
# thread-teardown.test.ts requires, and keeps each failure's stdout/stderr under OUT.
# Usage: scripts/teardown-loop.sh N [OUT]   (extra environment passes through, e.g. MALLOC_PERTURB_)
set -u
N=${1:-120}
OUT=${2:-/tmp/teardown-loop}
HOGS=${HOGS:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
# The child runs in OUT, where a crash leaves its core dump (core_pattern "core": the working
# directory; the checkout has a folder of that name).
cd "$OUT"
ulimit -c unlimited 2>/dev/null
rm -f core core.*
pids=()
for _ in $(seq "$HOGS"); do yes > /dev/null & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
expected='{"exits":{"exit":[0,0],"throw":[1,1],"terminate":[1,1],"rpc":[0,0]},"main":"alive"}'
fail=0
for i in $(seq "$N"); do
  node --import "$ROOT/node_modules/tsx/dist/loader.mjs" "$ROOT/test/native/thread-teardown-child.ts" exit throw terminate rpc > run.out 2> run.err
  rc=$?
  line=$(grep -m1 '^{' run.out)
  if [ "$rc" -ne 0 ] || [ "$line" != "$expected" ] || grep -qE 'Segmentation|Aborted|core dumped|FATAL ERROR|malloc|free\(\)' run.err; then
    fail=$((fail + 1))
    cp run.err "fail-$i.err"; cp run.out "fail-$i.out"
    for c in core core.*; do [ -f "$c" ] && mv "$c" "core-$i"; done
    echo "run $i: rc=$rc $(grep -m1 -E 'malloc|free|Segmentation|Abort|FATAL' run.err)"
  fi
  [ $((i % 10)) -eq 0 ] && echo "... $i runs, $fail failures"
done
echo "failures: $fail / $N"
