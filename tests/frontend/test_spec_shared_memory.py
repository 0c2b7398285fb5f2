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
