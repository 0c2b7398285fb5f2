#!/usr/bin/env python3
"""The f32 GEMMs of kernels/gemm_f32.cu and gemm_f32_f64acc.cu against torch.matmul in f32, on the Linear shapes of
BERT-base at 16 x 512 tokens (with its q, k and v as one Linear, N = 2304) and two wider N, in
one process.

For each M x N x K, on the same device inputs (a [M, K], b [N, K], c = a @ b^T):
  * `nt`: gemm_nt_f32 (a Linear's weight as stored: asynchronous copies, 16-deep steps, 128-row
    tiles, 33792 bytes of dynamic shared memory), the sm_90a object of the 128-row build;
  * `nn128`, `nn96`: gemm_f32 of b^T ([K, N], made once, not timed; register-staged loads, 8-deep
    steps) from the SGEMM_BM=128 and 96 builds;
  * `f64acc`: gemm_nt_f32_f64acc (the same c summed in f64 on the FP64 tensor cores, rounded once:
    what an f32 model's Linears take with --allow-wider-accumulation; 98304 bytes of dynamic
    shared memory), its sm_90a object;
  each launched by CuPy RawModule with its grid (ceildiv(M, rows), ceildiv(N, 128)), CUDA events
  around each launch, median of --iters after 3 warm-up launches (and, once before the first
  shape, about a second of SGEMMs, so that the GPU's clocks are up); c poisoned with NaN first;
  * `torch`: torch.matmul(a, b.T) in f32 with TF32 off (cuBLAS SGEMM), timed the same way.
TFLOP/s = 2 M N K / time. Checked: the three f32 kernels' c are the same bits (each element one
fmaf chain over k in order), and within 1e-5 of |a| @ |b^T| of torch's float64 product;
gemm_nt_f32_f64acc's within one f32 ulp of it (both on a sample of rows).

    python benchmarks/gemm_f32.py --prepare          # CPU side: nvcc -> build/gemm_f32_bench/*.cubin (three)
    python3 benchmarks/gemm_f32.py --out DIR         # GPU side: cupy, torch
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
from pathlib import Path

from common import event_times_ms, nvidia_smi  # benchmarks/common.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
OBJECTS = ROOT / "build" / "gemm_f32_bench"
ROWS = (128, 96)
SHAPES = [(8192, 768, 768), (8192, 768, 3072), (8192, 3072, 768), (8192, 2304, 768), (8192, 896, 768), (8192, 1024, 768)]


def prepare() -> None:
    OBJECTS.mkdir(parents=True, exist_ok=True)
    for rows in ROWS:
        out = OBJECTS / f"gemm_f32_m{rows}.sm_90a.cubin"
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", f"-DSGEMM_BM={rows}", str(ROOT / "kernels" / "gemm_f32.cu"), "-o", str(out)],
                       check=True)
        print(out)
    out = OBJECTS / "gemm_f32_f64acc.sm_90a.cubin"
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", str(ROOT / "kernels" / "gemm_f32_f64acc.cu"), "-o", str(out)], check=True)
    print(out)


def run(out_dir: Path, iters: int) -> None:
    import cupy as cp
    import numpy as np
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    modules = {rows: cp.RawModule(path=str(OBJECTS / f"gemm_f32_m{rows}.sm_90a.cubin")) for rows in ROWS}
    # name -> (kernel, tile rows, whether it takes b as stored [N, K] or b^T [K, N], bytes of dynamic
    # shared memory: kernels/gemm_f32.toml's shared_memory)
    kernels = {"nt": (modules[128].get_function("gemm_nt_f32"), 128, True, 33792), "nn128": (modules[128].get_function("gemm_f32"), 128, False, 0),
               "nn96": (modules[96].get_function("gemm_f32"), 96, False, 0),
               "f64acc": (cp.RawModule(path=str(OBJECTS / "gemm_f32_f64acc.sm_90a.cubin")).get_function("gemm_nt_f32_f64acc"), 128, True, 98304)}
    for kernel, _, _, shared in kernels.values():
        kernel.max_dynamic_shared_size_bytes = shared
    # CuPy launches on torch's current stream so that torch's events time it
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

    def timed(fn) -> float:
        return float(np.median(event_times_ms(fn, iters)))

    # The clocks of a GPU that was idle ramp up over the first tenths of a second of work: about a
    # second of SGEMMs before the first shape, so that it is not timed slower than the others.
    warm = torch.rand(4096, 4096, device="cuda")
    for _ in range(300):  # 300 x 137 GFLOP at cuBLAS's 40-48 TFLOP/s
        warm @ warm
    torch.cuda.synchronize()
    del warm

    rows_out = []
    for m, n, k in SHAPES:
        a = torch.rand(m, k, device="cuda") - 0.5
        b = torch.rand(n, k, device="cuda") - 0.5
        ca, cb, cbt = cp.asarray(a), cp.asarray(b), cp.asarray(b.T.contiguous())
        row: dict = {"shape": [m, n, k]}
        results = {}
        for name, (kernel, rows, as_stored, shared) in kernels.items():
            c = cp.full((m, n), cp.nan, dtype=cp.float32)
            grid = ((m + rows - 1) // rows, (n + 127) // 128)
            args = (ca, cb if as_stored else cbt, c, np.int32(m), np.int32(n), np.int32(k))
            with stream:
                row[f"{name}_ms"] = timed(lambda kernel=kernel, grid=grid, args=args, shared=shared: kernel(grid, (256,), args, shared_mem=shared))
            results[name] = c
        row["torch_ms"] = timed(lambda: a @ b.T)
        row["same_bits"] = all(bool((results[name].view(cp.uint32) == results["nt"].view(cp.uint32)).all()) for name in ("nn128", "nn96"))
        sample = slice(0, m, max(1, m // 64))
        want = a[sample].double() @ b.double().T
        bound = 1e-5 * (a[sample].double().abs() @ b.double().abs().T)
        row["within_bound"] = bool(((torch.as_tensor(results["nt"], device="cuda")[sample].double() - want).abs() <= bound).all())
        ulp = torch.as_tensor(np.spacing(want.abs().float().cpu().numpy()), device="cuda").double()
        row["f64acc_within_ulp"] = bool(((torch.as_tensor(results["f64acc"], device="cuda")[sample].double() - want).abs() <= ulp).all())
        flops = 2.0 * m * n * k
        for key in (*kernels, "torch"):
            row[f"{key}_tflops"] = flops / (row[f"{key}_ms"] * 1e-3) / 1e12
        rows_out.append(row)
        print(row, flush=True)
    result = {"date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "device": torch.cuda.get_device_name(),
              "driver": nvidia_smi("driver_version") or "unknown", "torch": torch.__version__, "iters": iters, "rows": rows_out}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gemm_f32.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"{result['device']}, driver {result['driver']}, {result['date']}, median of {iters} (CUDA events); µs (TFLOP/s)", "",
             "| M × N × K | gemm_nt_f32 | gemm_f32 of b^T, 128-row | gemm_f32 of b^T, 96-row | gemm_nt_f32_f64acc | torch.matmul (cuBLAS SGEMM) "
             "| same bits | within 1e-5 | f64acc within 1 ulp |",
             "|---|---:|---:|---:|---:|---:|---|---|---|"]
    for r in rows_out:
        cells = [f"{r[f'{key}_ms'] * 1e3:.1f} ({r[f'{key}_tflops']:.1f})" for key in (*kernels, "torch")]
        lines.append(f"| {' × '.join(map(str, r['shape']))} | {' | '.join(cells)} | {r['same_bits']} | {r['within_bound']} | {r['f64acc_within_ulp']} |")
    (out_dir / "gemm_f32.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prepare", action="store_true", help="CPU side: build the three objects with nvcc")
    p.add_argument("--out", default="build/gemm_f32_results")
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args(argv)
    if args.prepare:
        prepare()
    else:
        run(Path(args.out), args.iters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
