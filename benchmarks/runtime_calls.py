#!/usr/bin/env python3
"""What one call costs through the iree_dispatch runtime, against raw launches: kernels launched
directly by the runtime (the default), and through IREE's invoke with the output pool on and off
(each in its own process: the pool is set when the device is created).

Rows (H100 class GPU; wall times are medians of synchronous calls after warm-up, CUPTI
durations come from torch.profiler):

  * simple_mul, N = 1024 (samples.vmfb): CuPy launch + synchronize of the same cubin; an
    iree_dispatch call on device arrays (fresh output), on numpy arrays (copies both ways,
    queued on the kernel's stream with one wait; and the parts of such a call timed alone: the
    copies in, the launch, the read, each a wait of its own, and the staged copies of one call
    with no kernel), on torch tensors (DLPack in, a torch tensor out), and a torch elementwise
    multiply + synchronize; the host cost of calls on CuPy arrays and torch tensors (launched
    directly they are queued on the framework's stream and return at once), with a fresh output
    and in place (simple_mul_inplace), in rounds alternating with CuPy's launch of the same cubins
    (into an existing output, in place, allocating its output); the host cost of one asynchronous
    call (async/samples.vmfb); the parts of a call (argument checks, VmContext.invoke).
  * gemm_bf16 at 4096³ (gemm/gemm.vmfb): the synchronous call's wall time (in rounds alternating
    with the same cubin launched by CuPy into a fresh output and into one kept output, and with
    the call into one kept output, gemm/poisonable/gemm.vmfb) against its kernel's CUPTI duration,
    and the GPU's own time for one CuPy launch on an idle GPU against launches back to back
    (CUDA events).

    python3 benchmarks/runtime_calls.py --out DIR        # GPU side: numpy, torch, cupy, iree-base-runtime
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import nvidia_smi, summarize, wall_times_us  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "gpu-tests"
N = 1024
GEMM = 4096
REPS = 2000


def host_us(call, count: int, warmup: int = 50) -> list[float]:
    """µs of the host side of each call: the call returns without waiting for the GPU."""
    return wall_times_us(call, count, warmup)


def worker(out: Path) -> None:
    import cupy as cp
    import torch

    from iree_dispatch import runtime

    rows: dict[str, dict] = {}
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)

    # CuPy: the cubin IREE runs on this GPU.
    cc = runtime.cuda_compute_capability(0)
    arch = "sm_90" if cc >= (9, 0) else "sm_80"
    kern = cp.RawModule(path=str(BUILD / "samples.objects" / f"simple_mul.{arch}.cubin")).get_function("simple_mul")
    ca, cb, cout = cp.asarray(a), cp.asarray(b), cp.empty(N, cp.float32)
    args = (ca, cb, cout, np.int32(N))

    def cupy_sync():
        kern(((N + 63) // 64,), (64,), args)
        cp.cuda.runtime.deviceSynchronize()

    rows["cupy launch + sync"] = summarize(wall_times_us(cupy_sync, REPS, 50))

    def cupy_allocate_and_launch():  # what a call does: a fresh output, then the launch
        out = cp.empty(N, cp.float32)
        kern(((N + 63) // 64,), (64,), (ca, cb, out, np.int32(N)))
        return out

    mod = runtime.load(BUILD / "samples.vmfb")
    da, db = mod.to_device(a), mod.to_device(b)
    np.testing.assert_array_equal(mod.simple_mul(da, db).to_host(), a * b)
    rows["iree_dispatch call, device arrays"] = summarize(wall_times_us(lambda: mod.simple_mul(da, db), REPS, 50))
    rows["iree_dispatch call, numpy in/out"] = summarize(wall_times_us(lambda: mod.simple_mul(a, b), REPS, 50))
    check = mod.simple_mul.check
    import iree.runtime as ireert

    rows["  copy 4 KB to the device (to_device)"] = summarize(wall_times_us(lambda: mod.to_device(a), REPS, 50))

    # A numpy call's parts, each timed alone in this process, and the whole call through IREE's
    # invoke here too: what the sum of the parts leaves to the call itself shows at once.
    # IREE's asdevicearray, which copies used before, asks for host-visible device memory: CUDA
    # managed memory, allocated, prefetched and freed (cuMemFree) per copy, outside the pool.
    def upload_managed():
        with mod.gpu.bound():
            return ireert.asdevicearray(mod.device, a), ireert.asdevicearray(mod.device, b)

    rows["  numpy call: 2 copies to the device (pool + staging buffer)"] = summarize(wall_times_us(lambda: (mod.to_device(a), mod.to_device(b)), REPS, 50))
    rows["  numpy call: 2 copies to the device (IREE's asdevicearray, managed memory)"] = summarize(wall_times_us(upload_managed, REPS, 50))
    rows["  numpy call: IREE's invoke on numpy in, result to the host"] = summarize(wall_times_us(lambda: mod.simple_mul._invoke(a, b).to_host(), REPS, 50))
    rows["  copy 4 KB to the host (to_host, pinned staging buffer)"] = summarize(wall_times_us(da.to_host, REPS, 50))
    try:  # IREE's own read can fail when numpy reuses an address it still has registered
        rows["  (copy 4 KB to the host, IREE's DeviceArray.to_host)"] = summarize(wall_times_us(lambda: ireert.DeviceArray.to_host(da), REPS, 50))
    except RuntimeError as exc:
        print(f"IREE's DeviceArray.to_host failed: {exc}", flush=True)
    rows["  of which argument checks"] = summarize(host_us(lambda: check(da, db), REPS))
    direct = mod.simple_mul._direct
    if direct is not None:  # the parts of a direct launch
        from iree_dispatch.runtime import dlpack as _dlp
        from iree_dispatch.runtime import launch as _launch
        from iree_dispatch.runtime.compiled import compiled_launch

        output = direct.outputs["out"]

        def fresh_output():
            return _launch._fresh_output(mod.gpu, output, (N,), 4 * N, None)

        rows["  of which a fresh output (pool, wrap, pointer)"] = summarize(host_us(fresh_output, REPS))
        keep = mod.simple_mul(da, db)
        pointers = [_dlp.device_pointer(mod.gpu, v) for v in (da, db, keep)]
        constants = direct.constants_for({"n": N}, {})

        def launch_and_wait():
            direct.launch(pointers, constants, direct.grid_for({"n": N}), None, wait=True)

        path = "compiled launch" if compiled_launch() is not None else "ctypes"
        rows[f"  of which launch + synchronize ({path})"] = summarize(wall_times_us(launch_and_wait, REPS, 50))
        # A numpy call's direct launch on copies already made: its Python path (grid, push
        # constants, a fresh output, launch + synchronize), with no signature prepared.
        rows["  numpy call: the direct launch on device copies (checked path)"] = summarize(wall_times_us(lambda: direct.call([da, db], [], {"n": N}), REPS, 50))
        # The same on our arrays, then the result read: a numpy call without its copies in.
        rows["  numpy call: the direct launch + result to the host"] = summarize(wall_times_us(lambda: direct.call([da, db], [], {"n": N})[0].to_host(), REPS, 50))
        # What a numpy call queues on the launch stream besides its kernel: 2 copies in, 1 out, one wait.
        from iree_dispatch.runtime.host_copies import HostCopies

        def staged_copies():
            with mod.gpu.bound(), HostCopies(mod.gpu) as copies:
                staged_a, _ = copies.upload(a), copies.upload(b)
                copies.queue_uploads()
                return copies.read([staged_a])

        np.testing.assert_array_equal(staged_copies()[0], a)
        rows["  numpy call: 2 copies in + 1 out on the launch stream, one wait (no kernel)"] = summarize(wall_times_us(staged_copies, REPS, 50))
    invoker = mod.simple_mul._invoke
    rows["  of which invoke + result wrap"] = summarize(wall_times_us(lambda: invoker(da, db), REPS, 50))

    amod = runtime.load(BUILD / "async" / "samples.vmfb", asynchronous=True)
    xa, xb = amod.to_device(a), amod.to_device(b)
    held = []

    def async_call():
        held.append(amod.simple_mul(xa, xb))

    samples = []
    for _ in range(20):  # batches of 100 queued calls, host time per call, then a wait
        samples += host_us(async_call, 100, warmup=0)
        amod.wait()
        held.clear()
    rows["iree_dispatch async call (host)"] = summarize(samples)
    ainvoke = amod.simple_mul._invoke
    samples = []
    for _ in range(20):
        samples += host_us(lambda: held.append(ainvoke(xa, xb)), 100, warmup=0)
        amod.wait()
        held.clear()
    rows["  of which the fenced invoke"] = summarize(samples)

    smod = runtime.load(BUILD / "async" / "samples.vmfb")  # the same module, calls waited for
    sa, sb = smod.to_device(a), smod.to_device(b)
    np.testing.assert_array_equal(smod.simple_mul(sa, sb).to_host(), a * b)
    rows["iree_dispatch call of an async-built kernel, waited (device arrays)"] = summarize(wall_times_us(lambda: smod.simple_mul(sa, sb), REPS, 50))

    # The host cost of a call that returns without waiting, against CuPy's own launch of the
    # same cubin: into an existing output, in place, and allocating its output as a call does.
    # Alternating rounds of 100 calls each way (a synchronize after each round), so that every
    # way sees the same clocks and process state; each call's result is dropped at once, as
    # CuPy's are.
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    torch.testing.assert_close(mod.simple_mul(ta, tb), ta * tb, rtol=0, atol=0)
    np.testing.assert_array_equal(cp.asnumpy(mod.simple_mul(ca, cb)), a * b)
    inplace = cp.RawModule(path=str(BUILD / "samples.objects" / f"simple_mul.{arch}.cubin")).get_function("simple_mul_inplace")
    c_in, t_in = cp.asarray(b), torch.from_numpy(b).cuda()  # written in place by their rows
    ways = {
        "cupy launch (host)": lambda: kern(((N + 63) // 64,), (64,), args),
        "cupy launch, in place (host)": lambda: inplace(((N + 63) // 64,), (64,), (ca, c_in, np.int32(N))),
        "cupy output allocation + launch (host)": cupy_allocate_and_launch,
        "iree_dispatch call on CuPy arrays (host)": lambda: mod.simple_mul(ca, cb),
        "iree_dispatch call on CuPy arrays, in place (host)": lambda: mod.simple_mul_inplace(ca, c_in),
        "iree_dispatch call on torch tensors (host)": lambda: mod.simple_mul(ta, tb),
        "iree_dispatch call on torch tensors, in place (host)": lambda: mod.simple_mul_inplace(ta, t_in),
    }
    samples = {name: [] for name in ways}
    for _ in range(20):
        for name, call in ways.items():
            samples[name] += host_us(call, 100, warmup=5)
            torch.cuda.synchronize()
    for name, values in samples.items():
        rows[name] = summarize(values)
    rows["iree_dispatch call on CuPy arrays + sync"] = summarize(wall_times_us(lambda: (mod.simple_mul(ca, cb), cp.cuda.runtime.deviceSynchronize()), REPS, 50))

    def torch_call():  # a call on torch tensors returns a torch tensor
        y = mod.simple_mul(ta, tb)
        torch.cuda.synchronize()
        return y

    def torch_op():
        y = ta * tb
        torch.cuda.synchronize()
        return y

    # Side by side: alternating rounds, so that both see the same clocks and process state.
    call_wall, op_wall = [], []
    for _ in range(10):
        call_wall += wall_times_us(torch_call, REPS // 10, 5)
        op_wall += wall_times_us(torch_op, REPS // 10, 5)
    rows["torch in -> iree_dispatch -> torch out"] = summarize(call_wall)
    torch.cuda.synchronize()
    rows["iree_dispatch call, device arrays (again, after the async module's calls)"] = summarize(wall_times_us(lambda: mod.simple_mul(da, db), REPS, 50))
    rows["torch elementwise multiply + sync"] = summarize(op_wall)
    rows["  of which checks (2 tensors)"] = summarize(host_us(lambda: check(ta, tb), REPS))
    imported = mod.simple_mul._imported
    rows["  of which checks + IREE's DLPack import of 2 tensors"] = summarize(host_us(lambda: imported(check(ta, tb)), REPS))
    from iree_dispatch.runtime import dlpack as _dl

    rows["  of which reading a capsule (1 tensor)"] = summarize(host_us(lambda: _dl.describe(ta.__dlpack__(stream=-1)), REPS))
    rows["  of which IREE's import (1 tensor, HalDevice.from_dlpack_capsule)"] = summarize(host_us(lambda: mod.device.from_dlpack_capsule(ta.__dlpack__(stream=-1)), REPS))
    rows["  of which torch __dlpack__ (1 tensor, unordered)"] = summarize(host_us(lambda: ta.__dlpack__(stream=-1), REPS))
    rows["  (torch __dlpack__ ordered on a stream, 1 tensor)"] = summarize(host_us(lambda: ta.__dlpack__(stream=mod.gpu.bridge.handle), REPS))
    rows["  of which asking torch's current stream"] = summarize(host_us(lambda: torch.cuda.current_stream(ta.device).cuda_stream, REPS))
    stream = torch.cuda.current_stream().cuda_stream
    rows["  of which waiting for the producer stream"] = summarize(host_us(lambda: mod.gpu.bridge.wait_for(stream), REPS))
    rows["  of which waiting for consumer streams"] = summarize(host_us(mod.gpu.before_call, REPS))
    kept = mod.simple_mul(da, db)
    rows["  of which torch.from_dlpack(result)"] = summarize(host_us(lambda: torch.from_dlpack(kept), REPS))
    rows["  of which IREE's invoke on freshly imported arrays"] = summarize(wall_times_us(lambda: invoker(*imported(check(ta, tb))[0]), REPS, 50))
    once = imported(check(ta, tb))[0]
    rows["  of which IREE's invoke on arrays imported once"] = summarize(wall_times_us(lambda: invoker(*once), REPS, 50))

    gemm = runtime.load(BUILD / "gemm" / "gemm.vmfb")
    import ml_dtypes

    ga = gemm.to_device(rng.standard_normal((GEMM, GEMM)).astype(ml_dtypes.bfloat16))
    gb = gemm.to_device(rng.standard_normal((GEMM, GEMM)).astype(ml_dtypes.bfloat16))
    # The same cubin launched by CuPy into a fresh output, + synchronize: the raw-launch floor.
    from iree_dispatch.runtime import dlpack as _dlpack

    gemm_arch = "sm_90a" if cc == (9, 0) else "sm_80"
    gemm_kernel = cp.RawModule(path=str(BUILD / "gemm" / "gemm.objects" / f"gemm.{gemm_arch}.cubin")).get_function("gemm_bf16")
    gemm_smem = {"sm_90a": 197632, "sm_80": 62592}[gemm_arch]  # kernels/gemm.toml
    gemm_kernel.max_dynamic_shared_size_bytes = gemm_smem
    pa, pb = (np.uint64(_dlpack.device_pointer(gemm.gpu, x)) for x in (ga, gb))

    def cupy_gemm():
        c = cp.empty((GEMM, GEMM), cp.float32)
        gemm_kernel((GEMM // 256, 2 * GEMM // 256), (384,), (pa, pb, np.uint64(c.data.ptr), np.int32(GEMM), np.int32(GEMM), np.int32(GEMM)), shared_mem=gemm_smem)
        cp.cuda.runtime.deviceSynchronize()
        return c

    kept = cp.empty((GEMM, GEMM), cp.float32)

    def cupy_gemm_launch():  # into one kept output, on CuPy's current stream
        gemm_kernel((GEMM // 256, 2 * GEMM // 256), (384,), (pa, pb, np.uint64(kept.data.ptr), np.int32(GEMM), np.int32(GEMM), np.int32(GEMM)), shared_mem=gemm_smem)

    def cupy_gemm_kept_output():
        cupy_gemm_launch()
        cp.cuda.runtime.deviceSynchronize()

    want = gemm.gemm_bf16(ga, gb).to_host()
    np.testing.assert_allclose(cp.asnumpy(cupy_gemm()), want, rtol=0, atol=0)
    # Side by side: alternating rounds of 5 calls each way, so that all see the same clocks
    # and the same state of the process.
    # The same kernel with its output declared in place (out=): a call into one kept output.
    gemm_out = runtime.load(BUILD / "gemm" / "poisonable" / "gemm.vmfb")
    gc_out = gemm_out.to_device(np.full((GEMM, GEMM), np.nan, np.float32))
    np.testing.assert_allclose(gemm_out.gemm_bf16(ga, gb, gc_out).to_host(), want, rtol=0, atol=0)
    # The GPU's own time for one such launch: CUDA events recorded just before the launch and
    # just after it, the GPU idle before (as in a synchronous call), against the time per
    # kernel of launches queued back to back. Whatever the first exceeds the CUPTI kernel time
    # by is spent on the GPU, so no launcher's synchronous call can go below it.
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def cupy_gemm_span():
        start.record()
        cupy_gemm_launch()
        end.record()
        end.synchronize()
        spans.append(cp.cuda.get_elapsed_time(start, end) * 1e3)

    wall, out_wall, cupy_wall, cupy_kept_wall, spans = [], [], [], [], []
    for _ in range(40):
        wall += wall_times_us(lambda: gemm.gemm_bf16(ga, gb), 5, 1)
        out_wall += wall_times_us(lambda: gemm_out.gemm_bf16(ga, gb, gc_out), 5, 1)
        cupy_wall += wall_times_us(cupy_gemm, 5, 1)
        cupy_kept_wall += wall_times_us(cupy_gemm_kept_output, 5, 1)
        for _ in range(5):
            cupy_gemm_span()
    back_to_back = []
    for _ in range(10):
        start.record()
        for _ in range(20):
            cupy_gemm_launch()
        end.record()
        end.synchronize()
        back_to_back.append(cp.cuda.get_elapsed_time(start, end) * 1e3 / 20)
    rows["gemm_bf16 4096^3, CuPy: one launch on an idle GPU, GPU time (events)"] = summarize(spans)
    rows["gemm_bf16 4096^3, CuPy: launches back to back, GPU time per kernel (events)"] = summarize(back_to_back)
    rows["gemm_bf16 4096^3, CuPy: fresh output + launch + sync (wall)"] = summarize(cupy_wall)
    rows["gemm_bf16 4096^3, CuPy: launch into one kept output + sync (wall)"] = summarize(cupy_kept_wall)
    rows["gemm_bf16 4096^3 sync call into one kept output (out=, wall)"] = summarize(out_wall)

    def gemm_calls(count):
        for _ in range(count):
            gemm.gemm_bf16(ga, gb)

    from common import cupti_kernel_records

    records = cupti_kernel_records(gemm_calls, 20)  # one kernel per call, nothing else launched
    kernels = [r["dur"] for r in records]
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        gemm_calls(3)
    gpu_work = [(e.key, round(e.device_time_total / e.count, 1), e.count) for e in prof.key_averages() if e.device_time_total > 0]
    print("gemm call, GPU work per call:", gpu_work, flush=True)
    rows["gemm_bf16 4096^3 sync call (wall)"] = summarize(wall)
    rows["gemm_bf16 4096^3 kernel (CUPTI)"] = summarize(kernels or [float("nan")])
    out.write_text(json.dumps(rows))


def table(results: dict) -> str:
    names = list(dict.fromkeys(name for r in results["runs"].values() for name in r))
    lines = ["| row | " + " | ".join(f"{k} median µs (p10-p90)" for k in results["runs"]) + " |", "|---|" + "---:|" * len(results["runs"])]
    for name in names:
        cells = [f"{r[name]['median']:.1f} ({r[name]['p10']:.1f}-{r[name]['p90']:.1f})" if name in r else "" for r in results["runs"].values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for label, launch, pool in (("direct launch", "direct", "default"), ("through IREE", "iree", "default"), ("through IREE, no pool", "iree", "off")):
        target = args.out / f"runtime_calls_{launch}_{pool}.json"
        env = {**os.environ, "IREE_DISPATCH_OUTPUT_POOL": pool, "IREE_DISPATCH_LAUNCH": launch}
        subprocess.run([sys.executable, __file__, "--out", str(args.out), "--worker", str(target)], check=True, env=env)
        runs[label] = json.loads(target.read_text())
    results = {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "device": nvidia_smi("name"),
        "driver": nvidia_smi("driver_version"),
        "runs": runs,
    }
    (args.out / "runtime_calls.json").write_text(json.dumps(results, indent=1))
    text = f"{results['date']}, {results['device']}, driver {results['driver']}\n\n{table(results)}\n"
    (args.out / "runtime_calls.md").write_text(text)
    print(text)
    plot(results, args.out / "runtime_calls.png")
    return 0


PLOTTED = ["cupy launch + sync", "iree_dispatch call, device arrays", "iree_dispatch call, numpy in/out", "cupy launch (host)",
           "iree_dispatch call on CuPy arrays (host)", "iree_dispatch async call (host)",
           "torch elementwise multiply + sync", "torch in -> iree_dispatch -> torch out", "gemm_bf16 4096^3 kernel (CUPTI)", "gemm_bf16 4096^3 sync call (wall)"]


def plot(results: dict, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results["runs"]
    y = np.arange(len(PLOTTED))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, (label, rows) in enumerate(runs.items()):
        width = 0.8 / len(runs)
        ax.barh(y + width * (i - (len(runs) - 1) / 2), [rows[name]["median"] for name in PLOTTED], width, label=label)
    ax.set_yticks(y, PLOTTED, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("µs (median; log scale)")
    ax.set_title(f"One call through the iree_dispatch runtime, {results['device']}, {results['date'][:10]}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
