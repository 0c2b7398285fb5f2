#!/usr/bin/env python3
"""The persistent NT GEMMs a model takes (kernels/gemm.toml, gemm_n128.toml, gemm_n192.toml: the
same gemm.cu built with 256-, 128- and 192-column tiles) against torch at BERT-base's and
GPT-2 small's Linears at 8192 tokens.

Each row, on the same device inputs (a [M, K] bf16; w [N, K] bf16 as a Linear stores it; bias [N]
bf16; residual [M, N] bf16 for the residual rows): gemm_nt_bias_bf16_persistent,
gemm_nt_bias_residual_bf16_persistent or gemm_nt_bias_gelu_erf_bf16_persistent of each module
whose tiles divide N, grid (min((N / BN) (M / 256), 66), 2), launched by CuPy from the module's
sm_90a cubin; torch: F.linear(a, w, bias), + residual or F.gelu after it. CUDA events around 20
back-to-back calls after 3 warm-up calls, median of 10 rounds alternating between the ways. Each
kernel's output is filled with NaN, computed once and checked in full against torch's float32
result: max |ours - ref| / (|a| @ |w|^T + |residual| + 1) is printed (about one bf16 rounding).

    python3 benchmarks/gemm_tiles.py --objects build/gpu-tests
        (the artifacts of `python -m tests.support.artifacts --only gemm --only gemm_n128 --only gemm_n192 build/gpu-tests`)
"""

from __future__ import annotations

import argparse
import datetime as _dt
from pathlib import Path

import numpy as np
from common import alternating_medians_us, nvidia_smi

# module → (tile columns, the sm_90a dynamic shared memory its spec declares for the persistent kernels)
TILES = {"gemm": (256, 216064), "gemm_n128": (128, 199680), "gemm_n192": (192, 216064)}
# (M, N, K, epilogue): q, k and v as one Linear (N = 2304), the attention output (768 x 768), the
# MLP's first Linear with its erf GELU and its second with the residual add.
SHAPES = [(8192, 2304, 768, "bias"), (8192, 768, 768, "residual"), (8192, 3072, 768, "gelu_erf"), (8192, 768, 3072, "residual"), (8192, 768, 768, "bias")]
KERNEL = {"bias": "gemm_nt_bias_bf16_persistent", "residual": "gemm_nt_bias_residual_bf16_persistent", "gelu_erf": "gemm_nt_bias_gelu_erf_bf16_persistent"}
CLUSTERS, ROUNDS, CALLS = 66, 10, 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=Path, required=True, help="folder holding <module>/<module>.objects/gemm.sm_90a.cubin per module")
    args = parser.parse_args()
    import cupy as cp
    import torch

    modules = {}
    for name in TILES:
        cubin = args.objects / name / f"{name}.objects" / "gemm.sm_90a.cubin"
        if not cubin.is_file():
            raise SystemExit(f"{cubin}: not found (build the artifacts named in this script's docstring)")
        modules[name] = cp.RawModule(path=str(cubin))
    print(f"{_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC, {torch.cuda.get_device_name()}, driver {nvidia_smi('driver_version')}, torch {torch.__version__}")
    print("| M × N × K | epilogue | " + " | ".join(f"{TILES[m][0]} columns µs" for m in TILES) + " | torch µs | best / torch | max err |")
    print("|---|---|" + "---:|" * (len(TILES) + 2) + "---|")
    for m, n, k, epilogue in SHAPES:
        row(cp, torch, modules, m, n, k, epilogue)


def row(cp, torch, modules: dict, m: int, n: int, k: int, epilogue: str) -> None:
    import torch.nn.functional as F

    g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    a = (torch.randn(m, k, device="cuda", generator=g) * 0.5).bfloat16()
    w = (torch.randn(n, k, device="cuda", generator=g) * 0.5).bfloat16()
    bias = torch.randn(n, device="cuda", generator=g).bfloat16()
    residual = torch.randn(m, n, device="cuda", generator=g).bfloat16() if epilogue == "residual" else None
    ref = a.float() @ w.float().t() + bias.float()
    if epilogue == "residual":
        ref = ref.bfloat16().float() + residual.float()  # the Linear's bf16 result, then the model's add
    elif epilogue == "gelu_erf":
        ref = F.gelu(ref)
    scale = a.float().abs() @ w.float().abs().t() + 1.0 + (residual.float().abs() if residual is not None else 0.0)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    params = (np.uint64(a.data_ptr()), np.uint64(w.data_ptr()), np.uint64(bias.data_ptr()),
              *((np.uint64(residual.data_ptr()),) if residual is not None else ()), np.uint64(out.data_ptr()), np.int32(m), np.int32(n), np.int32(k))
    ways, errors = {}, {}
    for name, (columns, shared_memory) in TILES.items():
        if n % columns:
            continue
        function = modules[name].get_function(KERNEL[epilogue])
        function.max_dynamic_shared_size_bytes = shared_memory
        grid = (min((n // columns) * (m // 256), CLUSTERS), 2)
        ways[name] = lambda f=function, grid=grid, smem=shared_memory: f(grid, (384,), params, shared_mem=smem)
        out.fill_(float("nan"))
        ways[name]()
        torch.cuda.synchronize()
        errors[name] = float(((out.float() - ref).abs() / scale).max())  # NaN where an element was not written
    if epilogue == "residual":
        ways["torch"] = lambda: F.linear(a, w, bias) + residual
    elif epilogue == "gelu_erf":
        ways["torch"] = lambda: F.gelu(F.linear(a, w, bias))
    else:
        ways["torch"] = lambda: F.linear(a, w, bias)
    us = alternating_medians_us(ways, ROUNDS, CALLS)
    cells = " | ".join(f"{us[name]:.1f}" if name in us else "" for name in TILES)
    best = min(us[name] for name in TILES if name in us)
    print(f"| {m} × {n} × {k} | {epilogue} | {cells} | {us['torch']:.1f} | {us['torch'] / best:.2f}× | "
          f"{', '.join(f'{e:.1e}' for e in errors.values())} |", flush=True)


if __name__ == "__main__":
    main()
