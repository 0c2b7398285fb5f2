"""Object policies (PTX / cubin / fatbin): variant planning, conditions and what the vmfb holds."""

import re

import pytest

from iree_dispatch.backend.pipeline import build
from iree_dispatch.core.archs import parse_archs
from iree_dispatch.core.errors import SpecError
from iree_dispatch.core.variants import plan_variants
from iree_dispatch.frontend.spec_file import load_spec

from ..support.environment import SAMPLES_SPEC, needs_build_tools

ARCHS = tuple(parse_archs(["sm_80", "sm_90"]))


def chosen(policy, archs, capability):
    """The variant IREE picks: the first whose condition holds."""
    return next((v.name for v in plan_variants(archs, policy) if v.runs_on(*capability)), None)


@pytest.mark.parametrize(
    "policy, capability, variant",
    [
        ("ptx", (9, 0), "sm_90"), ("ptx", (8, 6), "sm_80"), ("ptx", (10, 0), "sm_90"), ("ptx", (7, 5), None),
        ("cubin", (9, 0), "sm_90_cubin"), ("cubin", (8, 6), "sm_80_cubin"), ("cubin", (8, 0), "sm_80_cubin"),
        ("cubin", (10, 0), "sm_90"), ("cubin", (12, 0), "sm_90"), ("cubin", (7, 0), None),
        ("fatbin", (9, 0), "fatbin"), ("fatbin", (8, 9), "fatbin"), ("fatbin", (10, 0), "fatbin"), ("fatbin", (7, 5), None),
    ],
)
def test_each_gpu_gets_the_best_object_it_can_run(policy, capability, variant):
    assert chosen(policy, ARCHS, capability) == variant


def test_arch_specific_targets_run_only_on_their_arch():
    archs = tuple(parse_archs(["sm_90a", "sm_80"]))
    assert chosen("cubin", archs, (9, 0)) == "sm_90a_cubin"
    assert chosen("cubin", archs, (10, 0)) is None  # sm_90a PTX does not JIT forward
    assert chosen("ptx", archs, (10, 0)) == "sm_80"


def test_unknown_policy():
    with pytest.raises(SpecError, match="objects = 'elf'; choose one of ptx, cubin, fatbin"):
        load_spec(SAMPLES_SPEC).with_objects("elf")


@needs_build_tools
@pytest.mark.parametrize("policy", ["cubin", "fatbin"])
def test_binary_objects_are_built_and_embedded(policy, tmp_path):
    result = build(load_spec(SAMPLES_SPEC).with_objects(policy), tmp_path / "s.vmfb", emit_mlir=tmp_path / "s.mlir")
    ir = result.mlir.read_text()
    names = sorted(p.name for p in result.objects_dir.iterdir())
    data = result.vmfb.read_bytes()
    if policy == "cubin":
        assert re.findall(r"variant public @(\w+)", ir)[:3] == ["sm_90_cubin", "sm_80_cubin", "sm_90"]
        assert {"simple_mul.sm_90.cubin", "simple_mul.sm_80.cubin", "simple_mul.sm_90.ptx"} <= set(names)
        assert (result.objects_dir / "simple_mul.sm_90.cubin").read_bytes()[:4] == b"\x7fELF"
        assert data.count(b"\x7fELF") >= 4  # two cubins per source
    else:
        assert re.findall(r"variant public @(\w+)", ir)[:2] == ["fatbin", "fatbin"]  # one per source
        fatbin = (result.objects_dir / "simple_mul.fatbin").read_bytes()
        assert fatbin[:4] == bytes.fromhex("50ed55ba")  # the fatbin magic
        assert fatbin in data


@needs_build_tools
def test_embedded_objects_compile_in_an_empty_folder(tmp_path):
    """--embed-objects: the MLIR alone is enough for plain iree-compile, and gives the same vmfb."""
    import subprocess

    from iree.compiler.tools.binaries import find_tool

    spec = load_spec(SAMPLES_SPEC)
    result = build(spec, tmp_path / "b" / "s.vmfb", emit_mlir=tmp_path / "b" / "s.mlir", embed_objects=True)
    ir = result.mlir.read_text()
    assert ir.count('data = dense<"0x') == 6 and ', data = dense<"0x7F454C46' in ir  # cubins start with \x7fELF
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "s.mlir").write_text(ir)
    subprocess.run([find_tool("iree-compile"), "--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80",
                    "--iree-input-demote-f64-to-f32=false", "s.mlir", "-o", "s.vmfb"], check=True, cwd=empty)
    assert (empty / "s.vmfb").read_bytes() == result.vmfb.read_bytes()
    linked = build(spec, tmp_path / "p" / "p.vmfb", emit_mlir=tmp_path / "p" / "p.mlir", program=SAMPLES_SPEC.parent.parent / "mlir" / "mixed_invocation.mlir", embed_objects=True)
    assert 'data = dense<"0x' in linked.mlir.read_text()
