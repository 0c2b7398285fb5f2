"""The build pipeline end to end on the CPU: PTX per arch, IR, vmfb, reproducibility, and
every build failure leaving nothing behind."""

import re
import subprocess
import zipfile

import pytest

from iree_dispatch.backend.pipeline import build
from iree_dispatch.core.errors import AbiError, CompileError, ToolchainError
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec
from iree_dispatch.frontend.spec_file import load_spec

from ..support.environment import MIXED_PROGRAM, SAMPLES_SPEC, needs_build_tools

pytestmark = needs_build_tools


def vmfb_ptx_targets(vmfb_bytes: bytes) -> list[str]:
    """The `.target sm_XX` line of every PTX object embedded in a vmfb, in storage order."""
    return re.findall(rb"\.target (sm_\w+)", vmfb_bytes)


@pytest.fixture(scope="module")
def samples_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("samples")
    return build(load_spec(SAMPLES_SPEC), out / "samples.vmfb", emit_mlir=out / "samples.mlir")


def test_objects_per_source_and_arch(samples_build):
    """Default policy: a cubin per arch, and PTX (the newest arch's is the JIT fallback)."""
    names = sorted(p.name for p in samples_build.objects_dir.iterdir())
    assert names == [f"{src}.{arch}.{kind}" for src in ("axpby", "simple_mul") for arch in ("sm_80", "sm_90") for kind in ("cubin", "ptx")]
    for path in samples_build.objects_dir.glob("*.ptx"):
        assert f".target {path.name.split('.')[1]}" in path.read_text()
    for path in samples_build.objects_dir.glob("*.cubin"):
        assert path.read_bytes()[:4] == b"\x7fELF"


def test_ir_has_conditioned_variants_in_preference_order(samples_build):
    ir = samples_build.mlir.read_text()
    variants = re.findall(r"hal\.executable\.variant public @(\w+)", ir)
    assert variants == ["sm_90_cubin", "sm_80_cubin", "sm_90"] * 2  # two executables (one per .cu)
    assert ir.count("hal.executable.condition") == 6
    assert ir.count('"compute_capability_major"') == 6 and ir.count('"compute_capability_minor"') == 6
    assert "flow.dispatch {@simple_mul_cu::@sm_90_cubin::@simple_mul, @simple_mul_cu::@sm_80_cubin::@simple_mul, @simple_mul_cu::@sm_90::@simple_mul}" in ir
    assert "workgroup_size = [64 : index, 1 : index, 1 : index]" in ir


def test_vmfb_holds_one_object_per_variant(samples_build):
    data = samples_build.vmfb.read_bytes()
    assert sorted(vmfb_ptx_targets(data)) == [b"sm_90", b"sm_90"]  # the PTX fallback of each source
    assert data.count(b"\x7fELF") >= 4  # the cubins
    assert b"compute_capability_major" in data and b"compute_capability_minor" in data
    # A vmfb is also a zip archive listing each executable variant as a file.
    with zipfile.ZipFile(samples_build.vmfb) as archive:
        variants = sorted(name for name in archive.namelist() if name != "module.fb")
    assert variants == [f"{src}_cu_{v}.fb" for src in ("axpby", "simple_mul") for v in ("sm_80_cubin", "sm_90", "sm_90_cubin")]


def test_vmfb_functions_and_descriptions(samples_build):
    from iree_dispatch.runtime import read_descriptions

    name, descriptions = read_descriptions(samples_build.vmfb)
    assert name == "samples" and set(descriptions) == {"simple_mul", "simple_mul_inplace", "axpby"}
    assert [s.to_dict() for s in descriptions["axpby"].scalars] == [
        {"bytes": 4, "ctype": "float", "kind": "float", "name": "alpha", "fields": []},
        {"bytes": 4, "ctype": "float", "kind": "float", "name": "beta", "fields": []},
    ]
    assert descriptions["simple_mul"].archs == ("sm_90", "sm_80")


def test_rebuild_is_byte_identical(samples_build, tmp_path):
    again = build(load_spec(SAMPLES_SPEC), tmp_path / "samples.vmfb", emit_mlir=tmp_path / "samples.mlir", cache=False)
    assert again.mlir.read_bytes() == samples_build.mlir.read_bytes()
    assert again.vmfb.read_bytes() == samples_build.vmfb.read_bytes()


def test_emitted_ir_compiles_with_plain_iree_compile(samples_build, tmp_path):
    """The documented command line, run on the emitted file, gives the same vmfb."""
    from iree.compiler.tools.binaries import find_tool

    out = tmp_path / "plain.vmfb"
    subprocess.run(
        [find_tool("iree-compile"), "--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80",
         "--iree-hal-executable-object-search-path=.", samples_build.mlir.name, "-o", str(out)],
        check=True, cwd=samples_build.mlir.parent,
    )
    assert out.read_bytes() == samples_build.vmfb.read_bytes()


def test_mixed_program_links_and_compiles(tmp_path):
    result = build(load_spec(SAMPLES_SPEC), tmp_path / "mixed.vmfb", emit_mlir=tmp_path / "mixed.mlir", program=MIXED_PROGRAM)
    ir = result.mlir.read_text()
    assert "func.func @mixed_invocation" in ir and "arith.addf" in ir
    assert "func.func private @samples.simple_mul(" in ir and "func.func private @samples.simple_mul_inplace(" in ir
    from iree_dispatch.runtime import read_descriptions

    assert read_descriptions(result.vmfb) == ("mixed_invocation", {"mixed_invocation": None})


def test_sm100_listed_first_when_asked(tmp_path):
    spec = load_spec(SAMPLES_SPEC).with_archs(["sm_80", "sm_100", "sm_90"])
    result = build(spec, tmp_path / "s.vmfb", emit_mlir=tmp_path / "s.mlir")
    assert re.findall(r"variant public @(\w+)", result.mlir.read_text())[:4] == ["sm_100_cubin", "sm_90_cubin", "sm_80_cubin", "sm_100"]


def _assert_nothing_left(folder, before):
    assert sorted(p.name for p in folder.iterdir()) == before


def test_nvcc_error_reports_file_and_line_and_leaves_nothing(tmp_path, cu):
    src = cu('extern "C" __global__ void k(float* out, int n) {\n  out[0] = undefined_name;\n}\n')
    spec = ModuleSpec("m", (KernelSpec.declare(src, "k", block=64, grid="n", shape=["n"]),))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ToolchainError) as err:
        build(spec, out / "m.vmfb", emit_mlir=out / "m.mlir")
    assert f"{src}(2): error" in str(err.value) and "undefined_name" in str(err.value)
    _assert_nothing_left(out, [])


def test_kernel_missing_from_ptx(tmp_path, cu):
    # The declaration parser doesn't preprocess; nvcc does, and the entry isn't in the PTX.
    src = cu('#if 0\nextern "C" __global__ void k(float* out, int n) {}\n#endif\nextern "C" __global__ void other(float* o) {}\n')
    spec = ModuleSpec("m", (KernelSpec.declare(src, "k", block=64, grid="n", shape=["n"]),))
    with pytest.raises(AbiError, match=r"no PTX entry named 'k' \(entries: other\)"):
        build(spec, tmp_path / "m.vmfb")
    assert list(tmp_path.iterdir()) == [src]


def test_signature_changed_after_spec_was_written(tmp_path, cu):
    src = cu('extern "C" __global__ void k(float* out, int n) {}\n')
    spec = ModuleSpec("m", (KernelSpec.declare(src, "k", block=64, grid="n", shape=["n"]),))
    src.write_text('extern "C" __global__ void k(float* out, int n, int extra) {}\n')
    with pytest.raises(AbiError, match="signature has 2 parameters but the PTX entry has 3"):
        build(spec, tmp_path / "m.vmfb")


def test_nvcc_flags_are_applied(tmp_path, cu):
    src = cu('extern "C" __global__ void k(float* out, int n) { int unused; }\n')
    kernel = KernelSpec.declare(src, "k", block=64, grid="n", shape=["n"])
    build(ModuleSpec("ok", (kernel,)), tmp_path / "ok.vmfb")
    strict = ModuleSpec("strict", (kernel,), nvcc_flags=("-Werror", "all-warnings"))
    with pytest.raises(ToolchainError, match="unused"):
        build(strict, tmp_path / "strict.vmfb")
    assert not (tmp_path / "strict.vmfb").exists()


def test_program_declaring_a_wrong_signature(tmp_path):
    program = tmp_path / "p.mlir"
    program.write_text(
        "module @p {\n"
        "  func.func private @samples.simple_mul(tensor<?xf32>) -> tensor<?xf32>\n"
        "  func.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {\n"
        "    %r = func.call @samples.simple_mul(%a) : (tensor<?xf32>) -> tensor<?xf32>\n"
        "    return %r : tensor<?xf32>\n  }\n}\n"
    )
    with pytest.raises(CompileError, match=r"p.mlir:2:\d+: @samples.simple_mul is declared as \(tensor<\?xf32>\) -> tensor<\?xf32>, but"):
        build(load_spec(SAMPLES_SPEC), tmp_path / "p.vmfb", program=program)
    program.write_text(program.read_text().replace("simple_mul", "simple_div"))
    with pytest.raises(CompileError, match="module samples has no kernel 'simple_div'"):
        build(load_spec(SAMPLES_SPEC), tmp_path / "p.vmfb", program=program)
    assert not (tmp_path / "p.vmfb").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.mlir"]


def test_parameter_and_size_names_never_clash_with_generated_names(tmp_path, cu):
    src = cu('extern "C" __global__ void k(const float* device, float* result, float* results, int t) {}')
    kernel = KernelSpec.declare(src, "k", block=32, grid="ceildiv(device, 32)", shapes={"device": ["device"], "result": ["device"], "results": ["device"]})
    build(ModuleSpec("m", (kernel,)), tmp_path / "m.vmfb")
