#!/usr/bin/env python3
"""Asynchronous calls under stress: many processes, each queueing long chains of dependent
calls and checking every result against numpy.

Two ways of queueing the same calls on the same module (`async/samples.vmfb`, built with
`--iree-execution-model=async-external`):

  * `iree_dispatch`: `runtime.load(..., asynchronous=True)`, as users call it;
  * `wait_on_previous`: IREE's coarse-fences ABI called directly, each call's wait fence being
    the previous call's signal value on one timeline semaphore: the textbook way, and what
    iree_dispatch did before. On IREE 3.13's CUDA driver a fraction of such processes fail
    with CUDA_ERROR_CONTEXT_IS_DESTROYED in the first wait after a batch. This mode is the
    minimal reproducer for that failure (about 40 lines, `wait_on_previous_worker`).

Each process: `batches` × (`calls` / `batches`) chained calls (a fresh-output multiply, then
in-place multiplies into its result), a wait after each batch, every element compared with the
same float32 operations in numpy. A process that fails, crashes or hangs (timeout) counts as
failed; a crashed one is reported with its signal and the stack its faulthandler printed.

    python3 benchmarks/async_stress.py --vmfb build/gpu-tests/async/samples.vmfb --mode iree_dispatch --processes 100 --calls 1000

Environment: STRESS_IREE_FLAGS replaces the reproducer's IREE driver flags (default
--cuda_async_allocations=false; "" for IREE's defaults); STRESS_GC=0 disables Python's cycle
collector in the workers.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
N = 1024


def operands(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(0.5, 1.5, N).astype(np.float32), rng.uniform(0.999, 1.001, N).astype(np.float32)


def expected(a: np.ndarray, b: np.ndarray, calls: int) -> np.ndarray:
    r = a * b
    for _ in range(calls - 1):
        r = b * r
    return r


def iree_dispatch_worker(vmfb: str, calls: int, batches: int, seed: int) -> None:
    from iree_dispatch import runtime

    mod = runtime.load(vmfb, asynchronous=True)
    a, b = operands(seed)
    da, db = mod.to_device(a), mod.to_device(b)
    per_batch = calls // batches
    r = mod.simple_mul(da, db)
    done = 1
    for i in range(batches):
        while done < per_batch * (i + 1):
            r = mod.simple_mul_inplace(db, r)
            done += 1
        r.wait()
    check(r.to_host(), expected(a, b, done))


def wait_on_previous_worker(vmfb: str, calls: int, batches: int, seed: int) -> None:
    import iree.runtime as rt

    flags = os.environ.get("STRESS_IREE_FLAGS", "--cuda_async_allocations=false").split()
    if flags:
        rt.flags.parse_flags(*flags)
    device = rt.get_device("cuda")
    config = rt.Config(device=device)
    module = rt.VmModule.mmap(config.vm_instance, vmfb)
    context = rt.SystemContext(config=config)
    context.add_vm_module(module)
    fresh, inplace = module.lookup_function("simple_mul"), module.lookup_function("simple_mul_inplace")
    timeline = device.create_semaphore(0)
    value = 0
    keep = []

    def call(function, lhs, rhs):
        nonlocal value
        args = rt.VmVariantList(4)
        args.push_ref(lhs._buffer_view)
        args.push_ref(rhs._buffer_view)
        args.push_ref(rt.HalFence.create_at(timeline, value))  # wait: the previous call
        args.push_ref(rt.HalFence.create_at(timeline, value + 1))  # signal: this call
        results = rt.VmVariantList(1)
        context.vm_context.invoke(function, args, results)
        value += 1
        out = rt.DeviceArray(device, results.get_as_object(0, rt.HalBufferView), implicit_host_transfer=True)
        keep.append((args, results, lhs, rhs, out))
        return out

    a, b = operands(seed)
    da, db = rt.asdevicearray(device, a), rt.asdevicearray(device, b)
    per_batch = calls // batches
    r = call(fresh, da, db)
    done = 1
    for i in range(batches):
        while done < per_batch * (i + 1):
            r = call(inplace, db, r)
            done += 1
        rt.HalFence.create_at(timeline, value).wait()
        keep.clear()
    check(r.to_host(), expected(a, b, done))


def check(got: np.ndarray, want: np.ndarray) -> None:
    bad = np.flatnonzero(got != want)
    if bad.size:
        raise SystemExit(f"{bad.size} of {want.size} elements differ, first at {bad[0]}: {got[bad[0]]} != {want[bad[0]]}")


WORKERS = {"iree_dispatch": iree_dispatch_worker, "wait_on_previous": wait_on_previous_worker}


def run_one(args, index: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", args.mode, "--vmfb", args.vmfb, "--calls", str(args.calls), "--batches", str(args.batches), "--seed", str(index)]
    t0 = time.perf_counter()
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
        status = "ok" if p.returncode == 0 else ("crashed" if p.returncode < 0 else "failed")
        tail = (p.stderr.strip().splitlines() or [""])[-1][:300]
        if p.returncode < 0:  # the worker's faulthandler names where it died
            tail = f"killed by signal {-p.returncode}; " + " | ".join(line.strip() for line in p.stderr.strip().splitlines()[-6:])[:600]
    except subprocess.TimeoutExpired:
        status, tail = "hung", f"no exit within {args.timeout} s"
    return {"index": index, "status": status, "seconds": round(time.perf_counter() - t0, 2), "message": "" if status == "ok" else tail}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vmfb", default=str(ROOT / "build" / "gpu-tests" / "async" / "samples.vmfb"))
    p.add_argument("--mode", choices=sorted(WORKERS), default="iree_dispatch")
    p.add_argument("--processes", type=int, default=100)
    p.add_argument("--parallel", type=int, default=8, help="processes at once")
    p.add_argument("--calls", type=int, default=1000, help="chained calls per process")
    p.add_argument("--batches", type=int, default=10, help="waits per process (the calls are split evenly)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds before a process counts as hung")
    p.add_argument("--json", type=Path, help="write the per-process results here")
    p.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        faulthandler.enable()  # a worker killed by a signal prints its Python stack (the exit path included)
        if os.environ.get("STRESS_GC") == "0":
            gc.disable()  # as the benchmark workers run (no collection pauses in timings)
        WORKERS[args.worker](args.vmfb, args.calls, args.batches, args.seed)
        return 0
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(lambda i: run_one(args, i), range(args.processes)))
    counts = {s: sum(r["status"] == s for r in results) for s in ("ok", "failed", "crashed", "hung")}
    summary = {"mode": args.mode, "processes": args.processes, "calls_per_process": args.calls, "batches": args.batches, **counts}
    print(json.dumps(summary))
    for r in results:
        if r["status"] != "ok":
            print(f"  process {r['index']}: {r['status']}: {r['message']}")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "processes": results}, indent=1))
    return 0 if counts["ok"] == args.processes else 1


if __name__ == "__main__":
    sys.exit(main())
