#!/usr/bin/env python3
"""Per-dispatch cost of kernels composed into programs, of asynchronous calls and of
preallocated (out=) outputs, with CuPy RawKernel launches of the same kernel side by side.

The program is a chain of K `simple_mul` calls (t = t * y, K = 1, 10, 100) built with
`iree_dispatch.backend.program.Program`, in four builds:

  * `sync`:             as `Program.build` makes it (synchronous functions);
  * `sync_noassert`:    the same linked MLIR compiled with `--iree-opt-strip-assertions`;
  * `async`:            compiled with `--iree-execution-model=async-external` (coarse fences);
  * `async_noassert`:   both flags;
  * `static`, `static_async`: the chain declared with static sizes (x, y: 1024 floats), built
    as Program.build makes it / compiled async-external. With every size known, the shape
    asserts fold away and IREE memoizes the command buffer: recorded once at load, replayed
    per call (`hal.device.queue.execute.indirect`).

Why the "noassert" builds: IREE 3.13 cuts its command buffers at every `cf.assert`. A program
checks its inputs once, at entry, and calls the kernels' functions without per-call asserts
(program.py), so as built it is one command buffer of K dispatches and one submission; the
stripped build shows what the remaining entry checks cost (see docs/benchmarks.md, "Programs").

Each IREE worker runs in its own process with its CUDA driver flags (WORKERS; runtime flags
must be parsed before the device is created): iree_dispatch's defaults
(runtime.DEFAULT_DRIVER_FLAGS: `--cuda_async_allocations=false`), IREE's own defaults
(stream-ordered pool allocations), and command buffers recorded as CUDA graphs
(`--cuda_use_streams=false`).

    python benchmarks/programs.py --prepare          # CPU side: build the vmfbs into build/programs/
    python benchmarks/programs.py --out DIR          # GPU side: programs.{json,md,png} in DIR
    python benchmarks/programs.py --dry-run --out DIR   # no GPU: the plumbing on no-op calls
    python benchmarks/programs.py --async-repro --out DIR   # GPU: the async failure, scenario by scenario

See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dispatch_overhead import summarize, time_batches, time_calls  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "programs"
KS = (1, 10, 100)
N = 1024
BLOCK = 64  # kernels/samples.toml: simple_mul block = [64]
BUILDS = ("sync", "sync_noassert", "async", "async_noassert", "static", "static_async")
STRIP_ASSERTS = "--iree-opt-strip-assertions"
ASYNC = "--iree-execution-model=async-external"
# Worker → the CUDA driver flags iree_dispatch sets (runtime.DRIVER_FLAGS_ENV); None: its defaults.
IREE_DEFAULTS = ["--cuda_async_allocations=true"]  # what IREE does without iree_dispatch's flags
WORKERS: dict[str, list[str] | None] = {
    "cupy": None, "iree_streams": None, "iree_pool": IREE_DEFAULTS,
    "iree_graphs": ["--cuda_async_allocations=false", "--cuda_use_streams=false"],
    "cupti_streams": None, "cupti_graphs": ["--cuda_async_allocations=false", "--cuda_use_streams=false"],
}

# Samples per measurement: synchronous calls, warm-up calls, asynchronous batches.
REPS = dict(calls=400, warmup=40, batch=20, batches=40)


def vmfb(build: str, k: int) -> Path:
    return BUILD / f"chain_mul_{k}_{build}.vmfb"


# --------------------------------------------------------------------------------------------
# CPU side


def prepare() -> int:
    """Builds the chain programs in the six builds, and single-kernel modules: samples (sync
    and async) and samples_out (simple_mul with its output taken as an argument)."""
    sys.path.insert(0, str(ROOT))
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec import ModuleSpec
    from iree_dispatch.frontend.spec_file import load_spec
    from tests.support.artifacts.samples import mul_chain

    spec = load_spec(ROOT / "kernels" / "samples.toml")
    BUILD.mkdir(parents=True, exist_ok=True)
    for k in KS:
        chain = mul_chain(spec, k, "chain")
        chain.build(spec, vmfb("sync", k), emit_mlir=BUILD / f"chain_mul_{k}.mlir")
        chain.build(spec, vmfb("sync_noassert", k), strip_assertions=True)
        chain.build(spec, vmfb("async", k), asynchronous=True)
        chain.build(spec, vmfb("async_noassert", k), asynchronous=True, strip_assertions=True)
        static = mul_chain(spec, k, "chain", static=N)
        static.build(spec, vmfb("static", k), emit_mlir=BUILD / f"chain_mul_{k}_static.mlir")
        static.build(spec, vmfb("static_async", k), asynchronous=True)
        print(f"built chain_mul_{k} ×6", flush=True)
    build(spec, BUILD / "samples.vmfb", emit_mlir=BUILD / "samples.mlir")
    build(spec, BUILD / "samples_async.vmfb", asynchronous=True)
    out = tuple(k.with_outputs_in_place(function=f"{k.function}_out") for k in spec.kernels if k.function == "simple_mul")
    build(ModuleSpec("samples_out", out, spec.archs), BUILD / "samples_out.vmfb")
    dispatches = {k: _count_vm_calls(BUILD / f"chain_mul_{k}.mlir", BUILD / f"chain_mul_{k}_static.mlir", spec) for k in KS}
    (BUILD / "structure.json").write_text(json.dumps(dispatches, indent=1))
    print(f"built into {BUILD}; per call (VM level): {json.dumps(dispatches)}")
    return 0


def _count_vm_calls(mlir: Path, static_mlir: Path, spec) -> dict:
    """How many command buffers, submissions and dispatches one call records, with and without
    the asserts (from iree-compile --compile-to=vm)."""
    from iree.compiler.tools.binaries import find_tool

    from iree_dispatch.backend.compile import compile_flags

    counts = {}
    for label, source, extra in (("sync", mlir, []), ("sync_noassert", mlir, [STRIP_ASSERTS]), ("static", static_mlir, [])):
        text = subprocess.run([find_tool("iree-compile"), *compile_flags(spec.archs[-1], Path(".")), *extra, "--compile-to=vm", source.name, "-o", "-"],
                              cwd=source.parent, check=True, capture_output=True, text=True).stdout
        ops = ("command_buffer.create", "device.queue.execute", "device.queue.execute.indirect", "command_buffer.dispatch", "fence.create")
        counts[label] = {op: len(re.findall(rf"vm\.call(?:\.variadic)? @hal\.{re.escape(op)}\(", text)) for op in ops}
        counts[label]["memoized"] = "memoize_apply" in text
    return counts


# --------------------------------------------------------------------------------------------
# GPU side: workers


class Recorder:
    def __init__(self, worker: str):
        self.worker = worker
        self.results: dict[str, dict] = {}
        self.errors: list[dict] = []
        self.info: dict = {}

    def add(self, key: str, samples, **extra) -> None:
        self.results[key] = dict(summarize(samples), **extra)
        s = self.results[key]
        print(f"[{self.worker}] {key:40s} median {s.get('median', float('nan')):10.2f} µs (p10 {s.get('p10', float('nan')):.2f}, "
              f"p90 {s.get('p90', float('nan')):.2f}, n={s['n']})", file=sys.stderr, flush=True)

    def attempt(self, what: str, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - one failing row must not stop the others
            self.errors.append({"what": what, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=6)})
            print(f"[{self.worker}] FAILED {what}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


def inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(N).astype(np.float32)
    y = rng.uniform(0.9, 1.1, N).astype(np.float32)
    return x, y


def chain_reference(x, y, k):
    t = x
    for _ in range(k):
        t = t * y
    return t


def worker_cupy(rec: Recorder, opts) -> None:
    import cupy as cp

    rec.info["cupy"] = cp.__version__
    kern = cp.RawModule(path=str(opts.ptx)).get_function("simple_mul")
    stream = cp.cuda.get_current_stream()
    x_h, y_h = inputs()
    x, y = cp.asarray(x_h), cp.asarray(y_h)
    bufs = [cp.empty(N, cp.float32) for _ in range(2)]
    grid = ((N + BLOCK - 1) // BLOCK,)

    def chain(k: int):
        """k dependent launches, t = t * y, ping-ponging between two buffers: what the program does."""
        src = x
        for i in range(k):
            kern(grid, (BLOCK,), (src, y, bufs[i % 2], np.int32(N)))
            src = bufs[i % 2]
        return src

    got = chain(100)
    stream.synchronize()
    if not np.array_equal(cp.asnumpy(got), chain_reference(x_h, y_h, 100)):
        raise AssertionError("CuPy chain differs from numpy")
    for k in KS:
        # K launches then one synchronize, as one call of a K-dispatch program.
        rec.attempt(f"chain {k}", lambda k=k: rec.add(f"cupy:chain_sync:{k}", time_calls(lambda: (chain(k), stream.synchronize()), REPS["calls"], REPS["warmup"])))
    rec.attempt("graphs", _cupy_graphs, rec, cp, chain, stream)
    launch_args = (x, y, bufs[0], np.int32(N))
    enqueue, total = time_batches(lambda: kern(grid, (BLOCK,), launch_args), stream.synchronize, 100, REPS["batches"])
    rec.add("cupy:enqueue", enqueue, launches_per_batch=100)
    rec.add("cupy:batch", total, launches_per_batch=100)


def _cupy_graphs(rec: Recorder, cp, chain, _stream) -> None:
    """The same K launches captured once into a CUDA graph and replayed: the GPU-side floor of
    a K-kernel chain, with one host launch per K kernels."""
    capture = cp.cuda.Stream(non_blocking=True)
    for k in KS:
        with capture:
            capture.begin_capture()
            chain(k)
            graph = capture.end_capture()
        graph.launch(capture)
        capture.synchronize()
        rec.add(f"cupy:graph_sync:{k}", time_calls(lambda: (graph.launch(capture), capture.synchronize()), REPS["calls"], REPS["warmup"]))


def use_driver_flags(worker: str) -> None:
    """Before the first device: the worker's flags, through iree_dispatch's own mechanism."""
    from iree_dispatch import runtime as idr

    if WORKERS[worker] is not None:
        os.environ[idr.DRIVER_FLAGS_ENV] = " ".join(WORKERS[worker])


def worker_iree(rec: Recorder, opts) -> None:
    import iree.runtime as rt

    use_driver_flags(rec.worker)
    from iree_dispatch import runtime as idr

    rec.info["iree_flags"] = list(idr.driver_flags())
    rec.info["device"] = idr.cuda_device_name(0)
    x_h, y_h = inputs()
    for build in BUILDS:
        for k in KS:
            rec.attempt(f"{build} {k}", _program_rows, rec, idr, rt, build, k, x_h, y_h)
            gc.collect()
    rec.attempt("single kernels", _single_rows, rec, idr, rt, x_h, y_h)


def _program_rows(rec: Recorder, idr, rt, build: str, k: int, x_h, y_h) -> None:
    asynchronous = "async" in build
    module = idr.load(vmfb(build, k), asynchronous=asynchronous)
    fn = module.chain
    x, y = module.to_device(x_h), module.to_device(y_h)
    want = chain_reference(x_h, y_h, k)
    got = fn(x, y).to_host()
    x2_h, y2_h = inputs(seed=k)  # other buffers: a replayed (memoized) command buffer must follow them
    got2 = fn(module.to_device(x2_h), module.to_device(y2_h)).to_host()
    if not (np.array_equal(got, want) and np.array_equal(got2, chain_reference(x2_h, y2_h, k))):
        raise AssertionError(f"{build} K={k}: result differs from numpy")
    prefix = f"{build}:{k}"
    if asynchronous:
        # Host cost of one call (queued behind the previous one), and calls + final wait.
        enqueue, total = time_batches(lambda: fn(x, y), module.wait, REPS["batch"], REPS["batches"])
        rec.add(f"{prefix}:enqueue", enqueue, calls_per_batch=REPS["batch"])
        rec.add(f"{prefix}:batch", total, calls_per_batch=REPS["batch"])
        rec.add(f"{prefix}:call_wait", time_calls(lambda: fn(x, y).wait(), REPS["calls"], REPS["warmup"]))
        return
    rec.add(f"{prefix}:call", time_calls(lambda: fn(x, y), REPS["calls"], REPS["warmup"]))
    # The floor under iree_dispatch's wrapper: VmContext.invoke with a prepacked argument list.
    vm_function = module.vm_module.lookup_function("chain")
    args = rt.VmVariantList(2)
    args.push_ref(x._buffer_view)
    args.push_ref(y._buffer_view)
    invoke = module.context.vm_context.invoke
    rec.add(f"{prefix}:vm_invoke", time_calls(lambda: invoke(vm_function, args, rt.VmVariantList(1)), REPS["calls"], REPS["warmup"]))


def _single_rows(rec: Recorder, idr, rt, x_h, y_h) -> None:
    """One kernel per call: fresh output, preallocated output (out=), and asynchronous."""
    samples = idr.load(BUILD / "samples.vmfb")
    out_module = idr.load(BUILD / "samples_out.vmfb")
    x, y = samples.to_device(x_h), samples.to_device(y_h)
    out = out_module.to_device(np.full(N, np.nan, np.float32))
    before = out.to_host().copy()
    result = out_module.simple_mul_out(x, y, out)
    rec.info["out_semantics"] = {
        "result_equals_product": bool(np.array_equal(result.to_host(), x_h * y_h)),
        "callers_buffer_written": bool(np.array_equal(out.to_host(), x_h * y_h)),
        "callers_buffer_was_nan": bool(np.isnan(before).all()),
    }
    rec.add("single:fresh", time_calls(lambda: samples.simple_mul(x, y), REPS["calls"], REPS["warmup"]))
    # Where the fresh output's cost goes: the call with its result released outside the timer,
    # and the release alone (IREE frees a pool allocation with a synchronous cuMemFree).
    rec.add("single:fresh_keep", time_calls(lambda: samples.simple_mul(x, y), REPS["calls"], REPS["warmup"], keep_result=True))
    rec.add("single:release", time_release(lambda: samples.simple_mul(x, y), REPS["calls"], REPS["warmup"]))
    rec.add("single:out", time_calls(lambda: out_module.simple_mul_out(x, y, out), REPS["calls"], REPS["warmup"]))
    rec.add("single:check", time_calls(lambda: samples.simple_mul.check(x, y), REPS["calls"], REPS["warmup"]))
    async_mod = idr.load(BUILD / "samples_async.vmfb", asynchronous=True)
    xa, ya, za = async_mod.to_device(x_h), async_mod.to_device(y_h), async_mod.to_device(y_h)
    r = async_mod.simple_mul(xa, ya)
    if not np.array_equal(r.to_host(), x_h * y_h):
        raise AssertionError("async simple_mul differs from numpy")
    for name, call in (("async_fresh", lambda: async_mod.simple_mul(xa, ya)), ("async_inplace", lambda: async_mod.simple_mul_inplace(xa, za))):
        enqueue, total = time_batches(call, async_mod.wait, 100, REPS["batches"])
        rec.add(f"single:{name}:enqueue", enqueue, calls_per_batch=100)
        rec.add(f"single:{name}:batch", total, calls_per_batch=100)


def time_release(call, reps: int, warmup: int) -> np.ndarray:
    """µs to drop the (only) reference to one result of `call`."""
    for _ in range(warmup):
        call()
    out = np.empty(reps)
    clock = time.perf_counter_ns
    for i in range(reps):
        held = [call()]
        t0 = clock()
        held.clear()
        out[i] = (clock() - t0) / 1e3
    return out


# --------------------------------------------------------------------------------------------
# The asynchronous failure (CUDA_ERROR_CONTEXT_IS_DESTROYED in a fence wait, docs/benchmarks.md):
# scenarios, each in fresh processes, with the CUDA context's state along the way.

REPRO_SCENARIOS = {
    # name: (driver flags for iree_dispatch, steps); steps run in order in one process.
    "bench_pool": (IREE_DEFAULTS, ("fresh", "inplace")),  # the benchmark's async rows, IREE's allocations
    "exit_pending_pool": (IREE_DEFAULTS, ("fresh", "inplace", "exit_pending")),  # exits with calls queued
    "bench": (None, ("fresh", "inplace")),  # the same, iree_dispatch's default flags
    "exit_pending": (None, ("fresh", "inplace", "exit_pending")),
    "fresh_pool": (IREE_DEFAULTS, ("fresh",)),
    "inplace_pool": (IREE_DEFAULTS, ("inplace",)),
    "inplace": (None, ("inplace",)),
    # What iree_dispatch's default costs asynchronous calls: with plain allocations IREE's
    # queue.alloca waits on the host for the call's wait fence (cuda_device.c), so a chain of
    # fresh-output calls no longer runs ahead of the GPU. 16 Mi floats: ~160 µs per kernel.
    "chain16m_pool": (IREE_DEFAULTS, ("chain16m",)),
    "chain16m": (None, ("chain16m",)),
}
REPRO_RUNS = 3
CHAIN16M = dict(n=16 * 2**20, calls=20, reps=5)


def _context_state() -> dict:
    """The primary context of device 0 (active?) and the calling thread's current context."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    dev, flags, active, current = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int(), ctypes.c_void_p()
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    rc = cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active))
    rc2 = cuda.cuCtxGetCurrent(ctypes.byref(current))
    return {"primary_active": bool(active.value), "rc": rc, "current": hex(current.value or 0), "rc_current": rc2}


def repro_scenario(name: str) -> int:
    """One scenario (in this process): the async single-kernel rows of the benchmark, step by
    step, N = 1024, gc disabled as in the workers; prints a JSON line per step."""
    flags, steps = REPRO_SCENARIOS[name]
    if flags is not None:
        from iree_dispatch import runtime as idr0

        os.environ[idr0.DRIVER_FLAGS_ENV] = " ".join(flags)
    from iree_dispatch import runtime as idr

    gc.disable()
    x_h, y_h = inputs()
    module = idr.load(BUILD / "samples_async.vmfb", asynchronous=True)
    print(json.dumps({"step": "loaded", "flags": idr.driver_flags(), **_context_state()}), flush=True)
    xa, ya, za = module.to_device(x_h), module.to_device(y_h), module.to_device(y_h)
    calls = {"fresh": lambda: module.simple_mul(xa, ya), "inplace": lambda: module.simple_mul_inplace(xa, za)}
    for step in steps:
        t0 = time.perf_counter()
        if step == "chain16m":
            print(json.dumps({"step": step, **_chain16m(module), **_context_state()}), flush=True)
            continue
        if step == "exit_pending":
            for _ in range(100):
                r = calls["fresh"]()
            print(json.dumps({"step": step, "pending": not r.done, **_context_state()}), flush=True)
            return 0  # the interpreter tears down with calls queued and results referenced
        try:
            time_batches(calls[step], module.wait, 100, REPS["batches"])
            ok = bool(np.array_equal(calls["fresh"]().to_host(), x_h * y_h))
            error = None
        except Exception as exc:  # noqa: BLE001 - recorded, the next step shows what follows
            ok, error = False, f"{type(exc).__name__}: {exc}"[:600]
        print(json.dumps({"step": step, "ok": ok, "error": error, "seconds": round(time.perf_counter() - t0, 2), **_context_state()}), flush=True)
    module.wait()
    return 0


def _chain16m(module) -> dict:
    """CHAIN16M["calls"] chained asynchronous simple_mul calls (t = t * y) on 16 Mi floats:
    host time per call while queuing, and per call including the final wait."""
    n, calls = CHAIN16M["n"], CHAIN16M["calls"]
    rng = np.random.default_rng(3)
    x_h, y_h = rng.standard_normal(n).astype(np.float32), rng.uniform(0.9, 1.1, n).astype(np.float32)
    x, y = module.to_device(x_h), module.to_device(y_h)
    enqueue, total = [], []
    t = x
    for rep in range(CHAIN16M["reps"] + 1):  # the first is warm-up
        module.wait()
        t0 = time.perf_counter()
        t = x
        for _ in range(calls):
            t = module.simple_mul(t, y)
        t1 = time.perf_counter()
        t.wait()
        t2 = time.perf_counter()
        if rep:
            enqueue.append((t1 - t0) * 1e6 / calls)
            total.append((t2 - t0) * 1e6 / calls)
    ok = bool(np.array_equal(t.to_host()[:4096], chain_reference(x_h[:4096], y_h[:4096], calls)))
    return {"ok": ok, "enqueue_us_per_call": round(float(np.median(enqueue)), 1), "total_us_per_call": round(float(np.median(total)), 1)}


def async_repro(out: Path, timeout: float, runs: int, scenarios: list[str]) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(ROOT)]))
    report: dict = {}
    for name in scenarios:
        results = []
        for _ in range(runs):
            t0 = time.perf_counter()
            try:
                proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--repro-scenario", name], env=env, cwd=ROOT,
                                      capture_output=True, text=True, timeout=timeout)
                rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
            except subprocess.TimeoutExpired as exc:
                rc, stdout, stderr = "timeout", (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout or "", ""
            steps = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
            results.append({"exit": rc, "seconds": round(time.perf_counter() - t0, 1), "steps": steps, "stderr_tail": stderr[-1500:]})
            print(f"[repro] {name}: exit {rc}, " + ", ".join(f"{s['step']}:{s.get('ok', '')}" for s in steps), file=sys.stderr, flush=True)
        report[name] = results
        (out / "async_repro.json").write_text(json.dumps(report, indent=1))  # after each: a timeout keeps the rest
    return report


def probe_depth(depth: int, limit: int | None) -> int:
    """`depth` asynchronous simple_mul_inplace calls on 16 Mi floats, chained on one timeline
    and queued before any wait, then one wait and a check. limit: iree_dispatch's bound on
    calls in flight; None: no bound (Module's own timeline bypassed, VmContext.invoke direct).
    Prints one line; a crash shows as the process's exit status."""
    import iree.runtime as rt

    from iree_dispatch import runtime as idr

    n = 16 * 2**20
    lhs = np.full(n, 1.0078125, np.float32)
    data = np.random.default_rng(1).uniform(1, 2, n).astype(np.float32)
    module = idr.load(BUILD / "samples_async.vmfb", asynchronous=True, max_in_flight=limit or 1 << 30)
    d_lhs, d_data = module.to_device(lhs), module.to_device(data)
    t0 = time.perf_counter()
    for _ in range(depth):
        r = module.simple_mul_inplace(d_lhs, d_data)
    queued = time.perf_counter() - t0
    pending = not r.done
    got = r.to_host()[:4096]
    want = data[:4096]
    for _ in range(depth):
        want = want * lhs[:4096]
    print(f"async depth {depth} max_in_flight {limit}: queued in {queued * 1e3:.1f} ms, pending after queuing: {pending}, "
          f"correct: {bool(np.array_equal(got, want))}, {rt.__name__}", flush=True)
    return 0


PROFILED = (("sync_noassert", 100), ("static", 100), ("sync", 100), ("sync_noassert", 1))
PROFILED_CALLS = 20


def worker_cupti(rec: Recorder, opts) -> None:
    """Where one program call's time goes: CUDA driver calls (count and total µs per call) and
    the kernels' GPU time, from CUPTI through torch.profiler, for PROFILED_CALLS calls."""
    use_driver_flags(rec.worker)
    import torch
    from torch.profiler import ProfilerActivity, profile

    from iree_dispatch import runtime as idr

    torch.cuda.init()
    x_h, y_h = inputs()
    folder = Path(tempfile.mkdtemp(prefix="cupti_"))
    for build, k in PROFILED:
        module = idr.load(vmfb(build, k))
        x, y = module.to_device(x_h), module.to_device(y_h)
        for _ in range(20):
            module.chain(x, y)
        trace = folder / f"{build}_{k}.json"
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(PROFILED_CALLS):
                module.chain(x, y)
        wall = (time.perf_counter() - t0) * 1e6 / PROFILED_CALLS
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text()).get("traceEvents", [])
        api: dict[str, list[float]] = {}
        for e in events:
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and "dur" in e:
                api.setdefault(e["name"], []).append(float(e["dur"]))
        kernels = sorted((float(e["ts"]), float(e["dur"])) for e in events if e.get("cat") == "kernel")
        rec.info.setdefault("cupti", {})[f"{build}:{k}"] = {
            # Includes the profiler's start-up on the first profiled build: not a call's cost.
            "wall_us_per_call_profiled": round(wall, 1),
            "driver_calls_per_call": {name: {"count": round(len(d) / PROFILED_CALLS, 2), "us_per_call": round(sum(d) / PROFILED_CALLS, 2)}
                                      for name, d in sorted(api.items(), key=lambda kv: -sum(kv[1]))},
            "kernels_per_call": round(len(kernels) / PROFILED_CALLS, 2),
            "kernel_us_median": round(float(np.median([d for _, d in kernels])), 3) if kernels else None,
            # GPU span of one call's K kernels, first start to last end (median over calls).
            "kernel_span_us": round(float(np.median([kernels[i + k - 1][0] + kernels[i + k - 1][1] - kernels[i][0]
                                                     for i in range(0, len(kernels) - k + 1, k)])), 2) if len(kernels) >= k else None,
        }
        print(f"[{rec.worker}] {build}:{k}: {json.dumps(rec.info['cupti'][f'{build}:{k}'])[:600]}", file=sys.stderr, flush=True)
        del module, x, y
        gc.collect()


def worker_fake(rec: Recorder, opts) -> None:
    """--dry-run: every key of this worker from no-op calls."""
    rec.info["dry_run"] = True
    noop = time_calls(lambda: None, 20, 2)
    if rec.worker.startswith("cupti"):
        keys = []
    elif rec.worker == "cupy":
        keys = [f"cupy:{m}:{k}" for m in ("chain_sync", "graph_sync") for k in KS] + ["cupy:enqueue", "cupy:batch"]
    else:
        keys = [f"{b}:{k}:{m}" for b in BUILDS for k in KS for m in measures(b)]
        keys += ["single:fresh", "single:fresh_keep", "single:release", "single:out", "single:check"]
        keys += [f"single:{n}:{m}" for n in ("async_fresh", "async_inplace") for m in ("enqueue", "batch")]
    for key in keys:
        rec.add(key, noop)


def run_worker(opts) -> int:
    rec = Recorder(opts.worker)
    gc.disable()
    try:
        if opts.dry_run:
            worker_fake(rec, opts)
        else:
            {"cupy": worker_cupy, "cupti_streams": worker_cupti, "cupti_graphs": worker_cupti}.get(opts.worker, worker_iree)(rec, opts)
    except Exception as exc:  # noqa: BLE001
        rec.errors.append({"what": "worker", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=8)})
        print(f"[{opts.worker}] worker failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    Path(opts.result).write_text(json.dumps({"worker": rec.worker, "info": rec.info, "results": rec.results, "errors": rec.errors}, indent=1))
    return 0


# --------------------------------------------------------------------------------------------
# GPU side: parent, report


def spawn(worker: str, opts, tmp: Path) -> dict:
    result = tmp / f"{worker}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", worker, "--result", str(result), "--ptx", str(opts.ptx)]
    if opts.dry_run:
        cmd.append("--dry-run")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(ROOT)]))
    t0 = time.perf_counter()
    print(f"== worker {worker}", file=sys.stderr, flush=True)
    try:
        rc = subprocess.run(cmd, env=env, timeout=opts.worker_timeout, cwd=ROOT).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    data = json.loads(result.read_text()) if result.is_file() else {"worker": worker, "info": {}, "results": {}, "errors": [{"what": "worker", "error": f"no result (exit {rc})"}]}
    data["exit"], data["seconds"] = rc, round(time.perf_counter() - t0, 1)
    print(f"== worker {worker}: exit {rc}, {data['seconds']} s, {len(data['results'])} results, {len(data['errors'])} errors", file=sys.stderr, flush=True)
    return data


def measures(build: str) -> tuple[str, ...]:
    return ("enqueue", "batch", "call_wait") if "async" in build else ("call", "vm_invoke")


def modes(worker: str) -> list[tuple[str, str]]:
    """(mode, result key with {k}) of the K-dependent rows of a worker."""
    if worker == "cupy":
        return [("cupy:chain_sync", "cupy:chain_sync:{k}"), ("cupy:graph_sync", "cupy:graph_sync:{k}")]
    if worker.startswith("cupti"):
        return []
    return [(f"{b}:{m}", f"{b}:{{k}}:{m}") for b in BUILDS for m in measures(b)]


def derived(workers: dict) -> dict:
    """Per-dispatch costs: slope (T(100) - T(1)) / 99 and T(K)/K, per worker and mode."""
    out: dict = {}
    for worker, data in workers.items():
        res = data["results"]
        for mode, key in modes(worker):
            medians = {k: res[key.format(k=k)]["median"] for k in KS if res.get(key.format(k=k), {}).get("n")}
            if len(medians) != len(KS):
                continue
            out[f"{worker}/{mode}"] = {
                "key": key,
                "T": medians,
                "per_dispatch_slope": (medians[100] - medians[1]) / 99,
                "per_dispatch_slope_10_100": (medians[100] - medians[10]) / 90,
                "per_dispatch_mean": {k: medians[k] / k for k in KS},
            }
    return out


MODE_LABELS = {
    "cupy:chain_sync": "CuPy: K launches + synchronize",
    "sync:call": "iree_dispatch call, as built (sync)",
    "sync:vm_invoke": "VmContext.invoke, as built (sync)",
    "sync_noassert:call": "iree_dispatch call, asserts stripped (sync)",
    "sync_noassert:vm_invoke": "VmContext.invoke, asserts stripped (sync)",
    "async:enqueue": "async call, host cost, as built",
    "async:batch": "async calls + final wait, per call, as built",
    "async:call_wait": "async call + wait, as built",
    "async_noassert:enqueue": "async call, host cost, asserts stripped",
    "async_noassert:batch": "async calls + final wait, per call, asserts stripped",
    "async_noassert:call_wait": "async call + wait, asserts stripped",
    "static:call": "iree_dispatch call, static sizes (memoized)",
    "static:vm_invoke": "VmContext.invoke, static sizes (memoized)",
    "static_async:enqueue": "async call, host cost, static sizes",
    "static_async:batch": "async calls + final wait, per call, static sizes",
    "static_async:call_wait": "async call + wait, static sizes",
    "cupy:graph_sync": "CuPy: the K launches as one CUDA graph, launch + sync",
}


def markdown(report: dict) -> str:
    workers, d = report["workers"], report["derived"]
    cupy = workers.get("cupy", {}).get("results", {})
    lines = [f"N = {N} float32, chain of K `simple_mul` calls. Medians in µs (p10–p90).", ""]
    lines += ["| worker | mode | T(1) | T(10) | T(100) | (T(100) − T(1)) / 99 | (T(100) − T(10)) / 90 | T(100) / 100 |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for key, v in d.items():
        worker, mode = key.split("/")
        res = workers[worker]["results"]
        cells = []
        for k in KS:
            s = res.get(v["key"].format(k=k), {})
            cells.append(f"{s['median']:.1f} ({s['p10']:.1f}–{s['p90']:.1f})" if s.get("n") else "–")
        slopes = f"{v['per_dispatch_slope']:.2f} | {v['per_dispatch_slope_10_100']:.2f} | {v['per_dispatch_mean'][100]:.2f}"
        lines.append(f"| {worker} | {MODE_LABELS.get(mode, mode)} | {' | '.join(cells)} | {slopes} |")
    lines += ["", "| worker | single-kernel row | median µs (p10–p90) |", "|---|---|---:|"]
    for key, s in [("cupy:enqueue", cupy.get("cupy:enqueue")), ("cupy:batch", cupy.get("cupy:batch"))]:
        if s and s.get("n"):
            lines.append(f"| cupy | `{key}` | {s['median']:.2f} ({s['p10']:.2f}–{s['p90']:.2f}) |")
    for worker, data in workers.items():
        for key, s in data["results"].items():
            if key.startswith("single:") and s.get("n"):
                lines.append(f"| {worker} | `{key}` | {s['median']:.2f} ({s['p10']:.2f}–{s['p90']:.2f}) |")
    for worker, data in workers.items():
        for key, c in data["info"].get("cupti", {}).items():
            top = ", ".join(f"{name} ×{v['count']} {v['us_per_call']} µs" for name, v in list(c["driver_calls_per_call"].items())[:6])
            lines.append(f"\nCUPTI {worker} {key}: {c['kernels_per_call']} kernels of "
                         f"{c['kernel_us_median']} µs, GPU span {c['kernel_span_us']} µs; driver per call: {top}")
        if data["info"].get("out_semantics"):
            lines.append(f"\nout= semantics ({worker}): {json.dumps(data['info']['out_semantics'])}")
        for e in data["errors"]:
            lines.append(f"\nERROR {worker}: {e['what']}: {e['error']}")
    return "\n".join(lines)


def plot(report: dict, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"no plot: {exc}"
    env, d = report["environment"], report["derived"]
    fig, ax = plt.subplots(figsize=(10, 6))
    styles = {"cupy": (None, "-"), "iree_streams": (None, "-"), "iree_pool": (None, ":"), "iree_graphs": (None, "--")}
    colors = {"sync:call": "#DD8452", "sync_noassert:call": "#C44E52", "async_noassert:enqueue": "#55A868",
              "static:call": "#8172B3", "static_async:enqueue": "#4C72B0", "cupy:chain_sync": "black", "cupy:graph_sync": "#777777"}
    for key, v in d.items():
        worker, mode = key.split("/")
        if mode not in colors:
            continue
        color, line = styles[worker]
        per = [v["per_dispatch_mean"][k] for k in KS]
        label = f"{MODE_LABELS.get(mode, mode)}" + ("" if worker == "cupy" else f" [{worker.replace('iree_', '')}]")
        ax.plot(KS, per, marker="o", linestyle=line, color=color or colors[mode], label=label)
    cupy = report["workers"].get("cupy", {}).get("results", {}).get("cupy:enqueue")
    if cupy and cupy.get("n"):
        ax.axhline(cupy["median"], color="grey", linestyle=":", label=f"CuPy launch, host cost ({cupy['median']:.1f} µs)")
    ax.axhline(1.0, color="red", linestyle=":", linewidth=0.8, label="1 µs target")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(KS)
    ax.set_xticklabels([str(k) for k in KS])
    ax.set_xlabel("K (simple_mul dispatches per call)")
    ax.set_ylabel("µs per dispatch = T(K) / K (median)")
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title(f"Cost per dispatch in a K-dispatch program, N = {N} — {env.get('device_name')}, {env.get('date_utc', '')[:10]}"
                 + (" — DRY RUN" if env.get("dry_run") else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def environment(opts) -> dict:
    def sh(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None

    query = sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    return {
        "date_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "nvidia_smi_L": sh(["nvidia-smi", "-L"]),
        "device_name": query.split(",")[0].strip() if query else None,
        "driver_version": query.split(",")[1].strip() if query else None,
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "versions": _versions(),
        "n": N, "ks": KS, "reps": REPS,
        "structure": json.loads((BUILD / "structure.json").read_text()) if (BUILD / "structure.json").is_file() else None,
        "dry_run": bool(opts.dry_run),
    }


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for dist in ("iree-base-runtime", "numpy", "cupy-cuda13x", "cupy-cuda12x", "matplotlib"):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--ptx", default=str(BUILD / "samples.objects" / "simple_mul.sm_90.ptx"))
    p.add_argument("--workers", default=",".join(WORKERS))
    p.add_argument("--worker-timeout", type=float, default=150.0)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--prepare", action="store_true")
    p.add_argument("--replot", metavar="JSON")
    p.add_argument("--async-depth", type=int, help="probe: this many chained async calls at 16 Mi (see probe_depth)")
    p.add_argument("--max-in-flight", type=int, help="with --async-depth: iree_dispatch's bound (default: none)")
    p.add_argument("--async-repro", action="store_true", help="run the async failure scenarios (REPRO_SCENARIOS) into --out")
    p.add_argument("--repro-runs", type=int, default=REPRO_RUNS, help="with --async-repro: processes per scenario")
    p.add_argument("--scenarios", default=",".join(REPRO_SCENARIOS), help="with --async-repro: which scenarios")
    p.add_argument("--repro-scenario", help=argparse.SUPPRESS)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    if opts.worker:
        return run_worker(opts)
    if opts.prepare:
        return prepare()
    if opts.async_depth:
        return probe_depth(opts.async_depth, opts.max_in_flight)
    if opts.repro_scenario:
        return repro_scenario(opts.repro_scenario)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    if opts.async_repro:
        async_repro(out, opts.worker_timeout, opts.repro_runs, opts.scenarios.split(","))
        return 0
    if opts.replot:
        report = json.loads(Path(opts.replot).read_text())
    else:
        report = {"environment": environment(opts), "workers": {}}
        print(f"device: {report['environment']['nvidia_smi_L']}", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="programs_") as tmp:
            for worker in opts.workers.split(","):
                report["workers"][worker] = spawn(worker, opts, Path(tmp))
    report["derived"] = derived(report["workers"])  # recomputed on --replot: JSON keys are strings
    (out / "programs.json").write_text(json.dumps(report, indent=1))
    env = report["environment"]
    md = f"# Programs, async calls, out=\n\n{env['nvidia_smi_L']} — driver {env['driver_version']} — {env['date_utc']}\n\n" + markdown(report)
    (out / "programs.md").write_text(md + "\n")
    problem = plot(report, out / "programs.png")
    print(md)
    if problem:
        print(problem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
