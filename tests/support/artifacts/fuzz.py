"""The kernel-ABI fuzz modules (tests/support/artifacts/fuzz_kernels.py) for the GPU test tests/backend/test_gpu_abi_fuzz.py,
built on a CPU machine:
    python -m tests.support.artifacts.fuzz build/gpu-tests/fuzz [--count 320] [--seed S]

Each module (PER_MODULE kernels, one .cu file) is built twice for sm_90: as declared
(`declared/<module>.vmfb`) and with every fresh output declared in place
(`in_place/<module>.vmfb`, so the test can pass outputs filled with its own poison; kernels with
a zero-filled output have no such form and are only in the first). A kernel
iree_dispatch refuses or fails to build is left out of both forms and recorded with the error
in `manifest.json`, which also holds the seed, each module's paths, kernels and function names,
and a digest of its generated source (the GPU test regenerates the kernels from the seed and
refuses artifacts built from other text).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import fuzz_kernels

ROOT = Path(__file__).resolve().parents[3]
SEED = 20260601
COUNT = 320
PER_MODULE = 20
MANIFEST = "manifest.json"


def module_layout(module: str) -> dict[str, str]:
    """name → path under the artifact folder of one module's two builds. Each form has its
    own folder, because both write <module>.objects/ beside their vmfb."""
    return {module: f"declared/{module}.vmfb", f"{module}_in_place": f"in_place/{module}.vmfb"}


def layout(seed: int = SEED, count: int = COUNT, per_module: int = PER_MODULE) -> dict[str, str]:
    """name → path under the artifact folder of everything build_all writes."""
    found = {"manifest": MANIFEST}
    for start in range(0, count, per_module):
        found.update(module_layout(f"fuzz{start // per_module:02d}"))
    return found


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def build_module(module: fuzz_kernels.FuzzModule, out: Path, archs=fuzz_kernels.DEFAULT_ARCHS) -> dict:
    """Builds both forms of `module` under `out`; returns its manifest entry. Kernels that
    can't be declared or built are left out (and recorded): the module is built from the rest,
    and when a build fails each kernel is built alone to find the ones to leave out."""
    from iree_dispatch.backend.pipeline import build

    source = module.write(out / "sources")
    failed: dict[str, str] = {}
    declared, in_place = {}, {}
    for k in module.kernels:
        try:
            declared[k.ident] = k.declare(source)
            if k.has_out_form:
                in_place[k.ident] = declared[k.ident].with_outputs_in_place()
        except Exception as exc:  # noqa: BLE001  (recorded: the CPU tests fail on it)
            failed[k.ident] = _error_text(exc)
            declared.pop(k.ident, None)

    paths = {form: out / rel for form, rel in zip(("declared", "in_place"), module_layout(module.name).values())}

    def attempt(specs: dict, target: Path) -> Exception | None:
        try:
            build(module.spec(source, specs.values(), archs), target)
            return None
        except Exception as exc:  # noqa: BLE001
            return exc

    # Both forms hold the same kernels (those with an out= form, the second): when a build
    # fails, each kernel is built alone to find the ones to leave out, and both forms are built
    # again from the rest.
    alive = [k.ident for k in module.kernels if k.ident not in failed]
    while alive:
        for form, specs in (("declared", declared), ("in_place", in_place)):
            members = [i for i in alive if i in specs]
            if not members:
                if paths[form].exists():
                    paths[form].unlink()
                continue
            error = attempt({i: specs[i] for i in members}, paths[form])
            if error is None:
                continue
            with tempfile.TemporaryDirectory(prefix=f"{module.name}-alone-") as scratch:
                for ident in members:
                    alone = attempt({ident: specs[ident]}, Path(scratch) / ident / f"{module.name}.vmfb")
                    if alone is not None:
                        failed[ident] = f"{form} form: {_error_text(alone)}"
            if not any(i in failed for i in members):  # each builds alone, not together
                failed.update({i: f"{form} form, built together: {_error_text(error)}" for i in members})
            alive = [i for i in alive if i not in failed]
            break
        else:
            break
    built = [k for k in module.kernels if k.ident in alive]
    in_place_built = [k for k in built if k.ident in in_place]
    for form, kernels in (("declared", built), ("in_place", in_place_built)):
        if not kernels and paths[form].exists():
            paths[form].unlink()
    return {
        "declared": str(paths["declared"].relative_to(out)) if built else None,
        "in_place": str(paths["in_place"].relative_to(out)) if in_place_built else None,
        "source": str(source.relative_to(out)),
        "fuzz_bf16": module.fuzz_bf16,
        "nvcc_flags": list(module.nvcc_flags),
        "digest": module.digest(),
        "kernels": {
            k.ident: {"name": k.name, "function": declared[k.ident].function, "features": sorted(k.features), "in_place": k.ident in in_place}
            for k in built
        },
        "failed": {k.ident: {"name": k.name, "features": sorted(k.features), "error": failed[k.ident]} for k in module.kernels if k.ident in failed},
    }


def build_all(out: Path, seed: int = SEED, count: int = COUNT, per_module: int = PER_MODULE, jobs: int | None = None) -> dict[str, Path]:
    """Builds `count` generated kernels into `out`; returns name → path of the manifest and of
    every module built (module_layout's names)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    modules = fuzz_kernels.generate_modules(seed, count, per_module)
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        entries = list(pool.map(lambda m: build_module(m, out), modules))
    manifest = {
        "seed": seed,
        "count": count,
        "per_module": per_module,
        "archs": list(fuzz_kernels.DEFAULT_ARCHS),
        "styles": sorted(fuzz_kernels.STYLES),
        "scalars_anywhere": fuzz_kernels.SCALARS_ANYWHERE,
        "same_dtype_outputs": fuzz_kernels.SAME_DTYPE_OUTPUTS,
        "abi_features": sorted(fuzz_kernels.ABI_FEATURES),
        "modules": {m.name: entry for m, entry in zip(modules, entries)},
    }
    tmp = out / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, out / MANIFEST)
    paths = {"manifest": out / MANIFEST}
    for m, entry in zip(modules, entries):
        if entry["declared"]:
            paths[m.name] = out / entry["declared"]
        if entry["in_place"]:
            paths[f"{m.name}_in_place"] = out / entry["in_place"]
    return paths


def summary(manifest: dict) -> str:
    """Built and failed kernels per feature, and each distinct error once."""
    kernels = [(k, True) for m in manifest["modules"].values() for k in m["kernels"].values()]
    kernels += [(k, False) for m in manifest["modules"].values() for k in m["failed"].values()]
    lines = [f"{sum(ok for _, ok in kernels)} of {len(kernels)} kernels built (seed {manifest['seed']})"]
    features = sorted({f for k, _ in kernels for f in k["features"]})
    for feature in features:
        with_it = [ok for k, ok in kernels if feature in k["features"]]
        lines.append(f"  {feature:20s} {sum(with_it):4d} built, {len(with_it) - sum(with_it):4d} failed")
    errors: dict[str, list[str]] = {}
    for m in manifest["modules"].values():
        for k in m["failed"].values():
            first = k["error"].splitlines()[0]
            errors.setdefault(_without_names(first), []).append(f"{k['name']} ({first})")
    for examples in sorted(errors.values(), key=len, reverse=True):
        lines.append(f"  {len(examples):4d} x {examples[0]}")
    return "\n".join(lines)


def _without_names(message: str) -> str:
    """An error message with paths, lines and identifiers blanked, to group alike errors."""
    message = re.sub(r"\S*\.cu(:\d+)?", "<src>", message)
    return re.sub(r"'[^']*'|\b\w*fz\w*|\b\d+\b", "_", message)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default=str(ROOT / "build" / "gpu-tests" / "fuzz"))
    parser.add_argument("--count", type=int, default=COUNT)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--per-module", type=int, default=PER_MODULE)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--clean", action="store_true", help="empty OUT first")
    parser.add_argument("--strict", action="store_true", help="exit 1 if any kernel failed to build")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.clean and out.exists():
        shutil.rmtree(out)
    started = time.perf_counter()
    paths = build_all(out, args.seed, args.count, args.per_module, args.jobs)
    manifest = json.loads(paths["manifest"].read_text())
    print(summary(manifest))
    print(f"{len(paths) - 1} modules and {paths['manifest']} in {time.perf_counter() - started:.1f} s")
    failed = sum(len(m["failed"]) for m in manifest["modules"].values())
    return 1 if args.strict and failed else 0


if __name__ == "__main__":
    sys.exit(main())
