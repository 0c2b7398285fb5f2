#!/usr/bin/env python3
"""The persistent bf16 GEMMs (kernels/gemm.toml, model_ops.toml) against their one-tile-per-CTA
forms, their forms reading the weight as stored, the any-size NT GEMM with the same epilogue
(kernels/gemm_nt.toml) and torch, at transformer shapes (M = tokens, N and K the Linears' widths).

Each row, on the same device inputs (a [M, K], b [K, N] bf16, bias [N] f32):
  * `one tile`: gemm_bias_bf16 (or gemm_bias_gelu_erf_bf16), grid (N / 256, 2 M / 256);
  * `persistent`: its *_persistent form, grid (min(pairs, 66), 2);
  * `NT persistent`: gemm_nt_bias_bf16_persistent (or ..._gelu_erf_...) reading W [N, K] as a
    Linear stores it, with the bf16 bias, the persistent grid;
  * `NT`: gemm_nt.cu's gemm_nt_bias_bf16 (or ..._gelu_erf_...), the same inputs, the grid
    gemm_nt.toml declares;
  * `torch`: torch.nn.functional.linear(a, W, bias) with W = b.T stored [N, K] as a Linear holds
    it (cuBLAS, bf16 out), followed by torch's exact GELU for the GELU rows;
the kernels from the modules' sm_90a cubins, launched by CuPy. Each way: CUDA events around 20
back-to-back calls, 3 warm-up calls, median of 10 rounds that alternate between the ways.
TFLOP/s = 2 M N K / time. Each kernel's output is filled with NaN, computed once and checked
in full against torch's float32 product: max |ours - ref| / (|a| @ |b| + 1) is printed (one bf16
rounding of the result: at most 2^-8).

    python3 benchmarks/gemm_persistent.py [--cubin build/gpu-tests/gemm/gemm.objects/gemm.sm_90a.cubin]
        [--nt-cubin build/gpu-tests/gemm_nt/gemm_nt.objects/gemm_nt.sm_90a.cubin]
"""

from __future__ import annotations

import argparse
import datetime as _dt
from pathlib import Path

import numpy as np
from common import alternating_medians_us, nvidia_smi

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CUBIN = ROOT / "build" / "gpu-tests" / "gemm" / "gemm.objects" / "gemm.sm_90a.cubin"
DEFAULT_NT_CUBIN = ROOT / "build" / "gpu-tests" / "gemm_nt" / "gemm_nt.objects" / "gemm_nt.sm_90a.cubin"
# (M, N, K, epilogue): GPT-2 small and BERT-base at 8192 tokens (qkv / attention output, GPT-2's
# fused qkv, the MLP's two matmuls), a 1024-wide model at 4096 tokens, and a square one.
SHAPES = [(8192, 768, 768, "bias"), (8192, 2304, 768, "bias"), (8192, 3072, 768, "gelu_erf"), (8192, 768, 3072, "bias"),
          (4096, 1024, 1024, "bias"), (4096, 2816, 1024, "gelu_erf"), (4096, 1024, 2816, "bias"), (4096, 4096, 4096, "bias")]
ONE_TILE_SMEM, PERSISTENT_SMEM = 4 * 49152 + 1024, 3 * 49152 + 2 * 64 * 264 * 2 + 1024  # gemm.toml's sm_90a sizes
NT_SMEM = 220160  # gemm_nt.toml's sm_90a size
CLUSTERS, ROUNDS, CALLS = 66, 10, 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cubin", type=Path, default=DEFAULT_CUBIN, help="gemm.cu built for sm_90a (the gemm module's object)")
    parser.add_argument("--nt-cubin", type=Path, default=DEFAULT_NT_CUBIN, help="gemm_nt.cu built for sm_90a (the gemm_nt module's object)")
    args = parser.parse_args()
    import cupy as cp
    import torch

    module, nt_module = cp.RawModule(path=str(args.cubin)), cp.RawModule(path=str(args.nt_cubin))
    print(f"{_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC, {torch.cuda.get_device_name()}, driver {nvidia_smi('driver_version')}, torch {torch.__version__}")
    print("| M × N × K | epilogue | one tile | persistent | NT persistent | NT | torch | persistent / torch | NT persistent / torch | NT / torch "
          "| max err (one tile, persistent, NT persistent, NT) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for m, n, k, epilogue in SHAPES:
        row(cp, torch, module, nt_module, m, n, k, epilogue)


def kernel(module, name: str, shared_memory: int):
    function = module.get_function(name)
    function.max_dynamic_shared_size_bytes = shared_memory
    return function


def row(cp, torch, module, nt_module, m: int, n: int, k: int, epilogue: str) -> None:
    g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    a = (torch.randn(m, k, device="cuda", generator=g) * 0.5).bfloat16()
    b = (torch.randn(k, n, device="cuda", generator=g) * 0.5).bfloat16()
    bias = torch.randn(n, device="cuda", generator=g)
    weight, bias_bf16 = b.t().contiguous(), bias.bfloat16()
    ref = a.float() @ b.float() + bias
    if epilogue == "gelu_erf":
        ref = torch.nn.functional.gelu(ref)
    scale = a.float().abs() @ b.float().abs() + 1.0
    name = "gemm_bias_bf16" if epilogue == "bias" else "gemm_bias_gelu_erf_bf16"
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    params = (np.uint64(a.data_ptr()), np.uint64(b.data_ptr()), np.uint64(bias.data_ptr()), np.uint64(out.data_ptr()), np.int32(m), np.int32(n), np.int32(k))
    nt_params = (np.uint64(a.data_ptr()), np.uint64(weight.data_ptr()), np.uint64(bias_bf16.data_ptr()), np.uint64(out.data_ptr()), np.int32(m), np.int32(n),
                 np.int32(k))
    one_tile, persistent = kernel(module, name, ONE_TILE_SMEM), kernel(module, f"{name}_persistent", PERSISTENT_SMEM)
    nt_name = name.replace("gemm_", "gemm_nt_", 1)
    nt_persistent, nt = kernel(module, f"{nt_name}_persistent", PERSISTENT_SMEM), kernel(nt_module, nt_name, NT_SMEM)
    pairs = (n // 256) * (m // 256)
    nt_grid = 2 * min(pairs, CLUSTERS)
    gelu = torch.nn.functional.gelu if epilogue == "gelu_erf" else (lambda x: x)
    ways = {
        "one tile": lambda: one_tile((n // 256, 2 * m // 256), (384,), params, shared_mem=ONE_TILE_SMEM),
        "persistent": lambda: persistent((min(pairs, CLUSTERS), 2), (384,), params, shared_mem=PERSISTENT_SMEM),
        "NT persistent": lambda: nt_persistent((min(pairs, CLUSTERS), 2), (384,), nt_params, shared_mem=PERSISTENT_SMEM),
        "NT": lambda: nt((nt_grid,), (384,), nt_params, shared_mem=NT_SMEM),
        "torch": lambda: gelu(torch.nn.functional.linear(a, weight, bias_bf16)),
    }
    errors = []
    for way in ("one tile", "persistent", "NT persistent", "NT"):
        out.fill_(float("nan"))
        ways[way]()
        torch.cuda.synchronize()
        errors.append(float(((out.float() - ref).abs() / scale).max()))  # NaN where an element was not written
    us = alternating_medians_us(ways, ROUNDS, CALLS)
    tflops = {way: 2 * m * n * k / t / 1e6 for way, t in us.items()}
    cells = " | ".join(f"{us[w]:.1f} µs, {tflops[w]:.0f} TFLOP/s" for w in ways)
    ratios = " | ".join(f"{us['torch'] / us[w]:.2f}×" for w in ("persistent", "NT persistent", "NT"))
    print(f"| {m} × {n} × {k} | {epilogue} | {cells} | {ratios} | {', '.join(f'{e:.1e}' for e in errors)} |", flush=True)


if __name__ == "__main__":
    main()
