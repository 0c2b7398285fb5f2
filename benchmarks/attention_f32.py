#!/usr/bin/env python3
"""The f32 attention kernels against torch's f32 scaled_dot_product_attention at BERT-base's shape
(16 x 512 tokens, 12 heads of 64, a [16, 1, 1, 512] padding mask), in one process.

On the same device inputs (qkv [B, S, 3, H, D] as a qkv projection leaves it, the mask with each
row's padding -inf from a random length on):
  * `f32`: flash_attn_qkv_f32_d64_mask (kernels/flash_attention_f32.cu, CUDA cores, f32 sums);
  * `f64acc`: flash_attn_qkv_f32_f64acc_d64_mask (kernels/flash_attention_f32_f64acc.cu, the two
    products summed in f64 on the FP64 tensor cores: what an f32 model takes with
    --allow-wider-accumulation);
  each launched by CuPy RawModule from its sm_90a object with its spec's launch (grid
  (B * H, S / 64), block and dynamic shared memory), out poisoned with NaN first;
  * `torch`: torch.nn.functional.scaled_dot_product_attention on q, k, v as [B, H, S, D] views of
    the same qkv (its default backend for f32 with a mask) and the mask;
each timed by CUDA events around each call, median of --iters after 3 warm-up calls, in --rounds
alternating rounds. Checked: every element of each against the float64 reference (max abs error
and max error relative to the row's largest |value|).

    python benchmarks/attention_f32.py --prepare     # CPU side: nvcc -> build/attention_f32_bench/*.cubin
    python3 benchmarks/attention_f32.py --out DIR    # GPU side: cupy, torch
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
OBJECTS = ROOT / "build" / "attention_f32_bench"
B, S, H, D = 16, 512, 12, 64
# name -> (source, entry point, threads, dynamic shared memory: the spec's block and shared_memory)
KERNELS = {"f32": ("flash_attention_f32", "flash_attn_qkv_f32_d64_mask", 256, 72704),
           "f64acc": ("flash_attention_f32_f64acc", "flash_attn_qkv_f32_f64acc_d64_mask", 128, 83968)}


def prepare() -> None:
    OBJECTS.mkdir(parents=True, exist_ok=True)
    for source in sorted({s for s, _, _, _ in KERNELS.values()}):
        out = OBJECTS / f"{source}.sm_90a.cubin"
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", str(ROOT / "kernels" / f"{source}.cu"), "-o", str(out)], check=True)
        print(out)


def run(out_dir: Path, iters: int, rounds: int) -> None:
    import cupy as cp
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    qkv = rng.standard_normal((B, S, 3, H, D)).astype(np.float32)
    lengths = rng.integers(S // 4, S + 1, B)
    mask = np.where(np.arange(S)[None, :] < lengths[:, None], 0.0, -np.inf).astype(np.float32).reshape(B, 1, 1, S)
    scale = 1.0 / np.sqrt(D)
    q, k, v = (qkv[:, :, i].astype(np.float64).transpose(0, 2, 1, 3) for i in range(3))
    scores = np.einsum("bhqd,bhkd->bhqk", q, k) * scale + mask
    scores -= scores.max(-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(-1, keepdims=True)
    want = np.einsum("bhqk,bhkd->bhqd", weights, v).transpose(0, 2, 1, 3)  # [B, S, H, D]
    row_max = np.abs(want).max(-1, keepdims=True)

    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)  # torch's events time CuPy's launches
    tqkv, tmask = torch.from_numpy(qkv).cuda(), torch.from_numpy(mask).cuda()
    tq, tk, tv = (tqkv[:, :, i].transpose(1, 2) for i in range(3))
    cqkv, cmask = cp.asarray(tqkv), cp.asarray(tmask)
    outs = {}
    calls = {}
    for name, (source, entry, threads, shared) in KERNELS.items():
        kernel = cp.RawModule(path=str(OBJECTS / f"{source}.sm_90a.cubin")).get_function(entry)
        kernel.max_dynamic_shared_size_bytes = shared
        outs[name] = cp.full((B, S, H, D), cp.nan, dtype=cp.float32)
        args = (cqkv, cmask, outs[name], np.int32(B), np.int32(S), np.int32(H), np.int32(B), np.int32(1), np.int32(1), np.float32(scale))

        def launch(kernel=kernel, threads=threads, shared=shared, args=args):
            with stream:
                kernel((B * H, S // 64), (threads,), args, shared_mem=shared)

        calls[name] = launch
    result_torch = {}

    def sdpa():
        result_torch["out"] = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tmask)

    calls["torch"] = sdpa

    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            samples[name] += event_times_ms(fn, iters)
    got = {name: cp.asnumpy(out) for name, out in outs.items()}
    got["torch"] = result_torch["out"].transpose(1, 2).cpu().numpy()
    flops = 4.0 * B * H * S * S * D
    rows = []
    for name in calls:
        ms = float(np.median(samples[name]))
        err = np.abs(got[name].astype(np.float64) - want)
        rows.append({"name": name, "ms": ms, "tflops": flops / (ms * 1e-3) / 1e12, "max_abs_err": float(err.max()),
                     "max_rel_to_row": float((err / row_max).max()), "finite": bool(np.isfinite(got[name]).all())})
        print(rows[-1], flush=True)
    result = {"date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "device": torch.cuda.get_device_name(),
              "driver": nvidia_smi("driver_version") or "unknown", "torch": torch.__version__, "iters": iters, "rounds": rounds,
              "shape": {"B": B, "S": S, "H": H, "D": D}, "rows": rows}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "attention_f32.json").write_text(json.dumps(result, indent=2) + "\n")
    names = {"f32": "flash_attn_qkv_f32_d64_mask", "f64acc": "flash_attn_qkv_f32_f64acc_d64_mask", "torch": "torch SDPA (f32)"}
    lines = [f"{result['device']}, driver {result['driver']}, torch {result['torch']}, {result['date']}; B {B}, S {S}, H {H}, D {D}, "
             f"[B, 1, 1, S] padding mask; median of {iters * rounds} calls in {rounds} alternating rounds (CUDA events)", "",
             "| implementation | µs | TFLOP/s | max abs error against float64 | max error / the row's largest value |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {names[r['name']]} | {r['ms'] * 1e3:.1f} | {r['tflops']:.1f} | {r['max_abs_err']:.2e} | {r['max_rel_to_row']:.2e} |")
    (out_dir / "attention_f32.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prepare", action="store_true", help="CPU side: build the two objects with nvcc")
    p.add_argument("--out", default="build/attention_f32_results")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    if args.prepare:
        prepare()
    else:
        run(Path(args.out), args.iters, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
