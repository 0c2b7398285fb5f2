"""Cold and warm build times of every sample (kernels/samples.toml and the mixed program),
with each CUDA toolchain.

    python benchmarks/build_times.py [--repeat 5] [--toolchains nvcc,nvrtc]

Cold: a fresh, empty build cache, split by stage. Warm: everything cached, in-process
(`iree_dispatch.build`) and as a command (`iree-dispatch build`, Python start included).
Medians of --repeat runs. Needs nvcc and iree-base-compiler; no GPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def build_samples(out: Path, toolchain: str) -> list[dict[str, float]]:
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec_file import load_spec

    spec = load_spec(ROOT / "kernels" / "samples.toml")
    return [
        build(spec, out / "samples.vmfb", emit_mlir=out / "samples.mlir", toolchain=toolchain).timings,
        build(spec, out / "mixed_invocation.vmfb", program=ROOT / "mlir" / "mixed_invocation.mlir", toolchain=toolchain).timings,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--toolchains", default="nvcc,nvrtc", help="comma-separated: nvcc, nvrtc")
    args = parser.parse_args()
    print(f"# Build times, {platform.node()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"median of {args.repeat}; 'all samples' = kernels/samples.toml + mlir/mixed_invocation.mlir")
    for toolchain in args.toolchains.split(","):
        measure(toolchain, args.repeat)


def measure(toolchain: str, repeat: int) -> None:
    cold, cold_stages, warm, warm_cli = [], {}, [], []
    cli = [sys.executable, "-m", "iree_dispatch.cli", "build", str(ROOT / "kernels" / "samples.toml"), "--toolchain", toolchain]
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["IREE_DISPATCH_CACHE_DIR"] = str(Path(tmp) / "cache")
            out = Path(tmp) / "out"
            started = time.perf_counter()
            timings = build_samples(out, toolchain)
            cold.append(time.perf_counter() - started)
            for t in timings:
                for stage, seconds in t.items():
                    cold_stages.setdefault(stage, []).append(seconds)
            started = time.perf_counter()
            assert all(set(t) == {"cache"} for t in build_samples(out, toolchain))
            warm.append(time.perf_counter() - started)
            started = time.perf_counter()
            subprocess.run([*cli, "-o", str(out / "samples.vmfb"), "--emit-mlir"], check=True, capture_output=True)
            warm_cli.append(time.perf_counter() - started)
    stages = {k: statistics.median(v) * 2 for k, v in cold_stages.items()}  # two builds per run
    print(f"\n## {toolchain}\n\n| build | seconds |\n|---|---:|")
    print(f"| cold, all samples (empty cache) | {statistics.median(cold):.2f} |")
    for stage, seconds in stages.items():
        print(f"| — of which {stage} (both builds) | {seconds:.2f} |")
    print(f"| warm, all samples, in-process `build()` | {statistics.median(warm):.3f} |")
    print(f"| warm, `iree-dispatch build` command, Python start included | {statistics.median(warm_cli):.3f} |")


if __name__ == "__main__":
    main()
