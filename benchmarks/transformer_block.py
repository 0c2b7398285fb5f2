#!/usr/bin/env python3
"""The transformer block (mlir/transformer_block_*.mlir, T = 8192, D = 1024, H = 4096) end to
end and op by op: pure IREE codegen against the programs with hand-written kernels.

End to end, per program (codegen, mixed, mixed_gemm, mixed_rows, mixed_gemm_fused,
mixed_gemm_epilogues), one synchronous IREE call on device arrays at a time:
  * `gpu_span`: CUPTI (torch.profiler) kernel records of CALLS calls, split per call in launch
    order: first kernel start to last kernel end, the GPU time of one call (gaps between its
    dispatches included, host overhead before and after excluded);
  * `kernel_sum`: the same records' durations summed per call (the gaps excluded);
  * `wall`: median wall time of the whole synchronous call (host overhead, output allocation
    and the wait included).
Each dispatch's median duration is recorded by kernel name: how IREE split the block (which
ops it fused into one dispatch) and where the time goes.

Per op, each alone on the block's tensors: IREE's code for the op (mlir/transformer_ops_codegen.mlir,
one function per op, compiled alone: no fusion with neighbours) against the hand-written kernel
(module `transformer`), both as IREE dispatches, timed by CUPTI (median over CALLS calls of the
summed durations of the call's kernels). torch's op on the same data (cuBLAS for the matmuls)
is timed alongside with CUDA events as a point of reference.

Before timing, each program's outputs are compared with the codegen program's (every element)
and with a float64 reference on a sample of rows, and programs with bitwise-equal outputs are
named.

    python benchmarks/transformer_block.py --prepare      # CPU side: python -m tests.support.artifacts --only transformer
    python benchmarks/transformer_block.py --out DIR      # GPU side: numpy, ml_dtypes, torch, iree-base-runtime
    python benchmarks/transformer_block.py --replot DIR/transformer_block.json --out DIR2
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path

import common  # benchmarks/common.py, beside this script
import numpy as np
from common import cupti_kernel_records, nvidia_smi, summarize, wall_times_us

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support.artifacts.transformer import BLOCKS, EPS, LAYOUT, D, H, T, bf16, block_inputs, block_reference, build_all  # noqa: E402

DEFAULT_DIR = ROOT / "build" / "gpu-tests" / "transformer"
CALLS, WARMUP, WALL_CALLS = 20, 3, 30
# op → (codegen function, hand-written kernels, torch equivalent); shapes are the block's.
OPS = {
    "bias_gelu [8192x4096]": ("bias_gelu", ["bias_gelu_f32"], "gelu"),
    "bias_gelu + bf16 cast [8192x4096]": ("bias_gelu_bf16", ["bias_gelu_f32_bf16"], "gelu_bf16"),
    "layernorm [8192x1024]": ("layernorm", ["layernorm_warp_f32", "layernorm_f32"], "layer_norm"),
    "softmax [8192x1024]": ("softmax", ["softmax_warp_f32", "softmax_f32"], "softmax"),
    "matmul 8192x1024 @ 1024x4096": ("matmul_up", ["gemm_bf16"], "matmul"),
    "matmul 8192x4096 @ 4096x1024": ("matmul_down", ["gemm_bf16"], "matmul"),
}


def per_call(records: list[dict], calls: int) -> list[list[dict]]:
    if len(records) % calls:
        raise RuntimeError(f"{len(records)} kernel records for {calls} calls: not the same kernels per call ({sorted({r['name'] for r in records})})")
    n = len(records) // calls
    groups = [records[i * n : (i + 1) * n] for i in range(calls)]
    names = [r["name"] for r in groups[0]]
    if any([r["name"] for r in g] != names for g in groups):
        raise RuntimeError("calls launched different kernels")
    return groups


def torch_time_us(fn) -> dict:
    import torch

    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    times = []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(CALLS):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return summarize(times)


def measure_program(module, args: list) -> dict:
    fn = module.transformer_block
    groups = per_call(cupti_kernel_records(lambda n: [fn(*args) for _ in range(n)], CALLS, WARMUP), CALLS)
    span = [g[-1]["ts"] + g[-1]["dur"] - g[0]["ts"] for g in groups]
    busy = [sum(r["dur"] for r in g) for g in groups]
    dispatches = [{"name": r["name"], "us": summarize([g[i]["dur"] for g in groups])} for i, r in enumerate(groups[0])]
    return {"gpu_span_us": summarize(span), "kernel_sum_us": summarize(busy), "wall_us": summarize(wall_times_us(lambda: fn(*args), WALL_CALLS, WARMUP)), "dispatches": dispatches}


def measure_call(call) -> dict:
    groups = per_call(cupti_kernel_records(lambda n: [call() for _ in range(n)], CALLS, WARMUP), CALLS)
    return {"us": summarize([sum(r["dur"] for r in g) for g in groups]), "dispatches": [r["name"] for r in groups[0]]}


def op_arguments(op: str, p: dict, dev) -> tuple[list, list, list]:
    """(codegen function's arguments, kernel's arguments, torch tensors) of an op, on device."""
    import torch

    rng = np.random.default_rng(1)
    f32 = np.float32
    if op.startswith("bias_gelu"):
        a = rng.standard_normal((T, H), dtype=f32)
        host = [a, p["b1"]]
        return [dev(v) for v in host], [dev(v) for v in host], [torch.from_numpy(v).cuda() for v in host]
    if op.startswith("layernorm"):
        host = [rng.normal(0.3, 1.2, (T, D)).astype(f32), p["gamma"], p["beta"]]
        return [dev(v) for v in host], [*(dev(v) for v in host), EPS], [torch.from_numpy(v).cuda() for v in host]
    if op.startswith("softmax"):
        host = [rng.normal(0, 1.2, (T, D)).astype(f32)]
        return [dev(v) for v in host], [dev(v) for v in host], [torch.from_numpy(v).cuda() for v in host]
    m, k, n = (T, D, H) if "@ 1024x4096" in op else (T, H, D)
    host = [bf16(rng.standard_normal((m, k), dtype=f32)), bf16(rng.standard_normal((k, n), dtype=f32) / np.sqrt(k))]
    return [dev(v) for v in host], [dev(v) for v in host], [torch.from_numpy(v.view(np.uint16).astype(np.int16)).cuda().view(torch.bfloat16) for v in host]


def torch_op(kind: str, t: list):
    import torch
    import torch.nn.functional as F

    if kind == "gelu":
        return lambda: F.gelu(t[0] + t[1], approximate="tanh")
    if kind == "gelu_bf16":
        return lambda: F.gelu(t[0] + t[1], approximate="tanh").to(torch.bfloat16)
    if kind == "layer_norm":
        return lambda: F.layer_norm(t[0], (D,), t[1], t[2], EPS)
    if kind == "softmax":
        return lambda: torch.softmax(t[0], dim=1)
    return lambda: torch.matmul(t[0], t[1])  # bf16 in, bf16 out (cuBLAS, f32 accumulation)


def measure(args) -> dict:
    import torch

    from iree_dispatch import runtime

    torch.cuda.init()
    paths = {name: args.dir / rel for name, rel in LAYOUT.items() if (args.dir / rel).exists()}
    modules = {name: runtime.load(path) for name, path in paths.items() if name != "kernels_poisonable"}
    major, minor = runtime.cuda_compute_capability()
    result = {
        "device": runtime.cuda_device_name(),
        "capability": f"{major}.{minor}",
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "driver": nvidia_smi("driver_version"),
        "versions": {"torch": torch.__version__, "numpy": np.__version__},
        "sizes": {"T": T, "D": D, "H": H},
        "method": __doc__.split("\n\n")[1] + "\n\n" + __doc__.split("\n\n")[2],
        "programs": {},
        "ops": [],
    }
    rng = np.random.default_rng(0)
    inputs = block_inputs(rng)
    dev_args = [modules["codegen"].to_device(a) for a in inputs.values()]
    sample = np.arange(0, T, 97)
    want_z, want_out = block_reference(inputs, sample)
    baseline = None
    outputs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in BLOCKS:
        if name not in modules:
            continue
        row = {}
        try:
            z, out = (a.to_host() for a in modules[name].transformer_block(*dev_args))
            if baseline is None:
                baseline = (z, out)
            row["bitwise_equal_to"] = [other for other, (oz, oo) in outputs.items() if np.array_equal(oz, z) and np.array_equal(oo, out)]
            outputs[name] = (z, out)
            row["max_abs_err_z_vs_codegen"] = float(np.abs(z.astype(np.float64) - baseline[0]).max())
            row["max_rel_err_out_vs_codegen"] = float((np.abs(out.astype(np.float64) - baseline[1]) / baseline[1]).max())
            row["max_abs_err_z_vs_float64_sampled"] = float(np.abs(z[sample] - want_z).max())
            row["max_rel_err_out_vs_float64_sampled"] = float((np.abs(out[sample] - want_out) / want_out).max())
            row.update(measure_program(modules[name], dev_args))
        except Exception as exc:  # recorded; the other programs still run
            row["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps({"program": name, **{k: v for k, v in row.items() if k != "dispatches"}}), flush=True)
        result["programs"][name] = row

    dev = modules["codegen"].to_device
    for op, (codegen_fn, kernels, torch_kind) in OPS.items():
        row = {"op": op}
        try:
            cg_args, k_args, t_args = op_arguments(op, inputs, dev)
            fn = modules["ops_codegen"][codegen_fn]
            row["codegen"] = measure_call(lambda: fn(*cg_args))
            want = fn(*cg_args).to_host()
            row["kernels"] = {}
            for kernel in kernels:
                if kernel not in modules["kernels"].functions:
                    continue
                kfn = modules["kernels"][kernel]
                got = kfn(*k_args).to_host().astype(np.float64)
                ref = want.astype(np.float64)
                row["kernels"][kernel] = {**measure_call(lambda: kfn(*k_args)), "max_rel_diff_vs_codegen": float(np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-3)))}
            row["torch"] = torch_time_us(torch_op(torch_kind, t_args))
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
        summary = {k: (v if k != "kernels" else {kk: vv["us"]["median"] for kk, vv in v.items()}) for k, v in row.items() if k != "codegen"}
        print(json.dumps(summary | {"codegen_us": row.get("codegen", {}).get("us", {}).get("median")}), flush=True)
        result["ops"].append(row)
        cg_args = k_args = t_args = None
        torch.cuda.empty_cache()
    return result


def table(result: dict) -> str:
    s = result["sizes"]
    lines = [
        f"Device: {result['device']} (compute capability {result['capability']}, driver {result['driver']}), {result['date']}; T={s['T']}, D={s['D']}, H={s['H']}.",
        "",
        "End to end (one synchronous call of the program on device arrays; µs, median of "
        f"{CALLS} (CUPTI) or {WALL_CALLS} (wall) calls):",
        "",
        "| program | GPU span | kernels summed | wall (whole call) | dispatches | max abs diff z vs codegen | max rel diff out vs codegen "
        "| max abs err z vs float64 (sampled rows) | outputs bitwise equal to |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in result["programs"].items():
        if "error" in r:
            lines.append(f"| {name} | error: {r['error']} |")
            continue
        lines.append(
            f"| {name} | {r['gpu_span_us']['median']:.0f} | {r['kernel_sum_us']['median']:.0f} | {r['wall_us']['median']:.0f} | {len(r['dispatches'])} "
            f"| {r['max_abs_err_z_vs_codegen']:.1e} | {r['max_rel_err_out_vs_codegen']:.1e} | {r['max_abs_err_z_vs_float64_sampled']:.1e} "
            f"| {', '.join(r.get('bitwise_equal_to', [])) or '-'} |"
        )
    lines += ["", "Dispatches per program (CUPTI, median µs):", ""]
    for name, r in result["programs"].items():
        if "error" not in r:
            lines.append(f"- {name}: " + "; ".join(f"`{d['name']}` {d['us']['median']:.1f}" for d in r["dispatches"]))
    lines += [
        "",
        "Per op, alone (CUPTI, median µs over the call's dispatches; torch: CUDA events):",
        "",
        "| op | IREE codegen | dispatches | hand-written kernel | µs | vs codegen | torch |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in result["ops"]:
        if "error" in r:
            lines.append(f"| {r['op']} | error: {r['error']} |")
            continue
        cg = r["codegen"]["us"]["median"]
        for i, (kernel, k) in enumerate(r["kernels"].items()):
            us = k["us"]["median"]
            head = f"| {r['op']} | {cg:.1f} | {len(r['codegen']['dispatches'])} " if i == 0 else "| | | "
            tail = f"| {r['torch']['median']:.1f} |" if i == 0 else "| |"
            lines.append(f"{head}| {kernel} | {us:.1f} | {cg / us:.2f}x {tail}")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 4.8), gridspec_kw={"width_ratios": [1.2, 2]})
    progs = [(n, r) for n, r in result["programs"].items() if "error" not in r]
    x = np.arange(len(progs))
    ax1.bar(x - 0.2, [r["gpu_span_us"]["median"] for _, r in progs], 0.4, label="GPU span (CUPTI)")
    ax1.bar(x + 0.2, [r["wall_us"]["median"] for _, r in progs], 0.4, label="wall, whole call")
    ax1.set_xticks(x, [n.replace("_", "\n", 1) for n, _ in progs], fontsize=8)
    ax1.set_ylabel("µs per block")
    ax1.set_title("end to end")
    ax1.legend(fontsize=8)
    ops = [r for r in result["ops"] if "error" not in r]
    labels, codegen, best, torch_us = [], [], [], []
    for r in ops:
        labels.append(r["op"].replace(" [", "\n[").replace(" 8192", "\n8192"))
        codegen.append(r["codegen"]["us"]["median"])
        best.append(min((k["us"]["median"] for k in r["kernels"].values()), default=np.nan))
        torch_us.append(r["torch"]["median"])
    x = np.arange(len(ops))
    ax2.bar(x - 0.27, codegen, 0.27, label="IREE codegen")
    ax2.bar(x, best, 0.27, label="hand-written kernel (best)")
    ax2.bar(x + 0.27, torch_us, 0.27, label="torch (reference)")
    ax2.set_xticks(x, labels, fontsize=8)
    ax2.set_ylabel("µs")
    ax2.set_title("per op, alone")
    ax2.legend(fontsize=8)
    fig.suptitle(f"transformer block T={result['sizes']['T']} D={result['sizes']['D']} H={result['sizes']['H']} on {result['device']}, {result['date'][:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    return common.main(argv, doc=__doc__, stem="transformer_block", default_dir=DEFAULT_DIR, default_out=ROOT / "benchmarks" / "results",
                       dir_help="folder of the modules (tests/support/artifacts/transformer.py)",
                       prepare=build_all, measure=measure, table=table, plot=plot)

if __name__ == "__main__":
    sys.exit(main())
