"""GPT-2 small through IREE alone, through IREE with our kernels substituted, and in PyTorch.

Two sides, as the other benchmarks (docs/models.md, "GPT-2"):

    # CPU side (torch, transformers, iree-base-compiler, nvcc): export, substitute, compile
    python benchmarks/model.py prepare --out build/model-gpu [--batch 8 --seq 1024 --dtypes f32,bf16]
    # GPU side (torch, transformers, numpy, ml_dtypes, iree-base-runtime; no compiler):
    python3 benchmarks/model.py run --dir build/model-gpu --out RESULTS

The model is GPT2LMHeadModel(GPT2Config(use_cache=False)) with eager attention and random
weights from a seed, fed an explicit additive causal mask ([B, 1, T, T]; transformers' own mask
construction does not legalize in IREE). Its parameters are the exported function's trailing
arguments (iree_dispatch.models.torch_export, params_as_inputs): the vmfbs hold no weights (a
few MB instead of 250-500), and the GPU side rebuilds the same weights from the seed and passes
the same tensors to every implementation. Logits are returned as float32.

`run` compares, per dtype: PyTorch eager, torch.compile (unless --no-compile), IREE alone, and
IREE with our kernels (strict numerics; for bf16 also --allow-wider-accumulation): forward time
(median of --iters, after warm-up; CUDA events for torch, a synchronous call for IREE) and the
logits' error against a float32 PyTorch reference run with the same (rounded) weights: max
|diff| / max |ref|, mean |diff|, and the fraction of positions whose top-1 token agrees.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = [ROOT / "kernels"]  # the kernel library: every spec in it that declares what its kernels replace
TORCH_DTYPES = {"f32": "float32", "bf16": "bfloat16"}


def make_model(dtype: str, seed: int):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(use_cache=False, attn_implementation="eager")
    return GPT2LMHeadModel(config).eval().to(getattr(torch, TORCH_DTYPES[dtype]))


def make_inputs(batch: int, seq: int, seed: int, dtype: str, vocab: int = 50257):
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    tdtype = getattr(torch, TORCH_DTYPES[dtype])
    causal = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
    mask = torch.zeros(batch, 1, seq, seq, dtype=tdtype).masked_fill(~causal, torch.finfo(tdtype).min)
    return ids, mask


def _logits(output):
    return output.logits.float()


# ----------------------------------------------------------------------------------------------
# CPU side
# ----------------------------------------------------------------------------------------------


def prepare(args) -> int:
    import torch

    from iree_dispatch.models.compiler import INPUT_FLAGS, compile_model, report_json
    from iree_dispatch.models.torch_export import export_mlir, parameter_names

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"batch": args.batch, "seq": args.seq, "seed": args.seed, "torch": torch.__version__, "dtypes": {}}
    kernels = [Path(k) for k in args.kernels] if args.kernels else KERNELS
    for dtype in args.dtypes.split(","):
        d = out / dtype
        d.mkdir(exist_ok=True)
        model = make_model(dtype, args.seed)
        ids, mask = make_inputs(args.batch, args.seq, args.seed, dtype)
        started = time.perf_counter()
        mlir = export_mlir(model, (ids,), d / "model.mlir", kwargs={"attention_mask": mask}, params_as_inputs=True, output=_logits)
        print(f"[{dtype}] export + import: {time.perf_counter() - started:.1f} s -> {mlir}", flush=True)
        params = [(n, list(p.shape), str(p.dtype)) for n, p in zip(parameter_names(model), (p for _, p in model.named_parameters()))]
        entry = {"parameters": params, "variants": {}}
        from iree.compiler.tools.binaries import find_tool

        started = time.perf_counter()
        flags = [*INPUT_FLAGS, "--iree-cuda-target=sm_80"]
        subprocess.run([find_tool("iree-compile"), *flags, str(mlir), "-o", str(d / "iree.vmfb")], check=True)
        print(f"[{dtype}] IREE alone: {time.perf_counter() - started:.1f} s", flush=True)
        entry["variants"]["iree"] = {"vmfb": "iree.vmfb", "device": "cuda", "what": "IREE alone"}
        variants = [("subst", False)] + ([("subst_wide", True)] if dtype != "f32" else [])
        for name, wide in variants:
            started = time.perf_counter()
            report = compile_model(mlir, kernels, d / f"{name}.vmfb", allow_wider_accumulation=wide, program=d / f"{name}.program.mlir")
            (d / f"{name}.report.txt").write_text(report.text())
            (d / f"{name}.report.json").write_text(report_json(report))
            print(f"[{dtype}] {name}: {time.perf_counter() - started:.1f} s; {report.kernel_counts()}; {report.counts()}", flush=True)
            what = "IREE + our kernels" + (" (--allow-wider-accumulation)" if wide else "")
            entry["variants"][name] = {"vmfb": f"{name}.vmfb", "device": "cuda", "what": what, "counts": report.counts(), "kernels": report.kernel_counts()}
        if args.cpu_check:  # the run side's code path, checked on this machine (IREE alone on the CPU)
            cpu = [find_tool("iree-compile"), "--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
            subprocess.run([*cpu, str(mlir), "-o", str(d / "iree_cpu.vmfb")], check=True)
            entry["variants"]["iree_cpu"] = {"vmfb": "iree_cpu.vmfb", "device": "local-task", "what": "IREE alone on the CPU (check)"}
        (d / "model.mlir").unlink() if not args.keep_mlir else None
        meta["dtypes"][dtype] = entry
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    if args.wheels:
        _copy_wheels(out / "whl")
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{out}: {total / 2**20:.1f} MiB")
    return 0


def _copy_wheels(folder: Path) -> None:
    """The IREE runtime and ml_dtypes wheels for the GPU machine's Python 3.12 (no network there)."""
    folder.mkdir(parents=True, exist_ok=True)
    from importlib.metadata import version

    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12", "--platform", "manylinux_2_28_x86_64", "-d", str(folder)]
    subprocess.run([*cmd, f"iree-base-runtime=={version('iree-base-runtime')}", f"ml_dtypes=={version('ml_dtypes')}"], check=True)


# ----------------------------------------------------------------------------------------------
# GPU side
# ----------------------------------------------------------------------------------------------


def _to_numpy(t):
    import ml_dtypes
    import torch

    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _errors(x, ref) -> dict:
    import torch

    diff = (x - ref).abs()
    return {
        "max_rel": float(diff.max() / ref.abs().max()),
        "mean_abs": float(diff.mean()),
        "top1_agree": float((x.argmax(-1) == ref.argmax(-1)).float().mean()),
        "finite": bool(torch.isfinite(x).all()),
    }


def _median(samples) -> float:
    s = sorted(samples)
    return s[len(s) // 2]


def run(args) -> int:
    import torch

    folder = Path(args.dir)
    meta = json.loads((folder / "meta.json").read_text())
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    results = {"meta": {k: v for k, v in meta.items() if k != "dtypes"}, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "runs": {}}
    results["meta"]["run_torch"] = torch.__version__
    if args.iree_flags:
        import iree.runtime as ireert

        ireert.flags.parse_flags(*args.iree_flags.split())
        results["meta"]["iree_flags"] = args.iree_flags
    results["meta"]["iree_device"] = "IREE's defaults" if args.iree_device else "iree_dispatch's (runtime/devices.py)"
    wanted = set(args.dtypes.split(",")) if args.dtypes else None
    for dtype, entry in meta["dtypes"].items():
        if wanted is not None and dtype not in wanted:
            continue
        model = make_model(dtype, meta["seed"]).to(dev)
        names = [n for n, _ in model.named_parameters()]
        shapes = [(n, list(p.shape), str(p.dtype)) for n, p in model.named_parameters()]
        if [tuple(p) for p in entry["parameters"]] != [tuple(p) for p in shapes]:
            raise SystemExit(f"[{dtype}] the model's parameters differ from the exported ones (transformers version?): {len(names)} vs {len(entry['parameters'])}")
        ids, mask = make_inputs(meta["batch"], meta["seq"], meta["seed"], dtype)
        ids, mask = ids.to(dev), mask.to(dev)
        out: dict = {}
        results["runs"][dtype] = out
        with torch.no_grad():
            reference = make_model("f32", meta["seed"]).to(dev)
            reference.load_state_dict({k: v.float() for k, v in model.state_dict().items()})  # the same (rounded) weights in f32
            ref_mask = mask.float().clamp(min=torch.finfo(torch.float32).min)
            ref = _logits(reference(ids))  # transformers' own causal mask: what the explicit one says
            # PyTorch gets the explicit mask too where this transformers version takes a 4-D mask as
            # given (the same logits as its own causal mask); otherwise none (its own causal mask).
            try:
                torch_mask = mask if torch.allclose(_logits(reference(ids, attention_mask=ref_mask)), ref, rtol=1e-4, atol=1e-4) else None
            except Exception:  # noqa: BLE001 - an older transformers that refuses 4-D masks
                torch_mask = None
            results["meta"][f"torch_mask_{dtype}"] = "explicit 4-D" if torch_mask is not None else "transformers' causal mask (the explicit one is not taken as given here)"
            del reference

            def eager():
                return _logits(model(ids, attention_mask=torch_mask))

            out["torch_eager"] = _time_torch(eager, ref, args.iters, dev)
            print(f"[{dtype}] torch eager: {out['torch_eager']}", flush=True)
            if not args.no_compile:
                try:
                    compiled = torch.compile(model)
                    out["torch_compile"] = _time_torch(lambda: _logits(compiled(ids, attention_mask=torch_mask)), ref, args.iters, dev)
                except Exception as exc:  # noqa: BLE001 - a peer we report, not depend on
                    out["torch_compile"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                print(f"[{dtype}] torch.compile: {out['torch_compile']}", flush=True)
        host_args = [_to_numpy(ids), _to_numpy(mask), *(_to_numpy(p) for p in model.parameters())]
        for name, variant in entry["variants"].items():
            if (variant["device"] == "cuda") != (dev == "cuda"):
                continue
            try:
                ours = [k.split(".", 1)[1] for k in variant.get("kernels", {})]
                trace = Path(args.out) / f"trace_{dtype}_{name}.json.gz" if args.traces else None
                out[name] = _time_iree(folder / dtype / variant["vmfb"], variant["device"], host_args, ref, args.iters, not args.no_profile, ours, trace, args.iree_device)
            except Exception as exc:  # noqa: BLE001 - one variant failing must not hide the others
                out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
            out[name]["what"] = variant["what"]
            if "kernels" in variant:
                out[name]["kernels"], out[name]["counts"] = variant["kernels"], variant["counts"]
            print(f"[{dtype}] {name}: {out[name]}", flush=True)
        model = ref = None  # free them before the next dtype
        if dev == "cuda":
            torch.cuda.empty_cache()
    dest = Path(args.out)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "model.json").write_text(json.dumps(results, indent=2) + "\n")
    (dest / "model.md").write_text(table(results))
    plot(results, dest / "model.png")
    print(table(results))
    return 0


def _time_torch(fn, ref, iters: int, dev: str) -> dict:
    import torch

    x = fn()
    errors = _errors(x, ref)
    del x
    for _ in range(2):
        fn()
    times = []
    for _ in range(iters):
        if dev == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return {"ms": _median(times), "ms_min": min(times), **errors}


def _time_iree(vmfb: Path, device: str, host_args, ref, iters: int, profile: bool = False, ours: list[str] = (), trace: Path | None = None,
               iree_device: bool = False) -> dict:
    """One IREE variant's forward. On CUDA the module runs on iree_dispatch's device (its driver
    flags and output pool, docs/runtime.md), or with iree_device on one IREE creates with its
    own defaults."""
    import iree.runtime as ireert
    import torch

    if device == "cuda" and not iree_device:
        from iree_dispatch.runtime import devices

        config = ireert.Config(device=devices.device("cuda").hal)
    else:
        config = ireert.Config(device)
    module = ireert.load_vm_module(ireert.VmModule.mmap(config.vm_instance, str(vmfb)), config)
    args = [ireert.asdevicearray(config.device, a) for a in host_args]
    started = time.perf_counter()
    result = module.main(*args)
    first = time.perf_counter() - started
    logits = torch.from_numpy(result.to_host()).to(ref.device)
    errors = _errors(logits, ref)
    del logits, result
    for _ in range(2):
        module.main(*args)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        module.main(*args)  # synchronous: returns when the results are ready
        times.append((time.perf_counter() - t0) * 1e3)
    result = {"ms": _median(times), "ms_min": min(times), "first_call_ms": first * 1e3, **errors}
    if profile and device == "cuda":
        try:
            result["gpu_kernels"] = _kernel_breakdown(lambda: module.main(*args), ours, trace)
        except Exception as exc:  # noqa: BLE001 - the breakdown is extra; the timing stands
            result["gpu_kernels_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return result


def _kernel_breakdown(call, ours: list[str], trace: Path | None = None) -> dict:
    """GPU time of one call by kernel (CUPTI through torch.profiler): ours (by entry name) and
    IREE's own dispatches, in ms, with the eight longest kernels; and where the forward's wall
    time goes besides kernels: the span from the call to its last kernel's end, the idle time
    between kernels (gaps), the host time before the first kernel, the largest gaps with the
    kernels around them. `trace`: also write the chrome trace there (gzip)."""
    import gzip
    import tempfile

    from torch.profiler import ProfilerActivity, profile, record_function

    call()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function(_FORWARD):
            call()
    totals: dict[str, float] = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None)
        if t is None:
            t = getattr(e, "cuda_time_total", 0.0)
        if t:
            totals[e.key] = totals.get(e.key, 0.0) + t / 1e3
    mine = {k: v for k, v in totals.items() if any(k == name or k.startswith(name + "(") for name in ours)}
    result = {
        "total_ms": sum(totals.values()),
        "ours_ms": sum(mine.values()),
        "iree_ms": sum(totals.values()) - sum(mine.values()),
        "top": dict(sorted(totals.items(), key=lambda kv: -kv[1])[:8]),
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
        if trace is not None:
            trace.parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(trace, "wt") as f:
                json.dump(events, f)
    result["timeline"] = _timeline(events)
    return result


_FORWARD = "forward"  # the profiled call's range in the trace


def _timeline(events: list) -> dict:
    """Where the wall time of one profiled call goes, in ms: GPU activities (kernels, copies,
    fills), the gaps between them, and the host time before the first and after the last."""
    gpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
    if not gpu:
        return {}
    launches = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cuda_driver", "cuda_runtime")]
    gaps = []
    end = gpu[0]["ts"] + gpu[0]["dur"]
    for prev, e in zip(gpu, gpu[1:]):
        if e["ts"] > end:
            gaps.append((e["ts"] - end, prev["name"][:60], e["name"][:60]))
        end = max(end, e["ts"] + e["dur"])
    forward = next((e for e in events if e.get("ph") == "X" and e.get("name") == _FORWARD and e.get("cat") == "user_annotation"), None)
    by_api: dict[str, list] = {}
    for e in launches:
        by_api.setdefault(e["name"], []).append(e["dur"])
    return {
        "gpu_activities": len(gpu),
        "busy_ms": sum(e["dur"] for e in gpu) / 1e3,
        "span_ms": (end - gpu[0]["ts"]) / 1e3,
        "gaps_ms": sum(g[0] for g in gaps) / 1e3,
        "gaps_over_10us": sum(1 for g in gaps if g[0] > 10),
        "call_ms": forward["dur"] / 1e3 if forward else None,
        "before_first_gpu_ms": (gpu[0]["ts"] - forward["ts"]) / 1e3 if forward else None,
        "after_last_gpu_ms": (forward["ts"] + forward["dur"] - end) / 1e3 if forward else None,
        "largest_gaps": [{"us": round(g[0], 1), "after": g[1], "before": g[2]} for g in sorted(gaps, reverse=True)[:12]],
        "host_api": {k: {"calls": len(v), "ms": round(sum(v) / 1e3, 3)} for k, v in sorted(by_api.items(), key=lambda kv: -sum(kv[1]))[:8]},
    }


def table(results: dict) -> str:
    m = results["meta"]
    lines = [f"GPT-2 small, batch {m['batch']} x {m['seq']} tokens, seed {m['seed']}, on {results['device']}", ""]
    lines.append("| dtype | implementation | forward ms (median) | vs eager | max err / max ref | top-1 agree | GPU ms: ours + IREE's | replaced |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---|")
    for dtype, runs in results["runs"].items():
        eager = runs.get("torch_eager", {}).get("ms")
        for name, r in runs.items():
            if "error" in r:
                lines.append(f"| {dtype} | {r.get('what', name)} | failed: {r['error'][:80]} | | | | | |")
                continue
            speed = f"{eager / r['ms']:.2f}x" if eager else ""
            kernels = ", ".join(f"{k.split('.')[-1]} x{n}" for k, n in r.get("kernels", {}).items())
            k = r.get("gpu_kernels")
            split = f"{k['ours_ms']:.2f} + {k['iree_ms']:.2f}" if k else ""
            lines.append(f"| {dtype} | {r.get('what', name)} | {r['ms']:.2f} | {speed} | {r['max_rel']:.2e} | {r['top1_agree'] * 100:.2f}% | {split} | {kernels} |")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    """Forward time per implementation and dtype, bars; the IREE variants' bars split into the
    GPU time of our kernels, of IREE's own, and the rest of the call. Skipped without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plot", flush=True)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results["runs"]
    fig, axes = plt.subplots(1, len(runs), figsize=(6.5 * len(runs), 4.2), squeeze=False)
    for ax, (dtype, variants) in zip(axes[0], runs.items()):
        names = [n for n, r in variants.items() if "ms" in r]
        labels = [variants[n].get("what", n).replace("IREE + our kernels (--allow-wider-accumulation)", "IREE + ours, wider")
                  .replace("IREE + our kernels", "IREE + ours").replace("torch_eager", "PyTorch eager").replace("torch_compile", "torch.compile") for n in names]
        labelled: set[str] = set()

        def once(label: str) -> str | None:  # each legend entry once
            if label in labelled:
                return None
            labelled.add(label)
            return label

        for i, n in enumerate(names):
            r = variants[n]
            k = r.get("gpu_kernels")
            if k:
                rest = max(r["ms"] - k["total_ms"], 0.0)
                ax.barh(i, k["ours_ms"], color="tab:green", label=once("our kernels (GPU)"))
                ax.barh(i, k["iree_ms"], left=k["ours_ms"], color="tab:blue", label=once("IREE's kernels (GPU)"))
                ax.barh(i, rest, left=k["total_ms"], color="lightgray", label=once("rest of the call"))
            else:
                ax.barh(i, r["ms"], color="tab:orange", label=once("PyTorch (CUDA events)"))
            ax.text(r["ms"], i, f" {r['ms']:.1f}", va="center", fontsize=8)
        ax.set_yticks(range(len(names)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("forward, ms (median)")
        m = results["meta"]
        ax.set_title(f"GPT-2 small {dtype}, {m['batch']} x {m['seq']} tokens, {results['device']}", fontsize=9)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def replot(args) -> int:
    results = json.loads(Path(args.json).read_text())
    plot(results, Path(args.out))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("prepare", help="CPU side: export, substitute, compile")
    a.add_argument("--out", default="build/model-gpu")
    a.add_argument("--batch", type=int, default=8)
    a.add_argument("--seq", type=int, default=1024)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--dtypes", default="f32,bf16")
    a.add_argument("--kernels", action="append", help="kernel specs or folders of them (default: kernels/, the kernel library)")
    a.add_argument("--cpu-check", action="store_true", help="also compile IREE alone for the CPU, to check the run side here")
    a.add_argument("--keep-mlir", action="store_true", help="keep the exported model.mlir")
    a.add_argument("--wheels", action="store_true", help="also download the runtime and ml_dtypes wheels for the GPU machine into OUT/whl")
    a.set_defaults(func=prepare)
    r = sub.add_parser("run", help="GPU side: time and compare")
    r.add_argument("--dir", default="build/model-gpu")
    r.add_argument("--out", default="build/model-results")
    r.add_argument("--iters", type=int, default=20)
    r.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    r.add_argument("--no-profile", action="store_true", help="skip the per-kernel GPU time breakdown of the IREE variants (CUPTI)")
    r.add_argument("--dtypes", help="only these of the prepared dtypes (e.g. bf16)")
    r.add_argument("--traces", action="store_true", help="also write each IREE variant's profiled forward as a chrome trace (OUT/trace_DTYPE_VARIANT.json.gz)")
    r.add_argument("--iree-device", action="store_true",
                   help="run the IREE variants on a device IREE creates with its defaults instead of iree_dispatch's (its driver flags and output pool)")
    r.add_argument("--iree-flags", default="", help="IREE runtime flags for every IREE variant, e.g. '--cuda_use_streams=false'")
    r.set_defaults(func=run)
    g = sub.add_parser("plot", help="the plot again from a model.json")
    g.add_argument("json")
    g.add_argument("--out", default="model.png")
    g.set_defaults(func=replot)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
