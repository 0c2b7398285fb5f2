"""Three model families through IREE alone, through IREE with our kernels substituted, and in PyTorch.

Two sides, as the other benchmarks (docs/models.md, "Model benchmark"):

    # CPU side (torch, transformers, iree-base-compiler, nvcc): export, substitute, compile
    python benchmarks/model.py prepare --out build/model-gpu [--models gpt2,llama,bert --dtypes bf16,f32 --wheels]
    # GPU side (torch, transformers, numpy, ml_dtypes, iree-base-runtime; no compiler):
    python3 benchmarks/model.py run --dir build/model-gpu --out RESULTS

The families (`FAMILIES`), configurations in code, random weights from a seed, no downloads:
GPT-2 small (GPT2LMHeadModel, its default configuration, batch 8 x 1024), a Llama-style decoder
(LlamaForCausalLM: 8 layers, hidden 1024, 16 query heads over 4 key/value heads of 64, SwiGLU of
2816, RMSNorm, rotary embeddings; batch 4 x 1024) and BERT-base (BertModel, its default
configuration without the pooler, batch 16 x 512 with a [B, S] padding `attention_mask`). Each is
exported as users export them: transformers' default attention (SDPA), the masks transformers
builds inside the model (the LMs from the token ids alone, BERT from its padding mask), and
`export_mlir(..., params_as_globals=True)`: the parameters are module globals read from IREE
parameters, so the vmfbs hold no weights; the GPU side rebuilds the same weights from the seed,
gives torch the model and each IREE variant the same weights as parameters (copied to the device
once, at load), and every implementation the same inputs. A call takes the token ids (and BERT's
mask) only, as the torch model's forward does. The outputs (the LMs' logits, BERT's
last_hidden_state) are returned as float32.

`run` compares, per model and dtype: PyTorch eager and torch.compile (default mode), both with
SDPA attention, IREE alone, and IREE with the kernel library (strict numerics, and
--allow-wider-accumulation): forward time, every implementation timed the same way (the wall time
of a call that returns when the output is ready: IREE's synchronous call, torch's forward and a
synchronize; the median of --iters calls after warm-up, taken over --rounds rounds in which the
implementations take turns; torch's CUDA-event time is reported beside) and the error against a float32 PyTorch run with the same
(rounded) weights: for the LMs max |diff| / max |ref| of the logits and the share of positions
whose top-1 token agrees; for BERT the cosine similarity of the tokens' hidden states (of all
of them, and the lowest of one token) and max |diff| / max |ref|, over the tokens that are not
padding.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = [ROOT / "kernels"]  # the kernel library: every spec in it that declares what its kernels replace
TORCH_DTYPES = {"f32": "float32", "bf16": "bfloat16"}
TINY_BATCH, TINY_SEQ = 2, 16  # --tiny: a few layers of small width, to check both sides on a CPU


@dataclass(frozen=True)
class Family:
    """One model family: how to build it (f32, from the caller's seed), its input and output."""

    name: str
    title: str
    batch: int
    seq: int
    dtypes: tuple[str, ...]  # exported in these
    padded: bool  # takes a [B, S] padding attention_mask (1: a token, 0: padding) after the ids
    output: str  # "logits" (an LM: top-1 agreement) or "hidden" (an encoder: cosine similarity)
    build: Callable[[bool], object]  # tiny -> the model, f32, in eval mode

    def output_of(self, out):
        return (out.logits if self.output == "logits" else out.last_hidden_state).float()


def _gpt2(tiny: bool):
    from transformers import GPT2Config, GPT2LMHeadModel

    size = {"n_layer": 2, "n_head": 4, "n_embd": 256, "n_positions": 64, "vocab_size": 1000,
            "bos_token_id": 0, "eos_token_id": 0} if tiny else {}
    return GPT2LMHeadModel(GPT2Config(use_cache=False, **size)).eval()


def _llama(tiny: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    size = ({"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
             "max_position_embeddings": 64, "vocab_size": 1000} if tiny else
            {"num_hidden_layers": 8, "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4, "intermediate_size": 2816,
             "max_position_embeddings": 2048, "vocab_size": 32000})
    return LlamaForCausalLM(LlamaConfig(head_dim=64, use_cache=False, **size)).eval()


def _bert(tiny: bool):
    from transformers import BertConfig, BertModel

    size = {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 512, "max_position_embeddings": 64,
            "vocab_size": 1000} if tiny else {}
    # The pooler is left out: last_hidden_state is the output, and its weights would be unused arguments
    return BertModel(BertConfig(**size), add_pooling_layer=False).eval()


FAMILIES = {f.name: f for f in (
    Family("gpt2", "GPT-2 small", 8, 1024, ("bf16",), False, "logits", _gpt2),
    Family("llama", "Llama-style, 8 layers, hidden 1024, GQA 16/4", 4, 1024, ("bf16",), False, "logits", _llama),
    Family("bert", "BERT-base, padded", 16, 512, ("bf16", "f32"), True, "hidden", _bert),
)}


def make_model(family: Family, dtype: str, seed: int, tiny: bool = False):
    """The family's model with weights from `seed`, in `dtype` as `from_pretrained(..., dtype=...)`
    leaves it: parameters in `dtype`, non-persistent float buffers (Llama's rotary frequencies,
    computed in f32 by transformers) in f32. Built on the CPU, so both sides draw the same weights."""
    import torch

    torch.manual_seed(seed)
    model = family.build(tiny).to(getattr(torch, TORCH_DTYPES[dtype]))
    for module in model.modules():
        for name, buffer in module.named_buffers(recurse=False):
            if name in module._non_persistent_buffers_set and buffer.is_floating_point():
                setattr(module, name, buffer.float())
    return model


def make_inputs(family: Family, batch: int, seq: int, seed: int, vocab: int):
    """Token ids [B, S], and for a padded family a padding mask [B, S]: the first sequence full,
    the others of a random length between S/2 and S (right padding, as tokenizers pad BERT)."""
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    if not family.padded:
        return ids, None
    lengths = torch.randint(seq // 2, seq + 1, (batch,), generator=g)
    lengths[0] = seq
    return ids, (torch.arange(seq)[None, :] < lengths[:, None]).long()


def _sizes(family: Family, tiny: bool) -> tuple[int, int]:
    return (TINY_BATCH, TINY_SEQ) if tiny else (family.batch, family.seq)


def _selected(names: str) -> list[Family]:
    unknown = [n for n in names.split(",") if n not in FAMILIES]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; the families are {', '.join(FAMILIES)}")
    return [FAMILIES[n] for n in names.split(",")]


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:500]}"


# ----------------------------------------------------------------------------------------------
# CPU side
# ----------------------------------------------------------------------------------------------


def prepare(args) -> int:
    """Every selected family in every dtype it is exported in (and --dtypes allows), each one's
    failure recorded in meta.json and printed, the others prepared all the same."""
    families = _selected(args.models)  # a misspelt name fails before the slow imports
    import torch
    import transformers

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"seed": args.seed, "tiny": args.tiny, "torch": torch.__version__, "transformers": transformers.__version__, "models": {}}
    kernels = [Path(k) for k in args.kernels] if args.kernels else KERNELS
    wanted = set(args.dtypes.split(","))
    for family in families:
        batch, seq = _sizes(family, args.tiny)
        entry: dict = {"batch": batch, "seq": seq, "dtypes": {}}
        meta["models"][family.name] = entry
        for dtype in (d for d in family.dtypes if d in wanted):
            started = time.perf_counter()
            try:
                entry["dtypes"][dtype] = _prepare_one(family, dtype, batch, seq, args, kernels, out / family.name / dtype)
            except Exception as exc:  # noqa: BLE001 - one model failing must not stop the others
                traceback.print_exc()
                entry["dtypes"][dtype] = {"error": _error_text(exc)}
            print(f"[{family.name} {dtype}] {time.perf_counter() - started:.0f} s", flush=True)
            (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")  # what is done so far, should a later model hang
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    if args.wheels:
        _copy_wheels(out / "whl")
    for sub in sorted(p for p in out.iterdir() if p.is_dir()):
        print(f"{sub}: {_mib(sub):.1f} MiB")
    print(f"{out}: {_mib(out):.1f} MiB")
    return 0


def _mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def _prepare_one(family: Family, dtype: str, batch: int, seq: int, args, kernels: list[Path], d: Path) -> dict:
    """Exports one family in one dtype into `d` and compiles it: IREE alone, with the kernel
    library strict and with --allow-wider-accumulation; with --cpu-check also IREE
    alone for the CPU. Returns its meta.json entry."""
    from iree.compiler.tools.binaries import find_tool

    from iree_dispatch.models.compiler import INPUT_FLAGS, compile_model, report_json
    from iree_dispatch.models.torch_export import export_mlir

    tag = f"[{family.name} {dtype}]"
    d.mkdir(parents=True, exist_ok=True)
    model = make_model(family, dtype, args.seed, args.tiny)
    ids, padding = make_inputs(family, batch, seq, args.seed, model.config.vocab_size)
    started = time.perf_counter()
    kwargs = {"attention_mask": padding} if family.padded else {}
    mlir = export_mlir(model, (ids,), d / "model.mlir", kwargs=kwargs, params_as_globals=True, output=family.output_of)
    print(f"{tag} export + import: {time.perf_counter() - started:.1f} s -> {mlir} ({mlir.stat().st_size / 2**20:.1f} MiB)", flush=True)
    entry: dict = {"parameters": [(n, list(p.shape), str(p.dtype)) for n, p in model.named_parameters()], "variants": {}}
    del model

    started = time.perf_counter()
    subprocess.run([find_tool("iree-compile"), *INPUT_FLAGS, "--iree-cuda-target=sm_80", str(mlir), "-o", str(d / "iree.vmfb")], check=True)
    print(f"{tag} IREE alone: {time.perf_counter() - started:.1f} s", flush=True)
    entry["variants"]["iree"] = {"vmfb": "iree.vmfb", "device": "cuda", "what": "IREE alone"}
    builds = [("subst", False, False), ("subst_wide", True, False)]
    if args.per_call_transients:  # the best build again, its transients allocated by IREE at each call
        builds.append((builds[-1][0] + "_per_call", builds[-1][1], True))
    for name, wide, per_call in builds:
        started = time.perf_counter()
        try:
            program = d / f"{name}.program.mlir" if args.keep_mlir else None
            report = compile_model(mlir, kernels, d / f"{name}.vmfb", allow_wider_accumulation=wide, per_call_transients=per_call, program=program)
        except Exception as exc:  # noqa: BLE001 - IREE alone and the other variant still run
            traceback.print_exc()
            entry["variants"][name] = {"error": _error_text(exc)}
            continue
        (d / f"{name}.report.txt").write_text(report.text())
        (d / f"{name}.report.json").write_text(report_json(report))
        print(f"{tag} {name}: {time.perf_counter() - started:.1f} s; {report.kernel_counts()}; {report.counts()}", flush=True)
        what = "IREE + our kernels" + (" (--allow-wider-accumulation)" if wide else "") + (", transients allocated at each call" if per_call else "")
        entry["variants"][name] = {"vmfb": f"{name}.vmfb", "device": "cuda", "what": what, "counts": report.counts(), "kernels": report.kernel_counts()}
    if args.cpu_check:  # the run side's code path, checked on this machine (IREE alone on the CPU)
        cpu = [find_tool("iree-compile"), "--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
        subprocess.run([*cpu, str(mlir), "-o", str(d / "iree_cpu.vmfb")], check=True)
        entry["variants"]["iree_cpu"] = {"vmfb": "iree_cpu.vmfb", "device": "local-task", "what": "IREE alone on the CPU (check)"}
    if not args.keep_mlir:
        mlir.unlink()
    return entry


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


def _errors(family: Family, x, ref, padding) -> dict:
    """x against the float32 reference ref: the LMs' logits by max relative error and top-1
    agreement; an encoder's hidden states, of the tokens that are not padding, by cosine
    similarity (of them all as one vector, and the lowest of one token) and max relative error."""
    import torch

    finite = bool(torch.isfinite(x).all())
    if family.output == "hidden" and padding is not None:
        keep = padding.bool()
        x, ref = x[keep], ref[keep]  # [tokens, hidden]: a padded position's output is whatever an implementation makes of it
    x, ref = x.double(), ref.double()
    diff = (x - ref).abs()
    errors = {"max_rel": float(diff.max() / ref.abs().max()), "mean_abs": float(diff.mean()), "finite": finite}
    if family.output == "logits":
        errors["top1_agree"] = float((x.argmax(-1) == ref.argmax(-1)).float().mean())
    else:
        flat = torch.nn.functional.cosine_similarity(x.flatten(), ref.flatten(), dim=0)
        errors["cosine"] = float(flat)
        errors["cosine_min"] = float(torch.nn.functional.cosine_similarity(x, ref, dim=-1).min())
    return errors


def _median(samples) -> float:
    s = sorted(samples)
    return s[len(s) // 2]


def run(args) -> int:
    """Every prepared family (or those --models name), each in a process of its own: a failure,
    even one that leaves the GPU unusable, or a model over --time-limit, is reported in its place
    and the next model runs on a fresh CUDA context. Each child writes what it has measured after
    every implementation, so a child killed at the time limit loses only the one it was running."""
    import multiprocessing

    folder = Path(args.dir)
    meta = json.loads((folder / "meta.json").read_text())
    results: dict = {"meta": {k: v for k, v in meta.items() if k != "models"}, "device": None, "models": {}}
    results["meta"].update({"iters": args.iters, "rounds": args.rounds, "time_limit_s": args.time_limit, "iree_flags": args.iree_flags,
                            "iree_device": "IREE's defaults" if args.iree_device else "iree_dispatch's (runtime/devices.py)",
                            "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "driver": _driver_version()})
    wanted_models = set(args.models.split(",")) if args.models else None
    if wanted_models is not None and not wanted_models <= set(meta["models"]):
        raise SystemExit(f"not prepared in {folder}: {', '.join(sorted(wanted_models - set(meta['models'])))}; prepared: {', '.join(meta['models'])}")
    wanted_dtypes = set(args.dtypes.split(",")) if args.dtypes else None
    dest = Path(args.out)
    dest.mkdir(parents=True, exist_ok=True)
    if args.keep_others and (dest / "model.json").exists():  # one table over several calls: this call's models replace theirs
        results["models"] = json.loads((dest / "model.json").read_text())["models"]
    child_args = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "func"})
    for name, entry in meta["models"].items():
        if wanted_models is not None and name not in wanted_models:
            continue
        partial = dest / f".{name}.partial.json"
        partial.unlink(missing_ok=True)
        child = multiprocessing.get_context("spawn").Process(target=_run_model, args=(child_args, name, partial))
        child.start()
        child.join(args.time_limit + 60)  # the child's own deadline, checked between implementations, plus a minute
        ended = None
        if child.is_alive():
            child.kill()
            child.join()
            ended = f"killed after the time limit of {args.time_limit:.0f} s"
        elif child.exitcode != 0:
            ended = f"its process exited with status {child.exitcode}"
        got = json.loads(partial.read_text()) if partial.exists() else {}
        partial.unlink(missing_ok=True)
        results["device"] = got.get("device", results["device"])
        results["meta"]["run_torch"] = got.get("torch", results["meta"].get("run_torch"))
        done = got.get("model") or {"title": FAMILIES[name].title, "batch": entry["batch"], "seq": entry["seq"], "dtypes": {}}
        done["device"] = got.get("device")
        for dtype in entry["dtypes"]:
            if (wanted_dtypes is None or dtype in wanted_dtypes) and ended:
                runs = done["dtypes"].setdefault(dtype, {})
                if not any(isinstance(r, dict) and "ms" in r for r in runs.values()):
                    runs["error"] = ended
        if ended:
            done["ended"] = ended
            print(f"[{name}] {ended}", flush=True)
        kept = results["models"].get(name, {}).get("dtypes", {})  # --keep-others: the dtypes not run this time stay
        done["dtypes"] = {**{d: r for d, r in kept.items() if wanted_dtypes is not None and d not in wanted_dtypes}, **done["dtypes"]}
        results["models"][name] = done
        (dest / "model.json").write_text(json.dumps(results, indent=2) + "\n")  # what is measured so far
    (dest / "model.md").write_text(table(results))
    plot(results, dest / "model.png")
    print(table(results))
    return 0


def _driver_version() -> str:
    """The NVIDIA driver's version (nvidia-smi), or "none" on a machine without one."""
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True,
                              check=True).stdout.split()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "none"


def _run_model(args, name: str, partial: Path) -> None:
    """One family, every prepared dtype (or those --dtypes name), in the child process `run`
    starts: its results go to `partial` (JSON) after every implementation."""
    import torch

    folder = Path(args.dir)
    meta = json.loads((folder / "meta.json").read_text())
    entry, family = meta["models"][name], FAMILIES[name]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if args.iree_flags:
        import iree.runtime as ireert

        ireert.flags.parse_flags(*args.iree_flags.split())
    done: dict = {"title": family.title + (" (--tiny)" if meta.get("tiny") else ""), "batch": entry["batch"], "seq": entry["seq"], "dtypes": {}}
    out = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "torch": torch.__version__, "model": done}

    def save() -> None:
        partial.write_text(json.dumps(out, indent=1))

    deadline = time.monotonic() + args.time_limit
    wanted_dtypes = set(args.dtypes.split(",")) if args.dtypes else None
    for dtype, prepared in entry["dtypes"].items():
        if wanted_dtypes is not None and dtype not in wanted_dtypes:
            continue
        if "error" in prepared:
            done["dtypes"][dtype] = {"error": f"prepare: {prepared['error']}"}
            continue
        runs: dict = {}
        done["dtypes"][dtype] = runs
        try:
            _run_one(family, dtype, entry, prepared, meta, folder / name / dtype, runs, deadline, dev, args, save)
        except Exception as exc:  # noqa: BLE001 - the other dtype still runs
            traceback.print_exc()
            runs["error"] = _error_text(exc)
        finally:
            if dev == "cuda":
                torch._dynamo.reset()
                torch.cuda.empty_cache()
        save()
    save()


def _run_one(family: Family, dtype: str, entry: dict, prepared: dict, meta: dict, folder: Path, runs: dict, deadline: float, dev: str, args,
             save: Callable[[], None]) -> None:
    """Checks one family in one dtype into `runs` (`save` after each): PyTorch eager, torch.compile
    and the prepared IREE variants the device runs, each loaded and checked first, then all of them
    timed in alternating rounds, then the IREE variants' GPU time profiled; what the deadline
    leaves no time for is marked skipped."""
    import torch

    tag = f"[{family.name} {dtype}]"
    model = make_model(family, dtype, meta["seed"], meta.get("tiny", False))
    shapes = [(n, list(p.shape), str(p.dtype)) for n, p in model.named_parameters()]
    if [tuple(p) for p in prepared["parameters"]] != [tuple(p) for p in shapes]:
        raise RuntimeError(f"the model's parameters differ from the exported ones (transformers version?): {len(shapes)} vs {len(prepared['parameters'])}")
    ids, padding = make_inputs(family, entry["batch"], entry["seq"], meta["seed"], model.config.vocab_size)
    host_args = [_to_numpy(ids), *([_to_numpy(padding)] if padding is not None else [])]
    model = model.to(dev)
    ids = ids.to(dev)
    padding = padding.to(dev) if padding is not None else None
    kwargs = {"attention_mask": padding} if padding is not None else {}
    with torch.no_grad():
        reference = make_model(family, "f32", meta["seed"], meta.get("tiny", False)).to(dev)
        reference.load_state_dict({k: v.float() for k, v in model.state_dict().items()})  # the same (rounded) weights in f32
        ref = family.output_of(reference(ids, **kwargs))
        del reference

        def check(x):
            return _errors(family, x, ref, padding)

        contenders: list[_Contender] = []
        torch_runs = {"torch_eager": ("PyTorch eager (SDPA)", lambda: model)}
        if not args.no_compile:
            torch_runs["torch_compile"] = ("torch.compile (SDPA)", lambda: torch.compile(model))
        for name, (what, make) in torch_runs.items():
            if time.monotonic() > deadline:
                runs[name] = {"what": what, "skipped": f"over the time limit of {args.time_limit} s"}
                continue
            try:
                module = make()
                runs[name] = {"what": what}
                contender = _torch_contender(name, lambda m=module: family.output_of(m(ids, **kwargs)), runs[name], dev)
                runs[name].update(check(contender.call()))
                contenders.append(contender)
            except Exception as exc:  # noqa: BLE001 - a peer we report, not depend on
                runs[name] = {"what": what, "error": _error_text(exc)}
            print(f"{tag} {name}: {runs[name]}", flush=True)
            save()
        loaded: dict[str, _Loaded] = {}
        for name, variant in prepared["variants"].items():
            if "error" in variant:
                runs[name] = {"error": f"prepare: {variant['error']}", "what": name}
                continue
            if (variant["device"] == "cuda") != (dev == "cuda"):
                continue
            runs[name] = {"what": variant["what"]}
            if "kernels" in variant:
                runs[name]["kernels"], runs[name]["counts"] = variant["kernels"], variant["counts"]
            if time.monotonic() > deadline:
                runs[name]["skipped"] = f"over the time limit of {args.time_limit} s"
                continue
            try:
                loaded[name] = _load_iree(folder / variant["vmfb"], variant["device"], host_args, model, args.iree_device, loaded.values())
                started = time.perf_counter()
                output = loaded[name].call()
                runs[name]["first_call_ms"] = (time.perf_counter() - started) * 1e3
                runs[name].update(check(torch.from_numpy(output.to_host()).to(ref.device)))
                del output
                contenders.append(_Contender(name, loaded[name].call, runs[name]))
            except Exception as exc:  # noqa: BLE001 - one variant failing must not hide the others
                runs[name]["error"] = _error_text(exc)
            print(f"{tag} {name}: {runs[name]}", flush=True)
            save()
        _time_in_rounds(contenders, args.rounds, args.iters, deadline, f"over the time limit of {args.time_limit} s")
        for c in contenders:
            print(f"{tag} {c.name}: {c.result.get('ms', c.result.get('skipped'))} ms, rounds {c.result.get('rounds_ms')}", flush=True)
        save()
    if not args.no_profile and dev == "cuda":
        for name, iree in loaded.items():
            if "ms" not in runs[name] or time.monotonic() > deadline:
                continue
            try:
                ours = [k.split(".", 1)[1] for k in runs[name].get("kernels", {})]
                trace = Path(args.out) / f"trace_{family.name}_{dtype}_{name}.json.gz" if args.traces else None
                runs[name]["gpu_kernels"] = _kernel_breakdown(iree.call, ours, trace)
            except Exception as exc:  # noqa: BLE001 - the breakdown is extra; the timing stands
                runs[name]["gpu_kernels_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            save()


@dataclass
class _Contender:
    """One implementation of a forward being timed. `call` returns when its output is ready;
    torch's on CUDA also have `launch`, the forward without waiting, to time with CUDA events.
    `result` is its entry in the results."""

    name: str
    call: Callable[[], object]
    result: dict
    launch: Callable[[], object] | None = None


def _torch_contender(name: str, fn: Callable[[], object], result: dict, dev: str) -> _Contender:
    """fn as a contender whose call returns when the output is ready (the GPU's work done), as
    IREE's synchronous call does."""
    import torch

    if dev != "cuda":
        return _Contender(name, fn, result)

    def call():
        out = fn()
        torch.cuda.synchronize()
        return out

    return _Contender(name, call, result, launch=fn)


@dataclass
class _Loaded:
    """An IREE variant loaded on its device with its weights and inputs there; `call` is synchronous."""

    module: object
    config: object
    args: list
    weights: object  # the IREE module providing the model's weights as parameters
    device_key: tuple[str, bool]  # (IREE device name, IREE's own defaults): variants with the same key share the inputs and weights

    def call(self):
        return self.module.main(*self.args)


def _load_iree(vmfb: Path, device: str, host_args, model, iree_device: bool, others) -> _Loaded:
    """One IREE variant, with `model`'s weights as its parameters (copied to the device as it
    loads). On CUDA the module runs on iree_dispatch's device (its driver flags and output pool,
    docs/runtime.md), or with iree_device on one IREE creates with its own defaults. The inputs
    are copied to the device, and the weights to the host, once per device: a variant on the same
    device as one of `others` shares theirs."""
    import iree.runtime as ireert

    from iree_dispatch.models.torch_export import parameter_module

    same = next((o for o in others if o.device_key == (device, iree_device)), None)
    if same is not None:
        config, args, weights = same.config, same.args, same.weights
    else:
        if device == "cuda" and not iree_device:
            from iree_dispatch.runtime import devices

            config = ireert.Config(device=devices.device("cuda").hal)
        else:
            config = ireert.Config(device)
        args = [ireert.asdevicearray(config.device, a) for a in host_args]
        weights = parameter_module(model.named_parameters(), config.vm_instance)
    module = ireert.load_vm_modules(weights, ireert.VmModule.mmap(config.vm_instance, str(vmfb)), config=config)[-1]
    return _Loaded(module, config, args, weights, (device, iree_device))


def _time_in_rounds(contenders: list[_Contender], rounds: int, iters: int, deadline: float, late: str) -> None:
    """Times every contender the same way: the wall time of a call that returns when the output is
    ready (for torch, the forward and a synchronize), `iters` calls in all, over `rounds` rounds
    in which each contender in turn makes one warm-up call and iters / rounds timed ones, so that
    a drift of the GPU's clocks or of the host's load during the run falls on all alike. Into
    each result: `ms` (the median of all timed calls), `ms_min`, `rounds_ms` (each round's
    median) and, where the contender has `launch`, `events_ms`: the median time between CUDA
    events recorded before and after the forward (without the wait for its end). A round the
    deadline leaves no time for is not run."""
    import torch

    per_round = max(1, iters // rounds)
    walls: dict[str, list[float]] = {c.name: [] for c in contenders}
    events: dict[str, list[float]] = {c.name: [] for c in contenders}
    medians: dict[str, list[float]] = {c.name: [] for c in contenders}
    for c in contenders:
        for _ in range(2):
            c.call()
    for _ in range(rounds):
        if time.monotonic() > deadline:
            break
        for c in contenders:
            c.call()
            this_round = []
            for _ in range(per_round):
                t0 = time.perf_counter()
                if c.launch is None:
                    c.call()
                else:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    c.launch()
                    end.record()
                    torch.cuda.synchronize()
                this_round.append((time.perf_counter() - t0) * 1e3)
                if c.launch is not None:
                    events[c.name].append(start.elapsed_time(end))
            walls[c.name] += this_round
            medians[c.name].append(_median(this_round))
    for c in contenders:
        if not walls[c.name]:
            c.result["skipped"] = late
            continue
        c.result.update({"ms": _median(walls[c.name]), "ms_min": min(walls[c.name]), "rounds_ms": [round(m, 3) for m in medians[c.name]]})
        if events[c.name]:
            c.result["events_ms"] = _median(events[c.name])


def _kernel_breakdown(call, ours: list[str], trace: Path | None = None) -> dict:
    """GPU time of one call by kernel (CUPTI through torch.profiler): ours (by entry name) and
    IREE's own dispatches, in ms, with the eight longest kernels; and where the forward's wall
    time goes besides kernels (_timeline). Two calls are profiled and the second is the one
    reported: CUPTI asks for its activity buffers during the first launch it traces (hundreds of
    microseconds inside that cuLaunchKernel), which would read as a gap in the forward.
    `trace`: also write the chrome trace (both calls) there (gzip)."""
    import gzip
    import tempfile

    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function(_WARM_UP):
            call()
        with record_function(_FORWARD):
            call()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
        if trace is not None:
            trace.parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(trace, "wt") as f:
                json.dump(events, f)
    forward = next(e for e in events if e.get("ph") == "X" and e.get("name") == _FORWARD and e.get("cat") == "user_annotation")
    mine = _of_call(events, forward)
    totals: dict[str, float] = {}
    for e in mine:
        if e.get("cat") == "kernel":
            totals[e["name"]] = totals.get(e["name"], 0.0) + e["dur"] / 1e3
    ours_ms = sum(v for k, v in totals.items() if any(k == name or k.startswith(name + "(") for name in ours))
    return {
        "total_ms": sum(totals.values()),
        "ours_ms": ours_ms,
        "iree_ms": sum(totals.values()) - ours_ms,
        "top": dict(sorted(totals.items(), key=lambda kv: -kv[1])[:8]),
        "timeline": _timeline(mine, forward),
    }


_WARM_UP, _FORWARD = "warm-up", "forward"  # the profiled calls' ranges in the trace
_GPU = ("kernel", "gpu_memcpy", "gpu_memset")  # trace categories of GPU activities
_LAUNCH = ("cuda_driver", "cuda_runtime")  # and of the host calls that start them


def _correlation(event: dict):
    """The id CUPTI gives a host call and the GPU activity it started."""
    return event.get("args", {}).get("correlation")


def _of_call(events: list, forward: dict) -> list:
    """The trace's events of the profiled call `forward`: its launches (host calls inside its
    range) and the GPU activities they started (by correlation id)."""
    start, end = forward["ts"], forward["ts"] + forward["dur"]
    host = [e for e in events if e.get("ph") == "X" and e.get("cat") in _LAUNCH and start <= e["ts"] <= end]
    launched = {_correlation(e) for e in host}
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in _GPU and _correlation(e) in launched]
    return host + gpu


def _timeline(events: list, forward: dict) -> dict:
    """Where the wall time of one profiled call goes, in ms: GPU activities (kernels, copies,
    fills), the gaps between them, and the host time before the first and after the last. A gap
    is the host's when the next activity's launch returned after the previous activity ended (the
    GPU waited for the host), the GPU's otherwise (the launch was queued: the time one activity
    takes to follow another on a stream)."""
    gpu = sorted((e for e in events if e.get("cat") in _GPU), key=lambda e: e["ts"])
    if not gpu:
        return {}
    launches = [e for e in events if e.get("cat") in _LAUNCH]
    launch_end = {_correlation(e): e["ts"] + e["dur"] for e in launches}
    gaps = []
    end = gpu[0]["ts"] + gpu[0]["dur"]
    for prev, e in zip(gpu, gpu[1:]):
        if e["ts"] > end:
            host = launch_end.get(_correlation(e), 0.0) > end
            gaps.append((e["ts"] - end, host, prev["name"][:60], e["name"][:60]))
        end = max(end, e["ts"] + e["dur"])
    by_api: dict[str, list] = {}
    for e in launches:
        by_api.setdefault(e["name"], []).append(e["dur"])
    return {
        "gpu_activities": len(gpu),
        "busy_ms": sum(e["dur"] for e in gpu) / 1e3,
        "span_ms": (end - gpu[0]["ts"]) / 1e3,
        "gaps_ms": sum(g[0] for g in gaps) / 1e3,
        "host_gaps_ms": sum(g[0] for g in gaps if g[1]) / 1e3,
        "gpu_gaps_ms": sum(g[0] for g in gaps if not g[1]) / 1e3,
        "gaps_over_10us": sum(1 for g in gaps if g[0] > 10),
        "call_ms": forward["dur"] / 1e3,
        "before_first_gpu_ms": (gpu[0]["ts"] - forward["ts"]) / 1e3,
        "after_last_gpu_ms": (forward["ts"] + forward["dur"] - end) / 1e3,
        "largest_gaps": [{"us": round(g[0], 1), "host": g[1], "after": g[2], "before": g[3]} for g in sorted(gaps, reverse=True)[:12]],
        "host_api": {k: {"calls": len(v), "ms": round(sum(v) / 1e3, 3)} for k, v in sorted(by_api.items(), key=lambda kv: -sum(kv[1]))[:8]},
    }


SHORT = {"torch_eager": "PyTorch eager", "torch_compile": "torch.compile", "iree": "IREE alone", "subst": "ours", "subst_wide": "ours, wider",
         "subst_per_call": "ours, transients per call", "subst_wide_per_call": "ours, wider, transients per call", "iree_cpu": "IREE alone, CPU"}


def _error_cell(r: dict) -> str:
    if "top1_agree" in r:
        return f"max rel {r['max_rel']:.1e}, top-1 {r['top1_agree'] * 100:.2f}%"
    return f"cos {r['cosine']:.6f} (min {r['cosine_min']:.6f}), max rel {r['max_rel']:.1e}"


def _cases(results: dict):
    """(model name, its results, dtype, that dtype's runs) of every prepared case, in order."""
    for name, model in results["models"].items():
        for dtype, runs in model["dtypes"].items():
            yield name, model, dtype, runs


def table(results: dict) -> str:
    """A summary (each implementation's forward ms, torch.compile's time over ours) and the details
    (errors against the float32 reference, the GPU time split, the kernels each build calls)."""
    m = results["meta"]
    devices = sorted({model["device"] for model in results["models"].values() if model.get("device")}) or [results["device"]]
    rounds = f" over {m['rounds']} alternating rounds" if m.get("rounds") else ""
    lines = [f"On {' and '.join(map(str, devices))}, seed {m['seed']}, median of {m.get('iters')} forwards{rounds} (wall time of a call that returns with the output "
             f"ready; torch's CUDA-event time in parentheses below); torch {m.get('run_torch')}"
             + (f"; driver {m['driver']}, started {m['started']}" if m.get("started") else ""), ""]
    columns = [k for k in SHORT if any(k in runs for *_, runs in _cases(results))]  # the CPU check's column only where it ran
    head = " | ".join(f"{SHORT[k]} ms" for k in columns)
    lines += [f"| model | dtype | {head} | torch.compile / ours | torch.compile / ours, wider |", "|---|---|" + "---:|" * (len(columns) + 2)]
    for _name, model, dtype, runs in _cases(results):
        shape = f"{model['title']}, {model['batch']} x {model['seq']}"
        if "error" in runs:
            lines.append(f"| {shape} | {dtype} | failed: {runs['error'][:100]} |" + " |" * (len(columns) + 1))
            continue
        ms = {k: runs[k]["ms"] for k in columns if "ms" in runs.get(k, {})}
        cells = [f"{ms[k]:.2f}" if k in ms else _state(runs.get(k)) for k in columns]
        ratios = [f"{ms['torch_compile'] / ms[k]:.2f}x" if "torch_compile" in ms and k in ms else "" for k in ("subst", "subst_wide")]
        lines.append(f"| {shape} | {dtype} | {' | '.join(cells)} | {' | '.join(ratios)} |")
    lines += [f"\n{model['title']}: {model['ended']}" for model in results["models"].values() if "ended" in model]
    lines += ["", "| model | dtype | implementation | forward ms | error against float32 PyTorch | GPU ms: ours + IREE's | replaced |", "|---|---|---|---:|---|---:|---|"]
    for name, _model, dtype, runs in _cases(results):
        for key, r in runs.items():
            if not isinstance(r, dict):
                continue
            what = r.get("what", key)
            if "ms" not in r:
                lines.append(f"| {name} | {dtype} | {what} | {_state(r)} | | | |")
                continue
            k = r.get("gpu_kernels")
            split = f"{k['ours_ms']:.2f} + {k['iree_ms']:.2f}" if k else ""
            calls = r.get("kernels", {})
            names = [kernel.split(".")[-1] for kernel in calls]
            # module.function where two modules have a function of that name (gemm's and gemm_n128's)
            kernels = ", ".join(f"{kernel if names.count(name) > 1 else name} x{n}" for (kernel, n), name in zip(calls.items(), names))
            events = f" ({r['events_ms']:.2f})" if "events_ms" in r else ""
            lines.append(f"| {name} | {dtype} | {what} | {r['ms']:.2f}{events} | {_error_cell(r)} | {split} | {kernels} |")
    return "\n".join(lines) + "\n"


def _state(r: dict | None) -> str:
    if r is None:
        return ""
    if "skipped" in r:
        return "skipped"
    return f"failed: {r.get('error', '?')[:80]}"


def plot(results: dict, path: Path) -> None:
    """Forward time per implementation, one panel per model and dtype; the IREE variants' bars
    split into the GPU time of our kernels, of IREE's own, and the rest of the call. Skipped
    without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plot", flush=True)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [c for c in _cases(results) if any("ms" in r for r in c[3].values() if isinstance(r, dict))]
    if not cases:
        return
    fig, axes = plt.subplots(len(cases), 1, figsize=(8, 2.6 * len(cases)), squeeze=False)
    labelled: set[str] = set()

    def once(label: str) -> str | None:  # each legend entry once
        if label in labelled:
            return None
        labelled.add(label)
        return label

    for ax, (_name, model, dtype, runs) in zip(axes[:, 0], cases):
        names = [n for n, r in runs.items() if isinstance(r, dict) and "ms" in r]
        for i, n in enumerate(names):
            r = runs[n]
            k = r.get("gpu_kernels")
            if k:
                rest = max(r["ms"] - k["total_ms"], 0.0)
                ax.barh(i, k["ours_ms"], color="tab:green", label=once("our kernels (GPU)"))
                ax.barh(i, k["iree_ms"], left=k["ours_ms"], color="tab:blue", label=once("IREE's kernels (GPU)"))
                ax.barh(i, rest, left=k["total_ms"], color="lightgray", label=once("rest of the call"))
            elif n.startswith("torch"):
                ax.barh(i, r["ms"], color="tab:orange", label=once("PyTorch (wall time of the call)"))
            else:  # an IREE build without the breakdown (--no-profile, or the CPU check)
                ax.barh(i, r["ms"], color="tab:cyan", label=once("IREE (wall time of the call)"))
            ax.text(r["ms"], i, f" {r['ms']:.1f}", va="center", fontsize=8)
        ax.set_yticks(range(len(names)), [SHORT.get(n, n) for n in names], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("forward, ms (median)", fontsize=8)
        ax.set_title(f"{model['title']}, {dtype}, {model['batch']} x {model['seq']} tokens, {model.get('device') or results['device']}", fontsize=9)
    fig.legend(fontsize=7, loc="lower center", ncol=4)
    fig.tight_layout(rect=(0, 0.35 / (2.6 * len(cases)), 1, 1))  # room for the legend below the panels
    fig.savefig(path, dpi=120)
    plt.close(fig)


def replot(args) -> int:
    results = json.loads(Path(args.json).read_text())
    if "runs" in results:  # the GPT-2-only benchmark's results (docs/model_gpt2_eager.json): one model, its dtypes under "runs"
        m = results["meta"]
        results["models"] = {"gpt2": {"title": "GPT-2 small, eager attention", "batch": m["batch"], "seq": m["seq"], "dtypes": results.pop("runs")}}
    plot(results, Path(args.out))
    return 0


def _positive(text: str) -> int:
    """An argument that must be a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("prepare", help="CPU side: export, substitute, compile")
    a.add_argument("--out", default="build/model-gpu")
    a.add_argument("--models", default=",".join(FAMILIES), help=f"comma-separated, of {', '.join(FAMILIES)}")
    a.add_argument("--dtypes", default="bf16,f32", help="of each family's dtypes (bf16 for all, f32 for BERT), these")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--tiny", action="store_true", help=f"2-layer models of width 256, batch {TINY_BATCH} x {TINY_SEQ}: to check both sides on a CPU")
    a.add_argument("--kernels", action="append", help="kernel specs or folders of them (default: kernels/, the kernel library)")
    a.add_argument("--cpu-check", action="store_true", help="also compile IREE alone for the CPU, to check the run side here")
    a.add_argument("--per-call-transients", action="store_true",
                   help="also build the best variant with --per-call-transients (IREE's allocation of the intermediate values at each call), to compare")
    a.add_argument("--keep-mlir", action="store_true", help="keep the exported model.mlir and the rewritten programs")
    a.add_argument("--wheels", action="store_true", help="also download the runtime and ml_dtypes wheels for the GPU machine into OUT/whl")
    a.set_defaults(func=prepare)
    r = sub.add_parser("run", help="GPU side: time and compare")
    r.add_argument("--dir", default="build/model-gpu")
    r.add_argument("--out", default="build/model-results")
    r.add_argument("--models", help="only these of the prepared models (e.g. gpt2,bert)")
    r.add_argument("--dtypes", help="only these of the prepared dtypes (e.g. bf16)")
    r.add_argument("--iters", type=_positive, default=20, help="timed forwards of each implementation, over --rounds rounds")
    r.add_argument("--rounds", type=_positive, default=4,
                   help="rounds in which every implementation is timed in turn (iters / rounds calls each), so a drift in the run falls on all alike")
    r.add_argument("--time-limit", type=float, default=900.0,
                   help="seconds per model; checked before each implementation, whatever is left then is reported as skipped")
    r.add_argument("--keep-others", action="store_true",
                   help="keep the models of an earlier OUT/model.json that this call does not run: one table over several calls")
    r.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    r.add_argument("--no-profile", action="store_true", help="skip the per-kernel GPU time breakdown of the IREE variants (CUPTI)")
    r.add_argument("--traces", action="store_true",
                   help="also write each IREE variant's profiled forward as a chrome trace (OUT/trace_MODEL_DTYPE_VARIANT.json.gz)")
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
