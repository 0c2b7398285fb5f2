"""The kernel-ABI fuzz on the CPU (tests/support/artifacts/fuzz_kernels.py): random kernels build, and what the
build made of them is what the kernel declares:
(a) every generated kernel builds, as declared and with its outputs in place;
(b) at flow level, where IREE assigns buffers, each dispatch takes one tensor per pointer in
    parameter order and ties each result to the operand of its own writable pointer, no two
    results to one value (outputs sharing a buffer would overwrite each other);
(c) the adapted PTX entry takes 8-byte pointers, then 4-byte push-constant slots (two per
    64-bit scalar, one per word of a struct or vector by value), and the function's description
    lists inputs (vector pointers with their lanes as a last dim), scalars (structs and vectors
    with every field's path and offset) and outputs (zero-filled ones marked) with their types in
    the kernel's parameter order.
Also: the generator is a pure function of its seed, its references agree with the CUDA text
(its per-element functions compiled for the host), its switches do what they say, and a kernel
that draws none of the ABI kinds (ABI_KINDS) is exactly the kernel generated before they existed.
The GPU half is tests/backend/test_gpu_abi_fuzz.py.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from iree_dispatch.core.contract import KernelDescription, struct_argument

from ..support.artifacts import fuzz_kernels
from ..support.artifacts.fuzz_kernels import ABI_KINDS, FEATURES, FuzzKernel, FuzzModule
from ..support.environment import needs_build_tools

# The styles iree_dispatch has long supported, so a module built to show one feature fails
# only for that feature.
BASELINE = dict(styles={"extern_c", "cxx", "template"}, scalars_anywhere=False, same_dtype_outputs=False, abi_features=set())


def switched_on(feature: str) -> bool:
    if feature == "scalars_anywhere":
        return fuzz_kernels.SCALARS_ANYWHERE
    if feature == "same_dtype_outputs":
        return fuzz_kernels.SAME_DTYPE_OUTPUTS
    if feature in ABI_KINDS:
        return feature in fuzz_kernels.ABI_FEATURES
    return feature in fuzz_kernels.STYLES


# --- the generator --------------------------------------------------------------------------


def test_generation_is_a_pure_function_of_the_seed():
    first, second = fuzz_kernels.generate_modules(7, 30, 10), fuzz_kernels.generate_modules(7, 30, 10)
    assert [m.source for m in first] == [m.source for m in second]
    assert [m.digest() for m in first] == [m.digest() for m in second]
    assert [m.fuzz_bf16 for m in first] == [False, True, False]
    assert fuzz_kernels.generate(123) == fuzz_kernels.generate(123)
    assert fuzz_kernels.generate(123).source != fuzz_kernels.generate(124).source
    # A kernel does not depend on the ones generated before it.
    alone = fuzz_kernels.generate_module(7, 1, 10)
    assert alone.source == first[1].source


# sha256 of generate(seed, fuzz_bf16=b, abi_features=set()).source for seed 0..50, b False then
# True: the kernels as they were before the ABI kinds existed.
PLAIN_KERNELS_0_TO_50 = "60e24ea334eee59da67db99327160a054639f3a8e6a0ad1f13563c5d325f2bb3"


def test_kernels_without_the_abi_kinds_are_the_kernels_of_before():
    digest = hashlib.sha256()
    for seed in range(51):
        for bf16 in (False, True):
            digest.update(fuzz_kernels.generate(seed, fuzz_bf16=bf16, abi_features=set()).source.encode())
    assert digest.hexdigest() == PLAIN_KERNELS_0_TO_50, "the generator's plain kernels changed: GPU artifacts built from them no longer match"
    # Each kind draws from its own stream: a kernel that draws none is the same with them on.
    drew_none = 0
    for seed in range(200):
        k = fuzz_kernels.generate(seed)
        if not k.features & set(ABI_KINDS):
            drew_none += 1
            assert k == fuzz_kernels.generate(seed, abi_features=set()), seed
    assert 20 <= drew_none <= 150
    # Switching one kind off leaves the others' choices as they were.
    for seed in range(60):
        for kind in ABI_KINDS:
            without = fuzz_kernels.generate(seed, abi_features=set(ABI_KINDS) - {kind})
            alone = fuzz_kernels.generate(seed, abi_features={kind})
            both = fuzz_kernels.generate(seed, abi_features=set(ABI_KINDS))
            assert (kind in both.features) == (kind in alone.features), (seed, kind)
            assert without.features & set(ABI_KINDS) == both.features & set(ABI_KINDS) - {kind}, (seed, kind)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), bf16=st.booleans())
def test_every_generated_kernel_is_well_formed(seed, bf16):
    k = fuzz_kernels.generate(seed, fuzz_bf16=bf16)
    names = [p.name for p in k.params]
    assert len(set(names)) == len(names) and (k.size in names or k.size_field.split(".")[0] in names)
    assert 1 <= len(k.pointers) <= 16 and k.writable and slots(k) <= 64
    assert {f for f in k.features if f in FEATURES} <= {f for f in FEATURES if switched_on(f)}
    # Each alias and the template parameter spell a pointer whose type is what they resolve to.
    for style, alias, ctype in k.aliases:
        assert any(p.spelled == alias and p.ctype == ctype for p in k.pointers)
        if style == "pp_alias":
            assert ctype == ("__nv_bfloat16" if bf16 else "float")
    if k.name_style == "template":
        assert any(p.spelled == "T" and p.ctype == k.template_arg for p in k.pointers)
    instantiates = (k.name_style == "template" and not k.template_consts) or (bool(k.template_consts) and k.instantiated)
    assert f"__global__ void {k.ident}(" in k.source and k.source.count("__global__") == 1 + instantiates
    assert [p.decl.split()[-1] for p in k.params] == names
    # The name gives every template argument but defaults left out, which are the values used.
    if k.template_consts:
        assert k.name.endswith(">") == (bool(k.template_arg) or any(c.named for c in k.template_consts))
        assert all(c.default and int(c.default.rstrip("u"), 0) == c.value for c in k.template_consts if not c.named and c.ctype != "bool")
    for p in k.params:
        if p.struct is not None:  # fields in order, each at an offset aligned to its size, inside the struct
            offsets = p.struct.leaf_offsets()
            sizes = [fuzz_kernels.numpy_dtype(fuzz_kernels.SCALAR[c]).itemsize for _, c in p.struct.leaves()]
            assert all(o % s == 0 for o, s in zip(offsets, sizes)) and offsets == sorted(offsets)
            assert offsets[-1] + sizes[-1] <= p.nbytes and p.nbytes % p.struct.align == 0

    rng = np.random.default_rng(seed % 2**32)
    n = int(rng.choice(fuzz_kernels.AWKWARD_SIZES + (fuzz_kernels.MAX_N,)))
    want = k.reference(k.random_arrays(rng, n), k.random_scalars(rng), n)
    assert list(want) == [p.name for p in k.writable]
    for p in k.writable:
        assert want[p.name].shape == (n, *p.shape_tail) and want[p.name].dtype == fuzz_kernels.numpy_dtype(p.numpy)
    # Fresh outputs of one dtype get formulas of their own, so outputs sharing a buffer show.
    formulas = dict(k.formulas)
    fresh = [p for p in k.params if p.role == "out"]
    for i, a in enumerate(fresh):
        for b in fresh[i + 1 :]:
            fa, fb = formulas[a.name], formulas[b.name]
            assert (fa.f_coefs, fa.f_index) != (fb.f_coefs, fb.f_index) and fa.u_coefs != fb.u_coefs
            if a.numpy == b.numpy and a.shape_tail == b.shape_tail and n >= 32:
                assert want[a.name].tobytes() != want[b.name].tobytes(), (a.name, b.name)
    # Every poison differs from the expected value in every element; zero-filled outputs have none.
    poisons = fuzz_kernels.poison_for(k, want)
    assert set(poisons) == {p.name for p in fresh if not p.zero}
    for name, poison in poisons.items():
        size = poison.dtype.itemsize
        assert (poison.view(np.uint8).reshape(-1, size) != want[name].view(np.uint8).reshape(-1, size)).any(axis=1).all()


@pytest.mark.parametrize("feature", FEATURES)
def test_a_required_feature_is_generated_and_a_switched_off_one_is_not(feature):
    for seed in range(20):
        assert feature in fuzz_kernels.generate(seed, require=[feature], **BASELINE).features
    off = dict(styles=set(fuzz_kernels.ALL_STYLES) - {feature}, scalars_anywhere=feature != "scalars_anywhere",
               same_dtype_outputs=feature != "same_dtype_outputs", abi_features=set(ABI_KINDS) - {feature})
    for seed in range(60):
        k = fuzz_kernels.generate(seed, **off)
        assert feature not in k.features
        if feature == "scalars_anywhere":
            first_scalar = next(i for i, p in enumerate(k.params) if not p.pointer)
            assert all(p.pointer for p in k.params[:first_scalar]) and not any(p.pointer for p in k.params[first_scalar:])


def test_batches_cover_every_feature():
    modules = fuzz_kernels.generate_modules(2024, 160)
    seen = {f for m in modules for k in m.kernels for f in k.features}
    assert {f for f in FEATURES if switched_on(f)} <= seen
    details = {"no_inputs": True, "scalar_first": switched_on("scalars_anywhere"), "nested_namespace": switched_on("namespace")}
    assert {detail for detail, on in details.items() if on} <= seen


# --- building ---------------------------------------------------------------------------------


def build_and_check(module: FuzzModule, folder: Path, in_place: bool) -> None:
    """Builds `module` (one form) and checks (a), (b) and (c) of the module doc."""
    from iree_dispatch.backend.abi import ptx_entries
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.runtime import read_descriptions

    source = module.write(folder)
    # Kernels with a zero-filled output have no out= form: the in-place build leaves them out.
    kernels = tuple(k for k in module.kernels if k.has_out_form or not in_place)
    specs = [k.declare(source) for k in kernels]
    if in_place:
        specs = [s.with_outputs_in_place() for s in specs]
    form = folder / ("in_place" if in_place else "declared")
    result = build(module.spec(source, specs), form / f"{module.name}.vmfb", emit_mlir=form / f"{module.name}.mlir")

    _, descriptions = read_descriptions(result.vmfb)
    assert set(descriptions) == {k.function for k in kernels}
    for k in kernels:
        check_description(k, descriptions[k.function], in_place)
        check_call_arguments(k, descriptions[k.function], in_place)

    ptx = (result.objects_dir / f"{module.name}.sm_90.ptx").read_text()
    entries = ptx_entry_names(kernels, ptx)
    found = ptx_entries(ptx)
    for k in kernels:
        sizes = [p.nbytes for p in found[entries[k.ident]].params]
        assert sizes == [8] * len(k.pointers) + [4] * slots(k), f"{k.name}: adapted PTX entry takes {sizes}"

    dispatches = flow_dispatches(result.mlir)
    for k in kernels:
        check_dispatch(k, dispatches.get(k.function, []))


def slots(k: FuzzKernel) -> int:
    return sum(p.words for p in k.scalars)


def check_description(k: FuzzKernel, d: KernelDescription, in_place: bool) -> None:
    where = f"{k.name} ({'in place' if in_place else 'declared'})"
    assert d.name == k.name and d.function == k.function, where
    assert d.block == (k.block, 1, 1) and d.grid == (k.grid, "1", "1"), where
    assert [(t.name, t.dtype, t.shape) for t in d.inputs] == [(p.name, p.mlir, (k.size, *p.shape_tail)) for p in k.call_tensors(in_place)], where
    # C types compared by what they are (int64_t is `long` once a kernel's types were resolved by the compiler).
    assert [(s.name, _kind_of(s), s.nbytes) for s in d.scalars] == [
        (p.name, "struct" if p.by_value else p.numpy, p.nbytes) for p in k.call_scalars(in_place)], where
    # A struct or vector by value: every scalar field by its path, at the offset C gives it.
    for s, p in zip(d.scalars, k.call_scalars(in_place)):
        if p.struct is not None:
            want = [(path, fuzz_kernels.SCALAR[ctype], offset) for (path, ctype), offset in zip(p.struct.leaves(), p.struct.leaf_offsets())]
        elif p.lanes:
            lane = fuzz_kernels.numpy_dtype(p.numpy).itemsize
            want = [(fuzz_kernels.LANES[i], p.numpy, i * lane) for i in range(p.lanes)]
        else:
            continue
        assert [(f.name, _kind_of(f), offset) for f, offset in s.fields] == want, f"{where}: {s.signature()}"
        # The words the runtime packs from the value the GPU test passes (a dict of nested dicts,
        # lists and tuples; a tuple of lanes) are the bytes C lays out (the host check's layout).
        value = k.scalar_values(k.random_scalars(np.random.default_rng(len(where))), 7)[p.name]
        words, _ = struct_argument(k.function, s, value)
        packed = p.struct.pack(value) if p.struct is not None else np.array(value, fuzz_kernels.numpy_dtype(p.numpy)).tobytes()
        assert np.array(words, "<i4").tobytes() == packed.ljust(4 * p.words, b"\0"), f"{where}: {p.name} = {value}"
    assert [(t.name, t.dtype, t.shape, t.inplace, t.zero) for t in d.outputs] == [
        (p.name, p.mlir, (k.size, *p.shape_tail), in_place or p.role == "io", p.zero) for p in k.writable], where


def check_call_arguments(k: FuzzKernel, d: KernelDescription, in_place: bool) -> None:
    """The arguments test_gpu_abi_fuzz.py passes (poisoned outputs in place, [n, lanes] vector
    arrays, structs as dicts with the size in their size field, vectors as tuples) pass the
    runtime's checks, which need no device."""
    from iree_dispatch.runtime.invocation import KernelFunction

    from ..support.fuzz_checks import call_arguments

    function = KernelFunction(d, invoke=None, device=None)
    assert function.parameters == [p.name for p in k.call_tensors(in_place)] + [p.name for p in k.call_scalars(in_place)]
    rng = np.random.default_rng(len(k.name))
    for n in (1, 1023):
        arrays, scalars = k.random_arrays(rng, n), k.random_scalars(rng)
        poison = fuzz_kernels.poison_for(k, k.reference(arrays, scalars, n)) if in_place else {}
        function.check(*call_arguments(k, in_place, arrays, scalars, poison, n))


def _kind_of(s) -> str:
    """A described scalar's numpy type name ("struct" for a struct or vector by value)."""
    return "struct" if s.kind == "struct" else fuzz_kernels.SCALAR.get(s.ctype, s.ctype)


def ptx_entry_names(kernels: tuple[FuzzKernel, ...], ptx: str) -> dict[str, str]:
    """Each kernel's PTX entry: its name if extern "C", else the entry whose demangled name is
    the kernel's qualified name (found here independently of iree_dispatch's own lookup)."""
    from iree_dispatch.backend.abi import ptx_entries
    from iree_dispatch.frontend.cxx_names import demangle

    names = sorted(ptx_entries(ptx))
    pretty = demangle(names)
    found = {}
    for k in kernels:
        if k.name_style == "extern_c":
            found[k.ident] = k.ident
            continue
        qualified = f"{k.namespace}::{k.ident}" if k.namespace else k.ident
        if k.template_consts:  # every argument, defaults included, compared by value
            matches = [n for n in names if (m := re.search(rf"(?:^|\s){re.escape(qualified)}<(.*)>\(", pretty[n]))
                       and [_template_value(a) for a in _split(m[1])] == [_template_value(a) for a in k.instantiation_args]]
        else:
            qualified = k.name if k.name_style == "template" else qualified
            matches = [n for n in names if re.search(rf"(?:^|\s){re.escape(qualified)}\(", pretty[n])]
        assert len(matches) == 1, f"{k.name}: PTX entries {matches} among {[pretty[n] for n in names]}"
        found[k.ident] = matches[0]
    return found


def _template_value(argument: str) -> str | int:
    """A template argument as the demangler or a kernel name writes it, by value: `(short)-259`,
    `96u`, `0x60` and `96` are one; `true`/`(bool)1`; a type as it is."""
    text = re.sub(r"^\((?:unsigned |signed )?\w+(?: \w+)?\)", "", argument.strip())
    if text in ("true", "false"):
        return int(text == "true")
    if re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)[uUlL]*", text):
        return int(text.rstrip("uUlL"), 0)
    return argument.strip()


# `%r:2 = flow.dispatch {@exe::@variant::@entry, ...}[%w](%a, %b, %c) : (types) -> (%a{%n}, %c{%n})`
_DISPATCH = re.compile(r"=\s*flow\.dispatch\s+\{[^}]*\}(?:\[[^\]]*\])?\(([^)]*)\)\s*:\s*\((.*)\)\s*->\s*(.*)$")


def flow_dispatches(mlir: Path) -> dict[str, list[tuple[list[str], list[str], list[str]]]]:
    """function → its flow.dispatch ops as (operands, operand types, results), from the module
    compiled to flow level with the build's own flags."""
    from iree.compiler.tools.binaries import find_tool

    from iree_dispatch.backend.compile import compile_flags
    from iree_dispatch.core.archs import parse_arch

    flags = compile_flags(parse_arch(fuzz_kernels.DEFAULT_ARCHS[0]), Path("."))
    proc = subprocess.run([find_tool("iree-compile"), *flags, "--compile-to=flow", mlir.name], cwd=mlir.parent, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found: dict[str, list] = {}
    function = None
    for line in proc.stdout.splitlines():
        head = re.match(r"\s*util\.func\s+public\s+@([\w$.]+)\(", line)
        if head:
            function = head[1]
            continue
        match = _DISPATCH.search(line)
        if match and function:
            results = match[3].strip()
            results = results[1:-1] if results.startswith("(") else results
            found.setdefault(function, []).append((_split(match[1]), _split(match[2]), _split(results)))
    return found


def _split(text: str) -> list[str]:
    """Top-level comma-separated parts of `text` (commas inside <>, {} and () stay)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"{": 1, "<": 1, "(": 1, "}": -1, ">": -1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    return [*parts, last] if last else parts


def check_dispatch(k: FuzzKernel, dispatches: list) -> None:
    assert len(dispatches) == 1, f"{k.function}: {len(dispatches)} flow.dispatch ops"
    operands, types, results = dispatches[0]
    tensors = [(value, t) for value, t in zip(operands, types) if t.startswith("tensor<")]
    elements = [re.match(r"tensor<(?:[?\d]+x)*(\w+)>", t)[1] for _, t in tensors]
    assert elements == [p.mlir for p in k.pointers], f"{k.function}: dispatch binds {elements}"
    assert [t for t in types if not t.startswith("tensor<")] == ["i32"] * slots(k), f"{k.function}: push constants {types}"
    tied = [r.split("{")[0] for r in results]
    assert all(v.startswith("%") for v in tied), f"{k.function}: untied results {results}"
    assert len(set(tied)) == len(tied), f"{k.function}: results share a value: {results}"
    want = [tensors[i][0] for i, p in enumerate(k.pointers) if p.writable]
    assert tied == want, f"{k.function}: results tied to {tied}, the writable pointers' operands are {want}"


@needs_build_tools
@pytest.mark.parametrize("feature", FEATURES)
def test_each_feature_builds_alone(tmp_path, feature):
    """Modules of kernels that show one feature on top of the long-supported ones, so a
    failure names the feature."""
    if not switched_on(feature):
        pytest.skip(f"{feature} is switched off in tests/support/artifacts/fuzz_kernels.py")
    kernels = tuple(fuzz_kernels.generate(fuzz_kernels._derive("feature", feature, j), ident=f"f{j}", require=[feature],
                                      fuzz_bf16=j % 2 == 1 and feature == "pp_alias", **BASELINE) for j in range(6))
    if feature == "pp_alias":  # both meanings of floatX: one module each
        for bf16 in (False, True):
            module = FuzzModule(f"feature_pp_{int(bf16)}", 0, bf16, tuple(k for k in kernels if k.fuzz_bf16 == bf16))
            build_and_check(module, tmp_path / module.name, in_place=False)
        return
    build_and_check(FuzzModule(f"feature_{feature}", 0, False, kernels), tmp_path, in_place=False)


@needs_build_tools
# No shrinking: one seed is as simple as another, and each example costs two builds.
@settings(max_examples=3, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate], suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**63 - 1), index=st.integers(0, 1))
def test_random_modules_build_in_both_forms(tmp_path_factory, seed, index):
    module = fuzz_kernels.generate_module(seed, index, 12)
    folder = tmp_path_factory.mktemp("random")
    build_and_check(module, folder, in_place=False)
    build_and_check(module, folder, in_place=True)


@needs_build_tools
@pytest.mark.parametrize("index", [0, 1])  # floatX as float, then as __nv_bfloat16
def test_references_agree_with_the_cuda_text_on_the_host(tmp_path, index):
    """The kernels' per-element functions compiled for the host compute, element for element
    and bit for bit, what the numpy references say (no GPU involved)."""
    pytest.importorskip("ml_dtypes")
    module = fuzz_kernels.generate_module(4711, index, 20)
    assert check_on_host(module, tmp_path) >= 20 * 4


@needs_build_tools
def test_references_of_every_abi_kind_agree_with_the_cuda_text_on_the_host(tmp_path):
    """As above, for kernels that each show one ABI kind (and whatever else they draw)."""
    pytest.importorskip("ml_dtypes")
    kernels = tuple(fuzz_kernels.generate(fuzz_kernels._derive("host", kind, j), ident=f"h{i}_{j}", require=[kind])
                    for i, kind in enumerate(ABI_KINDS) for j in range(4))
    module = FuzzModule("abi_kinds_host", 0, False, kernels)
    assert check_on_host(module, tmp_path) >= len(kernels) * 4


def check_on_host(module: FuzzModule, folder: Path) -> int:
    """Runs every kernel's per-element function on the host at a few sizes; returns how many
    outputs agreed, byte for byte, with their references."""
    library = ctypes.CDLL(str(fuzz_kernels.build_host_library(module, folder)))
    rng = np.random.default_rng()
    checked = 0
    for k in module.kernels:
        for n in fuzz_kernels.call_sizes(rng):
            arrays, scalars = k.random_arrays(rng, n), k.random_scalars(rng)
            want = k.reference(arrays, scalars, n)
            got = fuzz_kernels.run_on_host(library, k, arrays, scalars, n, fuzz_kernels.poison_for(k, want))
            for name in want:
                assert got[name].tobytes() == want[name].tobytes(), f"{k.name}: {name} at n={n}"
                checked += 1
    return checked


@needs_build_tools
def test_artifacts_and_manifest(tmp_path):
    """artifacts.fuzz builds both forms of every kernel and says so in its manifest."""
    from iree_dispatch.runtime import read_descriptions

    from ..support.artifacts import fuzz as fuzz_modules

    proc = subprocess.run([sys.executable, "-m", "tests.support.artifacts.fuzz", str(tmp_path), "--count", "5", "--per-module", "3", "--seed", "99", "--strict"],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 of 5 kernels built" in proc.stdout
    manifest = json.loads((tmp_path / fuzz_modules.MANIFEST).read_text())
    modules = fuzz_kernels.generate_modules(99, 5, 3)
    assert manifest["seed"] == 99 and list(manifest["modules"]) == [m.name for m in modules]
    assert set(fuzz_modules.layout(99, 5, 3).values()) == {"manifest.json"} | {
        rel for m in manifest["modules"].values() for rel in (m["declared"], m["in_place"])}
    for m in modules:
        entry = manifest["modules"][m.name]
        assert entry["digest"] == m.digest() and not entry["failed"]
        assert {ident: e["function"] for ident, e in entry["kernels"].items()} == {k.ident: k.function for k in m.kernels}
        assert {ident: e["in_place"] for ident, e in entry["kernels"].items()} == {k.ident: k.has_out_form for k in m.kernels}
        _, declared = read_descriptions(tmp_path / entry["declared"])
        _, in_place = read_descriptions(tmp_path / entry["in_place"])
        for k in m.kernels:
            check_description(k, declared[k.function], in_place=False)
            if k.has_out_form:
                check_description(k, in_place[k.function], in_place=True)
            else:
                assert k.function not in in_place


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), n=st.sampled_from(fuzz_kernels.AWKWARD_SIZES))
def test_the_gpu_comparison_sees_every_unwritten_element(seed, n):
    """What test_gpu_abi_fuzz.py does with a kernel's results, on results made here: the
    expected ones pass, and fresh outputs left holding their poison fail in every element."""
    pytest.importorskip("ml_dtypes")
    from ..support.fuzz_checks import call_arguments, mismatches

    k = fuzz_kernels.generate(seed)
    rng = np.random.default_rng(seed % 2**32)
    arrays, scalars = k.random_arrays(rng, n), k.random_scalars(rng)
    want = k.reference(arrays, scalars, n)
    poison = fuzz_kernels.poison_for(k, want)
    in_place = k.has_out_form  # as the GPU test calls it: poisoned, where it has an out= form
    args = call_arguments(k, in_place, arrays, scalars, poison, n)
    assert len(args) == len(k.call_tensors(in_place)) + len(k.call_scalars(in_place))
    assert all(a is poison[p.name] for a, p in zip(args, k.call_tensors(in_place)) if p.role == "out")
    # Structs go as dicts whose size field is the size, vectors as tuples of their lanes.
    for a, p in zip(args[len(k.call_tensors(in_place)):], k.call_scalars(in_place)):
        assert isinstance(a, dict) if p.struct is not None else isinstance(a, tuple) and len(a) == p.lanes if p.lanes else np.ndim(a) == 0
        if p.struct is not None and k.size_field.startswith(f"{p.name}."):
            assert a[k.size_field.split(".", 1)[1]] == n
    exact = tuple(want.values())
    assert mismatches(k, exact if len(exact) > 1 else exact[0], want, "k") == (0, [])
    unwritten = tuple(poison.get(name, w) for name, w in want.items())
    count, problems = mismatches(k, unwritten if len(unwritten) > 1 else unwritten[0], want, "k")
    assert count == sum(p.size for p in poison.values()) and len(problems) == len(poison)
