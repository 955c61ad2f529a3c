#!/usr/bin/env python3
"""KV-cache hand-over through NIXL (UCX backend): the reference for `npm run bench -- kv-blocks`.

An owner process (spawned) registers one region of N blocks of B bytes on its device (cuda:1 when
two GPUs are visible, else cuda:0, else host memory; --host forces host memory) and fills block i
with a pattern of i. This process registers its own region of N x B (cuda:0 or host) and READs all
N blocks with one NIXL transfer whose descriptor list maps remote block i to local block perm[i]
(a fixed pseudo-random permutation, as in a paged KV cache), timed from post (or from making the
transfer, where that is per call) until polling sees it done:
  - nixl prepped:       descriptor lists prepared and the transfer made once, re-posted each round;
  - nixl make_prepped:  lists prepared once, make_prepped_xfer each round (how vLLM's connector
                        drives NIXL), then post, wait and release;
  - nixl per-call:      descriptor lists built and initialize_xfer each round, then post, wait,
                        release;
  - nixl one descriptor: the same bytes as one descriptor (the transfer alone, no per-block cost),
                        made once and re-posted.
Each round runs every way once, in turn; round 0 warms up and is not kept. Afterwards every way runs
once more on a poisoned local region and the bytes are checked block by block (a checksum per block
from the owner, and the pattern itself); a mismatch fails the run. On a GPU the raw copy of the same
bytes between the same devices (PyTorch, CUDA events, median of --copy-iters) is the ceiling.

With --sizes S1,S2,... it measures rate by size instead (the reference for the rate-by-size chart
of the GPU bench): the owner registers one region as large as the largest size, and for each size
this process READs that many bytes as one descriptor (made once, re-posted) until --size-budget-ms
has passed (at least --rounds, at most 1,000 reads), after a warm-up; beside it, the torch copy of
the same size between the same devices. The whole region is then read once more onto a poisoned
local region and checked block by block.

Usage: python3 bench/nixl_kv_bench.py [--blocks N] [--block-bytes B] [--rounds R] [--host]
                                      [--json FILE] [--no-proto-info]
       python3 bench/nixl_kv_bench.py --sizes 4096,1048576,... [--size-budget-ms MS] [--json FILE]
Writes {machine, what, transports, results, copy, skipped} like bench/kv-blocks.ts.
"""
import argparse
import datetime
import json
import multiprocessing
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
import traceback

POLL_LIMIT_S = 120.0  # a transfer that is not done by then fails the run
CHUNK_BLOCKS = 256  # blocks per step when making or checking patterns (bounds scratch memory)
SWEEP_BLOCK_BYTES = 1 << 20  # block size of the region a --sizes run reads from
SWEEP_MAX_READS = 1000  # reads of one size at most in a --sizes run


# ----------------------------------------------------------------------------- arguments

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocks", type=int, default=4096, help="N, blocks in the region (4096)")
    p.add_argument("--block-bytes", type=int, default=32768, help="B, bytes a block (32768)")
    p.add_argument("--rounds", type=int, default=10, help="timed rounds after one warm-up round (10)")
    p.add_argument("--copy-iters", type=int, default=20, help="timed raw copies for the reference (20)")
    p.add_argument("--host", action="store_true", help="host memory at both ends, even with GPUs")
    p.add_argument("--json", help="write the result here")
    p.add_argument("--seed", type=int, default=20240611, help="seed of the block permutation")
    p.add_argument("--no-proto-info", action="store_true",
                   help="do not capture UCX_PROTO_INFO to name the UCX transports used")
    p.add_argument("--sizes", help="rate by size: comma-separated byte counts, each read as one descriptor")
    p.add_argument("--size-budget-ms", type=int, default=600, help="time spent reading each size (600)")
    a = p.parse_args(argv)
    for name in ("blocks", "block_bytes", "rounds", "copy_iters", "size_budget_ms"):
        if getattr(a, name) <= 0:
            p.error("--%s takes a positive integer" % name.replace("_", "-"))
    if a.block_bytes % 4:
        p.error("--block-bytes must be a multiple of 4 (the pattern is 32-bit words)")
    if a.sizes is not None:
        try:
            a.sizes = sorted({int(x) for x in a.sizes.split(",") if x.strip()})
        except ValueError:
            p.error("--sizes takes comma-separated byte counts")
        if not a.sizes or a.sizes[0] <= 0 or any(x % 4 for x in a.sizes):
            p.error("--sizes takes positive byte counts, each a multiple of 4")
        # The region is blocks of at most 1 MiB (the pattern is made block by block), as many as
        # the largest size needs.
        a.block_bytes = min(SWEEP_BLOCK_BYTES, a.sizes[-1])
        a.blocks = -(-a.sizes[-1] // a.block_bytes)
    return a


# ----------------------------------------------------------------------------- nixl import

def import_nixl():
    """The nixl_cu13 wheel's module (or the `nixl` meta package); exits with a clear reason if absent."""
    errors = []
    for name in ("nixl_cu13", "nixl"):
        try:
            mod = __import__(name)
            if hasattr(mod, "nixl_agent"):
                return mod
            from nixl._api import nixl_agent, nixl_agent_config  # noqa: F401 (older layouts)
            return sys.modules["nixl._api"]
        except Exception as error:  # ImportError, or a missing shared library (OSError)
            errors.append("%s: %s" % (name, error))
    raise SystemExit("nixl_kv_bench: cannot import NIXL (%s); PYTHONPATH=%s LD_LIBRARY_PATH=%s"
                     % ("; ".join(errors), os.environ.get("PYTHONPATH", ""), os.environ.get("LD_LIBRARY_PATH", "")))


def nixl_version():
    try:
        from importlib.metadata import version
    except ImportError:
        return None
    for dist in ("nixl-cu13", "nixl_cu13", "nixl-cu12", "nixl"):
        try:
            return "%s %s" % (dist, version(dist))
        except Exception:
            continue
    return None


def ucx_version(nixl_mod):
    """UCX's own version string, from the libucp the package bundles (None if not found)."""
    import ctypes
    import glob
    base = os.path.dirname(os.path.abspath(nixl_mod.__file__))
    for lib in sorted(glob.glob(os.path.join(base, "..", "*.libs", "libucp*.so*"))):
        try:
            ucp = ctypes.CDLL(lib)
            ucp.ucp_get_version_string.restype = ctypes.c_char_p
            return ucp.ucp_get_version_string().decode()
        except Exception:
            continue
    return None


def make_agent(nixl_mod, name):
    agent = nixl_mod.nixl_agent(name, nixl_mod.nixl_agent_config(backends=["UCX"]))
    if "UCX" not in agent.backends:
        raise RuntimeError("NIXL agent %s has no UCX backend; plugins found: %s (NIXL_PLUGIN_DIR=%s)"
                           % (name, agent.get_plugin_list(), os.environ.get("NIXL_PLUGIN_DIR", "unset")))
    return agent


# ----------------------------------------------------------------------------- memory

class Region:
    """N blocks of B bytes, one allocation: torch on a CUDA device, else numpy in host memory."""

    def __init__(self, device, blocks, block_bytes):
        self.device, self.blocks, self.block_bytes = device, blocks, block_bytes
        self.bytes = blocks * block_bytes
        self.words = block_bytes // 4
        if device == "cpu":
            import numpy as np
            self.lib = "numpy"
            raw = np.zeros(self.bytes + 4096, dtype=np.uint8)  # page-aligned view inside
            skip = (-raw.ctypes.data) % 4096
            self._raw = raw
            self.buf = raw[skip:skip + self.bytes]
            self.addr = self.buf.ctypes.data
            self.dev_id = 0
            self.mem = "DRAM"
        else:
            import torch
            self.lib = "torch"
            self.dev_id = int(device.split(":")[1])
            torch.cuda.set_device(self.dev_id)
            self.buf = torch.zeros(self.bytes, dtype=torch.uint8, device=device)
            self.addr = self.buf.data_ptr()
            self.mem = "VRAM"

    def block_words(self, i0, i1):
        """Blocks i0..i1-1 as a (i1-i0, B/4) int32 view."""
        part = self.buf[i0 * self.block_bytes:i1 * self.block_bytes]
        if self.lib == "numpy":
            return part.view("int32").reshape(i1 - i0, self.words)
        import torch
        return part.view(torch.int32).view(i1 - i0, self.words)

    def rows(self, order):
        """The rows (block indices) `order` of the region as an int32 (len, B/4) copy."""
        whole = self.block_words(0, self.blocks)
        if self.lib == "numpy":
            return whole[order]
        import torch
        return whole[torch.as_tensor(order, device=self.buf.device, dtype=torch.long)]

    def poison(self):
        if self.lib == "numpy":
            self.buf.fill(0xA5)
        else:
            self.buf.fill_(0xA5)
            import torch
            torch.cuda.synchronize(self.dev_id)

    def sync(self):
        if self.lib == "torch":
            import torch
            torch.cuda.synchronize(self.dev_id)


def pattern(lib, i0, i1, words, device):
    """int32 contents of blocks i0..i1-1: every word depends on its block and its place."""
    if lib == "numpy":
        import numpy as np
        rows = np.arange(i0, i1, dtype=np.int64)[:, None]
        cols = np.arange(words, dtype=np.int64)[None, :]
        v = (rows * 2654435761 + cols * 40503 + 0x5BD1E995) & 0xFFFFFFFF
        return ((v ^ 0x80000000) - 0x80000000).astype(np.int32)
    import torch
    rows = torch.arange(i0, i1, dtype=torch.int64, device=device)[:, None]
    cols = torch.arange(words, dtype=torch.int64, device=device)[None, :]
    v = (rows * 2654435761 + cols * 40503 + 0x5BD1E995) & 0xFFFFFFFF
    return ((v ^ 0x80000000) - 0x80000000).to(torch.int32)


def checksums(lib, words2d):
    """One int64 a block: sum of word x (place mod 1021 + 1), no overflow for blocks below 16 MiB."""
    if lib == "numpy":
        import numpy as np
        w = (np.arange(words2d.shape[1], dtype=np.int64) % 1021) + 1
        return [int(x) for x in (words2d.astype(np.int64) * w[None, :]).sum(axis=1)]
    import torch
    w = (torch.arange(words2d.shape[1], dtype=torch.int64, device=words2d.device) % 1021) + 1
    return [int(x) for x in (words2d.to(torch.int64) * w[None, :]).sum(dim=1).cpu().tolist()]


def fill_pattern(region):
    sums = []
    for i0 in range(0, region.blocks, CHUNK_BLOCKS):
        i1 = min(region.blocks, i0 + CHUNK_BLOCKS)
        p = pattern(region.lib, i0, i1, region.words, region.device)
        view = region.block_words(i0, i1)
        view[...] = p
        sums.extend(checksums(region.lib, view))
    region.sync()
    return sums


def permutation(n, seed):
    """A fixed pseudo-random permutation of range(n) (Fisher-Yates on a 64-bit LCG: no numpy RNG
    version dependence)."""
    perm = list(range(n))
    state = seed & 0xFFFFFFFFFFFFFFFF
    for i in range(n - 1, 0, -1):
        state = (state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        j = (state >> 33) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


# ----------------------------------------------------------------------------- UCX transports

class FdCapture:
    """Copies what C code writes to fd 1 and 2 into a file (UCX prints UCX_PROTO_INFO there), while
    still passing it through to the real stdout/stderr afterwards."""

    def __init__(self):
        self.file = tempfile.TemporaryFile(mode="w+b")
        self.saved = None

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        os.close(self.saved[0])
        os.close(self.saved[1])
        return False

    def text(self):
        self.file.seek(0)
        return self.file.read().decode("utf-8", "replace")


def proto_tables(text):
    """Parses the tables UCX_PROTO_INFO=y prints: returns (one line per row: "operation: range
    description config", the transport names in the Config column, e.g. ["cma", "cuda_ipc"])."""
    rows, transports, operation, header_cells = [], set(), None, 0
    for raw in text.splitlines():
        line = re.sub(r"^(\[[^\]]*\]\s*)+", "", raw.strip())  # drop "[time] [host:pid:thread]"
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 1:
            header_cells += 1
            # The first one-cell line names the endpoint configuration, the second the operation.
            if header_cells % 2 == 0:
                operation = cells[0]
            continue
        header_cells = 0
        if len(cells) >= 3 and cells[0] != "Range" and operation is not None:
            config = cells[-1]
            rows.append("%s: %s %s %s" % (operation, cells[0], cells[1], config))
            for part in re.split(r"[\s,]+", config):
                name = part.split("/")[0]
                if re.fullmatch(r"[a-z][a-z0-9_]*", name) and "/" in part:
                    transports.add(name)
    return rows, sorted(transports)


# ----------------------------------------------------------------------------- owner process

def owner_main(conn, device, blocks, block_bytes, quiet_proto):
    """Registers and fills the region, hands its NIXL metadata over `conn`, waits for 'done'."""
    if quiet_proto:  # the protocol tables that matter are the puller's (it initiates the READs)
        os.environ.pop("UCX_PROTO_INFO", None)
    try:
        nixl = import_nixl()
        region = Region(device, blocks, block_bytes)
        sums = fill_pattern(region)
        agent = make_agent(nixl, "kv-owner-%d" % os.getpid())
        reg = agent.register_memory([(region.addr, region.bytes, region.dev_id, "")], region.mem)
        conn.send({"ok": True, "metadata": agent.get_agent_metadata(), "addr": region.addr,
                   "bytes": region.bytes, "dev_id": region.dev_id, "mem": region.mem, "sums": sums})
        # The owner keeps its agent (and its progress thread) up until the puller is finished.
        while True:
            if conn.poll(1.0):
                msg = conn.recv()
                if msg == "done":
                    break
        agent.deregister_memory(reg)
        conn.send({"ok": True, "bye": True})
    except BaseException as error:  # noqa: BLE001 (reported to the puller, then re-raised)
        try:
            conn.send({"ok": False, "error": "%s\n%s" % (error, traceback.format_exc())})
        except Exception:
            pass
        raise


# ----------------------------------------------------------------------------- puller

def wait_done(agent, handle, what):
    deadline = time.monotonic() + POLL_LIMIT_S
    while True:
        state = agent.check_xfer_state(handle)
        if state == "DONE":
            return
        if state == "ERR":
            raise RuntimeError("NIXL transfer %s failed (check_xfer_state: ERR)" % what)
        if time.monotonic() > deadline:
            raise RuntimeError("NIXL transfer %s not done after %.0f s" % (what, POLL_LIMIT_S))


def post(agent, handle, what):
    state = agent.transfer(handle)
    if state == "ERR":
        raise RuntimeError("NIXL transfer %s: posting failed" % what)


def percentile(sorted_us, p):
    if not sorted_us:
        return None
    i = min(len(sorted_us) - 1, max(0, -(-p * len(sorted_us) // 100) - 1))
    return sorted_us[int(i)]


def verify(region, perm, owner_sums, permuted):
    """Checks every local block against the owner's checksum and the pattern; returns bad block ids."""
    bad = []
    n = region.blocks
    for i0 in range(0, n, CHUNK_BLOCKS):
        i1 = min(n, i0 + CHUNK_BLOCKS)
        where = [perm[i] for i in range(i0, i1)] if permuted else list(range(i0, i1))
        got = region.rows(where)
        sums = checksums(region.lib, got)
        want = pattern(region.lib, i0, i1, region.words, region.device)
        if region.lib == "numpy":
            same_rows = (got == want).all(axis=1).tolist()
        else:
            same_rows = (got == want).all(dim=1).cpu().tolist()
        for k, i in enumerate(range(i0, i1)):
            if sums[k] != owner_sums[i] or not same_rows[k]:
                bad.append(i)
    return bad


def torch_copy(src_dev, dst_dev, nbytes, iters):
    """dst.copy_(src) between the devices of the transfer, CUDA events around each copy; median."""
    import torch
    src = torch.empty(nbytes, dtype=torch.uint8, device=src_dev)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=dst_dev)
    times = []
    with torch.cuda.device(dst.device):
        for _ in range(3):
            dst.copy_(src)
        torch.cuda.synchronize()
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
    del src, dst
    torch.cuda.empty_cache()
    times.sort()
    p50 = times[len(times) // 2]
    return {"system": "cuda-copy (torch)", "workload": "d2d_copy/%s->%s" % (src_dev, dst_dev), "bytes": nbytes,
            "p50_us": p50, "p99_us": percentile(times, 99), "ops_per_s": 1e6 / p50, "gbps": nbytes / p50 / 1e3,
            "read_plus_write_gbps": 2 * nbytes / p50 / 1e3, "iterations": iters, "bytes_counted": "copied (size / time)"}


def gpu_count(force_host):
    """(number of CUDA devices torch sees, why there are none)."""
    if force_host:
        return 0, "host memory asked for (--host)"
    try:
        import torch
    except ImportError as error:
        return 0, "torch not importable (%s)" % error
    if not torch.cuda.is_available():
        return 0, "no GPU (torch.cuda.is_available() is False)"
    return torch.cuda.device_count(), None


def describe_machine(nixl_mod):
    def read(path):
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return ""
    cpu = next((l.split(":", 1)[1].strip() for l in read("/proc/cpuinfo").splitlines() if l.startswith("model name")),
               platform.processor() or "unknown")
    mem = re.search(r"MemTotal:\s+(\d+) kB", read("/proc/meminfo"))
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        gpus = [l for l in out.stdout.strip().splitlines() if l] if out.returncode == 0 else []
    except Exception:
        gpus = []
    torch_version = None
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        torch_version = torch.__version__ + (" (CUDA %s)" % torch.version.cuda if torch.version.cuda else "")
    else:
        try:
            from importlib.metadata import version
            torch_version = version("torch")
        except Exception:
            torch_version = None
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memoryGiB": round(int(mem.group(1)) / 2 ** 20) if mem else None,
        "kernel": platform.release(), "python": platform.python_version(), "host": socket.gethostname(),
        "torch": torch_version, "nixl": nixl_version(), "ucx": ucx_version(nixl_mod), "gpus": gpus,
        # UCX settings the run was given (UCX_PROTO_INFO is this script's own).
        "ucx_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("UCX_") and k != "UCX_PROTO_INFO"},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }


def main(argv):
    args = parse_args(argv)
    quiet_proto = False
    if not args.no_proto_info and "UCX_PROTO_INFO" not in os.environ:
        # UCX prints the protocol it picks for each new kind of operation (to fd 1, captured below).
        os.environ["UCX_PROTO_INFO"] = "y"
        quiet_proto = True
    gpus, no_gpu = gpu_count(args.host)
    local = "cuda:0" if gpus > 0 else "cpu"
    remote = "cuda:1" if gpus > 1 else local
    n, b = args.blocks, args.block_bytes
    total = n * b
    nixl = import_nixl()
    print("nixl_kv_bench: %d blocks of %d B (%d B) from %s (owner process) into %s; %s; %d rounds after a warm-up"
          % (n, b, total, remote, local, nixl_version() or "nixl (version unknown)", args.rounds), flush=True)

    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    owner = ctx.Process(target=owner_main, args=(theirs, remote, n, b, quiet_proto), daemon=True)
    owner.start()
    samples = {"nixl prepped": [], "nixl make_prepped": [], "nixl per-call": [], "nixl one descriptor": []}
    skipped, captured = [], ""
    handles = []
    try:
        deadline = time.monotonic() + 180
        while not mine.poll(1.0):
            if not owner.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the owner process sent nothing (alive: %s, exit code %s)" % (owner.is_alive(), owner.exitcode))
        hello = mine.recv()
        if not hello.get("ok"):
            raise RuntimeError("the owner process failed:\n%s" % hello.get("error"))
        region = Region(local, n, b)
        agent = make_agent(nixl, "kv-puller-%d" % os.getpid())
        reg = agent.register_memory([(region.addr, region.bytes, region.dev_id, "")], region.mem)
        peer = agent.add_remote_agent(hello["metadata"])
        if isinstance(peer, bytes):
            peer = peer.decode()
        import numpy as np
        if args.sizes is not None:
            rows, copy, captured = sweep(args, agent, peer, hello, region, local, remote, gpus, skipped)
            agent.remove_remote_agent(peer)
            agent.deregister_memory(reg)
            mine.send("done")
            if mine.poll(30):
                mine.recv()
            return finish(args, nixl, rows, copy, skipped, captured, remote, local,
                          "one descriptor of each size READ by NIXL (UCX backend) from %s (another process) into %s, made "
                          "once and re-posted, for %d ms a size (%d to %d reads) after a warm-up; the torch copy of each "
                          "size between the same devices; the whole region verified after"
                          % (remote, local, args.size_budget_ms, args.rounds, SWEEP_MAX_READS))
        perm = permutation(n, args.seed)
        ids = np.arange(n, dtype=np.uint64)
        rdesc = np.stack([hello["addr"] + ids * b, np.full(n, b, np.uint64),
                          np.full(n, hello["dev_id"], np.uint64)], axis=1).astype(np.uint64)
        ldesc = np.stack([region.addr + np.asarray(perm, dtype=np.uint64) * b, np.full(n, b, np.uint64),
                          np.full(n, region.dev_id, np.uint64)], axis=1).astype(np.uint64)
        rone = np.array([[hello["addr"], total, hello["dev_id"]]], dtype=np.uint64)
        lone = np.array([[region.addr, total, region.dev_id]], dtype=np.uint64)
        rmem, lmem = hello["mem"], region.mem
        index = np.arange(n, dtype=np.int32)

        # Made once: the prepared lists (local and remote side), the re-posted transfers.
        lprep = agent.prep_xfer_dlist("NIXL_INIT_AGENT", ldesc, lmem)
        rprep = agent.prep_xfer_dlist(peer, rdesc, rmem)
        prepped = agent.make_prepped_xfer("READ", lprep, index, rprep, index)
        one = agent.initialize_xfer("READ", agent.get_xfer_descs(lone, lmem), agent.get_xfer_descs(rone, rmem), peer)
        handles += [prepped, one, lprep, rprep]

        def run_prepped():
            t0 = time.perf_counter_ns()
            post(agent, prepped, "prepped")
            wait_done(agent, prepped, "prepped")
            return (time.perf_counter_ns() - t0) / 1e3

        def run_make_prepped():
            t0 = time.perf_counter_ns()
            h = agent.make_prepped_xfer("READ", lprep, index, rprep, index)
            post(agent, h, "make_prepped")
            wait_done(agent, h, "make_prepped")
            us = (time.perf_counter_ns() - t0) / 1e3
            h.release()
            return us

        def run_per_call():
            t0 = time.perf_counter_ns()
            h = agent.initialize_xfer("READ", agent.get_xfer_descs(ldesc, lmem), agent.get_xfer_descs(rdesc, rmem), peer)
            post(agent, h, "per-call")
            wait_done(agent, h, "per-call")
            us = (time.perf_counter_ns() - t0) / 1e3
            h.release()
            return us

        def run_one():
            t0 = time.perf_counter_ns()
            post(agent, one, "one descriptor")
            wait_done(agent, one, "one descriptor")
            return (time.perf_counter_ns() - t0) / 1e3

        ways = {"nixl prepped": (run_prepped, True), "nixl make_prepped": (run_make_prepped, True),
                "nixl per-call": (run_per_call, True), "nixl one descriptor": (run_one, False)}
        for rnd in range(args.rounds + 1):  # round 0 warms up and is not kept
            if rnd == 0 and not args.no_proto_info:
                with FdCapture() as cap:  # the first use of each protocol prints its table
                    for name, (fn, _) in ways.items():
                        fn()
                captured = cap.text()
                sys.stderr.write(captured[-8000:])
                continue
            for name, (fn, _) in ways.items():
                us = fn()
                if rnd > 0:
                    samples[name].append(us)
            if rnd > 0:
                print("round %d: %s" % (rnd, ", ".join("%s %.2f ms" % (k, v[-1] / 1e3) for k, v in samples.items())),
                      flush=True)

        # Every way once more, each on a poisoned local region, then every block checked.
        failures = []
        for name, (fn, permuted) in ways.items():
            region.poison()
            fn()
            region.sync()
            bad = verify(region, perm, hello["sums"], permuted)
            if bad:
                failures.append("%s: %d of %d blocks wrong (first: %s)" % (name, len(bad), n, bad[:8]))
            else:
                print("verified %s: %d blocks match the owner's checksums and the pattern" % (name, n), flush=True)
        if failures:
            raise RuntimeError("NIXL delivered wrong bytes: " + "; ".join(failures))

        for h in handles:
            h.release()
        handles = []
        agent.remove_remote_agent(peer)
        agent.deregister_memory(reg)
        mine.send("done")
        if mine.poll(30):
            mine.recv()
    finally:
        for h in handles:
            try:
                h.release()
            except Exception:
                pass
        try:
            mine.send("done")
        except Exception:
            pass
        owner.join(30)
        if owner.is_alive():
            owner.terminate()

    rows = []
    copy = []
    for name, us in samples.items():
        s = sorted(us)
        p50 = s[len(s) // 2]
        rows.append({"system": name,
                     "workload": ("one descriptor of %d B" % total) if name == "nixl one descriptor" else "%d blocks of %d B" % (n, b),
                     "bytes": total, "p50_us": p50, "p99_us": percentile(s, 99), "ops_per_s": n * 1e6 / p50,
                     "gbps": total / p50 / 1e3, "iterations": len(s), "memory": "%s->%s" % (remote, local),
                     "backend": "UCX"})

    if gpus > 0:
        try:
            copy.append(torch_copy(remote, local, total, args.copy_iters))
        except Exception as error:
            skipped.append({"system": "cuda-copy", "reason": "torch copy failed: %s" % error})
    else:
        skipped.append({"system": "cuda-copy", "reason": no_gpu})
    return finish(args, nixl, rows, copy, skipped, captured, remote, local,
                  "%d blocks of %d B READ by NIXL (UCX backend) from %s (another process) into %s, one transfer of %d "
                  "descriptors (remote block i -> local block perm[i]): prepped (made once, re-posted), make_prepped "
                  "(lists prepared once, transfer made each round), per-call (lists and transfer made each round); the "
                  "same bytes as one descriptor; and the raw copy; %d rounds after a warm-up; bytes verified after"
                  % (n, b, remote, local, n, args.rounds))


def sweep(args, agent, peer, hello, region, local, remote, gpus, skipped):
    """Rate by size (--sizes): returns (rows, torch copy rows, captured UCX_PROTO_INFO text)."""
    import numpy as np
    rmem, lmem = hello["mem"], region.mem
    rows, copy, captured = [], [], ""
    for size in args.sizes:
        rdesc = np.array([[hello["addr"], size, hello["dev_id"]]], dtype=np.uint64)
        ldesc = np.array([[region.addr, size, region.dev_id]], dtype=np.uint64)
        handle = agent.initialize_xfer("READ", agent.get_xfer_descs(ldesc, lmem), agent.get_xfer_descs(rdesc, rmem), peer)
        try:
            what = "read of %d B" % size

            def once():
                t0 = time.perf_counter_ns()
                post(agent, handle, what)
                wait_done(agent, handle, what)
                return (time.perf_counter_ns() - t0) / 1e3

            if not args.no_proto_info and size == args.sizes[0]:
                with FdCapture() as cap:
                    once()
                captured = cap.text()
            for _ in range(3):
                once()
            us, started = [], time.monotonic()
            while len(us) < args.rounds or (len(us) < SWEEP_MAX_READS and time.monotonic() - started < args.size_budget_ms / 1e3):
                us.append(once())
        finally:
            handle.release()
        us.sort()
        p50 = us[len(us) // 2]
        rows.append({"system": "nixl", "workload": "read/one descriptor", "bytes": size, "p50_us": p50,
                     "p99_us": percentile(us, 99), "ops_per_s": 1e6 / p50, "gbps": size / p50 / 1e3,
                     "iterations": len(us), "memory": "%s->%s" % (remote, local), "backend": "UCX"})
        print("nixl read of %d B: %.1f us p50 over %d, %.2f GB/s" % (size, p50, len(us), size / p50 / 1e3), flush=True)
        if gpus > 0:
            try:
                copy.append(torch_copy(remote, local, size, args.copy_iters))
            except Exception as error:
                skipped.append({"system": "cuda-copy", "reason": "torch copy of %d B failed: %s" % (size, error)})
    # The largest read once more onto a poisoned region, every block checked (not permuted).
    whole = region.bytes
    rdesc = np.array([[hello["addr"], whole, hello["dev_id"]]], dtype=np.uint64)
    ldesc = np.array([[region.addr, whole, region.dev_id]], dtype=np.uint64)
    handle = agent.initialize_xfer("READ", agent.get_xfer_descs(ldesc, lmem), agent.get_xfer_descs(rdesc, rmem), peer)
    try:
        region.poison()
        post(agent, handle, "verification read")
        wait_done(agent, handle, "verification read")
        region.sync()
    finally:
        handle.release()
    bad = verify(region, list(range(region.blocks)), hello["sums"], False)
    if bad:
        raise RuntimeError("NIXL delivered wrong bytes: %d of %d blocks wrong (first: %s)" % (len(bad), region.blocks, bad[:8]))
    print("verified: %d blocks of %d B match the owner's checksums and the pattern" % (region.blocks, region.block_bytes), flush=True)
    if gpus == 0:
        skipped.append({"system": "cuda-copy", "reason": "no GPU"})
    return rows, copy, captured


def finish(args, nixl, rows, copy, skipped, captured, remote, local, what):
    """Prints the rows and writes the result file."""
    proto_lines, transports = proto_tables(captured)
    for r in rows + copy:
        print("%s: %s in %.2f ms (p99 %s), %.2f GB/s, %d blocks/s"
              % (r["system"], r["workload"], r["p50_us"] / 1e3,
                 "%.2f ms" % (r["p99_us"] / 1e3) if r["p99_us"] is not None else "-", r["gbps"], round(r["ops_per_s"])))
    if transports:
        print("UCX transports of the puller's protocols (UCX_PROTO_INFO): %s" % ", ".join(transports))
        for line in proto_lines:
            print("  " + line)
    result = {
        "machine": describe_machine(nixl),
        "what": what,
        "transports": transports, "proto_info": proto_lines[:40],
        "results": rows, "copy": copy, "skipped": skipped,
    }
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        print("nixl_kv_bench: wrote %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
