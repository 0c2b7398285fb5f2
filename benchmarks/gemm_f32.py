#!/usr/bin/env python3
"""gemm_nt_f32 (kernels/gemm_f32.cu) with 128- and 96-row tiles against torch.matmul in f32, on
the Linear shapes of BERT-base at 16 x 512 tokens and two wider N, in one process.

For each M x N x K, on the same device inputs (a [M, K], b [N, K], c = a @ b^T):
  * `rows128`, `rows96`: the sm_90a object of each build (SGEMM_BM=128, 96) launched by CuPy
    RawModule with its grid (ceildiv(M, rows), ceildiv(N, 128)), CUDA events around each launch,
    median of --iters after 3 warm-up launches; c poisoned with NaN first;
  * `torch`: torch.matmul(a, b.T) in f32 with TF32 off (cuBLAS SGEMM), timed the same way.
TFLOP/s = 2 M N K / time. Checked: the 96-row c is the 128-row c bit for bit, and the 128-row c
is within 1e-5 of |a| @ |b^T| of torch's float64 product (on a sample of rows).

    python benchmarks/gemm_f32.py --prepare          # CPU side: nvcc -> build/gemm_f32_bench/*.cubin
    python3 benchmarks/gemm_f32.py --out DIR         # GPU side: cupy, torch
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OBJECTS = ROOT / "build" / "gemm_f32_bench"
ROWS = (128, 96)
SHAPES = [(8192, 768, 768), (8192, 768, 3072), (8192, 3072, 768), (8192, 896, 768), (8192, 1024, 768)]


def prepare() -> None:
    OBJECTS.mkdir(parents=True, exist_ok=True)
    for rows in ROWS:
        out = OBJECTS / f"gemm_f32_m{rows}.sm_90a.cubin"
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", f"-DSGEMM_BM={rows}", str(ROOT / "kernels" / "gemm_f32.cu"), "-o", str(out)],
                       check=True)
        print(out)


def run(out_dir: Path, iters: int) -> None:
    import cupy as cp
    import numpy as np
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    kernels = {rows: cp.RawModule(path=str(OBJECTS / f"gemm_f32_m{rows}.sm_90a.cubin")).get_function("gemm_nt_f32") for rows in ROWS}

    def timed(fn) -> float:
        for _ in range(3):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(iters):
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return float(np.median(times))

    rows_out = []
    for m, n, k in SHAPES:
        a = torch.rand(m, k, device="cuda") - 0.5
        b = torch.rand(n, k, device="cuda") - 0.5
        ca, cb = cp.asarray(a), cp.asarray(b)
        row = {"shape": [m, n, k]}
        results = {}
        for rows, kernel in kernels.items():
            c = cp.full((m, n), cp.nan, dtype=cp.float32)
            grid = ((m + rows - 1) // rows, (n + 127) // 128)
            # CuPy launches on torch's current stream so that torch's events time it
            stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
            with stream:
                row[f"rows{rows}_ms"] = timed(lambda: kernel(grid, (256,), (ca, cb, c, np.int32(m), np.int32(n), np.int32(k))))
            results[rows] = c
        row["torch_ms"] = timed(lambda: a @ b.T)
        row["same_bits"] = bool((results[96].view(cp.uint32) == results[128].view(cp.uint32)).all())
        sample = slice(0, m, max(1, m // 64))
        want = a[sample].double() @ b.double().T
        bound = 1e-5 * (a[sample].double().abs() @ b.double().abs().T)
        row["within_bound"] = bool(((torch.as_tensor(results[128], device="cuda")[sample].double() - want).abs() <= bound).all())
        flops = 2.0 * m * n * k
        for key in ("rows128", "rows96", "torch"):
            row[f"{key}_tflops"] = flops / (row[f"{key}_ms"] * 1e-3) / 1e12
        rows_out.append(row)
        print(row, flush=True)
    result = {"date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "device": torch.cuda.get_device_name(),
              "torch": torch.__version__, "iters": iters, "rows": rows_out}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gemm_f32.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"{result['device']}, {result['date']}, median of {iters} (CUDA events)", "",
             "| M × N × K | 128-row tiles | 96-row tiles | torch.matmul (cuBLAS SGEMM) | 96-row = 128-row bits | within 1e-5 |", "|---|---:|---:|---:|---|---|"]
    for r in rows_out:
        cells = [f"{r[f'{key}_ms'] * 1e3:.1f} µs ({r[f'{key}_tflops']:.1f})" for key in ("rows128", "rows96", "torch")]
        lines.append(f"| {' × '.join(map(str, r['shape']))} | {' | '.join(cells)} | {r['same_bits']} | {r['within_bound']} |")
    (out_dir / "gemm_f32.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prepare", action="store_true", help="CPU side: build the two objects with nvcc")
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
