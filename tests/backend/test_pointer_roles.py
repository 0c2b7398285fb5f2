"""How a non-const pointer's role is decided (backend/ptx_roles.py): the PTX analysis on
hand-written PTX (every way an address moves and every kind of access), the roles the build
gives real kernels in the non-const-input style (tests/support/artifacts/nonconst.py), declarations the PTX
contradicts, and what `inspect` shows. The GPU half is tests/backend/test_gpu_pointer_roles.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from iree_dispatch.backend.ptx_roles import pointer_uses
from iree_dispatch.core.errors import AbiError

from ..support.environment import needs_build_tools


def entry(body: str, params: int = 2, functions: str = "") -> str:
    """A PTX module with `functions` and one entry `k` of `params` u64 parameters."""
    decls = ",\n".join(f"  .param .u64 k_param_{i}" for i in range(params))
    return f".version 9.0\n.target sm_80\n.address_size 64\n{functions}\n.visible .entry k(\n{decls}\n)\n{{\n  .reg .b64 %rd<40>;\n{body}\n  ret;\n}}\n"


def roles(ptx: str) -> dict[int, str]:
    """Parameter index → "r", "w", "rw" or "?" (unknown)."""
    return {i: "?" if u.unknown else ("r" if u.read else "") + ("w" if u.written else "") for i, u in pointer_uses(ptx, "k").items()}


LOADS = """
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd2, [k_param_1];
  cvta.to.global.u64 %rd3, %rd1;
  cvta.to.global.u64 %rd4, %rd2;
"""


def test_a_load_reads_and_a_store_writes_through_derived_addresses():
    ptx = entry(LOADS + "  mul.wide.s32 %rd5, %r1, 4;\n  add.s64 %rd6, %rd3, %rd5;\n  ld.global.nc.f32 %f1, [%rd6+8];\n"
                "  mad.lo.s64 %rd7, %rd5, 2, %rd4;\n  st.global.f32 [%rd7], %f1;")
    assert roles(ptx) == {0: "r", 1: "w"}


def test_a_loaded_value_carries_no_pointer():
    # The data read through param 0 is used as an index into param 1: only param 1 is written.
    ptx = entry(LOADS + "  ld.global.u64 %rd8, [%rd3];\n  add.s64 %rd9, %rd4, %rd8;\n  st.global.u32 [%rd9], 1;")
    assert roles(ptx) == {0: "r", 1: "w"}


def test_selp_and_moves_join_both_parameters():
    ptx = entry(LOADS + "  selp.b64 %rd5, %rd3, %rd4, %p1;\n  mov.b64 %rd6, %rd5;\n  ld.global.f32 %f1, [%rd6];", params=2)
    assert roles(ptx) == {0: "r", 1: "r"}


def test_a_loop_carried_address_is_followed():
    body = LOADS + "$L__BB0_1:\n  ld.global.f32 %f1, [%rd10];\n  add.s64 %rd10, %rd11, 4;\n  @%p1 bra $L__BB0_1;\n  mov.u64 %rd11, %rd10;\n  add.s64 %rd10, %rd3, 0;"
    assert roles(entry(body)) == {0: "r"}


def test_atomics_and_reductions_read_and_write():
    assert roles(entry(LOADS + "  atom.global.add.u32 %r1, [%rd3], 1;\n  red.global.add.f32 [%rd4+4], %f1;")) == {0: "rw", 1: "rw"}


def test_copies_read_their_source_and_write_their_destination():
    ptx = entry(LOADS + "  cp.async.ca.shared.global [%r1], [%rd3], 16;\n  cp.async.bulk.global.shared::cta.bulk_group [%rd4], [%r2], 64;")
    assert roles(ptx) == {0: "r", 1: "w"}


def test_a_spill_to_local_memory_and_back_is_followed():
    body = LOADS + ("  .local .align 8 .b8 __local_depot0[16];\n  mov.u64 %SPL, __local_depot0;\n  st.local.u64 [%SPL+8], %rd3;\n"
                    "  ld.local.u64 %rd12, [%SPL+8];\n  st.global.f32 [%rd12], %f1;")
    assert roles(entry(body)) == {0: "w"}


def test_device_function_calls_carry_arguments_and_results():
    functions = """
.func (.param .b64 func_retval0) shift(.param .b64 shift_param_0)
{
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [shift_param_0];
  add.s64 %rd2, %rd1, 16;
  st.param.b64 [func_retval0+0], %rd2;
  ret;
}
.func put(.param .b64 put_param_0)
{
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [put_param_0];
  st.global.f32 [%rd1], %f1;
  ret;
}
"""
    body = LOADS + """
  { // callseq 0, 0
  .param .b64 param0;
  st.param.b64 [param0+0], %rd3;
  .param .b64 retval0;
  call.uni (retval0), shift, (param0);
  ld.param.b64 %rd20, [retval0+0];
  } // callseq 0
  ld.global.f32 %f2, [%rd20];
  { // callseq 1, 0
  .param .b64 param0;
  st.param.b64 [param0+0], %rd4;
  call.uni put, (param0);
  } // callseq 1
"""
    assert roles(entry(body, functions=functions)) == {0: "r", 1: "w"}


@pytest.mark.parametrize("body", [
    "  st.shared.u64 [%r1], %rd3;",  # stored where another thread can load it
    "  st.global.u64 [%rd4], %rd3;",
    "  atom.global.exch.b64 %rd9, [%rd4], %rd3;",
    "  .param .b64 param0;\n  st.param.b64 [param0+0], %rd3;\n  call.uni (retval0), %rd30, (param0), prototype_0;",  # indirect call
    "  .param .b64 param0;\n  st.param.b64 [param0+0], %rd3;\n  call.uni elsewhere, (param0);",  # defined in another module
    "  mbarrier.init.shared.b64 [%rd3], 1;",  # an instruction the analysis doesn't classify
])
def test_an_address_that_escapes_is_unknown(body):
    assert roles(entry(LOADS + body))[0] == "?"


def test_printf_keeps_no_pointer():
    functions = ".extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);"
    body = LOADS + ("  .local .align 8 .b8 __local_depot0[8];\n  mov.u64 %SPL, __local_depot0;\n  cvta.local.u64 %SP, %SPL;\n"
                    "  st.local.u64 [%SPL], %rd1;\n  add.u64 %rd5, %SP, 0;\n  .param .b64 param0;\n  st.param.b64 [param0+0], %rd9;\n"
                    "  .param .b64 param1;\n  st.param.b64 [param1+0], %rd5;\n  call.uni (retval0), vprintf, (param0, param1);\n"
                    "  st.global.f32 [%rd3], %f1;")
    assert roles(entry(body, functions=functions)) == {0: "w"}


def test_debug_line_directives_hide_no_instruction():
    ptx = entry(LOADS + "  .loc 1 12 0\n  ld.global.f32 %f1, [%rd3];\n  .loc 1 13 0\n  st.global.f32 [%rd4], %f1;")
    assert roles(ptx) == {0: "r", 1: "w"}


# --- the build --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nonconst(tmp_path_factory):
    """The non-const-input kernels built once, with what the build said."""
    from ..support.artifacts.nonconst import build_all

    said: list[str] = []
    paths = build_all(tmp_path_factory.mktemp("nonconst"), progress=said.append)
    return paths, said


@needs_build_tools
def test_each_pointer_gets_the_role_its_ptx_shows(nonconst):
    from iree_dispatch.runtime import read_descriptions

    from ..support.artifacts.nonconst import EXPECTED_ROLES

    paths, said = nonconst
    _, descriptions = read_descriptions(paths["nonconst"])
    for kernel, expected in EXPECTED_ROLES.items():
        d = descriptions[kernel]
        got = {t.name: "input" for t in d.inputs}
        got.update({t.name: "inplace" if t.inplace else "output" for t in d.outputs})
        assert got == expected, kernel
    assert [line for line in said if "can't tell" in line and "kernel pick" in line and "stored to memory" in line]
    assert any(line.startswith("kernel transpose_naive: pointer roles read from its PTX: odata output, idata input") for line in said)


@needs_build_tools
def test_the_poisonable_build_takes_every_output_and_keeps_inputs_inputs(nonconst):
    from iree_dispatch.runtime import read_descriptions

    paths, _ = nonconst
    _, descriptions = read_descriptions(paths["nonconst_poisonable"])
    transpose = descriptions["transpose_naive"]
    assert [t.name for t in transpose.inputs] == ["odata", "idata"]
    assert [(t.name, t.inplace) for t in transpose.outputs] == [("odata", True)]


@needs_build_tools
def test_inspect_shows_no_empty_parameter_slot(nonconst, capsys):
    from iree_dispatch.cli import main

    paths, _ = nonconst
    assert main(["inspect", str(paths["nonconst"])]) == 0
    out = capsys.readouterr().out
    assert "kernel transpose_naive(idata: f32[height, width]) -> (odata: f32[width, height])" in out
    assert "(," not in out and ", ," not in out and ", )" not in out


def _build(tmp_path, name, **declared):
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

    from ..support.artifacts.nonconst import NONCONST_CU

    k = KernelSpec.declare(NONCONST_CU, name, **declared)
    return build(ModuleSpec("m", (k,)), tmp_path / "m.vmfb", cache=False)


TRANSPOSE = dict(block=[32, 8], grid=["ceildiv(width, 32)", "ceildiv(height, 32)"], shapes={"odata": ["width", "height"], "idata": ["height", "width"]})


@needs_build_tools
def test_an_output_the_kernel_reads_fails_the_build(tmp_path):
    with pytest.raises(AbiError, match=r"outputs declares 'idata' a fresh output.*reads it.*inplace = \[\"idata\"\]"):
        _build(tmp_path, "transpose_naive", outputs=["idata"], **TRANSPOSE)
    assert not (tmp_path / "m.vmfb").exists()


@needs_build_tools
def test_a_readonly_pointer_the_kernel_writes_fails_the_build(tmp_path):
    with pytest.raises(AbiError, match=r"readonly declares 'y' read-only, but the kernel writes it.*inplace = \[\"y\"\]"):
        _build(tmp_path, "saxpy", block=256, grid="ceildiv(n, 256)", shape=["n"], readonly=["y"])


@needs_build_tools
def test_declarations_the_ptx_agrees_with_are_kept(tmp_path):
    from iree_dispatch.runtime import read_descriptions

    result = _build(tmp_path, "transpose_naive", outputs=["odata"], readonly=["idata"], **TRANSPOSE)
    d = read_descriptions(result.vmfb)[1]["transpose_naive"]
    assert [t.name for t in d.inputs] == ["idata"] and [t.name for t in d.outputs] == ["odata"]


@needs_build_tools
def test_a_named_output_dim_only_an_input_could_define_fails_at_build(tmp_path):
    from iree_dispatch.core.errors import SpecError

    with pytest.raises(SpecError, match="blocks"):
        _build(tmp_path, "block_sums", block=256, grid="ceildiv(n, 256)", shapes={"g_idata": ["n"], "g_odata": ["blocks"]})


def test_outputs_are_declared_by_name_and_checked():
    from iree_dispatch.core.errors import SpecError
    from iree_dispatch.frontend.spec import KernelSpec

    from ..support.artifacts.nonconst import NONCONST_CU

    with pytest.raises(SpecError, match="'x' is listed both in readonly and outputs"):
        KernelSpec.declare(NONCONST_CU, "saxpy", block=256, grid="ceildiv(n, 256)", shape=["n"], readonly=["x"], outputs=["x"])
    with pytest.raises(SpecError, match="outputs names 'n'"):
        KernelSpec.declare(NONCONST_CU, "saxpy", block=256, grid="ceildiv(n, 256)", shape=["n"], outputs=["n"])
    k = KernelSpec.declare(NONCONST_CU, "saxpy", block=256, grid="ceildiv(n, 256)", shape=["n"], readonly=["x"])
    assert k.inferred == ("y",)


def test_a_pointer_chosen_by_a_predicate_taints_no_data():
    # The predicate comes from the address's alignment; the values selp picks between are data.
    ptx = entry(LOADS + "  cvt.u32.u64 %r1, %rd4;\n  and.b32 %r2, %r1, 15;\n  setp.eq.s32 %p1, %r2, 0;\n  selp.b32 %r3, %r4, %r5, %p1;\n"
                "  st.global.u32 [%rd4], %r3;\n  st.global.u32 [%rd3], %r2;")
    assert roles(ptx) == {0: "w", 1: "w"}


def test_an_address_aligned_down_stays_an_address():
    ptx = entry(LOADS + "  and.b64 %rd5, %rd3, -16;\n  ld.global.f32 %f1, [%rd5];")
    assert roles(ptx) == {0: "r"}


TENSOR_MAPS = LOADS + """
  tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%r1], %rd3;
  tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.cta.sync.aligned [%rd4], [%r1], 128;
  fence.proxy.tensormap::generic.acquire.cta [%rd4], 128;
  cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r2], [%rd4, {%r3, %r4}], [%r5];
"""


def test_tensor_maps_a_kernel_writes_into_a_buffer_are_its_own():
    # Param 0's address goes into a map (untraceable); param 1 holds the maps, read back by the
    # copy and the fence, and is otherwise only written.
    assert roles(entry(TENSOR_MAPS + "  st.global.f32 [%rd4+512], %f1;")) == {0: "?", 1: "w"}


def test_a_tensor_map_read_from_caller_memory_is_a_read():
    body = LOADS + "  cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r2], [%rd4, {%r3, %r4}], [%r5];"
    assert roles(entry(body)) == {1: "r"}


@needs_build_tools
def test_library_kernels_keep_their_outputs(tmp_path):
    """Kernels of kernels/ whose outputs hold their own TMA maps, or whose stores depend on an
    output's alignment, still have fresh outputs."""
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec_file import load_spec
    from iree_dispatch.runtime import read_descriptions

    root = Path(__file__).resolve().parents[2]
    for spec in ("gemm.toml", "gemm_nt.toml"):
        said: list[str] = []
        result = build(load_spec(root / "kernels" / spec), tmp_path / f"{spec}.vmfb", progress=said.append)
        assert not [line for line in said if "can't tell" in line], said
        for d in read_descriptions(result.vmfb)[1].values():
            assert not any(t.inplace for t in d.outputs), d.name


@needs_build_tools
def test_machine_code_alone_makes_an_undeclared_pointer_in_place(tmp_path):
    import subprocess

    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec
    from iree_dispatch.runtime import read_descriptions
    from iree_dispatch.toolchains import find_nvcc

    from ..support.artifacts.nonconst import NONCONST_CU

    cubin = tmp_path / "k.sm_90.cubin"
    subprocess.run([str(find_nvcc()), "-cubin", "-arch=sm_90", str(NONCONST_CU), "-o", str(cubin)], check=True, capture_output=True)
    signature = "void block_sums(float* g_idata, float* g_odata, unsigned int n)"
    said: list[str] = []
    k = KernelSpec.declare([cubin], "block_sums", signature=signature, block=256, grid="ceildiv(n, 256)",
                           shapes={"g_idata": ["n"], "g_odata": ["m"]})
    result = build(ModuleSpec("m", (k,)), tmp_path / "m.vmfb", progress=said.append, cache=False)
    d = read_descriptions(result.vmfb)[1][k.function]
    assert [(t.name, t.inplace) for t in d.outputs] == [("g_idata", True), ("g_odata", True)]
    assert sum("no PTX to read how it uses" in line for line in said) == 2


@needs_build_tools
def test_the_command_line_says_the_roles_it_read(tmp_path, capsys):
    import shutil

    from iree_dispatch.cli import main

    from ..support.artifacts.nonconst import NONCONST_CU

    shutil.copyfile(NONCONST_CU, tmp_path / "nonconst.cu")
    (tmp_path / "t.toml").write_text('[module]\nname = "t"\narchs = ["sm_80"]\n\n[[kernel]]\nname = "transpose_naive"\nsource = "nonconst.cu"\n'
                                     'block = [32, 8]\ngrid = ["ceildiv(width, 32)", "ceildiv(height, 32)"]\n'
                                     'shapes = { odata = ["width", "height"], idata = ["height", "width"] }\n')
    assert main(["inspect", str(tmp_path / "t.toml")]) == 0
    assert "roles of odata, idata read from the PTX when built" in capsys.readouterr().out
    assert main(["build", str(tmp_path / "t.toml"), "-o", str(tmp_path / "t.vmfb")]) == 0
    assert "kernel transpose_naive: pointer roles read from its PTX: odata output, idata input" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "t.vmfb")]) == 0
    assert "kernel transpose_naive(idata: f32[height, width]) -> (odata: f32[width, height])" in capsys.readouterr().out


@needs_build_tools
def test_a_program_written_for_another_role_names_the_declaration_to_add(tmp_path):
    from iree_dispatch.backend.program import Program
    from iree_dispatch.core.errors import SpecError
    from iree_dispatch.frontend.spec import ModuleSpec

    from ..support.artifacts.nonconst import declare

    saxpy = declare("saxpy", block=256, grid="ceildiv(n, 256)", shape=["n"])
    p = Program("twice")
    p.output(*p.call(saxpy, 8, 2.0))  # until the build, x and y count as fresh outputs
    with pytest.raises(SpecError, match=r"kernel saxpy: its PTX shows 'x' is an input, but the program calls it as a fresh output.*readonly = \[\"x\"\]"):
        p.build(ModuleSpec("m", (saxpy,)), tmp_path / "p.vmfb")
    assert not (tmp_path / "p.vmfb").exists()
    declared = declare("saxpy", block=256, grid="ceildiv(n, 256)", shape=["n"], readonly=["x"], inplace=["y"])
    p = Program("once")
    x, y = p.input("x", "f32", ["n"]), p.input("y", "f32", ["n"])
    p.output(p.call(declared, x, y, 2.0))
    p.build(ModuleSpec("m", (declared,)), tmp_path / "p.vmfb")
