"""The reference for examples/tensor-parallel.ts: the same tensor-parallel MLP step in PyTorch, with
torch.distributed (NCCL) all_reduce of the partials, one process per shard, one GPU each (shards
share a GPU when there are fewer). Also times all_reduce alone at the example's all-reduce size
and each shard's two matrix products alone (cuBLAS). Prints one JSON line on stdout.

  python3 bench/nccl_tp_mlp.py --shards 2 --batch 8 --model 4096 --hidden 16384 --layers 4 --steps 20
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(fn, iters, torch):
    """Median wall time of fn() in microseconds, each call ended by a device synchronize."""
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times), min(times)


def worker(rank, args, port, queue):
    import torch
    import torch.distributed as dist

    device = rank % torch.cuda.device_count()
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.shards)
    slice_ = args.hidden // args.shards
    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    layers = []
    for _ in range(args.layers):
        up = (torch.rand(args.model, slice_, device="cuda", generator=g, dtype=torch.float32) - 0.5).mul_((12 / args.model) ** 0.5).half()
        up_bias = torch.zeros(slice_, device="cuda", dtype=torch.float16)
        down = (torch.rand(slice_, args.model, device="cuda", generator=g, dtype=torch.float32) - 0.5).mul_((12 / args.hidden) ** 0.5).half()
        layers.append((up, up_bias, down))
    x0 = (torch.rand(args.batch, args.model, device="cuda", dtype=torch.float32) - 0.5).half()

    def step():
        x = x0
        for up, up_bias, down in layers:
            h = torch.relu(torch.addmm(up_bias, x, up))
            partial = h @ down
            if rank == 0:
                partial += x
            dist.all_reduce(partial)
            x = partial
        return x

    buf = torch.zeros(args.batch, args.model, device="cuda", dtype=torch.float16)
    for _ in range(10):
        step()
        dist.all_reduce(buf)
    dist.barrier()
    step_us, step_min = timed(step, args.steps, torch)
    allreduce_us, allreduce_min = timed(lambda: dist.all_reduce(buf), 200, torch)
    up, up_bias, down = layers[0]
    h = torch.relu(torch.addmm(up_bias, x0, up))
    mm_up_us, _ = timed(lambda: torch.addmm(up_bias, x0, up), 50, torch)
    mm_down_us, _ = timed(lambda: h @ down, 50, torch)
    dist.barrier()
    if rank == 0:
        queue.put({
            "system": "pytorch+nccl", "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
            "step_us_median": step_us, "step_us_min": step_min,
            "all_reduce_bytes": args.batch * args.model * 2, "all_reduce_us_median": allreduce_us, "all_reduce_us_min": allreduce_min,
            "matmul_up_us_median": mm_up_us, "matmul_down_us_median": mm_down_us,
            "note": "times end with torch.cuda.synchronize(); all_reduce alone is 200 calls on a [batch, model] f16 tensor",
        })
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    for name, default in [("shards", 2), ("batch", 8), ("model", 4096), ("hidden", 16384), ("layers", 4), ("steps", 20)]:
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as error:
        print(json.dumps({"skipped": f"no torch: {error}"}))
        return
    if not torch.cuda.is_available() or not torch.distributed.is_nccl_available():
        print(json.dumps({"skipped": "no CUDA or no NCCL in this torch"}))
        return
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, port, queue)) for r in range(args.shards)]
    for p in procs:
        p.start()
    result = queue.get(timeout=300)
    for p in procs:
        p.join(60)
    result.update({"shards": args.shards, "batch": args.batch, "model": args.model, "hidden": args.hidden, "layers": args.layers, "steps": args.steps})
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
