#!/usr/bin/env python3
"""Achieved memory bandwidth of the kernel library (kernels/library.toml) at large sizes,
against a device-to-device copy measured in the same run.

Each kernel is timed four ways, on the same device buffers' worth of data:
  * `cupy`: the kernel's own cubin (library.objects/<source>.sm_XY.cubin, the one IREE runs on
    this GPU) launched by CuPy RawModule, no IREE involved; CUDA events around batches of
    launches, median per launch;
  * `cupy_cupti`: the same CuPy launches, each kernel's duration read from CUPTI (through
    torch.profiler);
  * `iree_cupti`: the kernel as an iree_dispatch call launches it (`module.<kernel>(*device_arrays)`,
    a fresh output per call, from the output pool), its duration read from CUPTI the same way:
    the kernel alone, without the call's host overhead. `IREE / CuPy (CUPTI)` compares the two
    CUPTI durations: the same cubin, launched by CuPy or through iree_dispatch;
  * `iree_wall - empty`: median wall time of the synchronous IREE call minus that of the same
    call on a 1x4 tensor (the host overhead of an empty call). It holds more than the kernel
    where the output is large: the call also allocates and frees its output, which the empty
    call doesn't; it matches CUPTI only for small outputs (the row reductions).
The copy reference is the faster of cudaMemcpyAsync (device to device) and cupy.copyto over
the largest buffer (8192 x 8192 floats), timed with events like the `cupy` rows. GB/s count
compulsory traffic: every input read once and every output written once (softmax, LayerNorm
and RMSNorm read their row a second time, from shared memory; that read is not counted).
CUPTI times the kernel alone, events also the gaps between launches: the CUPTI rows read a few
percent higher than the event-timed ones and the copy.

Each kernel's IREE output at the large size is also checked against its float64 reference on a
sample of rows.

    python benchmarks/kernels.py --prepare            # CPU side: python -m tests.support.artifacts --only library
    python benchmarks/kernels.py --out DIR            # GPU side: numpy, cupy, torch, iree-base-runtime
    python benchmarks/kernels.py --replot DIR/kernels.json --out DIR2   # table + PNG again
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import sys
from pathlib import Path

import common  # benchmarks/common.py, beside this script
import numpy as np
from common import cupti_times_us, nvidia_smi, summarize, wall_times_us

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / "build" / "gpu-tests" / "library"
SQUARE = (8192, 8192)
TALL = (65536, 1024)
SHORT = (32768, 2048)  # bf16/f16 kernels: the rows of a transformer's hidden sizes, 2048 to 8192
MID = (16384, 4096)
# kernel → (source file, shapes timed); row kernels also at many short rows.
KERNELS = {
    "bias_gelu_f32": ("elementwise", [SQUARE]),
    "bias_gelu_f16": ("elementwise", [SQUARE]),
    "bias_gelu_bf16": ("elementwise", [SQUARE]),
    "bias_gelu_f32_bf16": ("elementwise", [SQUARE]),
    "row_sum_f32": ("rows", [SQUARE, TALL]),
    "row_max_f32": ("rows", [SQUARE, TALL]),
    "softmax_f32": ("rows", [SQUARE, TALL]),
    "layernorm_f32": ("rows", [SQUARE, TALL]),
    "rmsnorm_f32": ("rows", [SQUARE, TALL]),
    "softmax_bf16": ("rows", [SQUARE, MID]),
    "layernorm_bf16": ("rows", [SQUARE, MID]),
    "rmsnorm_bf16": ("rows", [SQUARE, MID]),
    "softmax_f16": ("rows", [SQUARE, MID]),
    "layernorm_f16": ("rows", [SQUARE, MID]),
    "rmsnorm_f16": ("rows", [SQUARE, MID]),
    "softmax_warp_f32": ("rows", [TALL, SQUARE]),  # made for short rows; 8192 columns to show the cost past its cache
    "layernorm_warp_f32": ("rows", [TALL, SQUARE]),
    "softmax_warp_bf16": ("rows", [TALL, SHORT]),
    "layernorm_warp_bf16": ("rows", [TALL, SHORT]),
    "rmsnorm_warp_bf16": ("rows", [TALL, SHORT]),
    "softmax_warp_f16": ("rows", [TALL, SHORT]),
    "layernorm_warp_f16": ("rows", [TALL, SHORT]),
    "rmsnorm_warp_f16": ("rows", [TALL, SHORT]),
    "transpose_f32": ("transpose", [SQUARE]),
}
EPS = 1e-5
BATCH, BATCHES, CUPTI_CALLS, WALL_CALLS = 10, 15, 20, 30


def references():
    loader = importlib.util.spec_from_file_location("library_references", ROOT / "kernels" / "references.py")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


def arguments(name: str, rows: int, cols: int, rng) -> tuple[list[np.ndarray], list[float]]:
    """Inputs and scalar arguments of the IREE function (random, nonzero)."""
    if name.endswith("bf16") and name != "bias_gelu_f32_bf16":  # bias_gelu_f32_bf16 takes f32 and writes bf16
        import ml_dtypes  # numpy has no bfloat16

        dtype = np.dtype(ml_dtypes.bfloat16)
    else:
        dtype = np.float16 if name.endswith("_f16") else np.float32
    x = rng.standard_normal((rows, cols), dtype=np.float32).astype(dtype)
    vec = rng.uniform(0.5, 1.5, cols).astype(dtype)
    if name.startswith("bias_gelu"):
        return [x, vec], []
    if name.startswith("layernorm"):
        return [x, vec, rng.uniform(-1, 1, cols).astype(dtype)], [EPS]
    if name.startswith("rmsnorm"):
        return [x, vec], [EPS]
    return [x], []


def traffic_bytes(name: str, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> int:
    return sum(a.nbytes for a in inputs) + sum(a.nbytes for a in outputs)


def kernel_params(name: str, rows: int, cols: int, ins, outs, scalars):
    """The kernel's C parameters in order (for CuPy): pointers, then the ints/floats the spec
    derives from shapes or takes as arguments."""
    ints = {"bias_gelu_f32": (rows, cols), "bias_gelu_f16": (rows, cols), "bias_gelu_bf16": (rows, cols), "bias_gelu_f32_bf16": (rows, cols), "transpose_f32": (rows, cols),
            }.get(name, (rows, cols) if "_warp_" in name else (cols,))
    return (*ins, *outs, *(np.int32(v) for v in ints), *(np.float32(s) for s in scalars))


def launch_dims(description, rows: int, cols: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    from iree_dispatch.core import expr as ex

    env = {"rows": rows, "cols": cols}
    grid = tuple(ex.evaluate(ex.parse(g, "grid"), env) for g in description.grid)
    return grid, tuple(description.block)


def event_times_us(cp, launch) -> list[float]:
    """Per-launch µs from CUDA events around BATCH back-to-back launches, BATCHES times."""
    launch()
    cp.cuda.Device().synchronize()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    out = []
    for _ in range(BATCHES):
        start.record()
        for _ in range(BATCH):
            launch()
        stop.record()
        stop.synchronize()
        out.append(cp.cuda.get_elapsed_time(start, stop) * 1e3 / BATCH)
    return out


def check_sample(name: str, got: np.ndarray, inputs, scalars, refs) -> float:
    """Max error of the IREE result against the float64 reference on every 509th row (all of
    a transpose), relative to max |reference|."""
    if name == "transpose_f32":
        return 0.0 if np.array_equal(got, inputs[0].T) else float("inf")
    rows = np.arange(0, inputs[0].shape[0], 509)
    sub = [inputs[0][rows], *inputs[1:]]
    want = getattr(refs, name)(*sub, *scalars)
    err = np.abs(got[rows].astype(np.float64) - want)
    return float(err.max() / np.abs(want).max())


def measure(args) -> dict:
    import cupy as cp
    import torch

    from iree_dispatch import runtime

    torch.cuda.init()
    refs = references()
    module = runtime.load(args.dir / "library.vmfb")
    major, minor = runtime.cuda_compute_capability()
    arch = "sm_90" if major == 9 else "sm_80" if major == 8 else None
    objects = args.dir / "library.objects"
    rng = np.random.default_rng(0)
    result = {
        "device": runtime.cuda_device_name(),
        "capability": f"{major}.{minor}",
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "object": f"{arch}.cubin" if arch else "sm_90.ptx (JIT)",
        "driver": nvidia_smi("driver_version"),
        "versions": {"cupy": cp.__version__, "torch": torch.__version__, "numpy": np.__version__},
        "method": __doc__.split("\n\n")[1],
        "copy": {},
        "kernels": [],
    }

    n = SQUARE[0] * SQUARE[1]
    src, dst = cp.asarray(rng.standard_normal(n, dtype=np.float32)), cp.empty(n, cp.float32)
    memcpy = event_times_us(cp, lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, cp.cuda.runtime.memcpyDeviceToDevice, cp.cuda.get_current_stream().ptr))
    copyto = event_times_us(cp, lambda: cp.copyto(dst, src))
    for label, times in (("cudaMemcpyAsync", memcpy), ("cupy.copyto", copyto)):
        s = summarize(times)
        result["copy"][label] = {**s, "bytes": 2 * src.nbytes, "GBps": 2 * src.nbytes / s["median"] / 1e3}
    src = dst = None
    copy_gbps = max(c["GBps"] for c in result["copy"].values())
    result["copy_GBps"] = copy_gbps

    for name, (source, shapes) in KERNELS.items():
        raw = cp.RawModule(path=str(objects / (f"{source}.{arch}.cubin" if arch else f"{source}.sm_90.ptx")))
        kernel = raw.get_function(name)
        fn = module.functions[name]
        for rows, cols in shapes:
            row = {"kernel": name, "shape": [rows, cols]}
            try:
                inputs, scalars = arguments(name, rows, cols, rng)
                dev = [module.to_device(a) for a in inputs]
                got = fn(*dev, *scalars).to_host()
                row["max_rel_err_sampled"] = check_sample(name, got, inputs, scalars, refs)
                row["bytes"] = traffic_bytes(name, inputs, [got])
                # CuPy has no bfloat16: it moves 16-bit floats as their bits.
                c_in = [cp.asarray(a.view(np.uint16) if a.dtype.itemsize == 2 else a) for a in inputs]
                c_out = [cp.empty(got.shape, np.uint16 if got.dtype.itemsize == 2 else got.dtype)]
                grid, block = launch_dims(fn.description, rows, cols)
                params = kernel_params(name, rows, cols, c_in, c_out, scalars)
                cupy_launch = lambda: kernel(grid, block, params, shared_mem=fn.description.shared_memory)  # noqa: E731
                row["cupy_us"] = summarize(event_times_us(cp, cupy_launch))

                def cupy_calls(k):
                    for _ in range(k):
                        cupy_launch()

                row["cupy_cupti_us"] = summarize(cupti_times_us(cupy_calls, name, CUPTI_CALLS))
                got_cupy = c_out[0].get().view(got.dtype)
                row["cupy_matches_iree"] = bool(np.array_equal(got_cupy, got))

                def iree_calls(k):
                    for _ in range(k):
                        fn(*dev, *scalars)

                row["iree_cupti_us"] = summarize(cupti_times_us(iree_calls, name, CUPTI_CALLS))
                row["iree_wall_us"] = summarize(wall_times_us(lambda: fn(*dev, *scalars), WALL_CALLS))
                tiny_in, tiny_scalars = arguments(name, 1, 4, rng)
                tiny = [module.to_device(a) for a in tiny_in]
                row["iree_empty_wall_us"] = summarize(wall_times_us(lambda: fn(*tiny, *tiny_scalars), WALL_CALLS))
                row["iree_wall_minus_empty_us"] = row["iree_wall_us"]["median"] - row["iree_empty_wall_us"]["median"]
                row["iree_vs_cupy_cupti"] = row["cupy_cupti_us"]["median"] / row["iree_cupti_us"]["median"]
                for key, us in (("cupy", row["cupy_us"]["median"]), ("cupy_cupti", row["cupy_cupti_us"]["median"]), ("iree_cupti", row["iree_cupti_us"]["median"]),
                                ("iree_wall_minus_empty", row["iree_wall_minus_empty_us"])):
                    row[f"{key}_GBps"] = row["bytes"] / us / 1e3
                    row[f"{key}_pct_copy"] = 100 * row[f"{key}_GBps"] / copy_gbps
            except Exception as exc:  # a failing kernel is recorded; the others still run
                row["error"] = f"{type(exc).__name__}: {exc}"
            print(json.dumps({k: row.get(k) for k in ("kernel", "shape", "cupy_GBps", "iree_cupti_GBps", "max_rel_err_sampled", "error")}), flush=True)
            result["kernels"].append(row)
            inputs = dev = got = c_in = c_out = None
            cp.get_default_memory_pool().free_all_blocks()
    return result


def table(result: dict) -> str:
    copy = result["copy"]
    lines = [
        f"Device: {result['device']} (compute capability {result['capability']}, driver {result['driver']}), {result['date']}; object run: {result['object']}.",
        "",
        "Copy reference (8192 x 8192 f32, read + write): "
        + ", ".join(f"{k} {v['GBps']:.0f} GB/s ({v['median']:.1f} µs)" for k, v in copy.items())
        + f"; 100% = {result['copy_GBps']:.0f} GB/s.",
        "",
        "| kernel | shape | MB moved | CuPy launch µs (events) | GB/s | % copy | CuPy kernel µs (CUPTI) | IREE kernel µs (CUPTI) | GB/s | % copy "
        "| IREE / CuPy (CUPTI) | IREE call µs (wall) | minus empty call | max rel err (sampled rows) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["kernels"]:
        shape = "x".join(map(str, r["shape"]))
        if "error" in r:
            lines.append(f"| {r['kernel']} | {shape} | error: {r['error']} |")
            continue
        lines.append(
            f"| {r['kernel']} | {shape} | {r['bytes'] / 1e6:.0f} | {r['cupy_us']['median']:.1f} | {r['cupy_GBps']:.0f} | {r['cupy_pct_copy']:.0f}% "
            f"| {r['cupy_cupti_us']['median']:.1f} | {r['iree_cupti_us']['median']:.1f} | {r['iree_cupti_GBps']:.0f} | {r['iree_cupti_pct_copy']:.0f}% "
            f"| {100 * r['iree_vs_cupy_cupti']:.1f}% "
            f"| {r['iree_wall_us']['median']:.1f} | {r['iree_wall_minus_empty_us']:.1f} | {r['max_rel_err_sampled']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["kernels"] if "error" not in r]
    labels = [f"{r['kernel']}\n{r['shape'][0]}x{r['shape'][1]}" for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(rows)), 4.5))
    ax.bar(x - 0.2, [r["cupy_cupti_GBps"] for r in rows], 0.4, label="CuPy launch (CUPTI)")
    ax.bar(x + 0.2, [r["iree_cupti_GBps"] for r in rows], 0.4, label="IREE launch (CUPTI)")
    ax.axhline(result["copy_GBps"], color="k", linestyle="--", linewidth=1, label=f"d2d copy {result['copy_GBps']:.0f} GB/s")
    ax.axhline(0.9 * result["copy_GBps"], color="gray", linestyle=":", linewidth=1, label="90% of copy")
    ax.set_xticks(x, labels, fontsize=7, rotation=45, ha="right")
    ax.set_ylabel("GB/s (compulsory bytes)")
    ax.set_title(f"kernels/library.toml on {result['device']}, {result['date'][:10]}")
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def prepare(out: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.support.artifacts.library import build_all

    build_all(out)


def main(argv=None) -> int:
    return common.main(argv, doc=__doc__, stem="kernels", default_dir=DEFAULT_DIR, default_out=ROOT / "benchmarks" / "results",
                       dir_help="folder of library.vmfb and library.objects/ (tests/support/artifacts/library.py)",
                       prepare=prepare, measure=measure, table=table, plot=plot)

if __name__ == "__main__":
    sys.exit(main())
