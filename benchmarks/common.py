"""What the GPU benchmarks share: sample statistics, kernel durations from CUPTI, wall times
of synchronous calls, nvidia-smi readings, and writing a result as JSON + Markdown + PNG.

Imported by the scripts beside it (`python3 benchmarks/<script>.py` puts this folder on
sys.path); CUDA libraries are imported inside the functions that need them, so that the
scripts' CPU-side modes (--prepare, --replot) run without a GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def summarize(samples) -> dict:
    a = np.asarray(samples, dtype=np.float64)
    return {"median": float(np.median(a)), "p10": float(np.percentile(a, 10)), "p90": float(np.percentile(a, 90)), "n": int(a.size)}


def cupti_kernel_records(calls: Callable[[int], None], count: int, warmup: int = 2) -> list[dict]:
    """Kernel records (name, ts, dur in µs), in start order, of what calls(count) launches,
    after calls(warmup) outside the profiler. CUPTI through torch.profiler: the kernels' own
    durations, whoever launched them."""
    from torch.profiler import ProfilerActivity, profile

    calls(warmup)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        calls(count)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text()).get("traceEvents", [])
    kernels = [{"name": e["name"], "ts": float(e["ts"]), "dur": float(e["dur"])} for e in events if e.get("cat") == "kernel"]
    return sorted(kernels, key=lambda k: k["ts"])


def cupti_times_us(calls: Callable[[int], None], kernel: str, count: int) -> list[float]:
    """Durations of `kernel` over calls(count), which must launch it once per call."""
    durations = [r["dur"] for r in cupti_kernel_records(calls, count) if r["name"] == kernel]
    if len(durations) != count:
        raise RuntimeError(f"{kernel}: {len(durations)} kernel records in the CUPTI trace, expected {count}")
    return durations


def wall_times_us(call: Callable[[], object], count: int, warmup: int = 3) -> list[float]:
    """µs of each of `count` synchronous calls, after `warmup` calls."""
    for _ in range(warmup):
        call()
    out = []
    for _ in range(count):
        t0 = time.perf_counter_ns()
        call()
        out.append((time.perf_counter_ns() - t0) / 1e3)
    return out


def event_times_ms(call: Callable[[], object], count: int, warmup: int = 3) -> list[float]:
    """ms of each of `count` calls on torch's current stream, each between its own CUDA events and
    waited for before the next (the GPU's time for the call), after `warmup` calls."""
    import torch

    for _ in range(warmup):
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(count):
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end))
    return out


def events_us_per_call(launch: Callable[[], object], calls: int) -> float:
    """µs per call of `calls` back-to-back launches on torch's current stream, by CUDA events
    around them (the GPU's time for the batch, launch gaps included)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        launch()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / calls


def alternating_medians_us(ways: dict[str, Callable[[], object]], rounds: int, calls: int, warmup: int = 3) -> dict[str, float]:
    """Per way, the median over `rounds` rounds of events_us_per_call(launch, calls), the ways
    taking turns within each round (a drift of the GPU's clocks falls on all alike), after
    `warmup` launches of each."""
    import statistics

    for launch in ways.values():
        for _ in range(warmup):
            launch()
    samples: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(rounds):
        for way, launch in ways.items():
            samples[way].append(events_us_per_call(launch, calls))
    return {way: statistics.median(values) for way, values in samples.items()}


def nvidia_smi(field: str) -> str | None:
    """`field` of the first GPU as nvidia-smi reports it (one line on a machine of several)."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    lines = out.strip().splitlines()
    return lines[0].strip() if lines else None


def write_result(result: dict, out: Path, stem: str, table: Callable[[dict], str], plot: Callable[[dict, Path], None]) -> None:
    """out/<stem>.json, out/<stem>.md (also printed) and out/<stem>.png (skipped without matplotlib)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    text = table(result)
    (out / f"{stem}.md").write_text(text)
    print(text)
    try:
        plot(result, out / f"{stem}.png")
    except ImportError as exc:
        print(f"no plot: {exc}", file=sys.stderr)


def main(argv, *, doc: str, stem: str, default_dir: Path, default_out: Path, dir_help: str, prepare: Callable[[Path], None],
         measure: Callable[[argparse.Namespace], dict], table: Callable[[dict], str], plot: Callable[[dict, Path], None],
         add_arguments: Callable[[argparse.ArgumentParser], None] = lambda p: None) -> int:
    """The command line the benchmarks share: --prepare builds their modules (CPU side), --replot
    rewrites table and plot from an earlier <stem>.json, otherwise measure on the GPU; results go
    to --out as <stem>.json/.md/.png."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--dir", type=Path, default=default_dir, help=dir_help)
    p.add_argument("--out", type=Path, default=default_out)
    add_arguments(p)
    p.add_argument("--prepare", action="store_true", help="build the modules (CPU side)")
    p.add_argument("--replot", type=Path, help=f"a {stem}.json to write the table and plot from")
    args = p.parse_args(argv)
    if args.prepare:
        prepare(args.dir)
        return 0
    write_result(json.loads(args.replot.read_text()) if args.replot else measure(args), args.out, stem, table, plot)
    return 0
