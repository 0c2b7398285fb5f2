"""Per-arch dynamic shared memory: `shared_memory = { sm_90a = ..., sm_80 = ... }` gives each
arch variant's export its own `workgroup_local_memory`, checked against that arch's limit; a
plain size keeps meaning every arch. (The GEMM uses it: kernels/gemm.toml.)"""

from __future__ import annotations

import re

import pytest

from iree_dispatch.backend.emit import CompiledObjects, emit_module
from iree_dispatch.core.archs import parse_archs
from iree_dispatch.core.errors import SpecError
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec
from iree_dispatch.frontend.spec_file import load_spec

from ..support.environment import needs_build_tools

MUL = 'extern "C" __global__ void mul(const float* a, const float* b, float* out, int n) {}\n'
HOPPER, AMPERE = 200 * 1024, 96 * 1024  # over sm_80's 163 KB / under sm_86's 99 KB


def _spec(cu, shared_memory, archs=("sm_90a", "sm_80"), objects="cubin") -> ModuleSpec:
    k = KernelSpec.declare(cu(MUL), "mul", block=[64], grid="ceildiv(n, 64)", shape=["n"], shared_memory=shared_memory)
    return ModuleSpec("m", (k,), tuple(parse_archs(list(archs))), objects=objects)


def _exports(spec: ModuleSpec) -> dict[str, int | None]:
    """Variant name → the workgroup_local_memory of its export (None when it declares none)."""
    paths = {(s, v.name): f"objects/{v.object_filename(s.stem)}" for s in spec.sources for v in spec.variants}
    mlir = emit_module(CompiledObjects.of(spec, paths, {k.name: k.name for k in spec.kernels}, ()))
    out = {}
    for variant in re.split(r"hal\.executable\.variant public @", mlir)[1:]:
        name = variant.split(" ", 1)[0]
        size = re.search(r"workgroup_local_memory = (\d+) : index", variant.split("hal.executable.variant", 1)[0])
        out[name] = int(size[1]) if size else None
    return out


def test_each_variant_export_gets_its_arch_size(cu):
    spec = _spec(cu, {"sm_90a": HOPPER, "sm_80": "block_x * 1536"})
    (k,) = spec.kernels
    assert [(a.name, n) for a, n in k.shared_memory_by_arch] == [("sm_90a", HOPPER), ("sm_80", AMPERE)]
    assert k.shared_memory == HOPPER  # the largest, for code that reads one number
    assert k.describe().to_dict()["shared_memory"] == {"sm_90a": HOPPER, "sm_80": AMPERE}
    # cubin policy: a cubin per arch, then the newest arch's PTX.
    assert _exports(spec) == {"sm_90a_cubin": HOPPER, "sm_80_cubin": AMPERE, "sm_90a": HOPPER}


def test_plain_size_still_means_every_arch(cu):
    spec = _spec(cu, 4096, objects="ptx")
    assert spec.kernels[0].shared_memory_by_arch == ()
    assert spec.kernels[0].describe().shared_memory == 4096
    assert _exports(spec) == {"sm_90a": 4096, "sm_80": 4096}


def test_a_zero_entry_declares_no_shared_memory_on_that_arch(cu):
    assert _exports(_spec(cu, {"sm_90a": 1024, "sm_80": 0}, objects="ptx")) == {"sm_90a": 1024, "sm_80": None}


def test_fatbin_takes_the_largest_size_and_every_arch_must_allow_it(cu):
    # One export for all archs: the largest size, which sm_80 can't have.
    with pytest.raises(SpecError, match=rf"shared_memory {HOPPER} bytes exceeds the 166912 bytes a block can have on sm_80"):
        _spec(cu, {"sm_90a": HOPPER, "sm_80": AMPERE}, objects="fatbin")
    assert _exports(_spec(cu, {"sm_90": 8192, "sm_80": 4096}, archs=("sm_90", "sm_80"), objects="fatbin")) == {"fatbin": 8192}


def test_each_arch_is_checked_against_its_own_limit(cu):
    with pytest.raises(SpecError, match=rf"shared_memory {HOPPER} bytes exceeds the 166912 bytes a block can have on sm_80"):
        _spec(cu, {"sm_90a": HOPPER, "sm_80": HOPPER})
    with pytest.raises(SpecError, match="exceeds the 232448 bytes a block can have on sm_90a"):
        _spec(cu, {"sm_90a": 232449, "sm_80": AMPERE})


def test_an_arch_the_table_does_not_size_is_an_error(cu):
    with pytest.raises(SpecError, match=r"kernel mul: shared_memory has no size for sm_80 \(given for sm_90a\); add sm_80 = <bytes>"):
        _spec(cu, {"sm_90a": HOPPER})


def test_table_entries_are_checked_like_plain_sizes(cu):
    with pytest.raises(SpecError, match=r"shared_memory key 'sm8'.*malformed CUDA architecture"):
        _spec(cu, {"sm8": 1024})
    with pytest.raises(SpecError, match=r"shared_memory\.sm_80: shared_memory uses 'n'"):
        _spec(cu, {"sm_90a": 1024, "sm_80": "n * 4"})
    with pytest.raises(SpecError, match="shared_memory is an empty table"):
        _spec(cu, {})
    with pytest.raises(SpecError, match="shared_memory gives sm_80 twice"):
        _spec(cu, {"sm_80": 1024, "80": 2048})


def _toml(tmp_path, cu, shared: str, archs: str = '["sm_90a", "sm_80"]'):
    cu(MUL, "mul.cu")
    path = tmp_path / "m.toml"
    path.write_text(f'[module]\narchs = {archs}\n[[kernel]]\nname = "mul"\nsource = "mul.cu"\nblock = [64]\ngrid = ["n"]\nshape = ["n"]\nshared_memory = {shared}\n')
    return path


def test_toml_table(tmp_path, cu):
    spec = load_spec(_toml(tmp_path, cu, "{ sm_90a = 204800, sm_80 = 98304 }"))
    assert _exports(spec) == {"sm_90a_cubin": 204800, "sm_80_cubin": 98304, "sm_90a": 204800}
    # Building for fewer archs (e.g. `--arch sm_80`) keeps the table: sm_80 is still sized.
    assert _exports(spec.with_archs(["sm_80"])) == {"sm_80_cubin": 98304, "sm_80": 98304}


def test_toml_table_naming_an_arch_the_module_does_not_build(tmp_path, cu):
    # sm_90 for sm_90a: the sm_90a variant would otherwise be unsized.
    with pytest.raises(SpecError, match=r"shared_memory gives a size for sm_90, which the module doesn't build \(archs: sm_90a, sm_80\)"):
        load_spec(_toml(tmp_path, cu, "{ sm_90 = 204800, sm_80 = 98304 }"))


def test_out_form_keeps_the_table(cu):
    (k,) = _spec(cu, {"sm_90a": HOPPER, "sm_80": AMPERE}).kernels
    assert k.with_outputs_in_place().shared_memory_by_arch == k.shared_memory_by_arch


@needs_build_tools
def test_table_compiles(tmp_path, cu):
    from iree_dispatch.backend.compile import parse_check

    spec = _spec(cu, {"sm_90a": HOPPER, "sm_80": AMPERE})
    paths = {(s, v.name): f"objects/{v.object_filename(s.stem)}" for s in spec.sources for v in spec.variants}
    parse_check(emit_module(CompiledObjects.of(spec, paths, {k.name: k.name for k in spec.kernels}, ())), "m.mlir")


# ---- a size over the problem's dimensions, with its declared bound ----

FLASH = 'extern "C" __global__ void attend(const float* q, float* out, int Br, int Bc, int d) {}\n'
FLASH_SIZE = "(3*Bc*d + Bc*Br)*4"


def _flash(cu, shared_memory, archs=("sm_90a", "sm_80")) -> ModuleSpec:
    k = KernelSpec.declare(cu(FLASH), "attend", block=[128], grid="Br", shape=["n", "d"], shared_memory=shared_memory)
    return ModuleSpec("m", (k,), tuple(parse_archs(list(archs))), objects="ptx")


def _mlir(spec: ModuleSpec) -> str:
    paths = {(s, v.name): f"objects/{v.object_filename(s.stem)}" for s in spec.sources for v in spec.variants}
    return emit_module(CompiledObjects.of(spec, paths, {k.name: k.name for k in spec.kernels}, ()))


def test_a_size_over_dims_exports_its_bound_and_each_call_is_checked(cu):
    spec = _flash(cu, {"size": FLASH_SIZE, "max": 49152})
    (k,) = spec.kernels
    assert k.shared_memory == 49152 and str(k.shared_memory_size) == "((((3 * Bc) * d) + (Bc * Br)) * 4)"
    # The export declares the bound on every arch: IREE fixes one size per export.
    assert _exports(spec) == {"sm_90a": 49152, "sm_80": 49152}
    description = k.describe()
    assert (description.shared_memory, description.shared_memory_size) == (49152, str(k.shared_memory_size))
    # Each call: the size for its values, held to the bound, naming the values when beyond it.
    assert description.shared_memory_for_call({"Br": 32, "Bc": 32, "d": 96}) == (3 * 32 * 96 + 32 * 32) * 4
    assert description.shared_memory_for_call({"Br": 96, "Bc": 32, "d": 96}) == 49152  # at the bound
    with pytest.raises(ValueError, match=r"attend\(\): shared memory .* = 49536 bytes for Bc = 32, d = 97, Br = 96, beyond its declared max of 49152 bytes"):
        description.shared_memory_for_call({"Br": 96, "Bc": 32, "d": 97})
    # The generated function checks the same before its dispatch.
    mlir = _mlir(spec)
    assert f'"attend: shared memory {k.shared_memory_size} exceeds its declared max of 49152 bytes"' in mlir
    assert "arith.constant 49152 : index" in mlir


def test_the_description_round_trips_the_size(cu):
    from iree_dispatch.core.contract import KernelDescription, decode, encode

    (k,) = _flash(cu, {"size": "Bc * d * 4 + block_x", "max": 65536}).kernels
    again = decode(KernelDescription, encode(k.describe()), "m")
    assert again.shared_memory_size == k.describe().shared_memory_size and again.shared_memory == 65536
    # block_x is the block's: 128.
    assert again.shared_memory_for_call({"Bc": 2, "d": 8, "Br": 1}) == 2 * 8 * 4 + 128


def test_the_bound_is_checked_against_each_arch(cu):
    with pytest.raises(SpecError, match=r"shared_memory 200000 bytes exceeds the 166912 bytes a block can have on sm_80"):
        _flash(cu, {"size": FLASH_SIZE, "max": 200000})
    assert _exports(_flash(cu, {"size": FLASH_SIZE, "max": 200000}, archs=("sm_90a",))) == {"sm_90a": 200000}


def test_a_size_over_dims_without_a_bound_is_refused_with_how_to_declare_one(cu):
    with pytest.raises(SpecError, match=r"shared_memory uses 'Bc' \(from argument Bc\), a size: IREE fixes the dynamic shared memory per kernel, not per launch, "
                                        r"so declare its upper bound: shared_memory = \{ size = \"\(3\*Bc\*d \+ Bc\*Br\)\*4\", max = <bytes> \}"):
        _flash(cu, FLASH_SIZE)


@pytest.mark.parametrize("shared_memory, message", [
    ({"size": FLASH_SIZE}, r"given as \{ size = \"<expression>\", max = <bytes> \} \(both keys, nothing else\)"),
    ({"size": FLASH_SIZE, "max": 0}, "max must be a positive number of bytes, got 0"),
    ({"size": FLASH_SIZE, "max": "49152"}, "max must be a positive number of bytes, got '49152'"),
    ({"size": "m * 4", "max": 4096}, r"shared_memory size uses 'm', which is neither block_x, block_y, block_z nor a size"),
    ({"size": "block_x * 4", "max": 4096}, r"depends on no size \(512 bytes\); give it as shared_memory = 512"),
    ({"size": "Bc // (d - d)", "max": 4096}, "divides by"),
])
def test_malformed_bounded_sizes(cu, shared_memory, message):
    with pytest.raises(SpecError, match=message):
        _flash(cu, shared_memory)


def test_toml_bounded_size_and_out_form(tmp_path, cu):
    cu(FLASH, "attend.cu")
    path = tmp_path / "m.toml"
    path.write_text('[module]\narchs = ["sm_80"]\n[[kernel]]\nname = "attend"\nsource = "attend.cu"\nblock = [128]\ngrid = ["Br"]\nshape = ["n", "d"]\n'
                    f'shared_memory = {{ size = "{FLASH_SIZE}", max = 99000 }}\n')
    (k,) = load_spec(path).kernels
    assert (k.shared_memory, str(k.shared_memory_size)) == (99000, "((((3 * Bc) * d) + (Bc * Br)) * 4)")
    # Declared again (the out= form, roles read from the PTX) keeps the size and its bound.
    moved = k.with_outputs_in_place()
    assert (moved.shared_memory, moved.shared_memory_size) == (k.shared_memory, k.shared_memory_size)


# ---- fresh outputs zero-filled before the kernel ----

HISTOGRAM = 'extern "C" __global__ void histogram(const int* values, float* bins, float* total, int* seen, int n, int nbins) {}\n'


def _histogram(cu, **kw) -> KernelSpec:
    kw.setdefault("shapes", {"values": ["n"], "bins": ["nbins"], "total": [1], "seen": ["n"]})
    return KernelSpec.declare(cu(HISTOGRAM), "histogram", block=[64], grid="ceildiv(n, 64)", **kw)


def test_zeroed_outputs_are_filled_by_the_generated_function(cu):
    k = _histogram(cu, zero=["bins", "total"])
    assert k.zero == ("bins", "total") and "bins" not in k.inferred  # a zeroed pointer is a fresh output by declaration
    assert [(t.name, t.zero) for t in k.describe().outputs] == [("bins", True), ("total", True), ("seen", False)]
    mlir = _mlir(ModuleSpec("m", (k,), tuple(parse_archs(["sm_80"])), objects="ptx"))
    # Zero bytes, bitcast to the output's type; each zeroed output a byte tensor of its own rank,
    # so IREE can't merge two into one buffer; the others are plain allocations.
    assert "%bins.init.bytes = flow.tensor.splat %t.c0_i8 : tensor<?xi8>{" in mlir
    assert re.search(r"%bins.init = flow.tensor.bitcast %bins.init.bytes : tensor<\?xi8>\{%t.\d+\} -> tensor<\?xf32>\{%t.\d+\}", mlir)
    assert "%total.init.bytes = flow.tensor.splat %t.c0_i8 : tensor<1x?xi8>{%t.c4}" in mlir
    assert "%total.init = flow.tensor.bitcast %total.init.bytes : tensor<1x?xi8>{%t.c4} -> tensor<1xf32>" in mlir
    assert "%seen.init = flow.tensor.alloca : tensor<?xi32>" in mlir
    dispatch = next(line for line in mlir.splitlines() if "flow.dispatch" in line)
    assert "-> (%bins.init{" in dispatch and "%total.init, %seen.init{" in dispatch


@pytest.mark.parametrize("source, kw, message", [
    (HISTOGRAM, {"zero": ["values"]}, r"zero = \[\"values\"\] zero-fills a fresh output before the kernel runs, but 'values' points to const data \(an input\): "
                                      r"zeroing it would destroy the caller's data"),
    (HISTOGRAM, {"zero": ["bins"], "inplace": ["bins"]}, r"'bins' is listed in inplace, so the caller passes it in: zeroing it would destroy the caller's data"),
    (HISTOGRAM, {"zero": ["seen"], "readonly": ["seen"]}, r"'seen' is listed in readonly"),
    (HISTOGRAM, {"zero": ["n"]}, r"zero names 'n', but the signature declares it as a scalar"),
    (HISTOGRAM, {"zero": ["nope"]}, r"zero names 'nope', which is not a parameter"),
    (HISTOGRAM, {"zero": "bins"}, r"zero must be a list of parameter names"),
])
def test_zero_refusals(cu, source, kw, message):
    with pytest.raises(SpecError, match=message):
        _histogram(cu, **kw)


def test_zero_and_the_out_form(cu):
    with pytest.raises(SpecError, match=r"zero = \[\"bins\"\] zero-fills fresh outputs, but the out= form writes into the caller's buffers"):
        _histogram(cu, zero=["bins"]).with_outputs_in_place()


def test_toml_zero(tmp_path, cu):
    cu(HISTOGRAM, "h.cu")
    path = tmp_path / "m.toml"
    path.write_text('[[kernel]]\nname = "histogram"\nsource = "h.cu"\nblock = [64]\ngrid = ["n"]\nshape = ["n"]\nshapes = { bins = ["nbins"] }\nzero = ["bins"]\n')
    (k,) = load_spec(path).kernels
    assert k.zero == ("bins",)


# ---- kernels with no tensor result ----

@pytest.mark.parametrize("source, message", [
    ('extern "C" __global__ void hello(int n) {}', r"kernel hello: the kernel has no pointer parameter, so it has no tensor result; IREE runs a kernel for "
                                                   r"the tensors its generated function returns \(a dispatch with no result is removed as dead code\)"),
    ('extern "C" __global__ void hello(const float* a, const int* b, int n) {}', r"kernel hello: the kernel writes no tensor \(every pointer, a, b, is const or "
                                                                                 r"readonly\), so it has no result; IREE removes a dispatch with no result"),
])
def test_kernels_with_no_tensor_result(cu, source, message):
    with pytest.raises(SpecError, match=message):
        KernelSpec.declare(cu(source), "hello", block=[64], grid="1", shape=["n"])


@needs_build_tools
def test_two_zeroed_outputs_of_one_shape_keep_buffers_of_their_own(tmp_path, cu):
    # Equal splats would be merged into one value, tied to both results: one buffer for two outputs.
    from iree_dispatch.backend.compile import parse_check

    from ..support.flow_check import flow_ir, shared_results

    source = 'extern "C" __global__ void two(const float* a, float* x, float* y, int n) {}\n'
    k = KernelSpec.declare(cu(source), "two", block=[64], grid="ceildiv(n, 64)", shape=["n"], zero=["x", "y"],
                           shared_memory={"size": "n * 4", "max": 4096})
    mlir = _mlir(ModuleSpec("m", (k,), tuple(parse_archs(["sm_80"])), objects="ptx"))
    parse_check(mlir, "m.mlir")
    path = tmp_path / "m.mlir"
    path.write_text(mlir)
    flow = flow_ir(path, ["--iree-hal-target-device=cuda"])
    assert shared_results(flow) == []
    assert flow.count("flow.tensor.splat") == 2
