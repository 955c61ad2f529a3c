#!/usr/bin/env python3
"""PyTorch RPC baseline for bench/gpu.ts: TensorPipe backend with device maps, two processes.

The caller (rank 0) times a small call (no tensors) and calls taking a CUDA tensor argument of
each size; the callee waits for the tensor's bytes (stream synchronize) and returns its length,
like gdrpc's sink. Prints one JSON line: {"results": [rows]} or {"skipped": "reason"}.
"""
import argparse
import json
import os
import socket
import sys
import tempfile
import time

SYSTEM = "pytorch-rpc-tensorpipe"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--client-device", type=int, default=0, help="caller's CUDA device index")
    parser.add_argument("--server-device", type=int, default=0, help="callee's CUDA device index")
    parser.add_argument("--sizes", default=str(16 << 20) + "," + str(1 << 30),
                        help="comma-separated tensor sizes in bytes")
    parser.add_argument("--small-calls", type=int, default=2000)
    parser.add_argument("--budget-bytes", type=int, default=16 << 30,
                        help="bytes moved per size (iterations = budget / size, 10..500)")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    if any(s <= 0 for s in args.sizes):
        parser.error("sizes must be positive")
    return args


def iterations(size, budget):
    return max(10, min(500, budget // size))


def percentile(sorted_samples, p):
    index = min(len(sorted_samples) - 1, max(0, -(-p * len(sorted_samples) // 100) - 1))
    return sorted_samples[int(index)]


def row(workload, size, samples_us, extra):
    samples = sorted(samples_us)
    p50 = percentile(samples, 50)
    mean = sum(samples) / len(samples)
    result = {"system": SYSTEM, "workload": workload, "bytes": size, "p50_us": p50,
              "p99_us": percentile(samples, 99), "ops_per_s": 1e6 / mean,
              "gbps": size / p50 / 1e3 if size > 0 else None, "iterations": len(samples)}
    result.update(extra)
    return result


def noop(n):
    return n


def consume(tensor):
    import torch
    if tensor.is_cuda:
        torch.cuda.current_stream(tensor.device).synchronize()
    return tensor.numel()


def timed(fn, iters):
    samples = []
    for _ in range(iters):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1e6)
    return samples


def worker(rank, args, port, out_path):
    import torch
    import torch.distributed.rpc as rpc

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    cuda = args.device == "cuda"
    mine = args.client_device if rank == 0 else args.server_device
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=16, rpc_timeout=120,
                                              devices=[mine] if cuda else None)
    if cuda:
        torch.cuda.set_device(mine)
        if rank == 0:
            options.set_device_map("callee", {args.client_device: args.server_device})
    rpc.init_rpc("caller" if rank == 0 else "callee", rank=rank, world_size=2, rpc_backend_options=options)
    try:
        if rank == 0:
            results = []
            small = lambda: rpc.rpc_sync("callee", noop, args=(1,))
            timed(small, min(200, args.small_calls))
            results.append(row("small_call_rtt", 0, timed(small, args.small_calls), {}))
            device = "cuda:%d" % args.client_device if cuda else "cpu"
            for size in args.sizes:
                tensor = torch.full((size,), 7, dtype=torch.uint8, device=device)
                if cuda:
                    torch.cuda.synchronize(device)
                call = lambda: rpc.rpc_sync("callee", consume, args=(tensor,))
                n = iterations(size, args.budget_bytes)
                timed(call, max(2, n // 10))
                results.append(row("tensor_arg", size, timed(call, n), {"device_map": "%s->%s" % (
                    device, "cuda:%d" % args.server_device if cuda else "cpu")}))
                del tensor
            with open(out_path, "w") as out:
                json.dump(results, out)
    finally:
        rpc.shutdown()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    args = parse_args(argv)
    try:
        import torch
        import torch.distributed.rpc  # noqa: F401
        import torch.multiprocessing as mp
    except ImportError as error:
        print(json.dumps({"skipped": "PyTorch with torch.distributed.rpc is not installed: %s" % error}))
        return 0
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print(json.dumps({"skipped": "torch.cuda is not available"}))
            return 0
        count = torch.cuda.device_count()
        if max(args.client_device, args.server_device) >= count:
            print(json.dumps({"skipped": "needs device %d, have %d" % (max(args.client_device, args.server_device), count)}))
            return 0
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "results.json")
        mp.spawn(worker, args=(args, free_port(), out_path), nprocs=2, join=True)
        with open(out_path) as f:
            results = json.load(f)
    print(json.dumps({"results": results, "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
