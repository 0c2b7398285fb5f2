"""On a CUDA device: every kernel of the ABI fuzz (tests/support/artifacts/fuzz_kernels.py, built by
tests/support/artifacts/fuzz.py) against its numpy reference, element by element and bit for bit.

Each kernel runs at a few sizes (some awkward: 1, 3, 1023, 4097, ...; one random), each time on
fresh random inputs and scalars: once as declared (IREE allocates the fresh outputs) and once
from the in-place build, called with every fresh output poisoned with a pattern of its own that
differs from the expected value in every element (NaN with the output's own payload, integers
XOR an output-specific mask, bools as a byte that is neither 0 nor 1), so an element left
unwritten, a binding given to the wrong parameter, and outputs sharing one buffer all show.
Kernels with a zero-filled output (which they accumulate into atomically) have no out= form and
run as declared only: their reference starts from zero. Structs go as dicts of their fields,
vectors by value as tuples of their lanes, vector arrays as [n, lanes].

The kernels are regenerated from the seed in the artifacts' manifest (default
fuzz.SEED), and artifacts built from other generated text are refused. Without a
compiler, build them first: python -m tests.support.artifacts.fuzz build/gpu-tests/fuzz
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from iree_dispatch import runtime

from ..support.artifacts import fuzz as fuzz_modules
from ..support.artifacts import fuzz_kernels
from ..support.environment import have_compiler
from ..support.fuzz_checks import call_arguments, mismatches
from ..support.gpu_modules import module_paths, prebuilt_dir

pytestmark = pytest.mark.gpu


def _batch() -> tuple[int, int, int]:
    """(seed, count, per_module) of the kernels to test: the prebuilt manifest's where the
    tests use prebuilt modules, else the defaults."""
    manifest = prebuilt_dir("fuzz") / fuzz_modules.MANIFEST
    if not have_compiler() and manifest.exists():
        data = json.loads(manifest.read_text())
        return data["seed"], data["count"], data["per_module"]
    return fuzz_modules.SEED, fuzz_modules.COUNT, fuzz_modules.PER_MODULE


SEED, COUNT, PER_MODULE = _batch()
MODULES = fuzz_kernels.generate_modules(SEED, COUNT, PER_MODULE)
CASES = [(m, k) for m in MODULES for k in m.kernels]


@pytest.fixture(scope="session")
def fuzz(tmp_path_factory) -> tuple[dict[str, Path], dict]:
    """(name → module path, manifest), checked against the regenerated kernels."""
    if not have_compiler() and not (prebuilt_dir("fuzz") / fuzz_modules.MANIFEST).exists():
        pytest.fail(f"no compiler here and no {prebuilt_dir('fuzz') / fuzz_modules.MANIFEST}; run python -m tests.support.artifacts.fuzz {prebuilt_dir('fuzz')}")
    paths = module_paths(
        tmp_path_factory, "fuzz", fuzz_modules.layout(SEED, COUNT, PER_MODULE),
        lambda out: fuzz_modules.build_all(out, SEED, COUNT, PER_MODULE),
        # A module none of whose kernels built has no files; the manifest says which.
        keep=lambda name, path: name == "manifest" or path.exists(),
    )
    manifest = json.loads(paths["manifest"].read_text())
    assert (manifest["seed"], manifest["count"], manifest["per_module"]) == (SEED, COUNT, PER_MODULE)
    for m in MODULES:
        entry = manifest["modules"][m.name]
        if entry["digest"] != m.digest():
            pytest.fail(f"{m.name}: the artifacts were built from other generated kernels (tests/support/artifacts/fuzz_kernels.py changed since); "
                        f"rebuild them: python -m tests.support.artifacts.fuzz {paths['manifest'].parent}")
        if entry["kernels"]:
            assert m.name in paths, f"{m.name}: the manifest lists built kernels, the module is missing"
        if any(k["in_place"] for k in entry["kernels"].values()):
            assert f"{m.name}_in_place" in paths, f"{m.name}: the manifest lists kernels built in place, the module is missing"
    return paths, manifest


@pytest.fixture(scope="session")
def loaded(fuzz):
    """Modules loaded on first use, by layout name."""
    paths, _ = fuzz
    cache: dict[str, runtime.Module] = {}

    def get(name: str) -> runtime.Module:
        if name not in cache:
            cache[name] = runtime.load(paths[name])
        return cache[name]

    return get


class _Summary:
    """A plugin registered by `tally`: prints the counts in pytest's terminal summary (output
    of a fixture's teardown would be captured)."""

    def __init__(self, counts: dict[str, int]):
        self.counts = counts

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.counts["kernels"]:
            terminalreporter.write_line("ABI fuzz: " + ", ".join(f"{v} {k}" for k, v in self.counts.items()) + f" (seed {SEED})")


@pytest.fixture(scope="session")
def tally(request) -> dict[str, int]:
    """Counts over the session, printed at its end."""
    counts = {"kernels": 0, "calls": 0, "elements": 0, "mismatched elements": 0, "kernels with mismatches": 0}
    request.config.pluginmanager.register(_Summary(counts), "abi-fuzz-summary")
    return counts


@pytest.mark.parametrize("module, kernel", CASES, ids=[f"{m.name}-{k.ident}" for m, k in CASES])
def test_fuzz_kernel(fuzz, loaded, tally, module, kernel):
    _, manifest = fuzz
    entry = manifest["modules"][module.name]
    if kernel.ident in entry["failed"]:
        pytest.skip(f"{kernel.name} did not build (the CPU test test_abi_fuzz.py fails on it): {entry['failed'][kernel.ident]['error'][:500]}")
    if any(p.pointer and p.numpy == "bfloat16" for p in kernel.params):
        pytest.importorskip("ml_dtypes", reason="bf16 tensors need ml_dtypes")
    function = entry["kernels"][kernel.ident]["function"]
    assert function == kernel.function
    assert entry["kernels"][kernel.ident]["in_place"] == kernel.has_out_form
    forms = {False: getattr(loaded(module.name), function)}
    if kernel.has_out_form:
        forms[True] = getattr(loaded(f"{module.name}_in_place"), function)
    for in_place, fn in forms.items():
        expected = [p.name for p in kernel.call_tensors(in_place)] + [p.name for p in kernel.call_scalars(in_place)]
        assert fn.parameters == expected, f"{function} ({'in place' if in_place else 'declared'}) takes {fn.parameters}"

    rng = np.random.default_rng()
    bad_elements, problems = 0, []
    for n in fuzz_kernels.call_sizes(rng):
        for in_place, fn in forms.items():
            arrays, scalars = kernel.random_arrays(rng, n), kernel.random_scalars(rng)
            want = kernel.reference(arrays, scalars, n)
            poison = fuzz_kernels.poison_for(kernel, want) if in_place else {}
            args = call_arguments(kernel, in_place, arrays, scalars, poison, n)
            before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
            got = fn(*args)
            label = f"{function} ({'in place, poisoned' if in_place else 'declared'}) n={n}"
            count, found = mismatches(kernel, got, want, label)
            bad_elements += count
            problems += found
            # numpy arguments are copied to the device, never written.
            problems += [f"{label}: argument {i} was modified" for i, (a, b) in enumerate(zip(args, before))
                         if isinstance(a, np.ndarray) and a.tobytes() != b.tobytes()]
            tally["calls"] += 1
            tally["elements"] += sum(w.size for w in want.values())
    tally["kernels"] += 1
    tally["mismatched elements"] += bad_elements
    tally["kernels with mismatches"] += bool(problems)
    assert not problems, f"{kernel.name} (seed {kernel.seed}, features {sorted(kernel.features)}):\n" + "\n".join(problems)
