"""The main job: build every sample in kernels/ and mlir/, then run each on the first CUDA
device against its numpy reference. Without a GPU it builds everything, says so, and
succeeds: the artifacts are ready to copy to a GPU machine."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np

from .backend.pipeline import build
from .core.contract import FunctionDescription
from .core.dtypes import ELEMENT_TYPES
from .frontend.spec_file import load_spec

SPEC = Path("kernels/samples.toml")
PROGRAM = Path("mlir/mixed_invocation.mlir")
REFERENCES = Path("kernels/references.py")
SIZES = (1, 7, 1000, 2**20 + 3)


def load_references(root: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("iree_dispatch_kernel_references", root / REFERENCES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def random_arguments(description: FunctionDescription, sizes: dict[str, int], rng: np.random.Generator) -> list:
    """Fresh random inputs (never zeros) and scalar arguments for a kernel description."""
    args: list = []
    for t in description.inputs:
        shape = [d if isinstance(d, int) else sizes[d] for d in t.shape]
        dtype = np.dtype(ELEMENT_TYPES[t.dtype].numpy)
        if dtype.kind == "b":
            values = rng.integers(0, 2, size=shape)
        elif dtype.kind == "f":
            values = rng.uniform(0.5, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        else:
            values = rng.integers(1, 100, size=shape)
        args.append(values.astype(dtype))
    for s in description.scalars:
        args.append(float(rng.uniform(-3, 3)) if s.kind == "float" else int(rng.integers(1, 100)))
    return args


# The samples are elementwise float32 kernels: one rounding (products) or a few (FMA-contracted
# sums) away from the float64 reference.
TOLERANCE = {"rtol": 2e-6, "atol": 1e-6}


def build_samples(root: Path, out: Path, progress) -> list[Path]:
    spec = load_spec(root / SPEC)
    progress(f"building {SPEC} ({', '.join(a.name for a in spec.archs)}) -> {out}/")
    kernels = build(spec, out / f"{spec.name}.vmfb", emit_mlir=out / f"{spec.name}.mlir", progress=progress)
    progress(f"building {PROGRAM} with module {spec.name}")
    program = build(spec, out / f"{PROGRAM.stem}.vmfb", emit_mlir=out / f"{PROGRAM.stem}.mlir", program=root / PROGRAM, progress=progress)
    return [kernels.vmfb, kernels.mlir, program.vmfb, program.mlir, kernels.objects_dir]


def run_samples(root: Path, out: Path, device: str) -> bool:
    from . import runtime

    references = load_references(root)
    rng = np.random.default_rng()
    ok = True
    kernels = runtime.load(out / "samples.vmfb", device)
    for name, function in kernels.functions.items():
        description = function.description
        for n in SIZES:
            args = random_arguments(description, {"n": n}, rng)
            start = time.perf_counter()
            got = function(*args)
            elapsed = time.perf_counter() - start
            want = getattr(references, name)(*args)
            good = got.shape == want.shape and np.allclose(got, want, **TOLERANCE)
            err = float(np.max(np.abs(got - want))) if got.shape == want.shape and got.size else 0.0
            print(f"  {'PASS' if good else 'FAIL'}  {name:<20} n={n:<8} max|err|={err:.2e}  {elapsed * 1e3:7.2f} ms")
            ok &= good
    program = runtime.load(out / f"{PROGRAM.stem}.vmfb", device)
    lhs, rhs = np.full(8, 2, np.float32), np.full(8, 4, np.float32)
    got = program.mixed_invocation(lhs, rhs)
    got = got.to_host() if hasattr(got, "to_host") else got
    good = np.array_equal(got, np.full(8, 96, np.float32))
    print(f"  {'PASS' if good else 'FAIL'}  mixed_invocation(8xf32=2, 8xf32=4) = {got.tolist()}")
    ok &= good
    for n in SIZES[2:]:
        a = rng.uniform(0.5, 2, n).astype(np.float32)
        b = rng.uniform(0.5, 2, n).astype(np.float32)
        got = program.mixed_invocation(a, b)
        got = got.to_host() if hasattr(got, "to_host") else got
        good = np.allclose(got, references.mixed_invocation(a, b), rtol=2e-6)
        print(f"  {'PASS' if good else 'FAIL'}  mixed_invocation n={n}")
        ok &= good
    return ok


def main(root: Path, out: Path, device: str | None) -> int:
    from . import runtime

    device = device or runtime.devices.default_uri()
    def progress(message: str) -> None:
        print(f"[iree-dispatch] {message}", flush=True)

    if importlib.util.find_spec("iree.compiler") is None:
        # A deployment machine: runtime only. Run what was built elsewhere, if it is here.
        artifacts = [out / "samples.vmfb", out / f"{PROGRAM.stem}.vmfb"]
        missing = [str(p) for p in artifacts if not p.is_file()]
        if missing:
            print(f"iree-base-compiler is not installed and no prebuilt samples are in {out}/ (missing {', '.join(missing)})", file=sys.stderr)
            return 1
        progress(f"iree-base-compiler not installed: running the prebuilt samples in {out}/")
    else:
        artifacts = build_samples(root, out, progress)
    listing = "\n".join(f"  {p}" for p in artifacts)
    if not runtime.cuda_device_available(device):
        print(f"No CUDA device found ({device}): built everything, ran nothing.\nArtifacts:\n{listing}")
        print(f"On a GPU machine: iree-dispatch run {out / 'mixed_invocation.vmfb'} --function=mixed_invocation --input=8xf32=2 --input=8xf32=4")
        return 0
    name = runtime.cuda_device_name(runtime.devices.ordinal_of(device)) or device
    print(f"Artifacts:\n{listing}\nRunning the samples on {name} ({device}):")
    ok = run_samples(root, out, device)
    print("all samples match their numpy references" if ok else "SOME SAMPLES FAILED", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1
