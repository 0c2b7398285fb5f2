#!/usr/bin/env python3
"""One program over two GPUs, and one kernel split over them, against one GPU.

- Pipeline (mlir/pipeline_mlp.mlir): an MLP block y = gelu(x @ w1 + b1) @ w2 + b2 on f32 GEMM and
  bias+GELU kernels; stage 1 on GPU 0, stage 2 on GPU 1. Throughput of two micro-batches through
  the block on one GPU (two calls of mlp_one_gpu), through the pipeline one micro-batch in flight
  (two calls of pipeline_1) and two in flight (one call of pipeline_2).
- Tensor parallel (mlir/tensor_parallel_mlp.mlir): the same block with w1 split by columns and w2
  by rows over the two GPUs, against the block on one GPU.
- Data parallel: simple_mul (memory-bound, 12 bytes per element) at N = 2^28 on one GPU and
  split over two (DataParallel, each GPU holding its part).

Synchronous calls on device arrays (weights placed where each program takes them), wall-clock
time, median (p10-p90) of 20 after 3 warm-up calls. Prints a table naming the GPUs.

    python -m tests.support.artifacts --only samples --only multi_device build/gpu-tests
    python3 benchmarks/multi_device.py --modules build/gpu-tests [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import summarize, wall_times_us  # noqa: E402

from iree_dispatch import runtime  # noqa: E402
from iree_dispatch.runtime import cuda_driver  # noqa: E402
from iree_dispatch.runtime.parallel import DataParallel  # noqa: E402

ROWS, K, HIDDEN, N = 2048, 2048, 8192, 2048  # per micro-batch; 3 GEMMs of 34-69 GFLOP
ELEMENTS = 2**28
TWO_GPUS = ["cuda://0", "cuda://1"]


def timed_ms(call) -> dict:
    return summarize([us / 1e3 for us in wall_times_us(call, 20, 3)])


def mlp_cases(folder: Path) -> dict[str, dict]:
    rng = np.random.default_rng()
    w1 = rng.standard_normal((K, HIDDEN), dtype=np.float32) / np.float32(np.sqrt(K))
    b1 = rng.standard_normal(HIDDEN, dtype=np.float32)
    w2 = rng.standard_normal((HIDDEN, N), dtype=np.float32) / np.float32(np.sqrt(HIDDEN))
    b2 = rng.standard_normal(N, dtype=np.float32)
    x0, x1 = (rng.standard_normal((ROWS, K), dtype=np.float32) for _ in range(2))
    cases = {}

    pipeline = runtime.load(folder / "pipeline_mlp.vmfb", devices=TWO_GPUS)
    d_x0, d_x1, d_w1, d_b1, d_w2, d_b2 = (pipeline.to_device(a) for a in (x0, x1, w1, b1, w2, b2))
    s_w2, s_b2 = pipeline.to_device(w2, device=1), pipeline.to_device(b2, device=1)
    cases["pipeline: 2 micro-batches, one GPU"] = timed_ms(lambda: (pipeline.mlp_one_gpu(d_x0, d_w1, d_b1, d_w2, d_b2), pipeline.mlp_one_gpu(d_x1, d_w1, d_b1, d_w2, d_b2)))
    one_in_flight = lambda x: pipeline.pipeline_1(x, d_w1, d_b1, s_w2, s_b2)  # noqa: E731
    cases["pipeline: 2 micro-batches, 2 GPUs, 1 in flight"] = timed_ms(lambda: (one_in_flight(d_x0), one_in_flight(d_x1)))
    cases["pipeline: 2 micro-batches, 2 GPUs, 2 in flight"] = timed_ms(lambda: pipeline.pipeline_2(d_x0, d_x1, d_w1, d_b1, s_w2, s_b2))

    tp = runtime.load(folder / "tensor_parallel_mlp.vmfb", devices=TWO_GPUS)
    half = HIDDEN // 2
    on_0 = [tp.to_device(np.ascontiguousarray(a)) for a in (x0, w1[:, :half], b1[:half], w2[:half], b2)]
    on_1 = [tp.to_device(np.ascontiguousarray(a), device=1) for a in (w1[:, half:], b1[half:], w2[half:])]
    whole = [tp.to_device(a) for a in (w1, b1, w2)]
    cases["MLP block, one GPU"] = timed_ms(lambda: tp.mlp_one_gpu(on_0[0], *whole, on_0[4]))
    cases["MLP block, tensor parallel on 2 GPUs"] = timed_ms(lambda: tp.tensor_parallel(*on_0[:4], *on_1, on_0[4]))
    return cases


def data_parallel_cases(samples: Path) -> dict[str, dict]:
    rng = np.random.default_rng()
    a, b = rng.standard_normal(ELEMENTS, dtype=np.float32), rng.standard_normal(ELEMENTS, dtype=np.float32)
    cases = {}
    for count in (1, 2):
        dp = DataParallel(samples, TWO_GPUS[:count])
        parts_a, parts_b = dp.scatter(a), dp.scatter(b)
        cases[f"simple_mul 2^28, data parallel on {count} GPU(s)"] = timed_ms(lambda dp=dp, pa=parts_a, pb=parts_b: dp.call_parts("simple_mul", pa, pb))
        dp.close()
    return cases


def table(result: dict) -> str:
    lines = [f"GPUs: {', '.join(result['gpus'])}", "", "| case | ms, median (p10-p90) |", "|---|---:|"]
    lines += [f"| {name} | {s['median']:.3f} ({s['p10']:.3f}-{s['p90']:.3f}) |" for name, s in result["cases"].items()]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modules", type=Path, default=Path("build/gpu-tests"), help="what python -m tests.support.artifacts built (samples.vmfb, multi_device/)")
    p.add_argument("--json", type=Path, help="also write the results there")
    args = p.parse_args()
    if cuda_driver.device_count() < 2:
        print("needs two CUDA devices", file=sys.stderr)
        return 1
    result = {"gpus": [f"cuda://{i} {cuda_driver.device_name(i)}" for i in range(2)], "cases": {}}
    result["cases"].update(mlp_cases(args.modules / "multi_device"))
    result["cases"].update(data_parallel_cases(args.modules / "samples.vmfb"))
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
