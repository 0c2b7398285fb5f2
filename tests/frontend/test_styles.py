"""Kernels written the way real code writes them build unchanged, and the generated functions
say what the compiler saw (tests/kernels/styles.cu; run on the GPU by tests/frontend/test_gpu_styles.py)."""

from __future__ import annotations

import json
import re

import pytest

from iree_dispatch.backend.abi import ptx_entries
from iree_dispatch.backend.pipeline import build
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

from ..support.artifacts.styles import STYLES_CU, prebuilt_cxx_module, styles_module
from ..support.environment import needs_build_tools

pytestmark = needs_build_tools


def _descriptions(mlir: str) -> dict[str, dict]:
    found = re.findall(r'iree_dispatch\.kernel = "((?:[^"\\]|\\.)*)"', mlir)
    return {d["function"]: d for d in (json.loads(json.loads(f'"{text}"')) for text in found)}


def _signature(d: dict) -> list[str]:
    return [f"{t['name']}:{t['dtype']}" for t in d["inputs"]] + [f"{s['name']}:{s['ctype']}" for s in d["scalars"]] + [
        f"->{t['name']}:{t['dtype']}" for t in d["outputs"]
    ]


@pytest.mark.parametrize("precision, element", [("f32", "f32"), ("bf16", "bf16")])
def test_aliases_follow_the_modules_flags(tmp_path, precision, element):
    module = styles_module(precision)
    result = build(module, tmp_path / "styles.vmfb", emit_mlir=tmp_path / "styles.mlir")
    d = _descriptions(result.mlir.read_text())
    x = element
    assert _signature(d["layernorm_forward_kernel"]) == [f"inp:{x}", f"weight:{x}", f"bias:{x}", f"->out:{x}", "->mean:f32", "->rstd:f32"]
    assert _signature(d["axpy"]) == ["x:f32", "y:f32", "alpha:float", "->y:f32"]
    assert _signature(d["scale_offset"]) == ["in:f32", "s:double", "offset:float", "->out:f32"]
    assert _signature(d["ops_square_plus"]) == [f"in:{x}", "c:float", f"->out:{x}"]
    assert _signature(d["ops_detail_scale___half"]) == ["in:f16", "factor:float", "->out:f16"]
    assert _signature(d["ops_detail_scale_floatX"]) == [f"in:{x}", "factor:float", f"->out:{x}"]
    assert _signature(d["min_max"]) == ["a:f32", "b:f32", "->lo:f32", "->hi:f32"]
    # Every adapted entry takes what IREE passes: the pointers, then 32-bit push constants.
    for ptx in result.objects_dir.glob("*.ptx"):
        for entry in ptx_entries(ptx.read_text()).values():
            sizes = [p.nbytes for p in entry.params]
            assert sizes == sorted(sizes, reverse=True) and set(sizes) <= {8, 4}, (ptx.name, entry.name, sizes)


def test_a_python_declaration_is_resolved_again_with_the_modules_flags():
    kernel = KernelSpec.declare(STYLES_CU, "ops::square_plus", block=256, grid="ceildiv(n, 256)", shape=["n"])
    assert kernel.outputs[0].dtype == "f32"
    module = ModuleSpec("styles", (kernel,), nvcc_flags=("-DENABLE_BF16",))
    assert module.kernels[0].outputs[0].dtype == "bf16" and module.kernels[0].types_resolved_with[0] == ("-DENABLE_BF16",)


def test_plain_names_find_kernels_in_namespaces_and_qualified_names_must_match():
    plain = KernelSpec.declare(STYLES_CU, "square_plus", block=256, grid="ceildiv(n, 256)", shape=["n"])
    assert plain.signature.qualified_name == "ops::square_plus" and plain.function == "square_plus"
    with pytest.raises(Exception, match="no __global__ kernel named 'other::square_plus'.*ops::square_plus"):
        KernelSpec.declare(STYLES_CU, "other::square_plus", block=256, grid="ceildiv(n, 256)", shape=["n"])


def test_cxx_kernels_in_prebuilt_objects_by_plain_name(tmp_path):
    result = build(prebuilt_cxx_module(tmp_path / "objects"), tmp_path / "prebuilt_cxx.vmfb", emit_mlir=tmp_path / "prebuilt_cxx.mlir")
    exports = set(re.findall(r"hal\.executable\.export public @(\w+)", result.mlir.read_text()))
    assert exports == {"_ZN3ops11square_plusEPfPKffi", "min_max"}


def test_the_type_probes_answers_are_kept_in_the_build_cache_until_a_header_changes(tmp_path, monkeypatch):
    from iree_dispatch.frontend import type_probe

    (tmp_path / "real.h").write_text("typedef float real;\n")
    source = tmp_path / "k.cu"
    source.write_text('#include "real.h"\nextern "C" __global__ void k(const real* x, real* out, int n) {}\n')

    def declare():
        type_probe._PROBED.clear()  # a new process: only the build cache remembers
        return KernelSpec.declare(source, "k", block=64, grid="n", shape=["n"]).outputs[0].dtype

    assert declare() == "f32"
    asked = []
    monkeypatch.setattr(type_probe, "_probe", lambda *a: asked.append(a) or pytest.fail("asked the compiler again"))
    assert declare() == "f32" and not asked
    monkeypatch.undo()
    (tmp_path / "real.h").write_text("typedef double real;\n")
    assert declare() == "f64"
