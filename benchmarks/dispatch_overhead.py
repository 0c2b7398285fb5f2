#!/usr/bin/env python3
"""Dispatch overhead of one PTX kernel, `simple_mul`, launched five ways side by side.

The same PTX (build/samples.objects/simple_mul.sm_90.ptx, made by `iree-dispatch build
kernels/samples.toml -o build/samples.vmfb --emit-mlir`) is launched

  * by CuPy (RawModule loaded from the PTX file, RawKernel launch),
  * by cuda.core (ObjectCode.from_ptx, launch with a LaunchConfig) and by a raw cuLaunchKernel
    through cuda.bindings,
  * by iree_dispatch (`runtime.load(vmfb).simple_mul`) with numpy arrays, with IREE device
    arrays, through the raw IREE FunctionInvoker, and through VmContext.invoke (with a prepacked
    and with a fresh argument list); also `simple_mul_inplace` (no output allocation), IREE's
    CUDA-graph command buffers, inline execution, synchronous allocations, and an async
    (coarse-fences) build of the same module,

at N = 1024 and N = 16 Mi float32 elements, plus kernel-only times (CUDA events, CUPTI through
torch.profiler) and a device-to-device copy of N floats as a bandwidth reference.

Each group of measurements runs in its own subprocess (`--worker NAME`), so that the IREE
numbers are taken both in processes that never imported CuPy and in processes shared with CuPy.
The parent process imports no CUDA library: it spawns the workers, collects their JSON, writes
dispatch_overhead.json, dispatch_overhead.md, dispatch_overhead.png (every row) and
dispatch_overhead_summary.png (main rows) into --out, and prints the Markdown table.

    python benchmarks/dispatch_overhead.py --prepare        # CPU side: build the vmfbs (needs nvcc, iree-compile)
    python benchmarks/dispatch_overhead.py --out DIR        # GPU side: needs iree-base-runtime, numpy, cupy, ...
    python benchmarks/dispatch_overhead.py --dry-run        # no GPU: exercise the plumbing with no-op "launches"
    python benchmarks/dispatch_overhead.py --replot DIR/dispatch_overhead.json --out DIR2   # table + plots again

See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_VMFB = ROOT / "build" / "samples.vmfb"
DEFAULT_ASYNC_VMFB = ROOT / "build" / "samples_async.vmfb"
DEFAULT_PTX = ROOT / "build" / "samples.objects" / "simple_mul.sm_90.ptx"
KERNEL = "simple_mul"
BLOCK = 64  # kernels/samples.toml: block = [64], grid = ceildiv(n, 64)

SIZES = {"1K": 1024, "16M": 16 * 2**20}

# Repetitions per size: per-call samples, warm-up calls, launches per batch, batches.
REPS = {
    "1K": dict(calls=2000, warmup=200, batch=100, batches=60, numpy_calls=1000, cupti=300),
    "16M": dict(calls=200, warmup=20, batch=20, batches=20, numpy_calls=15, cupti=100),
}

WORKERS = ["cupy", "cuda_core", "iree", "iree_cupy", "iree_graph", "iree_inline", "iree_noasync", "iree_async", "cupti", "iree_b", "iree_cupy_b"]

# IREE runtime flags per IREE worker (parsed before the CUDA driver is created).
IREE_WORKER_FLAGS = {
    "iree": [],
    "iree_cupy": [],
    "iree_graph": ["--cuda_use_streams=false"],
    "iree_inline": ["--cuda_allow_inline_execution=true"],
    "iree_noasync": ["--cuda_async_allocations=false"],
    "iree_async": [],
    "cupti": [],
    "iree_b": [],
    "iree_cupy_b": [],
}

# Rows of the report: (key, group, label, ratio reference key).
# Keys are "worker:mode"; kinds of measurement are explained in benchmarks/README.md.
ROWS = [
    # host cost of one asynchronous launch
    ("cupy:enqueue", "launch", "CuPy RawKernel launch, host cost (K back to back, before sync)", None),
    ("cuda_core:enqueue", "launch", "cuda.core launch, host cost", "cupy:enqueue"),
    ("cuda_core:bindings_enqueue", "launch", "cuda.bindings cuLaunchKernel (prepacked args), host cost", "cupy:enqueue"),
    ("iree_async:enqueue", "launch", "IREE async (coarse-fences) invoke, host cost, chained by fences", "cupy:enqueue"),
    ("iree_async:inplace_enqueue", "launch", "IREE async invoke of simple_mul_inplace (no output alloc), host cost", "cupy:enqueue"),
    ("cupy:batch", "launch", "CuPy: K launches + sync, per launch", None),
    ("cuda_core:batch", "launch", "cuda.core: K launches + sync, per launch", "cupy:batch"),
    ("cuda_core:bindings_batch", "launch", "cuda.bindings: K launches + sync, per launch", "cupy:batch"),
    ("iree:device_batch", "launch", "iree_dispatch device arrays: K sync calls, per call (no CuPy)", "cupy:batch"),
    ("iree_async:batch", "launch", "IREE async: K chained invokes + final wait, per call", "cupy:batch"),
    ("iree_async:inplace_batch", "launch", "IREE async simple_mul_inplace: K chained invokes + wait, per call", "cupy:batch"),
    # one synchronous call: launch and wait for the result
    ("cupy:sync", "sync", "CuPy: launch + synchronize", None),
    ("cuda_core:sync", "sync", "cuda.core: launch + stream sync", "cupy:sync"),
    ("cuda_core:bindings_sync", "sync", "cuda.bindings: cuLaunchKernel + cuStreamSynchronize", "cupy:sync"),
    ("iree:check", "sync", "iree_dispatch argument checks only (KernelFunction.check, no launch)", "cupy:sync"),
    ("iree:pack", "sync", "IREE FunctionInvoker argument packing only (no invoke)", "cupy:sync"),
    ("iree:vm_invoke", "sync", "IREE VmContext.invoke, prepacked args, result dropped", "cupy:sync"),
    ("iree:vm_fresh", "sync", "IREE VmContext.invoke, new arg list each call", "cupy:sync"),
    ("iree:vm_fresh_keepargs", "sync", "IREE VmContext.invoke, new arg list released after the timed call", "cupy:sync"),
    ("iree:vm_wrap", "sync", "IREE VmContext.invoke, new arg list, result wrapped in DeviceArray", "cupy:sync"),
    ("iree:raw", "sync", "IREE FunctionInvoker(device arrays), no iree_dispatch checks", "cupy:sync"),
    ("iree:raw_keep", "sync", "IREE FunctionInvoker, result released outside the timed call", "cupy:sync"),
    ("iree:device", "sync", "iree_dispatch simple_mul(device arrays)", "cupy:sync"),
    ("iree:vm_inplace", "sync", "IREE VmContext.invoke of simple_mul_inplace (no output alloc)", "cupy:sync"),
    ("iree:device_inplace", "sync", "iree_dispatch simple_mul_inplace(device arrays) (no output alloc)", "cupy:sync"),
    ("iree:numpy", "sync", "iree_dispatch simple_mul(numpy) incl. H2D+D2H copies", "cupy:sync"),
    ("iree_cupy:check", "sync", "with CuPy in the process: iree_dispatch checks only", "cupy:sync"),
    ("iree_cupy:vm_invoke", "sync", "with CuPy: IREE VmContext.invoke, prepacked args", "cupy:sync"),
    ("iree_cupy:vm_fresh", "sync", "with CuPy: IREE VmContext.invoke, new arg list each call", "cupy:sync"),
    ("iree_cupy:raw", "sync", "with CuPy: IREE FunctionInvoker(device arrays)", "cupy:sync"),
    ("iree_cupy:device", "sync", "with CuPy: iree_dispatch simple_mul(device arrays)", "cupy:sync"),
    ("iree_cupy:device_inplace", "sync", "with CuPy: iree_dispatch simple_mul_inplace(device arrays)", "cupy:sync"),
    ("iree_cupy:numpy", "sync", "with CuPy: iree_dispatch simple_mul(numpy)", "cupy:sync"),
    ("iree_cupy:cupy_sync", "sync", "with IREE in the process: CuPy launch + synchronize", "cupy:sync"),
    ("iree_b:vm_invoke", "sync", "repeat, new process without CuPy: VmContext.invoke, prepacked", "cupy:sync"),
    ("iree_b:vm_fresh", "sync", "repeat without CuPy: VmContext.invoke, new arg list", "cupy:sync"),
    ("iree_b:raw", "sync", "repeat without CuPy: FunctionInvoker(device arrays)", "cupy:sync"),
    ("iree_b:device", "sync", "repeat without CuPy: iree_dispatch simple_mul(device arrays)", "cupy:sync"),
    ("iree_b:device_inplace", "sync", "repeat without CuPy: iree_dispatch simple_mul_inplace", "cupy:sync"),
    ("iree_cupy_b:vm_invoke", "sync", "repeat, new process with CuPy: VmContext.invoke, prepacked", "cupy:sync"),
    ("iree_cupy_b:vm_fresh", "sync", "repeat with CuPy: VmContext.invoke, new arg list", "cupy:sync"),
    ("iree_cupy_b:raw", "sync", "repeat with CuPy: FunctionInvoker(device arrays)", "cupy:sync"),
    ("iree_cupy_b:device", "sync", "repeat with CuPy: iree_dispatch simple_mul(device arrays)", "cupy:sync"),
    ("iree_cupy_b:device_inplace", "sync", "repeat with CuPy: iree_dispatch simple_mul_inplace", "cupy:sync"),
    ("iree_graph:vm_invoke", "sync", "--cuda_use_streams=false (CUDA graphs): VmContext.invoke", "cupy:sync"),
    ("iree_graph:raw", "sync", "--cuda_use_streams=false: FunctionInvoker(device arrays)", "cupy:sync"),
    ("iree_graph:device", "sync", "--cuda_use_streams=false: iree_dispatch simple_mul(device arrays)", "cupy:sync"),
    ("iree_graph:vm_inplace", "sync", "--cuda_use_streams=false: VmContext.invoke of simple_mul_inplace", "cupy:sync"),
    ("iree_inline:vm_invoke", "sync", "--cuda_allow_inline_execution=true: VmContext.invoke", "cupy:sync"),
    ("iree_inline:device", "sync", "--cuda_allow_inline_execution=true: iree_dispatch simple_mul(device arrays)", "cupy:sync"),
    ("iree_noasync:vm_invoke", "sync", "--cuda_async_allocations=false: VmContext.invoke", "cupy:sync"),
    ("iree_noasync:device", "sync", "--cuda_async_allocations=false: iree_dispatch simple_mul(device arrays)", "cupy:sync"),
    ("iree_noasync:vm_inplace", "sync", "--cuda_async_allocations=false: VmContext.invoke of simple_mul_inplace", "cupy:sync"),
    ("iree_async:sync", "sync", "IREE async (coarse-fences) invoke + fence wait", "cupy:sync"),
    ("iree_async:inplace_sync", "sync", "IREE async simple_mul_inplace invoke + fence wait", "cupy:sync"),
    # GPU time of the kernel alone
    ("cupy:events", "kernel", "CuPy launch between CUDA events, queued behind GPU work", None),
    ("cupy:events_idle", "kernel", "CuPy launch between CUDA events, idle GPU", "cupy:events"),
    ("cuda_core:events", "kernel", "cuda.core launch between events, queued behind GPU work", "cupy:events"),
    ("cupti:cupy_kernel", "kernel", "CUPTI kernel duration, CuPy launch", "cupy:events"),
    ("cupti:iree_kernel", "kernel", "CUPTI kernel duration, IREE launch (same PTX)", "cupti:cupy_kernel"),
    ("iree_cupy:cupy_events_around_iree", "kernel", "CuPy events around an IREE call (other stream: wall time, not kernel)", "cupy:events"),
    # bandwidth reference
    ("cupy:d2d", "copy", "device-to-device memcpy of N floats (events, queued)", None),
]
# The rows of the compact plot (the full plot has every row).
SUMMARY_KEYS = [
    "cupy:enqueue", "cuda_core:enqueue", "cuda_core:bindings_enqueue", "iree_async:enqueue", "iree_async:inplace_enqueue",
    "cupy:sync", "cuda_core:sync", "iree:check", "iree:vm_invoke", "iree:vm_inplace", "iree:raw", "iree:device",
    "iree:device_inplace", "iree_cupy:device", "iree_graph:device", "iree_noasync:device", "iree_async:sync",
    "iree_async:inplace_sync", "iree:numpy",
    "cupti:cupy_kernel", "cupti:iree_kernel", "cupy:events", "cupy:d2d",
]
GROUP_TITLES = {
    "launch": "Host cost per asynchronous launch",
    "sync": "One synchronous call (launch and wait)",
    "kernel": "Kernel time on the GPU",
    "copy": "Bandwidth reference",
}

us_per_ns = 1e-3


# --------------------------------------------------------------------------------------------
# statistics and timing helpers (no CUDA here)


def summarize(samples) -> dict:
    a = np.asarray(samples, dtype=np.float64)
    if a.size == 0:
        return {"n": 0}
    return {
        "n": int(a.size),
        "median": float(np.median(a)),
        "p10": float(np.percentile(a, 10)),
        "p90": float(np.percentile(a, 90)),
        "mean": float(a.mean()),
        "min": float(a.min()),
    }


def time_calls(call, reps: int, warmup: int, keep_result: bool = False) -> np.ndarray:
    """Wall time in µs of each of `reps` calls of `call` (which must include its own wait).

    The call's result is dropped inside the timed interval (its release is counted), or, with
    keep_result, just after the clock is read (its release is not counted).
    """
    for _ in range(warmup):
        call()
    out = np.empty(reps)
    clock = time.perf_counter_ns
    if keep_result:
        held = [None]
        for i in range(reps):
            t0 = clock()
            held[0] = call()
            t1 = clock()
            held[0] = None  # released outside the timed interval
            out[i] = (t1 - t0) * us_per_ns
        return out
    for i in range(reps):
        t0 = clock()
        call()
        out[i] = (clock() - t0) * us_per_ns
    return out


def time_batches(launch, sync, k: int, batches: int, warmup_batches: int = 2):
    """Per-launch µs of `batches` batches of `k` back-to-back launches.

    Returns (enqueue, total): host time of the k launches before the wait, and including it.
    The device is idle at the start of every batch.
    """
    clock = time.perf_counter_ns
    for _ in range(warmup_batches):
        for _ in range(k):
            launch()
        sync()
    enqueue, total = np.empty(batches), np.empty(batches)
    for b in range(batches):
        sync()
        t0 = clock()
        for _ in range(k):
            launch()
        t1 = clock()
        sync()
        t2 = clock()
        enqueue[b] = (t1 - t0) * us_per_ns / k
        total[b] = (t2 - t0) * us_per_ns / k
    return enqueue, total


class Recorder:
    """Collects one worker's results; each measurement is isolated so one failure loses one row."""

    def __init__(self, worker: str):
        self.worker = worker
        self.results: list[dict] = []
        self.errors: list[dict] = []
        self.info: dict = {}

    def add(self, mode: str, size: str, samples, **extra):
        entry = {"key": f"{self.worker}:{mode}", "size": size, "n_elements": SIZES[size], "stats": summarize(samples)}
        entry.update(extra)
        self.results.append(entry)
        s = entry["stats"]
        print(f"[{self.worker}] {mode:28s} {size:>4s}: median {s.get('median', float('nan')):10.2f} µs "
              f"(p10 {s.get('p10', float('nan')):.2f}, p90 {s.get('p90', float('nan')):.2f}, n={s['n']})",
              file=sys.stderr, flush=True)

    def attempt(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a benchmark row failing must not stop the others
            msg = f"{type(exc).__name__}: {exc}"
            self.errors.append({"what": what, "error": msg, "traceback": traceback.format_exc(limit=6)})
            print(f"[{self.worker}] FAILED {what}: {msg}", file=sys.stderr, flush=True)
            return None

    def dump(self) -> dict:
        return {"worker": self.worker, "info": self.info, "results": self.results, "errors": self.errors}


def inputs(n: int, seed: int = 0):
    rng = np.random.default_rng(seed + n)
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    return a, b, a * b


def grid_for(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def check_equal(what: str, got: np.ndarray, want: np.ndarray) -> bool:
    if got.shape != want.shape or not np.array_equal(got, want):
        bad = int(np.count_nonzero(got != want)) if got.shape == want.shape else -1
        raise AssertionError(f"{what}: result differs from numpy a*b ({bad} elements differ)")
    return True


# --------------------------------------------------------------------------------------------
# CUDA driver queries through ctypes (context identity and flags), no CUDA Python package needed


def cuda_context_info() -> dict:
    """The calling thread's current context, and the primary context's state and flags."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return {"error": str(exc)}
    info: dict = {}
    dev = ctypes.c_int()
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(dev), 0) != 0:
        return {"error": "cuInit/cuDeviceGet failed"}
    flags, active = ctypes.c_uint(), ctypes.c_int()
    cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active))
    info["primary_active"] = bool(active.value)
    info["primary_flags"] = int(flags.value)
    current = ctypes.c_void_p()
    cuda.cuCtxGetCurrent(ctypes.byref(current))
    info["current_ctx"] = hex(current.value or 0)
    if current.value:
        cflags = ctypes.c_uint()
        if cuda.cuCtxGetFlags(ctypes.byref(cflags)) == 0:
            info["current_ctx_flags"] = int(cflags.value)
    if active.value:  # retaining an active primary context creates nothing new
        primary = ctypes.c_void_p()
        if cuda.cuDevicePrimaryCtxRetain(ctypes.byref(primary), dev) == 0:
            info["primary_ctx"] = hex(primary.value or 0)
            info["current_is_primary"] = bool(current.value) and current.value == primary.value
            cuda.cuDevicePrimaryCtxRelease_v2(dev)
    version = ctypes.c_int()
    if cuda.cuDriverGetVersion(ctypes.byref(version)) == 0:
        info["cuda_driver_api_version"] = int(version.value)
    # CU_CTX_SCHED_*: 0 auto, 1 spin, 2 yield, 4 blocking sync
    info["sched"] = {0: "auto", 1: "spin", 2: "yield", 4: "blocking_sync"}.get(info.get("current_ctx_flags", 0) & 7, "?")
    return info


# --------------------------------------------------------------------------------------------
# workers


def worker_cupy(rec: Recorder, opts) -> None:
    import cupy as cp

    rec.info["cupy"] = cp.__version__
    rec.info["launch"] = "cupy.RawModule(path=<ptx>).get_function('simple_mul'), legacy default stream"
    module = cp.RawModule(path=str(opts.ptx))  # `code=` would be compiled as CUDA C++ by NVRTC
    kern = module.get_function(KERNEL)
    stream = cp.cuda.get_current_stream()
    big = _cupy_blocker(cp, kern)

    for size, n in SIZES.items():
        r = REPS[size]
        a_h, b_h, want = inputs(n)
        a, b, out = cp.asarray(a_h), cp.asarray(b_h), cp.empty(n, cp.float32)
        grid, args = (grid_for(n),), (a, b, out, np.int32(n))

        def launch():
            kern(grid, (BLOCK,), args)

        launch()
        stream.synchronize()
        check_equal(f"cupy N={n}", cp.asnumpy(out), want)
        rec.attempt(f"enqueue/batch {size}", _record_batches, rec, size, "", launch, stream.synchronize, r)
        rec.attempt(f"sync {size}", lambda: rec.add("sync", size, time_calls(lambda: (launch(), stream.synchronize()), r["calls"], r["warmup"])))
        rec.attempt(f"events {size}", lambda: rec.add("events", size, _cupy_events(cp, launch, big, r["calls"] // 2, queued=True)))
        rec.attempt(f"events_idle {size}", lambda: rec.add("events_idle", size, _cupy_events(cp, launch, big, r["calls"] // 2, queued=False)))
        rec.attempt(f"d2d {size}", _cupy_d2d, rec, cp, size, n, big, r)
        a = b = out = None  # release device memory
    rec.info["context"] = cuda_context_info()


def _record_batches(rec: Recorder, size: str, prefix: str, launch, sync, r) -> None:
    enqueue, total = time_batches(launch, sync, r["batch"], r["batches"])
    rec.add(prefix + "enqueue", size, enqueue, launches_per_batch=r["batch"])
    rec.add(prefix + "batch", size, total, launches_per_batch=r["batch"])


def _cupy_blocker(cp, kern):
    """A 16M-element simple_mul (~0.1 ms of GPU work) to queue events and launches behind."""
    n = SIZES["16M"]
    x, y, z = cp.ones(n, cp.float32), cp.ones(n, cp.float32), cp.empty(n, cp.float32)
    args, grid = (x, y, z, np.int32(n)), (grid_for(n),)

    def block(times: int = 3):
        for _ in range(times):
            kern(grid, (BLOCK,), args)

    block.keep = (x, y, z)
    return block


def _cupy_events(cp, launch, blocker, reps: int, queued: bool) -> np.ndarray:
    """GPU time between two events around one launch.

    queued: the events and the launch are enqueued while the GPU is still busy with earlier
    work, so the interval holds the kernel alone, not the host's launch latency.
    """
    start, end = cp.cuda.Event(), cp.cuda.Event()
    out = np.empty(reps)
    for i in range(-10, reps):
        if queued:
            blocker()
        start.record()
        launch()
        end.record()
        end.synchronize()
        if i >= 0:
            out[i] = cp.cuda.get_elapsed_time(start, end) * 1e3
    return out


def _cupy_d2d(rec: Recorder, cp, size: str, n: int, blocker, r) -> None:
    src, dst = cp.ones(n, cp.float32), cp.empty(n, cp.float32)
    nbytes = n * 4
    stream = cp.cuda.get_current_stream()
    rt = cp.cuda.runtime

    def copy():
        rt.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, rt.memcpyDeviceToDevice, stream.ptr)

    samples = _cupy_events(cp, copy, blocker, r["calls"] // 2, queued=True)
    med = float(np.median(samples))
    rec.add("d2d", size, samples, bytes_moved=2 * nbytes, gb_per_s_median=2 * nbytes / (med * 1e-6) / 1e9)


def worker_cuda_core(rec: Recorder, opts) -> None:
    cc, api = _import_cuda_core()
    rec.info["cuda_core_api"] = api
    rec.info["cuda_core"] = _dist_version("cuda-core") or getattr(cc, "__version__", "?")
    driver = _import_driver()
    rec.info["cuda_bindings"] = _dist_version("cuda-bindings") or _dist_version("cuda-python") or "?"

    dev = cc.Device(0)
    dev.set_current()
    stream = dev.create_stream()
    ptx = Path(opts.ptx).read_bytes()
    obj, how = _cuda_core_object_code(cc, ptx)
    rec.info["object_code"] = how
    kernel = obj.get_kernel(KERNEL)

    # raw driver path: our own module, stream and prepacked kernelParams
    cu_module = _ok(driver.cuModuleLoadData(ptx + b"\0"), "cuModuleLoadData")
    cu_func = _ok(driver.cuModuleGetFunction(cu_module, KERNEL.encode()), "cuModuleGetFunction")
    cu_stream = _ok(driver.cuStreamCreate(1), "cuStreamCreate")  # CU_STREAM_NON_BLOCKING

    blocker_bufs = _driver_alloc(driver, SIZES["16M"])
    blocker_args = _ctypes_args(blocker_bufs, SIZES["16M"])
    blocker_config, _ = _make_launch(cc, stream, kernel, grid_for(SIZES["16M"]), blocker_args)

    def blocker(times: int = 3):
        for _ in range(times):
            blocker_config()

    for size, n in SIZES.items():
        r = REPS[size]
        a_h, b_h, want = inputs(n)
        bufs = _driver_alloc(driver, n, a_h, b_h)
        args = _ctypes_args(bufs, n)
        launch, launch_api = _make_launch(cc, stream, kernel, grid_for(n), args)
        rec.info["launch_api"] = launch_api
        launch()
        stream.sync()
        check_equal(f"cuda.core N={n}", _driver_download(driver, bufs[2], n), want)
        rec.attempt(f"enqueue/batch {size}", _record_batches, rec, size, "", launch, stream.sync, r)
        rec.attempt(f"sync {size}", lambda: rec.add("sync", size, time_calls(lambda: (launch(), stream.sync()), r["calls"], r["warmup"])))
        rec.attempt(f"events {size}", lambda: rec.add("events", size, _cuda_core_events(cc, stream, launch, blocker, r["calls"] // 2)))

        # cuda.bindings: cuLaunchKernel with a kernelParams array built once
        values = [ctypes.c_void_p(int(p)) for p in bufs] + [ctypes.c_int(n)]
        params = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in values])
        params_addr, grid = ctypes.addressof(params), grid_for(n)

        def raw_launch(values=values, params=params):  # keeps the ctypes storage alive
            driver.cuLaunchKernel(cu_func, grid, 1, 1, BLOCK, 1, 1, 0, cu_stream, params_addr, 0)

        def raw_sync():
            driver.cuStreamSynchronize(cu_stream)

        _ok(driver.cuLaunchKernel(cu_func, grid, 1, 1, BLOCK, 1, 1, 0, cu_stream, params_addr, 0), "cuLaunchKernel")
        raw_sync()
        check_equal(f"cuLaunchKernel N={n}", _driver_download(driver, bufs[2], n), want)
        rec.attempt(f"bindings enqueue/batch {size}", _record_batches, rec, size, "bindings_", raw_launch, raw_sync, r)
        rec.attempt(f"bindings sync {size}", lambda: rec.add("bindings_sync", size, time_calls(lambda: (raw_launch(), raw_sync()), r["calls"], r["warmup"])))
        for p in bufs:
            driver.cuMemFree(p)
    rec.info["context"] = cuda_context_info()


def _import_cuda_core():
    try:
        import cuda.core as cc

        if all(hasattr(cc, name) for name in ("Device", "LaunchConfig", "launch", "ObjectCode")):
            return cc, "cuda.core"
    except ImportError:
        pass
    import cuda.core.experimental as cc

    return cc, "cuda.core.experimental"


def _import_driver():
    try:
        from cuda.bindings import driver
    except ImportError:  # cuda-python < 12.6
        from cuda import cuda as driver
    return driver


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _ok(result, what: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if getattr(err, "value", err) != 0:
        raise RuntimeError(f"{what} failed: {err}")
    return rest[0] if len(rest) == 1 else (tuple(rest) or None)


def _driver_alloc(driver, n: int, *host: np.ndarray):
    bufs = [_ok(driver.cuMemAlloc(n * 4), "cuMemAlloc") for _ in range(3)]
    for ptr, arr in zip(bufs, host):
        _ok(driver.cuMemcpyHtoD(ptr, arr.ctypes.data, n * 4), "cuMemcpyHtoD")
    return bufs


def _driver_download(driver, ptr, n: int) -> np.ndarray:
    out = np.empty(n, np.float32)
    _ok(driver.cuMemcpyDtoH(out.ctypes.data, ptr, n * 4), "cuMemcpyDtoH")
    return out


def _ctypes_args(bufs, n: int):
    return [ctypes.c_void_p(int(p)) for p in bufs] + [ctypes.c_int(n)]


def _cuda_core_object_code(cc, ptx: bytes):
    if hasattr(cc.ObjectCode, "from_ptx"):
        return cc.ObjectCode.from_ptx(ptx), "ObjectCode.from_ptx(bytes)"
    try:
        return cc.ObjectCode(ptx, "ptx"), "ObjectCode(bytes, 'ptx')"
    except Exception:  # noqa: BLE001
        return cc.Program(ptx.decode(), code_type="ptx").compile("cubin"), "Program(ptx).compile('cubin')"


def _make_launch(cc, stream, kernel, grid: int, args):
    """A no-argument launch closure for the installed cuda.core: tries the launch() signature of
    cuda.core >= 0.2 (stream first) and of 0.1 (stream in the LaunchConfig), with pointers as
    ctypes.c_void_p and, failing that, as numpy uintp. Launches once to prove it works."""
    pointer_kinds = {"ctypes": list(args), "numpy": [np.uintp(a.value) if isinstance(a, ctypes.c_void_p) else np.int32(a.value) for a in args]}
    problems = []
    for arg_kind, values in pointer_kinds.items():
        try:
            config = cc.LaunchConfig(grid=(grid, 1, 1), block=(BLOCK, 1, 1))
            cc.launch(stream, config, kernel, *values)

            def launch(config=config, values=values):
                cc.launch(stream, config, kernel, *values)

            return launch, f"launch(stream, config, kernel, *args), args as {arg_kind}"
        except Exception as exc:  # noqa: BLE001
            problems.append(f"new API/{arg_kind}: {type(exc).__name__}: {exc}")
        try:
            config = cc.LaunchConfig(grid=(grid, 1, 1), block=(BLOCK, 1, 1), stream=stream)
            cc.launch(kernel, config, *values)

            def launch(config=config, values=values):
                cc.launch(kernel, config, *values)

            return launch, f"launch(kernel, config(stream=...), *args), args as {arg_kind}"
        except Exception as exc:  # noqa: BLE001
            problems.append(f"0.1 API/{arg_kind}: {type(exc).__name__}: {exc}")
    raise RuntimeError("no cuda.core launch form worked: " + "; ".join(problems))


def _cuda_core_events(cc, stream, launch, blocker, reps: int) -> np.ndarray:
    try:
        options = cc.EventOptions(timing_enabled=True)  # cuda.core >= 0.3
    except TypeError:
        options = cc.EventOptions(enable_timing=True)
    out = np.empty(reps)
    for i in range(-10, reps):
        blocker()
        start = stream.record(options=options)
        launch()
        end = stream.record(options=options)
        end.sync()
        if i >= 0:
            out[i] = (end - start) * 1e3  # Event.__sub__: milliseconds
    return out


def _open_iree(opts, worker: str, vmfb: Path):
    """Parses the worker's IREE runtime flags, then loads the module with iree_dispatch."""
    import iree.runtime as rt

    flags = IREE_WORKER_FLAGS.get(worker, [])
    if flags:
        rt.flags.parse_flags(*flags)
    from iree_dispatch import runtime as idr

    # The rows name their driver flags themselves: none of iree_dispatch's defaults on top.
    os.environ[idr.DRIVER_FLAGS_ENV] = ""

    return rt, idr, idr.load(vmfb), flags


IREE_MODES = ("check", "pack", "vm_invoke", "vm_fresh", "vm_fresh_keepargs", "vm_wrap", "raw", "raw_keep", "device", "device_batch",
              "vm_inplace", "device_inplace", "numpy")


def worker_iree(rec: Recorder, opts, worker: str = "iree", modes=IREE_MODES, before_sizes=None) -> None:
    rt, idr, mod, flags = _open_iree(opts, worker, Path(opts.vmfb))
    rec.info["iree_runtime"] = _dist_version("iree-base-runtime")
    rec.info["iree_flags"] = flags
    rec.info["context"] = cuda_context_info()  # right after IREE created its device
    fn = mod.functions[KERNEL]
    fn_inplace = mod.functions[KERNEL + "_inplace"]
    raw = mod.context.modules[mod.name][KERNEL]
    raw_inplace = mod.context.modules[mod.name][KERNEL + "_inplace"]
    vm_function, vm_context = raw.vm_function, mod.context.vm_context
    rec.info["cuda_device"] = idr.cuda_device_name(0)
    for size, n in SIZES.items():
        r = REPS[size]
        a_h, b_h, want = inputs(n)
        da, db = mod.to_device(a_h), mod.to_device(b_h)
        check_equal(f"{worker} numpy N={n}", fn(a_h, b_h), want)
        check_equal(f"{worker} device N={n}", fn(da, db).to_host(), want)
        check_equal(f"{worker} raw N={n}", raw(da, db).to_host(), want)
        if before_sizes:
            before_sizes(size, n, mod, fn, da, db)
        if "check" in modes:
            rec.attempt(f"check {size}", lambda: rec.add("check", size, time_calls(lambda: fn.check(da, db), r["calls"], r["warmup"])))
        if "pack" in modes:
            rec.attempt(f"pack {size}", _iree_pack, rec, size, raw, mod.device, da, db, r)
        if "vm_invoke" in modes:
            rec.attempt(f"vm_invoke {size}", _iree_vm_invoke, rec, rt, size, vm_context, vm_function, da, db, want, r)
        if {"vm_fresh", "vm_wrap", "vm_fresh_keepargs"} & set(modes):
            rec.attempt(f"vm_fresh/vm_wrap {size}", _iree_vm_fresh, rec, rt, size, vm_context, vm_function, mod.device, da, db, r, modes)
        if "raw" in modes:
            rec.attempt(f"raw {size}", lambda: rec.add("raw", size, time_calls(lambda: raw(da, db), r["calls"], r["warmup"])))
        if "raw_keep" in modes:
            rec.attempt(f"raw_keep {size}", lambda: rec.add("raw_keep", size, time_calls(lambda: raw(da, db), r["calls"], r["warmup"], keep_result=True)))
        if "device" in modes:
            rec.attempt(f"device {size}", lambda: rec.add("device", size, time_calls(lambda: fn(da, db), r["calls"], r["warmup"])))
        if "vm_inplace" in modes or "device_inplace" in modes:
            dc = mod.to_device(b_h)
            check_equal(f"{worker} inplace N={n}", fn_inplace(da, dc).to_host(), want)
            if "vm_inplace" in modes:
                args = rt.VmVariantList(2)
                args.push_ref(da._buffer_view)
                args.push_ref(dc._buffer_view)
                inplace_fn = raw_inplace.vm_function
                rec.attempt(f"vm_inplace {size}", lambda: rec.add("vm_inplace", size, time_calls(
                    lambda: vm_context.invoke(inplace_fn, args, rt.VmVariantList(1)), r["calls"], r["warmup"])))
            if "device_inplace" in modes:
                rec.attempt(f"device_inplace {size}", lambda: rec.add("device_inplace", size, time_calls(lambda: fn_inplace(da, dc), r["calls"], r["warmup"])))
            dc = None  # release device memory
        if "device_batch" in modes:
            k = r["batch"]
            rec.attempt(f"device_batch {size}", lambda: rec.add("device_batch", size, _iree_batches(fn, da, db, k, r["batches"]), calls_per_batch=k))
        if "numpy" in modes:
            rec.attempt(f"numpy {size}", lambda: rec.add("numpy", size, time_calls(lambda: fn(a_h, b_h), r["numpy_calls"], max(3, r["numpy_calls"] // 10))))
        da = db = None  # release device memory
        gc.collect()


def _iree_vm_invoke(rec, rt, size, vm_context, vm_function, da, db, want, r) -> None:
    args = rt.VmVariantList(2)
    args.push_ref(da._buffer_view)
    args.push_ref(db._buffer_view)
    ret = rt.VmVariantList(1)
    vm_context.invoke(vm_function, args, ret)
    result = rt.DeviceArray(da._device, ret.get_as_object(0, rt.HalBufferView))
    check_equal(f"vm_invoke {size}", result.to_host(), want)

    def call():
        vm_context.invoke(vm_function, args, rt.VmVariantList(1))

    rec.add("vm_invoke", size, time_calls(call, r["calls"], r["warmup"]))


def _iree_pack(rec, size, raw, device, da, db, r) -> None:
    """FunctionInvoker's argument packing alone (InvokeContext + ArgumentPacker.pack)."""
    from iree.runtime._binding import InvokeContext

    packer = raw._arg_packer
    rec.add("pack", size, time_calls(lambda: packer.pack(InvokeContext(device), (da, db), {}), r["calls"], r["warmup"]))


def _iree_vm_fresh(rec, rt, size, vm_context, vm_function, device, da, db, r, modes) -> None:
    """VmContext.invoke with a new argument list each call; vm_wrap also wraps the result in a
    DeviceArray as FunctionInvoker does. Both drop the result inside the timed call."""

    def fresh():
        args = rt.VmVariantList(2)
        args.push_ref(da._buffer_view)
        args.push_ref(db._buffer_view)
        ret = rt.VmVariantList(1)
        vm_context.invoke(vm_function, args, ret)
        return ret

    def wrap():
        return rt.DeviceArray(device, fresh().get_as_object(0, rt.HalBufferView), implicit_host_transfer=True)

    def fresh_keep_args():
        args = rt.VmVariantList(2)
        args.push_ref(da._buffer_view)
        args.push_ref(db._buffer_view)
        vm_context.invoke(vm_function, args, rt.VmVariantList(1))
        return args  # released by time_calls after the clock is read

    if "vm_fresh" in modes:
        rec.add("vm_fresh", size, time_calls(fresh, r["calls"], r["warmup"]))
    if "vm_fresh_keepargs" in modes:
        rec.add("vm_fresh_keepargs", size, time_calls(fresh_keep_args, r["calls"], r["warmup"], keep_result=True))
    if "vm_wrap" in modes:
        rec.add("vm_wrap", size, time_calls(wrap, r["calls"], r["warmup"]))


def _iree_batches(fn, da, db, k: int, batches: int) -> np.ndarray:
    clock = time.perf_counter_ns
    for _ in range(k):
        fn(da, db)
    out = np.empty(batches)
    for b in range(batches):
        t0 = clock()
        for _ in range(k):
            fn(da, db)
        out[b] = (clock() - t0) * us_per_ns / k
    return out


REPEAT_MODES = ("vm_invoke", "vm_fresh", "raw", "device", "device_inplace")


def worker_iree_cupy(rec: Recorder, opts, worker: str = "iree_cupy",
                     modes=("check", "vm_invoke", "vm_fresh", "raw", "device", "device_batch", "device_inplace", "numpy")) -> None:
    """IREE measured in a process where CuPy was imported and used first."""
    import cupy as cp

    rec.info["cupy"] = cp.__version__
    kern = cp.RawModule(path=str(opts.ptx)).get_function(KERNEL)
    warm = cp.ones(1024, cp.float32)
    kern((16,), (BLOCK,), (warm, warm, cp.empty_like(warm), np.int32(1024)))
    cp.cuda.get_current_stream().synchronize()
    rec.info["context_before_iree"] = cuda_context_info()
    stream = cp.cuda.get_current_stream()

    def extra(size, n, mod, fn, da, db):
        r = REPS[size]
        a_h, b_h, _ = inputs(n)
        a, b, out = cp.asarray(a_h), cp.asarray(b_h), cp.empty(n, cp.float32)
        grid, args = (grid_for(n),), (a, b, out, np.int32(n))

        def launch():
            kern(grid, (BLOCK,), args)

        rec.attempt(f"cupy_sync {size}", lambda: rec.add("cupy_sync", size, time_calls(lambda: (launch(), stream.synchronize()), r["calls"], r["warmup"])))

        def iree_between_events(reps=r["calls"] // 2):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            samples = np.empty(reps)
            for i in range(-10, reps):
                start.record()
                fn(da, db)
                end.record()
                end.synchronize()
                if i >= 0:
                    samples[i] = cp.cuda.get_elapsed_time(start, end) * 1e3
            return samples

        rec.attempt(f"cupy_events_around_iree {size}", lambda: rec.add("cupy_events_around_iree", size, iree_between_events()))

    worker_iree(rec, opts, worker=worker, before_sizes=extra if worker == "iree_cupy" else None, modes=modes)
    rec.info["context_after_iree"] = cuda_context_info()


def worker_iree_graph(rec: Recorder, opts) -> None:
    worker_iree(rec, opts, worker="iree_graph", modes=("vm_invoke", "raw", "device", "vm_inplace"))


def worker_iree_inline(rec: Recorder, opts) -> None:
    worker_iree(rec, opts, worker="iree_inline", modes=("vm_invoke", "device"))


def worker_iree_noasync(rec: Recorder, opts) -> None:
    worker_iree(rec, opts, worker="iree_noasync", modes=("vm_invoke", "device", "vm_inplace"))


def worker_iree_async(rec: Recorder, opts) -> None:
    """The same kernel built with --iree-execution-model=async-external (coarse-fences ABI)."""
    vmfb = Path(opts.async_vmfb)
    if not vmfb.is_file():
        raise FileNotFoundError(f"{vmfb} not built (run --prepare on a machine with iree-compile)")
    import iree.runtime as rt

    device = rt.get_device("cuda")
    config = rt.Config(device=device)
    context = rt.SystemContext(config=config)
    vm_module = rt.VmModule.mmap(config.vm_instance, str(vmfb))
    context.add_vm_module(vm_module)
    function = vm_module.lookup_function(KERNEL)
    function_inplace = vm_module.lookup_function(KERNEL + "_inplace")
    rec.info["abi"] = function.reflection.get("iree.abi.model")
    vm_context = context.vm_context
    rec.info["context"] = cuda_context_info()

    for size, n in SIZES.items():
        r = REPS[size]
        a_h, b_h, want = inputs(n)
        da, db = rt.asdevicearray(device, a_h), rt.asdevicearray(device, b_h)
        sem = device.create_semaphore(0)
        state = {"t": 0}

        dc = rt.asdevicearray(device, b_h)

        def invoke(f=function, rhs=db):
            """One call that waits for the previous one and signals the next timepoint."""
            t = state["t"]
            args = rt.VmVariantList(4)
            args.push_ref(da._buffer_view)
            args.push_ref(rhs._buffer_view)
            args.push_ref(rt.HalFence.create_at(sem, t))
            args.push_ref(rt.HalFence.create_at(sem, t + 1))
            ret = rt.VmVariantList(1)
            vm_context.invoke(f, args, ret)
            state["t"] = t + 1
            return ret

        def wait():
            rt.HalFence.create_at(sem, state["t"]).wait()

        ret = invoke()
        wait()
        check_equal(f"async N={n}", rt.DeviceArray(device, ret.get_as_object(0, rt.HalBufferView)).to_host(), want)
        rec.attempt(f"sync {size}", lambda: rec.add("sync", size, time_calls(lambda: (invoke(), wait()), r["calls"], r["warmup"])))
        kept: list = []

        def launch():
            kept.append(invoke())  # results stay referenced until the batch is waited for

        def sync():
            wait()
            kept.clear()

        rec.attempt(f"enqueue/batch {size}", _record_batches, rec, size, "", launch, sync, r)

        # simple_mul_inplace: the result is the rhs buffer, so no output is allocated
        ret = invoke(function_inplace, dc)
        wait()
        check_equal(f"async inplace N={n}", rt.DeviceArray(device, ret.get_as_object(0, rt.HalBufferView)).to_host(), want)
        rec.attempt(f"inplace_sync {size}", lambda: rec.add("inplace_sync", size, time_calls(
            lambda: (invoke(function_inplace, dc), wait()), r["calls"], r["warmup"])))

        def launch_inplace():
            kept.append(invoke(function_inplace, dc))

        rec.attempt(f"inplace enqueue/batch {size}", _record_batches, rec, size, "inplace_", launch_inplace, sync, r)
        da = db = dc = None  # release device memory


def worker_cupti(rec: Recorder, opts) -> None:
    """Kernel durations from CUPTI (through torch.profiler), for CuPy's and IREE's launches."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.init()
    rec.info["torch"] = torch.__version__
    rec.info["torch_device"] = torch.cuda.get_device_name(0)
    import cupy as cp

    rt, idr, mod, _ = _open_iree(opts, "cupti", Path(opts.vmfb))
    fn = mod.functions[KERNEL]
    kern = cp.RawModule(path=str(opts.ptx)).get_function(KERNEL)
    tmp = Path(tempfile.mkdtemp(prefix="cupti_"))
    for size, n in SIZES.items():
        reps = REPS[size]["cupti"]
        a_h, b_h, _ = inputs(n)
        a, b, out = cp.asarray(a_h), cp.asarray(b_h), cp.empty(n, cp.float32)
        grid, args = (grid_for(n),), (a, b, out, np.int32(n))
        da, db = mod.to_device(a_h), mod.to_device(b_h)
        stream = cp.cuda.get_current_stream()

        def cupy_calls():
            for _ in range(reps):
                kern(grid, (BLOCK,), args)
                stream.synchronize()

        def iree_calls():
            for _ in range(reps):
                fn(da, db)

        for label, calls in (("cupy_kernel", cupy_calls), ("iree_kernel", iree_calls)):
            calls()  # warm-up outside the profiler
            trace = tmp / f"{label}_{size}.json"

            def run(calls=calls, trace=trace):
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    calls()
                prof.export_chrome_trace(str(trace))
                return _parse_cupti_trace(trace, reps)

            parsed = rec.attempt(f"{label} {size}", run)
            if parsed:
                durations, api = parsed
                rec.add(label, size, durations, api_calls_per_launch=api)
        a = b = out = da = db = None  # release device memory
    shutil.rmtree(tmp, ignore_errors=True)


def _parse_cupti_trace(path: Path, launches: int):
    events = json.loads(path.read_text()).get("traceEvents", [])
    durations = [float(e["dur"]) for e in events if e.get("cat") == "kernel" and e.get("name") == KERNEL]
    if not durations:
        raise RuntimeError(f"no '{KERNEL}' kernel in the CUPTI trace ({len(events)} events)")
    api: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "dur" in e:
            api.setdefault(e["name"], []).append(float(e["dur"]))
    summary = {name: {"per_launch": round(len(d) / launches, 3), "median_us": round(float(np.median(d)), 3)} for name, d in api.items()}
    return durations, dict(sorted(summary.items(), key=lambda kv: -kv[1]["per_launch"]))


def worker_iree_b(rec: Recorder, opts) -> None:
    """A second process without CuPy, run after all the others: run-to-run spread of IREE."""
    worker_iree(rec, opts, worker="iree_b", modes=REPEAT_MODES)


def worker_iree_cupy_b(rec: Recorder, opts) -> None:
    worker_iree_cupy(rec, opts, worker="iree_cupy_b", modes=REPEAT_MODES)


WORKER_FUNCS = {
    "cupy": worker_cupy,
    "cuda_core": worker_cuda_core,
    "iree": worker_iree,
    "iree_cupy": worker_iree_cupy,
    "iree_graph": worker_iree_graph,
    "iree_inline": worker_iree_inline,
    "iree_noasync": worker_iree_noasync,
    "iree_async": worker_iree_async,
    "cupti": worker_cupti,
    "iree_b": worker_iree_b,
    "iree_cupy_b": worker_iree_cupy_b,
}


def worker_fake(rec: Recorder, opts) -> None:
    """--dry-run: every row of this worker timed on no-op calls, plus the real argument checks."""
    rec.info["dry_run"] = True
    check = None
    try:  # the checks need no device: build a KernelFunction from the vmfb's descriptions
        from iree_dispatch.runtime import KernelFunction, read_descriptions

        _, descriptions = read_descriptions(opts.vmfb)
        check = KernelFunction(descriptions[KERNEL], invoke=lambda *a: None, device=None).check
    except Exception as exc:  # noqa: BLE001
        rec.info["check_unavailable"] = str(exc)
    for key, *_ in ROWS:
        worker, mode = key.split(":")
        if worker != rec.worker:
            continue
        for size, n in SIZES.items():
            r = {k: max(2, v // 20) for k, v in REPS[size].items()}
            if mode == "check" and check is not None:
                a_h, b_h, _ = inputs(n)
                rec.add(mode, size, time_calls(lambda: check(a_h, b_h), r["calls"], r["warmup"]))
            elif mode.endswith("enqueue") or mode.endswith("batch"):
                enqueue, total = time_batches(lambda: None, lambda: None, r["batch"], r["batches"])
                rec.add(mode, size, total if mode.endswith("batch") else enqueue)
            else:
                rec.add(mode, size, time_calls(lambda: None, r["calls"], r["warmup"]))


def run_worker(opts) -> int:
    rec = Recorder(opts.worker)
    rec.info["pid"] = os.getpid()
    gc.disable()
    try:
        (worker_fake if opts.dry_run else WORKER_FUNCS[opts.worker])(rec, opts)
    except Exception as exc:  # noqa: BLE001
        rec.errors.append({"what": "worker", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=8)})
        print(f"[{opts.worker}] worker failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    rec.info["modules_loaded"] = sorted(m for m in ("cupy", "torch", "iree.runtime", "cuda.core") if m in sys.modules)
    Path(opts.result).write_text(json.dumps(rec.dump(), indent=1))
    return 0


# --------------------------------------------------------------------------------------------
# parent: environment, workers, report


def sh(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(opts) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for dist in ("iree-base-runtime", "numpy", "cupy-cuda13x", "cupy-cuda12x", "cuda-core", "cuda-bindings", "cuda-python", "torch", "matplotlib"):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            pass
    query = sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,pstate", "--format=csv,noheader"])
    return {
        "date_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "nvidia_smi_L": sh(["nvidia-smi", "-L"]),
        "nvidia_smi_query": query,
        "device_name": query.split(",")[0].strip() if query else None,
        "driver_version": query.split(",")[1].strip() if query else None,
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": versions,
        "git_commit": sh(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "vmfb": str(opts.vmfb),
        "ptx": str(opts.ptx),
        "ptx_sha256": _sha256(opts.ptx),
        "dry_run": bool(opts.dry_run),
    }


def _sha256(path) -> str | None:
    import hashlib

    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def spawn(worker: str, opts, tmp: Path) -> dict:
    result = tmp / f"{worker}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", worker, "--result", str(result),
           "--vmfb", str(opts.vmfb), "--async-vmfb", str(opts.async_vmfb), "--ptx", str(opts.ptx)]
    if opts.dry_run:
        cmd.append("--dry-run")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("PYTHONPATH", str(ROOT))
    if str(ROOT) not in env["PYTHONPATH"].split(os.pathsep):
        env["PYTHONPATH"] += os.pathsep + str(ROOT)
    t0 = time.perf_counter()
    print(f"== worker {worker}", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(cmd, env=env, timeout=opts.worker_timeout, cwd=ROOT)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    seconds = round(time.perf_counter() - t0, 2)
    if result.is_file():
        data = json.loads(result.read_text())
    else:
        data = {"worker": worker, "info": {}, "results": [], "errors": [{"what": "worker", "error": f"no result (exit {rc})"}]}
    data["exit"] = rc
    data["seconds"] = seconds
    print(f"== worker {worker}: exit {rc}, {seconds} s, {len(data['results'])} results, {len(data['errors'])} errors", file=sys.stderr, flush=True)
    return data


def index_results(workers: dict) -> dict:
    table: dict = {}
    for data in workers.values():
        for entry in data["results"]:
            table.setdefault(entry["key"], {})[entry["size"]] = entry
    return table


def fmt_us(stats: dict | None) -> str:
    if not stats or not stats.get("n"):
        return "–"
    m = stats["median"]
    digits = 2 if m < 10 else 1 if m < 1000 else 0
    return f"{m:.{digits}f} ({stats['p10']:.{digits}f}–{stats['p90']:.{digits}f})"


def markdown_table(table: dict) -> str:
    sizes = list(SIZES)
    head = "| measurement | key | " + " | ".join(f"N={SIZES[s]:,} µs median (p10–p90) | ×ref" for s in sizes) + " |"
    sep = "|---|---|" + "---:|---:|" * len(sizes)
    lines = []
    group = None
    for key, grp, label, ref in ROWS:
        if grp != group:
            group = grp
            lines += ["", f"**{GROUP_TITLES[grp]}**", "", head, sep]
        cells = []
        for s in sizes:
            entry = table.get(key, {}).get(s)
            stats = entry["stats"] if entry else None
            cell = fmt_us(stats)
            if entry and "gb_per_s_median" in entry:
                cell += f", {entry['gb_per_s_median']:.0f} GB/s"
            ratio = "–"
            ref_entry = table.get(ref, {}).get(s) if ref else None
            if stats and stats.get("n") and ref_entry and ref_entry["stats"].get("n"):
                ratio = f"{stats['median'] / ref_entry['stats']['median']:.1f}×"
            cells += [cell, ratio]
        lines.append(f"| {label} | `{key}` | " + " | ".join(cells) + " |")
    refs = ("×ref: this median divided by the median of its CuPy reference at the same N: host-cost rows by "
            "`cupy:enqueue`, batch rows by `cupy:batch`, synchronous rows by `cupy:sync`, kernel rows by `cupy:events` "
            "(the IREE CUPTI row by `cupti:cupy_kernel`).")
    return "\n".join(lines[1:] + ["", refs])


def plot(table: dict, env: dict, path: Path, keys: list[str] | None = None) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"no plot: {exc}"
    colors = {"launch": "#4C72B0", "sync": "#DD8452", "kernel": "#55A868", "copy": "#8172B3"}
    rows = [(key, grp, label) for key, grp, label, _ in ROWS
            if (keys is None or key in keys) and any(s in table.get(key, {}) for s in SIZES)]
    if not rows:
        return "no plot: no results"
    fig, axes = plt.subplots(1, len(SIZES), figsize=(18, 0.28 * len(rows) + 1.6), sharey=True)
    for ax, size in zip(axes, SIZES):
        ys, med, lo, hi, col = [], [], [], [], []
        for i, (key, grp, _) in enumerate(rows):
            entry = table.get(key, {}).get(size)
            if not entry or not entry["stats"].get("n"):
                continue
            s = entry["stats"]
            ys.append(i)
            med.append(max(s["median"], 1e-3))
            lo.append(max(s["median"] - s["p10"], 0))
            hi.append(max(s["p90"] - s["median"], 0))
            col.append(colors[grp])
        ax.barh(ys, med, xerr=[lo, hi], color=col, ecolor="#333", capsize=2, height=0.7)
        for y, m, h in zip(ys, med, hi):
            ax.text((m + h) * 1.12, y, f"{m:.3g}", va="center", fontsize=7)
        ax.set_xscale("log")
        ax.set_title(f"N = {SIZES[size]:,} float32")
        ax.set_xlabel("µs per call/launch (median, bars p10–p90), log scale")
        ax.grid(axis="x", which="both", alpha=0.3)
    axes[0].set_yticks(range(len(rows)))
    axes[0].set_yticklabels([f"{label if len(label) <= 64 else label[:62] + '…'}  [{key}]" for key, _, label in rows], fontsize=7)
    axes[0].invert_yaxis()
    dev = env.get("device_name") or "?"
    fig.suptitle(f"simple_mul (same PTX) dispatch cost — {dev}, driver {env.get('driver_version')}, {env.get('date_utc', '')[:10]}"
                 + (" — DRY RUN (no GPU)" if env.get("dry_run") else ""), fontsize=10, y=1 - 0.15 / fig.get_figheight())
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return None


def prepare(opts) -> int:
    """CPU side: build the sync vmfb (with its PTX and MLIR) and the async (coarse-fences) one."""
    iree_dispatch = shutil.which("iree-dispatch") or str(Path(sys.executable).with_name("iree-dispatch"))
    vmfb = Path(opts.vmfb)
    subprocess.run([iree_dispatch, "build", str(ROOT / "kernels" / "samples.toml"), "-o", str(vmfb), "--emit-mlir"], check=True, cwd=ROOT)
    mlir = vmfb.with_suffix(".mlir")
    iree_compile = shutil.which("iree-compile") or str(Path(sys.executable).with_name("iree-compile"))
    # Same flags as iree_dispatch.backend.compile.compile_flags, plus the async-external execution model.
    subprocess.run([iree_compile, "--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80",
                    "--iree-execution-model=async-external", "--iree-hal-executable-object-search-path=.",
                    mlir.name, "-o", str(Path(opts.async_vmfb).absolute())], check=True, cwd=mlir.parent)
    print(f"built {vmfb}, {opts.async_vmfb}, PTX {opts.ptx}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="output folder (JSON, PNG, Markdown)")
    p.add_argument("--vmfb", default=str(DEFAULT_VMFB))
    p.add_argument("--async-vmfb", default=str(DEFAULT_ASYNC_VMFB))
    p.add_argument("--ptx", default=str(DEFAULT_PTX))
    p.add_argument("--workers", default=",".join(WORKERS), help=f"comma-separated subset of {','.join(WORKERS)}")
    p.add_argument("--worker-timeout", type=float, default=120.0)
    p.add_argument("--dry-run", action="store_true", help="no GPU: time no-op calls through the same plumbing")
    p.add_argument("--prepare", action="store_true", help="build the vmfbs and PTX (needs nvcc and iree-compile)")
    p.add_argument("--replot", metavar="JSON", help="rewrite table and plots into --out from an earlier dispatch_overhead.json")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    opts = p.parse_args(argv)

    if opts.worker:
        return run_worker(opts)
    if opts.prepare:
        return prepare(opts)
    if opts.replot:
        report = json.loads(Path(opts.replot).read_text())
        out = Path(opts.out)
        out.mkdir(parents=True, exist_ok=True)
        write_report(report, out)
        return 0

    missing = [f for f in (opts.vmfb, opts.ptx) if not Path(f).is_file()]
    if missing and not opts.dry_run:
        print(f"missing {', '.join(missing)}: run `python {Path(__file__).name} --prepare` where nvcc and iree-compile are", file=sys.stderr)
        return 2
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(opts)
    print(f"device: {env['nvidia_smi_L']}\ndriver: {env['driver_version']}, date {env['date_utc']}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    workers = {}
    with tempfile.TemporaryDirectory(prefix="dispatch_overhead_") as tmp:
        for worker in [w.strip() for w in opts.workers.split(",") if w.strip()]:
            if worker not in WORKER_FUNCS:
                raise SystemExit(f"unknown worker {worker!r} (known: {', '.join(WORKERS)})")
            workers[worker] = spawn(worker, opts, Path(tmp))
    env["total_seconds"] = round(time.perf_counter() - t0, 1)
    env["nvidia_smi_query_after"] = sh(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,pstate,temperature.gpu", "--format=csv,noheader"])

    report = {"environment": env, "sizes": SIZES, "reps": REPS, "workers": workers}
    write_report(report, out)
    print(f"\nwrote {out}/dispatch_overhead.{{json,md,png}} and dispatch_overhead_summary.png in {env['total_seconds']} s")
    return 0


def write_report(report: dict, out: Path) -> None:
    """dispatch_overhead.{json,md,png} and dispatch_overhead_summary.png from a report's workers."""
    env, workers = report["environment"], report["workers"]
    table = index_results(workers)
    report["rows"] = [dict(key=k, group=g, label=label, ref=r) for k, g, label, r in ROWS]
    report["table"] = {k: {s: e["stats"] for s, e in v.items()} for k, v in table.items()}
    (out / "dispatch_overhead.json").write_text(json.dumps(report, indent=1))
    md = markdown_table(table)
    header = (f"# simple_mul dispatch overhead\n\n{env['nvidia_smi_L']} — driver {env['driver_version']} — {env['date_utc']}"
              + (" — DRY RUN (no GPU, no-op calls)" if env.get("dry_run") else "") + "\n")
    (out / "dispatch_overhead.md").write_text(header + "\n" + md + "\n")
    problems = [plot(table, env, out / "dispatch_overhead.png"),
                plot(table, env, out / "dispatch_overhead_summary.png", keys=SUMMARY_KEYS)]
    print(header)
    print(md)
    errors = [(w, e["what"], e["error"]) for w, d in workers.items() for e in d["errors"]]
    if errors:
        print("\nerrors:")
        for w, what, err in errors:
            print(f"- {w}: {what}: {err}")
    for problem in filter(None, problems):
        print(problem)


if __name__ == "__main__":
    sys.exit(main())
