#!/usr/bin/env python3
"""Raw device-to-device copy, the ceiling for bench/gpu.ts: dst.copy_(src) timed with CUDA events.

gbps counts the bytes copied (size / time), the same count gdrpc and ucx_perftest report for a
transfer; read_plus_write_gbps counts each byte read and written (2 x size / time), the figure
memory-bandwidth tables quote. Uses PyTorch, else CuPy. Prints one JSON line.
"""
import argparse
import json
import sys


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default=",".join(str(1 << s) for s in (24, 26, 28, 30)))
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--peer", action="store_true", help="also copy cuda:0 -> cuda:1 when there are two GPUs")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.iters <= 0 or any(s <= 0 for s in args.sizes):
        parser.error("sizes and iters must be positive")
    return args


def row(system, src, dst, size, ms_per_copy, iters):
    seconds = ms_per_copy / 1e3
    return {"system": system, "workload": "d2d_copy/%s->%s" % (src, dst), "bytes": size,
            "p50_us": ms_per_copy * 1e3, "p99_us": None, "ops_per_s": 1 / seconds,
            "gbps": size / seconds / 1e9, "read_plus_write_gbps": 2 * size / seconds / 1e9,
            "iterations": iters, "bytes_counted": "copied (size / time)"}


def with_torch(args):
    import torch
    if not torch.cuda.is_available():
        return None
    pairs = [(0, 0)] + ([(0, 1)] if args.peer and torch.cuda.device_count() >= 2 else [])
    rows = []
    for a, b in pairs:
        for size in args.sizes:
            src = torch.empty(size, dtype=torch.uint8, device="cuda:%d" % a)
            dst = torch.empty(size, dtype=torch.uint8, device="cuda:%d" % b)
            with torch.cuda.device(a):
                for _ in range(3):
                    dst.copy_(src)
                torch.cuda.synchronize(a)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(args.iters):
                    dst.copy_(src)
                end.record()
                end.synchronize()
                rows.append(row("cuda-copy (torch)", "cuda:%d" % a, "cuda:%d" % b, size, start.elapsed_time(end) / args.iters, args.iters))
            del src, dst
            torch.cuda.empty_cache()
    return rows


def with_cupy(args):
    import cupy
    rows = []
    for size in args.sizes:
        src = cupy.empty(size, dtype=cupy.uint8)
        dst = cupy.empty(size, dtype=cupy.uint8)
        for _ in range(3):
            dst[...] = src
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(args.iters):
            dst[...] = src
        end.record()
        end.synchronize()
        rows.append(row("cuda-copy (cupy)", "cuda:0", "cuda:0", size, cupy.cuda.get_elapsed_time(start, end) / args.iters, args.iters))
    return rows


def main(argv):
    args = parse_args(argv)
    errors = []
    for name, fn in (("torch", with_torch), ("cupy", with_cupy)):
        try:
            rows = fn(args)
        except ImportError as error:
            errors.append("%s: %s" % (name, error))
            continue
        if rows is None:
            errors.append("%s: CUDA not available" % name)
            continue
        print(json.dumps({"results": rows}))
        return 0
    print(json.dumps({"skipped": "no CUDA copy available (%s)" % "; ".join(errors)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
