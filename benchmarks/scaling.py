#!/usr/bin/env python3
"""Data-parallel scaling of a memory-bound kernel over the GPUs of one host.

simple_mul (out = lhs * rhs, 12 bytes moved per element) at N = 2^28 elements (3 GiB of
traffic): the time of one call on one GPU against the same N split over k GPUs, each GPU
holding its part of the inputs (DataParallel.scatter) and the k calls issued at once from k
threads. Wall time of synchronous calls, median of 20 after 3 warm-up calls.

    python3 benchmarks/scaling.py --vmfb build/gpu-tests/samples.vmfb --out DIR
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import nvidia_smi, summarize, wall_times_us  # noqa: E402

from iree_dispatch.runtime import cuda_driver  # noqa: E402
from iree_dispatch.runtime.parallel import DataParallel  # noqa: E402

N = 2**28


def timed(call, count: int = 20, warmup: int = 3) -> list[float]:
    """ms of each synchronous call (all GPUs' parts complete when call_parts returns)."""
    return [us / 1e3 for us in wall_times_us(call, count, warmup)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vmfb", required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    rows = {}
    gpus = cuda_driver.device_count()
    for k in range(1, gpus + 1):
        dp = DataParallel(args.vmfb, [f"cuda://{i}" for i in range(k)])
        pa, pb = dp.scatter(a), dp.scatter(b)
        got = np.concatenate([r.to_host() for r in dp.call_parts("simple_mul", pa, pb)])
        bad = int(np.count_nonzero(got != a * b))
        ms = summarize(timed(lambda dp=dp, pa=pa, pb=pb: dp.call_parts("simple_mul", pa, pb)))
        rows[k] = {"ms": ms, "GB/s": 12 * N / (ms["median"] * 1e-3) / 1e9, "mismatches": bad}
        dp.close()
    for k in rows:
        rows[k]["speedup"] = rows[1]["ms"]["median"] / rows[k]["ms"]["median"]
    result = {"date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "device": nvidia_smi("name"), "driver": nvidia_smi("driver_version"), "N": N, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.json").write_text(json.dumps(result, indent=1))
    lines = [f"{result['date']}, {gpus} × {result['device']}, driver {result['driver']}; simple_mul, N = 2^28, wall time of synchronous calls, median of 20", "",
             "| GPUs | ms (p10-p90) | GB/s | speedup | mismatches |", "|---:|---:|---:|---:|---:|"]
    for k, r in rows.items():
        lines.append(f"| {k} | {r['ms']['median']:.2f} ({r['ms']['p10']:.2f}-{r['ms']['p90']:.2f}) | {r['GB/s']:.0f} | {r['speedup']:.2f}× | {r['mismatches']} |")
    text = "\n".join(lines)
    (args.out / "scaling.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
