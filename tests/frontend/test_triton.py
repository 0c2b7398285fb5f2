"""Triton kernels compiled offline (iree_dispatch.frontend.triton): signature mapping, the hidden
scratch parameters Triton 3.x appends, block size and shared memory from the metadata, the
objects made per arch, and errors. Skipped where triton is not installed."""

from __future__ import annotations

import re
import sys

import pytest

pytest.importorskip("triton")

from iree_dispatch.backend.abi import ptx_entries  # noqa: E402
from iree_dispatch.backend.pipeline import build  # noqa: E402
from iree_dispatch.core.errors import SpecError  # noqa: E402
from iree_dispatch.frontend.spec import ModuleSpec  # noqa: E402
from iree_dispatch.frontend.triton import load_triton_kernel, strip_hidden_params, triton_kernel  # noqa: E402

from ..support.environment import ROOT, needs_build_tools  # noqa: E402

sys.path.insert(0, str(ROOT))
from kernels import triton_kernels as tk  # noqa: E402

pytestmark = needs_build_tools


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return tmp_path_factory.mktemp("triton")


def axpy(out, **kw):
    kw = {"grid": "ceildiv(n, BLOCK)", "constexprs": {"BLOCK": 1024}, "shape": ["n"], "out_dir": out, **kw}
    return triton_kernel(tk.axpy, tk.AXPY_SIGNATURE, **kw)


def test_axpy_objects_block_and_grid(out):
    k = axpy(out)
    assert k.block == (128, 1, 1)  # 4 warps
    assert str(k.grid[0]) == "ceildiv(n, 1024)"  # the constexpr substituted
    assert [o.variant.name for o in k.objects] == ["sm_90a_cubin", "sm_80_cubin", "sm_90a", "sm_80"]
    assert [t.role for t in k.tensors] == ["input", "input", "output"] and [s.name for s in k.scalar_args] == ["alpha"]
    for o in k.objects:
        if o.kind == "ptx":
            entry = ptx_entries(o.path.read_text())["axpy"]
            # the two hidden scratch pointers are gone: x, y, out, alpha, n
            assert [p.nbytes for p in entry.params] == [8, 8, 8, 4, 4]
            assert entry.required_threads == (128,)
        else:
            cubin = o.kernel_params()[0][1]["axpy"]
            assert cubin.params == (8, 8, 8, 4, 4) and cubin.required_threads == (128, 1, 1)


def test_num_warps_sets_the_block_and_shared_memory_comes_from_the_metadata(out):
    k = triton_kernel(tk.softmax_rows, tk.SOFTMAX_SIGNATURE, grid="rows", constexprs={"BLOCK": 1024}, num_warps=8, shape=["rows", "cols"], out_dir=out)
    assert k.block == (256, 1, 1)
    assert k.shared_memory > 0  # the cross-warp reductions use shared memory


def test_hidden_params_are_removed_and_their_loads_read_zero():
    ptx = """.version 8.7
.target sm_90a
.visible .entry k(
\t.param .u64 .ptr .global .align 1 k_param_0,
\t.param .u32 k_param_1,
\t.param .u64 .ptr .global .align 1 k_param_2,
\t.param .u64 .ptr .global .align 1 k_param_3
)
.reqntid 128
{
\tld.param.b64 \t%rd1, [k_param_0];
\tld.param.b64 \t%rd9, [k_param_2];
\tret;
}
"""
    stripped = strip_hidden_params(ptx, "k", 2, "k")
    assert [p.name for p in ptx_entries(stripped)["k"].params] == ["k_param_0", "k_param_1"]
    assert "mov.b64 %rd9, 0;" in stripped and "k_param_2" not in stripped and "k_param_3" not in stripped
    with pytest.raises(SpecError, match="expected the 1 declared plus 2 hidden"):
        strip_hidden_params(ptx, "k", 1, "k")
    with pytest.raises(SpecError, match="other than by a plain load"):
        strip_hidden_params(ptx.replace("ret;", "mov.u64 %rd2, k_param_3;\n\tret;"), "k", 2, "k")


def test_module_builds(out, tmp_path):
    k = axpy(out)
    result = build(ModuleSpec("tri", (k,)), tmp_path / "tri.vmfb", emit_mlir=tmp_path / "tri.mlir", cache=False)
    text = result.mlir.read_text()
    assert re.findall(r"hal\.executable\.variant public @(\w+)", text) == ["sm_90a_cubin", "sm_80_cubin", "sm_90a", "sm_80"]
    assert "workgroup_size = [128 : index, 1 : index, 1 : index]" in text


def test_unaligned_pointers_can_be_declared(out):
    def code(k) -> str:
        text = k.objects[-1].path.read_text()
        return text[: text.index(".section")]  # without the debug sections

    aligned = axpy(out, archs=["sm_80"])
    unaligned = axpy(out, archs=["sm_80"], aligned=["y_ptr"])
    # Without the 16-byte divisibility hint on x and out, Triton generates other code (here:
    # it can't keep each thread's elements contiguous and converts layouts through shared memory).
    assert code(aligned) != code(unaligned)
    assert "global_smem" not in code(aligned) and "global_smem" in code(unaligned)


def test_errors(out):
    with pytest.raises(SpecError, match=r"non-constexpr parameters are \['x_ptr', 'y_ptr', 'out_ptr', 'alpha', 'n'\]"):
        triton_kernel(tk.axpy, "void axpy(const float* x, const float* y, float* out, float alpha, int n)", grid=1, constexprs={"BLOCK": 1024}, shape=["n"], out_dir=out)
    with pytest.raises(SpecError, match=r"constexpr 'BLOCK' needs a value"):
        triton_kernel(tk.axpy, tk.AXPY_SIGNATURE, grid=1, shape=["n"], out_dir=out)
    with pytest.raises(SpecError, match=r"constexprs names \['BLOK'\]"):
        triton_kernel(tk.axpy, tk.AXPY_SIGNATURE, grid=1, constexprs={"BLOCK": 1024, "BLOK": 1}, shape=["n"], out_dir=out)
    with pytest.raises(SpecError, match=r"aligned names \['alpha'\]"):
        axpy(out, aligned=["alpha"])
    with pytest.raises(SpecError, match="is not a @triton.jit function"):
        triton_kernel(len, tk.AXPY_SIGNATURE, grid=1, shape=["n"], out_dir=out)


def test_toml_spec_with_a_triton_source_builds_with_the_cli(tmp_path, capsys):
    from iree_dispatch.cli import main

    spec = tmp_path / "tri.toml"
    spec.write_text(
        f"""
[module]
name = "tri"
archs = ["sm_80", "sm_90"]

[[kernel]]
name = "softmax_rows"
source = "{ROOT / 'kernels' / 'triton_kernels.py'}"
signature = "{tk.SOFTMAX_SIGNATURE}"
constexprs = {{ BLOCK = 1024 }}
num_warps = 8
grid = ["rows"]
shape = ["rows", "cols"]
"""
    )
    out = tmp_path / "tri.vmfb"
    assert main(["build", str(spec), "-o", str(out), "--emit-mlir"]) == 0
    assert main(["inspect", str(out)]) == 0
    assert "kernel softmax_rows(x_ptr: f32[rows, cols]) -> (out_ptr: f32[rows, cols])" in capsys.readouterr().out
    text = out.with_suffix(".mlir").read_text()
    assert re.findall(r"hal\.executable\.variant public @(\w+)", text) == ["sm_90a_cubin", "sm_80_cubin", "sm_90a", "sm_80"]
    assert "workgroup_size = [256 : index, 1 : index, 1 : index]" in text


def test_toml_errors(tmp_path):
    from iree_dispatch.frontend.spec_file import load_spec

    def spec(body: str):
        path = tmp_path / "t.toml"
        path.write_text(f'[[kernel]]\nname = "axpy"\ngrid = ["n"]\nshape = ["n"]\n{body}\n')
        return load_spec(path)

    source = f'source = "{ROOT / "kernels" / "triton_kernels.py"}"'
    with pytest.raises(SpecError, match="needs signature"):
        spec(source)
    with pytest.raises(SpecError, match=r"\['block'\] of a Triton kernel come from its compilation"):
        spec(f"{source}\nblock = [128]")
    with pytest.raises(SpecError, match=r"\['num_warps'\] are for Triton kernels"):
        spec(f'source = "{ROOT / "kernels" / "simple_mul.cu"}"\nnum_warps = 4')
    with pytest.raises(SpecError, match="num_warps must be a power of two"):
        spec(f'{source}\nsignature = "{tk.AXPY_SIGNATURE}"\nconstexprs = {{ BLOCK = 1024 }}\nnum_warps = 3')
    with pytest.raises(SpecError, match="no function 'nope'"):
        load_triton_kernel(ROOT / "kernels" / "triton_kernels.py", "nope", "void nope(float* x, int n)", grid=1, shape=["n"])


# ---- compiled by the build: nothing written outside it, nothing run when the cache has it ----

TOML = """
[module]
name = "tri"
archs = ["sm_80", "sm_90"]

[[kernel]]
name = "softmax_rows"
source = "{source}"
signature = "{signature}"
constexprs = {{ BLOCK = 1024 }}
num_warps = 8
grid = ["rows"]
shape = ["rows", "cols"]

[[kernel]]
name = "axpy"
source = "{source}"
signature = "{axpy}"
constexprs = {{ BLOCK = 1024 }}
grid = ["ceildiv(n, BLOCK)"]
shape = ["n"]
"""


@pytest.fixture
def triton_project(tmp_path, monkeypatch):
    """A copy of the Triton examples, a spec using two of them, and a private build cache."""
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "kernels.py"
    source.write_text((ROOT / "kernels" / "triton_kernels.py").read_text())
    spec = tmp_path / "tri.toml"
    spec.write_text(TOML.format(source=source.name, signature=tk.SOFTMAX_SIGNATURE, axpy=tk.AXPY_SIGNATURE))
    return tmp_path


def test_a_declared_kernel_is_pending_until_the_build_compiles_it(out, tmp_path):
    pending = axpy(out, out_dir=None)
    assert pending.pending and pending.objects == () and pending.block == (128, 1, 1) and str(pending.grid[0]) == "ceildiv(n, 1024)"
    assert pending.source == ROOT / "kernels" / "triton_kernels.py"
    # The build compiles it to what compiling it at once (out_dir) gives: the same IR and vmfb.
    now = build(ModuleSpec("tri", (axpy(out),)), tmp_path / "a" / "tri.vmfb", emit_mlir=tmp_path / "a" / "tri.mlir", cache=False)
    later = build(ModuleSpec("tri", (pending,)), tmp_path / "b" / "tri.vmfb", emit_mlir=tmp_path / "b" / "tri.mlir", cache=False)
    assert later.mlir.read_text() == now.mlir.read_text()
    assert later.vmfb.read_bytes() == now.vmfb.read_bytes()
    assert {p.name for p in later.objects_dir.iterdir()} == {p.name for p in now.objects_dir.iterdir()}
    assert ROOT / "kernels" / "triton_kernels.py" in later.dependencies
    assert not any(".triton" in str(d) or str(tmp_path / "b") in str(d) for d in later.dependencies)


def test_load_spec_neither_imports_nor_compiles(triton_project):
    from iree_dispatch.frontend.spec_file import load_spec

    spec = load_spec(triton_project / "tri.toml")
    assert all(k.pending for k in spec.kernels) and [k.block[0] for k in spec.kernels] == [256, 128]
    assert str(spec.kernels[1].grid[0]) == "ceildiv(n, 1024)"
    assert not any(name.startswith("_iree_dispatch_triton_") and "kernels_py" in name for name in sys.modules)
    assert not (triton_project / "cache").exists()  # nothing written


def test_a_failed_build_leaves_nothing_and_a_warm_one_runs_no_triton(triton_project, monkeypatch):
    import os

    from iree_dispatch.frontend import triton as front

    spec_path = triton_project / "tri.toml"
    text = (triton_project / "kernels.py").read_text()
    (triton_project / "kernels.py").write_text(text.replace("alpha * x + y", "alpha * x + undefined_name"))
    from iree_dispatch.frontend.spec_file import load_spec

    with pytest.raises(SpecError, match="Triton failed to compile it for"):
        build(load_spec(spec_path), triton_project / "out" / "tri.vmfb")
    # Nothing but whole, verified entries of the objects that did compile (the other kernel's).
    from iree_dispatch.backend.cache import Cache

    cache = triton_project / "cache"
    leftovers = [p for p in cache.rglob("*") if p.is_file() and p.name != "CACHEDIR.TAG" and p.parts[len(cache.parts)] not in ("locks", "objects", "manifests")]
    assert leftovers == [] and not (triton_project / "out").exists() and Cache().info()["entries"] == 0
    for entry in (cache / "objects").iterdir():
        Cache().verify(entry)

    (triton_project / "kernels.py").write_text(text)
    cold = build(load_spec(spec_path), triton_project / "out" / "tri.vmfb", emit_mlir=triton_project / "out" / "tri.mlir")
    assert "triton" in cold.timings and (triton_project / "kernels.py") in cold.dependencies
    assert not any(p.name == "triton" for p in (triton_project / "cache").iterdir())  # no objects kept beside the cache's entries

    def no_triton(*args, **kwargs):
        raise AssertionError("a warm build compiled Triton")

    monkeypatch.setattr(front, "compile_triton", no_triton)
    warm = build(load_spec(spec_path), triton_project / "out" / "tri.vmfb", emit_mlir=triton_project / "out" / "tri.mlir")
    assert set(warm.timings) == {"cache"} and warm.vmfb.read_bytes() == cold.vmfb.read_bytes()
    # The .py file's bytes are part of the key: an edit compiles again.
    monkeypatch.undo()
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(triton_project / "cache"))
    (triton_project / "kernels.py").write_text(text + "\n# edited\n")
    assert "triton" in build(load_spec(spec_path), triton_project / "out" / "tri.vmfb").timings
    assert os.listdir(triton_project / "out") == ["tri.vmfb", "tri.objects", "tri.mlir"] or set(os.listdir(triton_project / "out")) == {"tri.vmfb", "tri.objects", "tri.mlir"}


WARM_BUILD = """
import sys
sys.path.insert(0, {root!r})
from iree_dispatch.backend.pipeline import build
from iree_dispatch.frontend.spec_file import load_spec
result = build(load_spec({spec!r}), {out!r})
print(sorted(result.timings), "triton" in sys.modules)
"""


def test_a_warm_build_does_not_import_triton(triton_project):
    import os
    import subprocess

    script = WARM_BUILD.format(root=str(ROOT), spec=str(triton_project / "tri.toml"), out=str(triton_project / "out" / "tri.vmfb"))
    env = {**os.environ, "IREE_DISPATCH_CACHE_DIR": str(triton_project / "cache")}
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    assert runs[0].stdout.split()[-1] == "True" and runs[1].stdout.strip() == "['cache'] False"


def test_two_declarations_of_one_function_with_other_constexprs_share_a_module(out, tmp_path):
    small = axpy(out, out_dir=None, constexprs={"BLOCK": 256}, function="axpy256")
    large = axpy(out, out_dir=None)
    result = build(ModuleSpec("tri", (small, large)), tmp_path / "tri.vmfb", emit_mlir=tmp_path / "tri.mlir", cache=False)
    text = result.mlir.read_text()
    assert len(re.findall(r"^  hal\.executable private", text, re.M)) == 2
    assert "ceildiv" in text and "func.func @axpy256" in text and "func.func @axpy(" in text


def test_a_build_that_misses_takes_the_triton_objects_from_the_cache(triton_project, monkeypatch):
    from iree_dispatch.backend import pipeline
    from iree_dispatch.frontend.spec_file import load_spec

    spec_path = triton_project / "tri.toml"
    cold = build(load_spec(spec_path), triton_project / "a" / "tri.vmfb", emit_mlir=triton_project / "a" / "tri.mlir")
    assert "triton" in cold.timings

    def no_triton(*args, **kwargs):
        raise AssertionError("Triton compiled what the object cache holds")

    monkeypatch.setattr(pipeline, "compile_triton", no_triton)
    # Another option: a miss of the build cache, whose objects stage takes Triton's objects from the cache.
    other = build(load_spec(spec_path), triton_project / "b" / "tri.vmfb", emit_mlir=triton_project / "b" / "tri.mlir", strip_assertions=True)
    assert "cache" not in other.timings and "triton" in other.timings
    assert other.mlir.read_text() == cold.mlir.read_text()  # the same objects, shared memory and names
    assert (triton_project / "kernels.py") in other.dependencies


def test_a_spec_reads_the_function_from_the_python_source(tmp_path):
    from iree_dispatch.frontend.triton import jit_params

    source = tmp_path / "k.py"
    source.write_text(
        "import triton\nimport triton.language as tl\nWIDE = 4\n\n"
        "@triton.jit\ndef k(x, out, n, BLOCK: tl.constexpr = 256, WIDTH: tl.constexpr = WIDE, *, FLAG: 'tl.constexpr' = True):\n    pass\n\n"
        "def plain(x):\n    pass\n"
    )
    params = jit_params(source, "k")
    assert [(p.name, p.is_constexpr, p.has_default) for p in params] == [
        ("x", False, False), ("out", False, False), ("n", False, False), ("BLOCK", True, True), ("WIDTH", True, True), ("FLAG", True, True)]
    assert params[3].default == 256 and params[5].default is True
    k = load_triton_kernel(source, "k", "void k(const float* x, float* out, int n)", grid="ceildiv(n, BLOCK)", shape=["n"])
    assert k.pending and str(k.grid[0]) == "ceildiv(n, 256)"
    with pytest.raises(SpecError, match="whose default is not a literal"):
        load_triton_kernel(source, "k", "void k(const float* x, float* out, int n)", grid="ceildiv(n, WIDTH)", shape=["n"])
    assert str(load_triton_kernel(source, "k", "void k(const float* x, float* out, int n)", grid="ceildiv(n, WIDTH)", shape=["n"],
                                  constexprs={"WIDTH": 8}).grid[0]) == "ceildiv(n, 8)"
    with pytest.raises(SpecError, match="is not a @triton.jit function"):
        jit_params(source, "plain")
    source.write_text("def k(:\n")
    with pytest.raises(SpecError, match=r"k\.py:1: importing it would fail: SyntaxError"):
        jit_params(source, "k")


def test_options_are_part_of_the_key_and_a_pending_kernel_takes_its_outputs_in_place(tmp_path, monkeypatch):
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path / "cache"))

    def pending(**kw):
        return triton_kernel(tk.axpy, tk.AXPY_SIGNATURE, grid="ceildiv(n, BLOCK)", constexprs={"BLOCK": 1024}, shape=["n"], archs=["sm_80"], **kw)

    assert "cache" not in build(ModuleSpec("tri", (pending(),)), tmp_path / "a" / "tri.vmfb").timings
    assert "cache" in build(ModuleSpec("tri", (pending(),)), tmp_path / "b" / "tri.vmfb").timings
    assert "cache" not in build(ModuleSpec("tri", (pending(num_stages=2),)), tmp_path / "c" / "tri.vmfb").timings
    assert "cache" not in build(ModuleSpec("tri", (pending(aligned=["y_ptr"]),)), tmp_path / "d" / "tri.vmfb").timings
    out_form = pending().with_outputs_in_place(function="axpy_out")
    assert out_form.pending and [t.role for t in out_form.tensors] == ["input", "input", "inplace"]
    result = build(ModuleSpec("tri", (out_form,)), tmp_path / "e" / "tri.vmfb", emit_mlir=tmp_path / "e" / "tri.mlir")
    assert "func.func @axpy_out(" in result.mlir.read_text()
