"""Weights as IREE parameters (export_mlir(..., params_as_globals=True), without torch): a
torch-dialect function's trailing arguments become globals read from the parameters named after
them, and a module built from (name, array) pairs provides them; compiled for and run on IREE's
CPU, the function computes what it did with the weights as arguments."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("iree.compiler")  # the model compiler: not in a runtime-only install

from iree.compiler import ir  # noqa: E402

from iree_dispatch.models.torch_export import PARAMETER_SCOPE, _arguments_to_globals  # noqa: E402

from ..support.model_references import _compile_cpu, _run, _run_with_parameters  # noqa: E402

# x * scale + shift, with scale [3] and shift [2, 3] the weights.
MODEL = """
func.func @main(%x: !torch.vtensor<[2,3],f32>, %scale: !torch.vtensor<[3],f32>, %shift: !torch.vtensor<[2,3],f32>) -> !torch.vtensor<[2,3],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.aten.mul.Tensor %x, %scale : !torch.vtensor<[2,3],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.add.Tensor %0, %shift, %int1 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}
"""
NAMES = ["layer.scale", "layer.shift"]


def _as_globals() -> str:
    module = ir.Module.parse(MODEL, context=ir.Context())
    _arguments_to_globals(module, "main", NAMES)
    return str(module)


def test_trailing_arguments_become_parameter_globals():
    text = _as_globals()
    (signature,) = [line for line in text.splitlines() if "func.func @main(" in line]
    assert signature.split("->")[0].count("!torch.vtensor") == 1  # x alone
    assert f'util.global private @__parameter_0 = #stream.parameter.named<"{PARAMETER_SCOPE}"::"layer.scale"> : tensor<3xf32>' in text
    assert f'util.global private @__parameter_1 = #stream.parameter.named<"{PARAMETER_SCOPE}"::"layer.shift"> : tensor<2x3xf32>' in text
    assert text.count("util.global.load immutable") == 2


def test_globals_compute_what_the_arguments_did(tmp_path):
    """Fresh random x and weights; the weights as arguments and as parameters give the same c."""
    rng = np.random.default_rng()
    x, scale, shift = (rng.standard_normal(shape).astype(np.float32) for shape in ((2, 3), (3,), (2, 3)))
    (with_arguments,) = _run(_compile_cpu(MODEL, tmp_path / "arguments.vmfb"), "main", [x, scale, shift])
    (with_parameters,) = _run_with_parameters(_compile_cpu(_as_globals(), tmp_path / "globals.vmfb"), "main", [x], zip(NAMES, (scale, shift)))
    np.testing.assert_allclose(with_parameters, x * scale + shift, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(with_parameters, with_arguments)


def test_integer_and_zero_dimensional_weights_take_builtin_types():
    """A signed integer weight is a signless builtin tensor (what torch_c.from_builtin_tensor takes);
    a 0-d weight a tensor without dims."""
    module = ir.Module.parse("""
func.func @main(%x: !torch.vtensor<[2],si64>, %w: !torch.vtensor<[2],si64>, %s: !torch.vtensor<[],f32>) -> !torch.vtensor<[2],si64> {
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %x, %w, %int1 : !torch.vtensor<[2],si64>, !torch.vtensor<[2],si64>, !torch.int -> !torch.vtensor<[2],si64>
  return %0 : !torch.vtensor<[2],si64>
}
""", context=ir.Context())
    _arguments_to_globals(module, "main", ["w", "s"])
    text = str(module)
    assert f'@__parameter_0 = #stream.parameter.named<"{PARAMETER_SCOPE}"::"w"> : tensor<2xi64>' in text
    assert f'@__parameter_1 = #stream.parameter.named<"{PARAMETER_SCOPE}"::"s"> : tensor<f32>' in text
    assert "torch_c.from_builtin_tensor %__parameter_0 : tensor<2xi64> -> !torch.vtensor<[2],si64>" in text
