#!/usr/bin/env python3
"""TFLOP/s of the tensor-core GEMM (kernels/gemm.toml) against torch.matmul, in one process.

For each size (M = N = K = 2048, 4096, 8192) and dtype (bf16, f16), on the same device inputs:
  * `torch`: torch.matmul(a, b) (cuBLAS; output bf16/f16, ours is f32), CUDA events around
    batches of back-to-back calls, median per call, and each call's kernels read from CUPTI
    (through torch.profiler); "% torch" compares CUPTI with CUPTI;
  * `cupy`: our kernel's object that IREE runs on this GPU (gemm.objects/gemm.sm_90a.cubin on
    an H100) launched by CuPy RawModule, timed like torch;
  * `iree_cupti`: the kernel as IREE launches it (`module.gemm_bf16(a, b)` on device arrays),
    its duration read from CUPTI through torch.profiler: the kernel alone;
  * `iree_wall`: median wall time of the synchronous IREE call (kernel + call overhead + the
    allocation of c).
Other configurations of gemm.cu (built by --prepare: -D options, see VARIANTS; and the sm_80
mma.sync body as PTX JIT-compiled for this GPU) are timed like `cupy`.
TFLOP/s = 2 M N K / time. Every timed object's result is checked against torch's float32
product of the same inputs on a sample of rows, relative to |a| @ |b| (ours must be within
1e-5; torch's own bf16/f16-rounded output is not checked).
Batched rows (GPT-2 small's attention batch matmuls in bf16, B x M x N x K = 96 x 1024 x 1024 x 64,
the scores q @ k^T, and 96 x 1024 x 64 x 1024, the context p @ v): gemm_batched_bf16 against
torch.bmm(a, b) (bf16 output, ours f32), each timed as above (`torch`: events and CUPTI; the
objects by CuPy, with grid z = B; `iree_cupti` and `iree_wall` through IREE); TFLOP/s = 2 B M N K
/ time; errors on a sample of rows of the first, middle and last batch.

    python benchmarks/gemm.py --prepare            # CPU side: modules + variant objects
    python benchmarks/gemm.py --out DIR            # GPU side: numpy, cupy, torch, ml_dtypes, iree-base-runtime
    python benchmarks/gemm.py --replot DIR/gemm.json --out DIR2
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import subprocess
import sys
from pathlib import Path

import common  # benchmarks/common.py, beside this script
import numpy as np
from common import cupti_times_us, nvidia_smi, summarize, wall_times_us

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / "build" / "gpu-tests" / "gemm"
SIZES = (2048, 4096, 8192)
# (name, B, M, N, K) of the batched rows: GPT-2 small's attention at batch 8 x 12 heads x 1024 tokens.
BATCHED = (("scores", 96, 1024, 1024, 64), ("context", 96, 1024, 64, 1024))
DTYPES = ("bf16", "f16")
BM, THREADS = 128, 384
# Other configurations of the sm_90a body: (name, nvcc -D flags, dynamic shared memory bytes, BN,
# CTAs per cluster); shared memory = stages * 64 * (128 + BN) * 2 + 1024. The spec's: 4 stages,
# BN = 256, clusters of 2, one wgmma group at a time.
VARIANTS = [
    ("wgmma group in flight", ["-DGEMM_WGMMA_IN_FLIGHT=1"], 4 * 49152 + 1024, 256, 2),
    ("3 stages (fits sm_80's 163 KB)", ["-DGEMM_STAGES=3"], 3 * 49152 + 1024, 256, 2),
    ("clusters of 1", ["-DGEMM_CLUSTER=1"], 4 * 49152 + 1024, 256, 1),
    ("clusters of 4", ["-DGEMM_CLUSTER=4"], 4 * 49152 + 1024, 256, 4),
    ("BN 128, 4 stages", ["-DGEMM_BN=128"], 4 * 32768 + 1024, 128, 2),
]
RTOL = 1e-5
BATCH, BATCHES, CUPTI_CALLS, WALL_CALLS = 10, 10, 10, 10


def prepare(out: Path) -> None:
    """The IREE modules (tests/support/artifacts/gemm.py) and the extra tile configurations' cubins."""
    sys.path.insert(0, str(ROOT))
    from iree_dispatch.toolchains import find_nvcc
    from tests.support.artifacts.gemm import build_all

    build_all(out)
    variants = out / "variants"
    variants.mkdir(parents=True, exist_ok=True)
    manifest = []
    for name, flags, smem, bn, cluster in VARIANTS:
        cubin = variants / f"gemm.{re.sub(r'[^A-Za-z0-9]+', '_', name).strip('_')}.sm_90a.cubin"
        cmd = [str(find_nvcc()), "-cubin", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", *flags,
               str(ROOT / "kernels" / "gemm.cu"), "-o", str(cubin)]
        subprocess.run(cmd, check=True)
        manifest.append({"name": name, "object": cubin.name, "shared_memory": smem, "bn": bn, "cluster": cluster, "flags": flags})
    (variants / "manifest.json").write_text(json.dumps(manifest, indent=1))


def event_times_us(torch, launch) -> list[float]:
    """Per-call µs from CUDA events around BATCH back-to-back calls, BATCHES times, after warm-up."""
    for _ in range(3):
        launch()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(BATCHES):
        start.record()
        for _ in range(BATCH):
            launch()
        stop.record()
        stop.synchronize()
        out.append(start.elapsed_time(stop) * 1e3 / BATCH)
    return out


def sampled_error(got, a, b, rows) -> float:
    """max |got - a @ b| / (|a| @ |b|) over `rows`, in float64 from the f32 copies on the GPU."""
    import torch

    a64, b64 = a[rows].double(), b.double()
    want = a64 @ b64
    scale = a64.abs() @ b64.abs()
    err = (got[rows].double() - want).abs() / scale
    return float(err.max().item()) if not torch.isnan(err).any() else float("nan")


def sampled_error_batched(got, a, b, rows) -> float:
    """sampled_error over `rows` of the first, middle and last batch."""
    batches = sorted({0, a.shape[0] // 2, a.shape[0] - 1})
    return max(sampled_error(got[z], a[z], b[z], rows) for z in batches)


def tflops(flop: float, us: dict) -> float:
    """TFLOP/s of `flop` done in a summary's median µs."""
    return flop / us["median"] / 1e6


def calls_of(call):
    """calls(count): `count` back-to-back call()s, for the CUPTI readers of benchmarks/common.py."""

    def calls(count):
        for _ in range(count):
            call()

    return calls


def time_torch(torch, call, flop: float) -> dict:
    """torch's fields of a row: `call` (one torch product) timed by CUDA events and by CUPTI."""
    out = {"torch_us": summarize(event_times_us(torch, call))}
    out["torch_tflops"] = tflops(flop, out["torch_us"])
    # cuBLAS may launch more than one kernel per product: a call's duration is the sum
    records = common.cupti_kernel_records(calls_of(call), CUPTI_CALLS)
    per_call = len(records) // CUPTI_CALLS
    out["torch_cupti_us"] = summarize([sum(r["dur"] for r in records[i * per_call : (i + 1) * per_call]) for i in range(CUPTI_CALLS)])
    out["torch_cupti_tflops"] = tflops(flop, out["torch_cupti_us"])
    return out


def gemm_params(a, b, c, m: int, n: int, k: int) -> tuple:
    """The kernels' arguments (a, b, c device pointers; M, N, K) for a CuPy launch."""
    return (np.uint64(a.data_ptr()), np.uint64(b.data_ptr()), np.uint64(c.data_ptr()), np.int32(m), np.int32(n), np.int32(k))


def cupy_launch(fn, grid, params, shared_mem: int):
    """One CuPy launch of `fn` on `grid`, THREADS threads a block."""
    return lambda: fn(grid, (THREADS,), params, shared_mem=shared_mem)


def time_object(torch, make_launch, c, error, flop: float, torch_tflops: float) -> dict:
    """An object's fields of a row: make_launch() gives its launch, run once into c filled with NaN
    (error(c): its max err/scale), then timed by CUDA events. A failure is recorded as `error`
    (a failing configuration is recorded; the others still run)."""
    row = {}
    try:
        launch = make_launch()
        c.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        row["max_err_over_scale"] = error(c)
        row["us"] = summarize(event_times_us(torch, launch))
        row["tflops"] = tflops(flop, row["us"])
        row["pct_torch"] = 100 * row["tflops"] / torch_tflops
        row["correct"] = bool(row["max_err_over_scale"] <= RTOL)
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
    return row


def time_iree(torch, call, kernel: str, error, flop: float, torch_cupti_tflops: float) -> dict:
    """The `iree` fields of a row: `call` (the synchronous IREE call on device arrays) checked
    (error(result on the GPU)), the kernel timed by CUPTI and the call by wall time. A failure is
    recorded as `error`."""
    iree = {}
    try:
        got = torch.from_numpy(call().to_host()).cuda()
        iree["max_err_over_scale"] = error(got)
        got = None
        iree["cupti_us"] = summarize(cupti_times_us(calls_of(call), kernel, CUPTI_CALLS))
        iree["cupti_tflops"] = tflops(flop, iree["cupti_us"])
        iree["pct_torch"] = 100 * iree["cupti_tflops"] / torch_cupti_tflops
        iree["wall_us"] = summarize(wall_times_us(call, WALL_CALLS, warmup=2))
        iree["wall_tflops"] = tflops(flop, iree["wall_us"])
    except Exception as exc:
        iree["error"] = f"{type(exc).__name__}: {exc}"
    return iree


def to_iree(module, torch, t, np_dtype):
    """A 16-bit torch tensor's bits as an IREE device array of np_dtype."""
    return module.to_device(t.cpu().view(torch.int16).numpy().view(np_dtype))


def print_progress(head: dict, fields: dict, keys: tuple[str, ...], under: str | None = None) -> None:
    """One JSON line: head, then `fields`' values of `keys` (nested under `under` if given)."""
    picked = {x: fields.get(x) for x in keys}
    print(json.dumps({**head, under: picked} if under else {**head, **picked}), flush=True)


OBJECT_KEYS = ("name", "tflops", "pct_torch", "max_err_over_scale", "error")
IREE_KEYS = ("cupti_tflops", "pct_torch", "wall_tflops", "max_err_over_scale", "error")


def measure(args) -> dict:
    import cupy as cp
    import ml_dtypes
    import torch

    from iree_dispatch import runtime
    from iree_dispatch.core import expr as ex

    torch.cuda.init()
    module = runtime.load(args.dir / "gemm.vmfb")
    major, minor = runtime.cuda_compute_capability()
    arch = "sm_90a" if (major, minor) == (9, 0) else "sm_80" if major == 8 else None
    objects = args.dir / "gemm.objects"
    spec = module.functions["gemm_bf16"].description
    shared = dict(spec.shared_memory)  # {arch: bytes} (kernels/gemm.toml sizes each arch's variant)
    kernels_under_test = [{"name": "gemm.toml", "path": objects / (f"gemm.{arch}.cubin" if arch else "gemm.sm_80.ptx"),
                           "shared_memory": shared[arch or "sm_80"], "grid": list(spec.grid)}]
    if arch == "sm_90a":
        manifest = args.dir / "variants" / "manifest.json"
        if manifest.exists():
            for v in json.loads(manifest.read_text()):
                grid = [f"ceildiv(N, {v['bn']})", f"{v['cluster']} * ceildiv(M, {BM * v['cluster']})"]
                kernels_under_test.append({"name": v["name"], "path": args.dir / "variants" / v["object"], "shared_memory": v["shared_memory"], "grid": grid})
        # The sm_80 body (mma.sync), JIT-compiled from PTX for this GPU, for comparison.
        kernels_under_test.append({"name": "sm_80 mma.sync (PTX JIT)", "path": objects / "gemm.sm_80.ptx",
                                   "shared_memory": shared["sm_80"], "grid": list(spec.grid)})
    loaded = {}
    for k in kernels_under_test:
        raw = cp.RawModule(path=str(k["path"]))
        loaded[k["name"]] = {}
        for dtype in DTYPES:
            fn = raw.get_function(f"gemm_{dtype}")
            fn.max_dynamic_shared_size_bytes = k["shared_memory"]
            loaded[k["name"]][dtype] = fn

    result = {
        "device": runtime.cuda_device_name(),
        "capability": f"{major}.{minor}",
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "driver": nvidia_smi("driver_version"),
        "versions": {"cupy": cp.__version__, "torch": torch.__version__, "numpy": np.__version__},
        "method": __doc__.split("\n\n")[1],
        "rows": [],
    }
    gen = torch.Generator(device="cuda").manual_seed(0)
    for size in args.sizes:
        m = n = k = size
        flop = 2.0 * m * n * k
        for dtype in DTYPES:
            tdtype = torch.bfloat16 if dtype == "bf16" else torch.float16
            a = (torch.randn(m, k, device="cuda", generator=gen) + 0.25).to(tdtype)
            b = (torch.randn(k, n, device="cuda", generator=gen) - 0.25).to(tdtype)
            rows = torch.arange(0, m, 97, device="cuda")
            entry = {"size": [m, n, k], "dtype": dtype, "kernels": []}
            entry.update(time_torch(torch, lambda: torch.matmul(a, b), flop))
            c = torch.empty(m, n, device="cuda", dtype=torch.float32)
            for kut in kernels_under_test:
                fn = loaded[kut["name"]][dtype]
                grid = tuple(ex.evaluate(ex.parse(g, "grid"), {"M": m, "N": n, "K": k}) for g in kut["grid"])
                params = gemm_params(a, b, c, m, n, k)
                row = {"name": kut["name"], "object": kut["path"].name,
                       **time_object(torch, lambda: cupy_launch(fn, grid, params, kut["shared_memory"]), c,
                                     lambda got: sampled_error(got, a, b, rows), flop, entry["torch_tflops"])}
                print_progress({"size": size, "dtype": dtype}, row, OBJECT_KEYS)
                entry["kernels"].append(row)
            # Through IREE, on device arrays (the bits of the same inputs).
            np_dtype = ml_dtypes.bfloat16 if dtype == "bf16" else np.float16
            da, db = to_iree(module, torch, a, np_dtype), to_iree(module, torch, b, np_dtype)
            fn = module.functions[f"gemm_{dtype}"]
            entry["iree"] = time_iree(torch, lambda: fn(da, db), f"gemm_{dtype}", lambda got: sampled_error(got, a, b, rows), flop, entry["torch_cupti_tflops"])
            print_progress({"size": size, "dtype": dtype, "torch_tflops": entry["torch_tflops"]}, entry["iree"], IREE_KEYS, under="iree")
            result["rows"].append(entry)
            a = b = c = da = db = None
            torch.cuda.empty_cache()
    result["batched"] = [] if args.no_batched or "gemm_batched_bf16" not in module.functions else measure_batched(args, module, kernels_under_test, gen)
    return result


def measure_batched(args, module, kernels_under_test: list[dict], gen) -> list[dict]:
    """The BATCHED rows: gemm_batched_bf16 against torch.bmm, timed as the square rows are."""
    import cupy as cp
    import ml_dtypes
    import torch

    from iree_dispatch.core import expr as ex

    rows_out = []
    fn_iree = module.functions["gemm_batched_bf16"]
    for label, batch, m, n, k in BATCHED:
        flop = 2.0 * batch * m * n * k
        sizes = {"B": batch, "M": m, "N": n, "K": k}
        a = (torch.randn(batch, m, k, device="cuda", generator=gen) + 0.25).to(torch.bfloat16)
        b = (torch.randn(batch, k, n, device="cuda", generator=gen) - 0.25).to(torch.bfloat16)
        rows = torch.arange(0, m, 97, device="cuda")
        entry = {"name": label, "size": [batch, m, n, k], "dtype": "bf16", "kernels": []}
        entry.update(time_torch(torch, lambda: torch.bmm(a, b), flop))
        c = torch.empty(batch, m, n, device="cuda", dtype=torch.float32)
        for kut in kernels_under_test:

            def batched_launch():
                fn = cp.RawModule(path=str(kut["path"])).get_function("gemm_batched_bf16")
                fn.max_dynamic_shared_size_bytes = kut["shared_memory"]
                grid_exprs = [*kut["grid"][:2], "B"]  # the batch along z
                grid = tuple(ex.evaluate(ex.parse(g, "grid"), sizes) for g in grid_exprs)
                return cupy_launch(fn, grid, gemm_params(a, b, c, m, n, k), kut["shared_memory"])

            row = {"name": kut["name"], "object": kut["path"].name,
                   **time_object(torch, batched_launch, c, lambda got: sampled_error_batched(got, a, b, rows), flop, entry["torch_tflops"])}
            print_progress({"batched": label}, row, OBJECT_KEYS)
            entry["kernels"].append(row)
        da, db = to_iree(module, torch, a, ml_dtypes.bfloat16), to_iree(module, torch, b, ml_dtypes.bfloat16)
        entry["iree"] = time_iree(torch, lambda: fn_iree(da, db), "gemm_batched_bf16", lambda got: sampled_error_batched(got, a, b, rows), flop,
                                  entry["torch_cupti_tflops"])
        print_progress({"batched": label, "torch_cupti_tflops": entry["torch_cupti_tflops"]}, entry["iree"], IREE_KEYS, under="iree")
        rows_out.append(entry)
        a = b = c = da = db = None
        torch.cuda.empty_cache()
    return rows_out


def object_lines(cells: str, kernels: list[dict]) -> list[str]:
    """The objects table's lines of one row's `kernels`, each starting with `cells`."""
    lines = []
    for kr in kernels:
        if "error" in kr:
            lines.append(f"| {cells} | {kr['name']} | error: {kr['error']} | | | |")
            continue
        lines.append(
            f"| {cells} | {kr['name']} | {kr['tflops']:.0f} | {kr['pct_torch']:.0f}% | {kr['max_err_over_scale']:.1e} "
            f"| {'yes' if kr['correct'] else 'NO'} |"
        )
    return lines


def table(result: dict) -> str:
    lines = [
        f"Device: {result['device']} (compute capability {result['capability']}, driver {result['driver']}), {result['date']}; "
        f"torch {result['versions']['torch']}, cupy {result['versions']['cupy']}.",
        "",
        "| M=N=K | dtype | torch.matmul TFLOP/s (CUPTI) | (events) | ours via IREE (CUPTI) TFLOP/s | % torch (CUPTI/CUPTI) | IREE call (wall) TFLOP/s | max err/scale (IREE) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        i = r["iree"]
        if "error" in i:
            lines.append(f"| {r['size'][0]} | {r['dtype']} | {r['torch_cupti_tflops']:.0f} | {r['torch_tflops']:.0f} | error: {i['error']} | | | |")
            continue
        lines.append(
            f"| {r['size'][0]} | {r['dtype']} | {r['torch_cupti_tflops']:.0f} | {r['torch_tflops']:.0f} | {i['cupti_tflops']:.0f} | {i['pct_torch']:.0f}% | {i['wall_tflops']:.0f} "
            f"| {i['max_err_over_scale']:.1e} |"
        )
    batched = result.get("batched", [])
    if batched:
        lines += ["", "Batched, gemm_batched_bf16 against torch.bmm (bf16):", "",
                  "| shape | B x M x N x K | torch.bmm TFLOP/s (CUPTI) | (events) | ours via IREE (CUPTI) TFLOP/s | µs (CUPTI) | torch.bmm µs (CUPTI) "
                  "| % torch (CUPTI/CUPTI) | IREE call (wall) TFLOP/s | max err/scale (IREE) |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in batched:
            i, size = r["iree"], "x".join(str(x) for x in r["size"])
            if "error" in i:
                lines.append(f"| {r['name']} | {size} | {r['torch_cupti_tflops']:.0f} | {r['torch_tflops']:.0f} | error: {i['error']} | | | | | |")
                continue
            lines.append(
                f"| {r['name']} | {size} | {r['torch_cupti_tflops']:.0f} | {r['torch_tflops']:.0f} | {i['cupti_tflops']:.0f} | {i['cupti_us']['median']:.1f} "
                f"| {r['torch_cupti_us']['median']:.1f} | {i['pct_torch']:.0f}% | {i['wall_tflops']:.0f} | {i['max_err_over_scale']:.1e} |"
            )
    lines += ["", "Objects launched by CuPy (CUDA events):", "",
              "| M=N=K | dtype | object | TFLOP/s | % torch | max err/scale | correct |", "|---:|---|---|---:|---:|---:|---|"]
    for r in result["rows"]:
        lines += object_lines(f"{r['size'][0]} | {r['dtype']}", r["kernels"])
    for r in batched:
        size = "x".join(str(x) for x in r["size"])
        lines += object_lines(f"{r['name']} {size} | bf16 batched", r["kernels"])
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if "error" not in r["iree"]]
    labels = [f"{r['size'][0]}³ {r['dtype']}" for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(7, 1.2 * len(rows)), 4.2))
    ax.bar(x - 0.27, [r.get("torch_cupti_tflops", r["torch_tflops"]) for r in rows], 0.27, label="torch.matmul (cuBLAS, CUPTI)")
    ax.bar(x, [r["iree"]["cupti_tflops"] for r in rows], 0.27, label="ours via IREE (CUPTI kernel time)")
    ax.bar(x + 0.27, [r["kernels"][0].get("tflops", 0) for r in rows], 0.27, label="ours via CuPy (events)")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"kernels/gemm.toml on {result['device']}, {result['date'][:10]}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    return common.main(argv, doc=__doc__, stem="gemm", default_dir=DEFAULT_DIR, default_out=ROOT / "benchmarks" / "results" / "gemm",
                       dir_help="folder of gemm.vmfb, gemm.objects/ and variants/ (--prepare)",
                       prepare=prepare, measure=measure, table=table, plot=plot,
                       add_arguments=add_arguments)


def add_arguments(p) -> None:
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--no-batched", action="store_true", help="skip the batched rows (gemm_batched_bf16 against torch.bmm)")


if __name__ == "__main__":
    sys.exit(main())
