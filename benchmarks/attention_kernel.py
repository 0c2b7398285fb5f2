#!/usr/bin/env python3
"""kernels/flash_attention.cu on the GPU: correctness of every entry point against a float64
torch reference, then TFLOP/s against torch's own scaled_dot_product_attention.

Correctness: every entry point (bf16 and f16, head dims 64 and 128, no mask, causal, additive
mask) on fresh random data over shapes that exercise the edges: tails (Sq, Sk not multiples of
the tiles), Sq != Sk (causal, top-left aligned as SDPA's is_causal), grouped-query and
multi-query heads, masks broadcast over batch, heads or query rows, a row masked entirely with
-inf (NaN, as torch) and one masked with finfo.min (finite), and pointers that are not 16-byte
aligned (the kernel's element-by-element copy). The output is poisoned with NaN before each
launch and every element is checked: NaN exactly where the reference has NaN, elsewhere
|ours - ref| <= atol + rtol * |ref|. torch SDPA's own error on the same data is printed beside.

Timing: CUDA events around single launches (warm-up first, median of --reps), ours launched by
CuPy from the cubin, torch's SDPA with its default backend choice and with each backend forced
(torch.nn.attention.sdpa_kernel); the backend the default picked is read from the names of the
kernels it launches (torch.profiler). FLOPs: 4 * B * Hq * Sq * Sk * D, halved when causal.

    python benchmarks/attention_kernel.py --prepare     # CPU side: nvcc -> build/fa/*.cubin
    python benchmarks/attention_kernel.py               # GPU side: torch, cupy, numpy
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from common import write_result  # benchmarks/common.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "fa"
ARCHS = ("sm_90a", "sm_80")
SOURCES = ("flash_attention.cu", "attention.cu")  # attention.cu: the previous kernel, timed beside

# Launch configuration, as flash_attention.cu's Launch (the same for every variant): threads and
# query rows per block; each entry point's dynamic shared memory per arch from the spec.
THREADS, ROWS = 256, 128
SPEC = ROOT / "kernels" / "flash_attention.toml"


def shared_memory(arch: str, function: str) -> int:
    """The spec's dynamic shared memory for `function` on `arch` (kernels/flash_attention.toml)."""
    (size,) = [k["shared_memory"][arch] for k in tomllib.loads(SPEC.read_text())["kernel"] if k["name"] == function]
    return size


def prepare() -> None:
    """Compile each source for each arch into build/fa/<stem>.<arch>.cubin, and flash_attention.cu's
    sm_80 PTX (its mma.sync body, JIT-compiled by the driver on newer GPUs, checked there too)."""
    BUILD.mkdir(parents=True, exist_ok=True)
    jobs = [(source, arch, "cubin") for source in SOURCES for arch in ARCHS] + [(SOURCES[0], "sm_80", "ptx")]
    for source, arch, kind in jobs:
        out = BUILD / f"{Path(source).stem}.{arch}.{kind}"
        # sm_90a through -gencode: the -arch shorthand also runs a plain sm_90 pass, which rejects wgmma.
        target = f"-gencode=arch=compute_{arch[3:]},code={arch}" if kind == "cubin" else f"-arch=compute_{arch[3:]}"
        cmd = ["nvcc", f"-{kind}", target, "-O3", "-std=c++17", str(ROOT / "kernels" / source), "-o", str(out)]
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)


@dataclass(frozen=True)
class Case:
    """One attention problem: sizes, masking ("none", "causal", "mask") and the mask's dims."""

    B: int
    Hq: int
    Hkv: int
    Sq: int
    Sk: int
    D: int
    masking: str
    mask_dims: tuple[int, int, int] = (0, 0, 0)  # (MB, MH, MQ) for masking == "mask"
    misaligned: bool = False  # q, k, v, mask and out start 2 bytes past a 16-byte boundary
    scale: float | None = None  # the softmax scale; None: SDPA's default, 1 / sqrt(D)

    def flops(self) -> float:
        full = 4.0 * self.B * self.Hq * self.Sq * self.Sk * self.D
        return full / 2 if self.masking == "causal" else full

    def label(self) -> str:
        mask = f" mask[{','.join(map(str, self.mask_dims))},{self.Sk}]" if self.masking == "mask" else ""
        label = f"B{self.B} Hq{self.Hq} Hkv{self.Hkv} Sq{self.Sq} Sk{self.Sk} d{self.D} {self.masking}{mask}"
        return label + (" misaligned" if self.misaligned else "") + ("" if self.scale is None else f" scale {self.scale:g}")


def bodies(torch) -> list[tuple[str, str]]:
    """The flash_attention objects to check on this GPU, (arch, file name): on Hopper the sm_90a
    cubin (wgmma body) and the sm_80 PTX (mma.sync body); elsewhere the sm_80 cubin."""
    major, _ = torch.cuda.get_device_capability()
    if major == 9:
        return [("sm_90a", "flash_attention.sm_90a.cubin"), ("sm_80", "flash_attention.sm_80.ptx")]
    return [("sm_80", "flash_attention.sm_80.cubin")]


class Kernels:
    """One flash_attention object (cubin or PTX) of `arch`, launched by CuPy on torch tensors."""

    def __init__(self, torch, cupy, arch: str, file_name: str):
        self.torch, self.cupy, self.arch = torch, cupy, arch
        self.module = cupy.RawModule(path=str(BUILD / file_name))
        self._functions: dict[str, object] = {}

    def function(self, name: str, smem: int):
        fn = self._functions.get(name)
        if fn is None:
            fn = self.module.get_function(name)
            fn.max_dynamic_shared_size_bytes = smem
            self._functions[name] = fn
        return fn

    def launcher(self, case: Case, q, k, v, mask, out, scale: float):
        """A no-argument callable that launches the case's entry point once."""
        import numpy as np

        dtype = "bf16" if q.dtype == self.torch.bfloat16 else "f16"
        suffix = {"none": "", "causal": "_causal", "mask": "_mask"}[case.masking]
        name = f"flash_attn_{dtype}_d{case.D}{suffix}"
        threads, rows, smem = THREADS, ROWS, shared_memory(self.arch, name)
        fn = self.function(name, smem)
        grid = (case.B * case.Hq, math.ceil(case.Sq / rows))
        ptr = lambda t: np.uint64(t.data_ptr())  # noqa: E731
        sizes = [np.int32(x) for x in (case.B, case.Hq, case.Hkv, case.Sq, case.Sk)]
        if case.masking == "mask":
            args = (ptr(q), ptr(k), ptr(v), ptr(mask), ptr(out), *sizes, *(np.int32(x) for x in mask.shape[:3]), np.float32(scale))
        else:
            args = (ptr(q), ptr(k), ptr(v), ptr(out), *sizes, np.float32(scale))
        return lambda: fn(grid, (threads,), args, shared_mem=smem)


def make_inputs(torch, case: Case, dtype, gen):
    """q, k, v (and the mask) on the GPU, each in a buffer of its own (offset by one element when
    misaligned). The mask: 0 or -inf at random, plus row 0 all -inf and row 1 all finfo.min in
    every (batch, head) slice that has query rows of its own."""

    def tensor(shape, fill):
        n = math.prod(shape)
        off = 1 if case.misaligned else 0
        buf = torch.empty(n + off, dtype=dtype, device="cuda")
        t = buf[off:].view(shape)
        fill(t)
        return t

    normal = lambda t: t.copy_(torch.randn(t.shape, generator=gen, device="cuda"))  # noqa: E731
    q = tensor((case.B, case.Hq, case.Sq, case.D), normal)
    k = tensor((case.B, case.Hkv, case.Sk, case.D), normal)
    v = tensor((case.B, case.Hkv, case.Sk, case.D), normal)
    mask = None
    if case.masking == "mask":
        mb, mh, mq = case.mask_dims

        def fill_mask(t):
            live = torch.rand(t.shape, generator=gen, device="cuda") < 0.8
            t.copy_(torch.where(live, torch.randn(t.shape, generator=gen, device="cuda"), torch.full_like(t, -math.inf, dtype=torch.float32)))
            if mq > 2:
                t[:, :, 0, :] = -math.inf
                t[:, :, 1, :] = torch.finfo(dtype).min

        mask = tensor((mb, mh, mq, case.Sk), fill_mask)
    return q, k, v, mask


def reference(torch, case: Case, q, k, v, mask, scale: float):
    """softmax(q @ k^T * scale + mask) @ v in float64, kv heads repeated for grouped queries."""
    g = case.Hq // case.Hkv
    q64, k64, v64 = q.double(), k.double().repeat_interleave(g, dim=1), v.double().repeat_interleave(g, dim=1)
    s = q64 @ k64.transpose(-1, -2) * scale
    if case.masking == "causal":
        keep = torch.ones(case.Sq, case.Sk, dtype=torch.bool, device="cuda").tril()
        s = s.masked_fill(~keep, -math.inf)
    elif case.masking == "mask":
        s = s + mask.double()
    return torch.softmax(s, dim=-1) @ v64


def sdpa(torch, case: Case, q, k, v, mask, scale: float):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=case.masking == "causal", scale=scale, enable_gqa=case.Hq != case.Hkv)


def correctness(torch, kernels: Kernels) -> bool:
    print(f"\n{kernels.arch} body ({'wgmma' if kernels.arch == 'sm_90a' else 'mma.sync'}):")
    cases = []
    for d in (64, 128):
        cases += [
            Case(2, 4, 4, 200, 200, d, "none"),
            Case(1, 3, 3, 1, 1, d, "none"),
            Case(2, 8, 2, 333, 333, d, "causal"),
            Case(1, 4, 1, 100, 257, d, "causal"),
            Case(1, 4, 4, 300, 70, d, "causal"),
            Case(2, 4, 2, 130, 77, d, "mask", (2, 1, 130)),
            Case(3, 4, 4, 64, 190, d, "mask", (3, 1, 1)),
            Case(2, 4, 4, 129, 129, d, "mask", (1, 4, 129)),
            Case(1, 2, 2, 257, 255, d, "none", misaligned=True),
            Case(1, 2, 1, 150, 150, d, "causal", misaligned=True),
            Case(2, 2, 2, 70, 33, d, "mask", (2, 2, 70), misaligned=True),
            # More key tiles than the d128 body's ring has stages (each stage refilled, twice).
            Case(1, 4, 2, 1100, 1100, d, "causal"),
            Case(2, 2, 2, 600, 1000, d, "none"),
            Case(1, 2, 2, 700, 1300, d, "mask", (1, 1, 700)),
            # Scales other than SDPA's: negative and zero (the d128 body's cp.async fallback without a mask).
            Case(1, 2, 2, 300, 300, d, "causal", scale=-0.3),
            Case(1, 2, 2, 200, 200, d, "none", scale=0.0),
            Case(2, 2, 2, 130, 130, d, "mask", (2, 1, 130), scale=-0.2),
        ]
    tolerance = {torch.bfloat16: (2e-2, 2e-2), torch.float16: (3e-3, 3e-3)}
    ok = True
    gen = torch.Generator(device="cuda").manual_seed(20261126)
    print(f"{'case':62} {'type':5} {'max err':>9} {'torch err':>9} {'NaN rows':>8}  result")
    for dtype in (torch.bfloat16, torch.float16):
        for case in cases:
            q, k, v, mask = make_inputs(torch, case, dtype, gen)
            scale = 1.0 / math.sqrt(case.D) if case.scale is None else case.scale
            out = torch.full((case.B * case.Hq * case.Sq * case.D + 1,), math.nan, dtype=dtype, device="cuda")
            out = out[1:] if case.misaligned else out[:-1]
            out = out.view(case.B, case.Hq, case.Sq, case.D)
            kernels.launcher(case, q, k, v, mask, out, scale)()
            torch.cuda.synchronize()
            ref = reference(torch, case, q, k, v, mask, scale)
            atol, rtol = tolerance[dtype]
            ref_nan = ref.isnan()
            got = out.double()
            nan_match = bool((got.isnan() == ref_nan).all())
            finite = ~ref_nan
            err = (got - ref).abs()[finite]
            within = bool((err <= atol + rtol * ref.abs()[finite]).all())
            max_err = float(err.max()) if err.numel() else 0.0
            theirs = math.nan  # torch's own error, for scale; not for the misaligned views
            if not case.misaligned:
                theirs = float((sdpa(torch, case, q, k, v, mask, scale).double() - ref).abs()[finite].max())
            nan_rows = int(ref_nan.any(dim=-1).sum())
            passed = nan_match and within
            ok &= passed
            print(
                f"{case.label():62} {str(dtype)[6:]:5} {max_err:9.2e} {theirs:9.2e} {nan_rows:8d}  {'ok' if passed else 'FAIL'}" + ("" if nan_match else " (NaN pattern differs)"),
                flush=True,
            )
    return ok


def time_ms(torch, fn, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def picked_backend(torch, fn) -> str:
    """The backend torch's default choice ran, from its kernels' names."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = " ".join(e.key for e in prof.key_averages()).lower()
    for key, backend in (("cudnn", "cuDNN"), ("flash", "flash"), ("fmha", "efficient"), ("cutlass", "efficient")):
        if key in names:
            return backend
    return "math/other"


def benchmark(torch, cupy, all_kernels: list[Kernels], warmup: int, reps: int) -> dict:
    """Times the first of all_kernels (the object this GPU runs) against torch; the others beside."""
    kernels = all_kernels[0]
    from torch.nn.attention import SDPBackend, sdpa_kernel

    shapes = [
        ("GPT-2", Case(8, 12, 12, 1024, 1024, 64, "causal")),
        ("Llama GQA", Case(4, 16, 4, 1024, 1024, 64, "causal")),
        ("BERT", Case(16, 12, 12, 512, 512, 64, "mask", (16, 1, 1))),
        # The padding mask as transformers' BERT hands it to SDPA: expanded over the query rows.
        ("BERT, mask per row", Case(16, 12, 12, 512, 512, 64, "mask", (16, 1, 512))),
        ("long context", Case(1, 32, 32, 4096, 4096, 128, "causal")),
    ]
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)]
    dtype = torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(7)
    rows = []
    for name, case in shapes:
        q, k, v, _ = make_inputs(torch, case, dtype, gen)
        mask = None
        if case.masking == "mask":  # padding: each batch entry's keys past a random length are -inf
            lengths = torch.randint(case.Sk // 2, case.Sk + 1, (case.B,), generator=gen, device="cuda")
            pad = torch.arange(case.Sk, device="cuda")[None, :] >= lengths[:, None]
            mask = torch.zeros(case.B, 1, 1, case.Sk, dtype=dtype, device="cuda").masked_fill(pad[:, None, None, :], -math.inf)
            mask = mask.expand(*case.mask_dims, case.Sk).contiguous()
        scale = 1.0 / math.sqrt(case.D)
        out = torch.empty(case.B, case.Hq, case.Sq, case.D, dtype=dtype, device="cuda")
        ours = kernels.launcher(case, q, k, v, mask, out, scale)
        theirs = lambda: sdpa(torch, case, q, k, v, mask, scale)  # noqa: E731
        ours()
        diff = float((out.float() - theirs().float()).abs().max())
        t_ours = time_ms(torch, ours, warmup, reps)
        t_others = [time_ms(torch, other.launcher(case, q, k, v, mask, out, scale), warmup, reps) for other in all_kernels[1:]]
        t_torch = time_ms(torch, theirs, warmup, reps)
        forced = {}
        for label, backend in backends:
            try:
                with sdpa_kernel([backend]):
                    forced[label] = time_ms(torch, theirs, warmup, reps)
            except RuntimeError:
                forced[label] = math.nan
        rows.append((name, case, t_ours, t_torch, picked_backend(torch, theirs), forced, diff, t_others))
    # The previous kernel (attention.cu's attention_bf16: additive [B, S, S] mask, keys transposed)
    # on GPT-2's shape, for the before/after.
    case = shapes[0][1]
    import numpy as np

    z, s = case.B * case.Hq, case.Sq
    q = torch.randn(z, s, 64, dtype=dtype, device="cuda")
    kt, v = torch.randn(z, 64, s, dtype=dtype, device="cuda"), torch.randn(z, s, 64, dtype=dtype, device="cuda")
    causal = torch.full((s, s), -math.inf, device="cuda").triu(1).to(dtype)
    mask = causal.expand(case.B, s, s).contiguous()
    out = torch.empty_like(q)
    previous = cupy.RawModule(path=str(BUILD / f"attention.{kernels.arch}.cubin"))
    fn = previous.get_function("attention_bf16")
    args = tuple(np.uint64(t.data_ptr()) for t in (q, kt, v, mask, out)) + (np.int32(z), np.int32(s), np.int32(case.B))
    t_prev = time_ms(torch, lambda: fn((z, math.ceil(s / 64)), (128,), args), warmup, reps)

    return {
        "arch": kernels.arch,
        "others": [other.arch for other in all_kernels[1:]],
        "rows": [
            {"name": name, "sizes": case.label(), "flops": case.flops(), "ours_ms": t_ours, "torch_ms": t_torch, "torch_backend": backend,
             "forced_ms": forced, "others_ms": t_others, "max_abs_diff": diff}
            for name, case, t_ours, t_torch, backend, forced, diff, t_others in rows
        ],
        "previous": {"kernel": "attention_bf16", "shape": shapes[0][0], "ms": t_prev, "flops": shapes[0][1].flops()},
    }


def table(result: dict) -> str:
    """The markdown table of a benchmark result (TFLOP/s from each row's FLOPs and times)."""
    others = "".join(f" {arch} body TFLOP/s |" for arch in result["others"])
    lines = [
        f"{result['date']}, {result['device']}, driver {result['driver']}, torch {result['torch']}, cupy {result['cupy']}",
        f"bf16; ours: the {result['arch']} object. TFLOP/s count causal attention at half the FLOPs.",
        "",
        f"| shape | sizes | ours ms | ours TFLOP/s | torch ms | torch TFLOP/s | torch backend | ours / torch |{others} flash / efficient / cuDNN forced, TFLOP/s | max abs diff |",
        "|---" * (10 + len(result["others"])) + "|",
    ]
    for r in result["rows"]:
        tf = lambda ms: r["flops"] / ms / 1e9  # noqa: E731
        forced_tf = " / ".join("n/a" if math.isnan(t) else f"{tf(t):.0f}" for t in r["forced_ms"].values())
        other_tf = "".join(f" {tf(t):.0f} |" for t in r["others_ms"])
        lines.append(
            f"| {r['name']} | {r['sizes']} | {r['ours_ms']:.4f} | {tf(r['ours_ms']):.0f} | {r['torch_ms']:.4f} | {tf(r['torch_ms']):.0f} | "
            f"{r['torch_backend']} | {r['torch_ms'] / r['ours_ms']:.2f} |{other_tf} {forced_tf} | {r['max_abs_diff']:.1e} |"
        )
    prev = result["previous"]
    lines += ["", f"Previous kernel {prev['kernel']} on {prev['shape']}'s shape (causal as a [B, S, S] mask): {prev['ms']:.4f} ms, "
              f"{prev['flops'] / prev['ms'] / 1e9:.0f} TFLOP/s (causal FLOPs).", "", f"correctness: {result['correctness']}", ""]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    """TFLOP/s per shape: ours, torch's SDPA with its default backend, and the other bodies."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    series = [("ours", "ours_ms", None), ("torch SDPA (default)", "torch_ms", None)]
    series += [(f"ours, {arch} body", "others_ms", i) for i, arch in enumerate(result["others"])]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for j, (label, key, index) in enumerate(series):
        values = [r["flops"] / (r[key] if index is None else r[key][index]) / 1e9 for r in rows]
        bars = ax.bar([i + (j - (len(series) - 1) / 2) * width for i in range(len(rows))], values, width, label=label)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(range(len(rows)), [r["name"] for r in rows])
    ax.set_ylabel("TFLOP/s (causal: half the FLOPs)")
    ax.set_title(f"Flash attention, bf16, one launch (CUDA events): {result['device']}, {result['date']}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", action="store_true", help="compile the cubins (CPU side) and exit")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--skip-correctness", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="where attention_kernel.json, .md and .png go")
    parser.add_argument("--replot", type=Path, help="an attention_kernel.json to write the table and plot from (no GPU)")
    args = parser.parse_args()
    if args.prepare:
        prepare()
        return 0
    if args.replot:
        write_result(json.loads(args.replot.read_text()), args.out, "attention_kernel", table, plot)
        return 0
    import cupy
    import torch

    props = torch.cuda.get_device_properties(0)
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    date = f"{_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC"
    print(f"{date}, {props.name}, driver {driver}, torch {torch.__version__}, cupy {cupy.__version__}", flush=True)
    all_kernels = [Kernels(torch, cupy, arch, file_name) for arch, file_name in bodies(torch)]
    ok = True
    if not args.skip_correctness:
        for kernels in all_kernels:
            ok &= correctness(torch, kernels)
    result = benchmark(torch, cupy, all_kernels, args.warmup, args.reps)
    correctness_said = "skipped" if args.skip_correctness else "all passed" if ok else "FAILURES"
    result = {"date": date, "device": props.name, "driver": driver, "torch": torch.__version__, "cupy": cupy.__version__,
              "correctness": correctness_said} | result
    write_result(result, args.out, "attention_kernel", table, plot)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
