"""A model's transients in one storage the module keeps (models/transients.py routes the results
through it, backend/transients.py allocates it at the end of IREE's stream phase): the calls
compute what numpy does, a result outlives the next call, the command buffer is recorded once,
and what the storage can't serve is refused or left to IREE. On IREE's CPU backend: the
mechanism is IREE's, not the device's."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.compiler")  # the model compiler: not in a runtime-only install

from iree.compiler import ir  # noqa: E402
from iree.compiler.tools.binaries import find_tool  # noqa: E402

from iree_dispatch.backend.compile import run_iree_compile  # noqa: E402
from iree_dispatch.backend.transients import DECLARATION, STORAGE_GLOBAL, allocate_storage, declares_storage  # noqa: E402
from iree_dispatch.core.errors import CompileError  # noqa: E402
from iree_dispatch.models import compile_model  # noqa: E402
from iree_dispatch.models.compiler import rewrite_model  # noqa: E402
from iree_dispatch.models.transients import route_transients  # noqa: E402

from ..support.environment import needs_build_tools  # noqa: E402

MODELS = Path(__file__).parent
CPU = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=generic"]


def _input_level(model: Path, tmp: Path, route: bool) -> Path:
    """The model at IREE's input level for the CPU, its results routed through the storage or not."""
    staged = tmp / "input.mlir"
    subprocess.run([find_tool("iree-compile"), *CPU, "--compile-to=input", str(model), "-o", str(staged)], check=True, capture_output=True)
    with ir.Context():
        module = ir.Module.parse(staged.read_text())
        if route:
            assert route_transients(module)
        out = tmp / ("routed.mlir" if route else "plain.mlir")
        out.write_text(module.operation.get_asm(enable_debug_info=True))
    return out


def _vm_ir(mlir: Path, tmp: Path) -> str:
    stream = tmp / "s.mlir"
    subprocess.run([find_tool("iree-compile"), *CPU, "--compile-to=stream", str(mlir), "-o", str(stream)], check=True, capture_output=True)
    stream.write_text(allocate_storage(stream.read_text())[0])
    vm = tmp / "vm.mlir"
    subprocess.run([find_tool("iree-compile"), *CPU, "--compile-from=stream", "--compile-to=vm", str(stream), "-o", str(vm)], check=True, capture_output=True)
    return vm.read_text()


def _function(vm: str, name: str) -> str:
    start = vm.index(f"vm.func private @{name}(")
    return vm[start:vm.index("\n    }\n", start)]


def _load(vmfb: Path):
    import iree.runtime as rt

    config = rt.Config("local-task")
    return rt.load_vm_module(rt.VmModule.copy_buffer(config.vm_instance, vmfb.read_bytes()), config)


def _mlp(x, w1, b1, w2):
    return np.maximum(x @ w1 + b1, 0) @ w2


def test_mlp_on_the_storage_computes_what_numpy_does_and_a_result_outlives_the_next_call(tmp_path):
    routed = _input_level(MODELS / "mlp_f32.mlir", tmp_path, route=True)
    assert "hal.tensor.transients" in routed.read_text() and STORAGE_GLOBAL in routed.read_text()
    run_iree_compile(CPU, routed, tmp_path / "mlp.vmfb")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["input.mlir", "mlp.vmfb", "routed.mlir"]  # the stream-phase file is gone
    mlp = _load(tmp_path / "mlp.vmfb").mlp
    rng = np.random.default_rng()
    calls = [[rng.standard_normal(s, dtype=np.float32) for s in ((32, 64), (64, 128), (128,), (128, 16))] for _ in range(3)]
    results = [mlp(*args) for args in calls]  # each kept while the next calls run on the same storage
    for args, result in zip(calls, results):
        np.testing.assert_allclose(result.to_host(), _mlp(*args), rtol=1e-4, atol=1e-4)
    # The compiled file now allocates the storage itself: plain iree-compile takes it as it is.
    assert re.search(rf"util\.global\.store %\w+, @{STORAGE_GLOBAL}", routed.read_text())
    subprocess.run([find_tool("iree-compile"), *CPU, str(routed), "-o", str(tmp_path / "plain.vmfb")], check=True, capture_output=True)
    # And the build takes it again without a second allocation.
    completed = routed.read_text()
    run_iree_compile(CPU, routed, tmp_path / "again.vmfb")
    assert routed.read_text() == completed
    args = calls[0]
    for vmfb in ("plain.vmfb", "again.vmfb"):
        np.testing.assert_allclose(_load(tmp_path / vmfb).mlp(*args).to_host(), _mlp(*args), rtol=1e-4, atol=1e-4)


def test_torch_model_gives_the_bits_of_iree_s_own_allocation(tmp_path):
    """A torch export ends its function with a barrier on its results (here three norms of one
    input): each is routed, and each comes out as with IREE's allocation at every call."""
    model = MODELS / "norms_f32.torch.mlir"
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    run_iree_compile(CPU, _input_level(model, tmp_path / "a", route=True), tmp_path / "routed.vmfb")
    run_iree_compile(CPU, _input_level(model, tmp_path / "b", route=False), tmp_path / "plain.vmfb")
    routed, plain = _load(tmp_path / "routed.vmfb").main, _load(tmp_path / "plain.vmfb").main
    rng = np.random.default_rng()
    inputs = [rng.standard_normal((4, 8, 96), dtype=np.float32) for _ in range(2)]
    results = [routed(x) for x in inputs]
    for x, got in zip(inputs, results):
        expected = [r.to_host() for r in plain(x)]
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a.to_host(), b)
        centered = x - x.mean(-1, keepdims=True)  # the LayerNorm without weight and bias
        np.testing.assert_allclose(got[1].to_host(), centered / np.sqrt((centered**2).mean(-1, keepdims=True) + 1e-5), rtol=1e-4, atol=1e-4)


def test_the_storage_is_allocated_once_and_the_command_buffer_recorded_once(tmp_path):
    """IREE's per-call transient allocation and deallocation are gone, and the command buffer is
    recorded in an initializer: a call allocates its result and submits."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    routed = _vm_ir(_input_level(MODELS / "mlp_f32.mlir", tmp_path / "a", route=True), tmp_path / "a")
    plain = _vm_ir(_input_level(MODELS / "mlp_f32.mlir", tmp_path / "b", route=False), tmp_path / "b")
    call, before = _function(routed, "mlp"), _function(plain, "mlp")
    assert before.count("@hal.device.queue.alloca(") == 2 and before.count("@hal.device.queue.dealloca(") == 1  # result and transients
    assert call.count("@hal.device.queue.alloca(") == 1 and "@hal.device.queue.dealloca(" not in call
    assert "@hal.command_buffer.dispatch" not in call and "memoize_apply" not in call  # replayed, not recorded
    # The storage is allocated before the command buffer that binds it is recorded.
    init = _function(routed, "__init")
    stored = init.index(f"@{STORAGE_GLOBAL} :")
    assert "memoize_apply" in init and all(m.start() > stored for m in re.finditer(r"memoize_apply", init))


def test_a_shape_computed_from_the_data_keeps_iree_s_allocation(tmp_path):
    """Static arguments and result, a dynamic intermediate: no storage, and the model compiles."""
    report = compile_model(MODELS / "data_dependent_f32.mlir", [MODELS.parents[1] / "kernels" / "gemm.toml"], tmp_path / "d.vmfb", program=tmp_path / "d.mlir")
    assert report.transient_storage is False and "transients: allocated by IREE at each call" in report.text()
    assert (tmp_path / "d.vmfb").stat().st_size > 0 and STORAGE_GLOBAL not in (tmp_path / "d.mlir").read_text()


def test_dynamic_results_keep_iree_s_allocation(tmp_path):
    report = compile_model(MODELS / "dynamic_f32.mlir", [MODELS / "kernels" / "naive.toml"], None, dry_run=True)
    assert report.transient_storage is None  # a dry run rewrites nothing
    staged = tmp_path / "input.mlir"
    subprocess.run([find_tool("iree-compile"), *CPU, "--compile-to=input", str(MODELS / "dynamic_f32.mlir"), "-o", str(staged)], check=True, capture_output=True)
    with ir.Context():
        module = ir.Module.parse(staged.read_text())
        before = str(module)
        assert route_transients(module) is False and str(module) == before


def _stream_text(body: str) -> str:
    return (
        'module attributes {stream.affinity.default = #hal.device.affinity<@__device_0>} {\n'
        f"  util.global private @{STORAGE_GLOBAL} : !hal.buffer\n{body}}}\n"
    )


def test_storage_of_a_size_known_only_at_the_call_is_refused():
    body = (
        "  util.func public @f(%arg0: !hal.buffer_view) attributes {iree.reflection = {iree.abi.transients.size = @f_transients_size}} {\n"
        f"    %s = util.global.load immutable @{STORAGE_GLOBAL} : !hal.buffer\n"
        "    %length = hal.buffer.length<%s : !hal.buffer> : index\n  }\n"
    )
    with pytest.raises(CompileError, match="size known only at the call"):
        allocate_storage(_stream_text(body))


def test_storage_for_a_program_on_several_devices_is_refused():
    body = (
        "  util.func public @f(%arg0: !hal.buffer_view) attributes {iree.reflection = {iree.abi.transients.size = @f_size, iree.abi.transients.size.constant = 64 : index}} {\n"
        f"    %s = util.global.load immutable @{STORAGE_GLOBAL} : !hal.buffer\n"
        "    %length = hal.buffer.length<%s : !hal.buffer> : index\n"
        "    %x = stream.tensor.import on(#hal.device.affinity<@__device_1>) %s : !hal.buffer -> tensor<?xi8>{%length} in !stream.resource<transient>{%length}\n  }\n"
    )
    with pytest.raises(CompileError, match="one device"):
        allocate_storage(_stream_text(body))


def test_unused_storage_is_left_alone():
    text = _stream_text("")
    assert allocate_storage(text) == (text, None)


def test_a_module_that_has_the_storage_already_is_left_as_it_is(tmp_path):
    routed = _input_level(MODELS / "mlp_f32.mlir", tmp_path, route=True)
    with ir.Context():
        module = ir.Module.parse(routed.read_text())
        before = str(module)
        assert route_transients(module) is False and str(module) == before


@needs_build_tools
def test_per_call_transients_leave_the_model_to_iree_s_allocation(tmp_path):
    kernels = [MODELS / "kernels" / "naive.toml"]
    kept = compile_model(MODELS / "mlp_f32.mlir", kernels, tmp_path / "a.vmfb", program=tmp_path / "a.mlir", cache=False)
    per_call = compile_model(MODELS / "mlp_f32.mlir", kernels, tmp_path / "b.vmfb", program=tmp_path / "b.mlir", per_call_transients=True, cache=False)
    assert kept.transient_storage is True and "transients: one storage, allocated when the module loads" in kept.text()
    assert per_call.transient_storage is False and "transients: allocated by IREE at each call" in per_call.text()
    assert STORAGE_GLOBAL in (tmp_path / "a.mlir").read_text() and STORAGE_GLOBAL not in (tmp_path / "b.mlir").read_text()
    assert per_call.to_json()["transient_storage"] is False


def test_rewrite_model_leaves_the_transients_to_iree():
    """rewrite_model's program may be compiled by other means than the build that sizes the storage."""
    report, program = rewrite_model(MODELS / "mlp_f32.mlir", [MODELS / "kernels" / "naive.toml"])
    assert report.transient_storage is None and "transients:" not in report.text() and STORAGE_GLOBAL not in program


def test_declaration_is_looked_for_in_the_module_only(tmp_path):
    """The build asks whether a file declares the storage without reading its dialect resources
    (a model's inline weights): a declaration there is no declaration."""
    body = "module {\n  func.func @main() {\n    return\n  }\n}\n"
    plain, declared, in_resources = (tmp_path / f"{n}.mlir" for n in ("plain", "declared", "in_resources"))
    plain.write_text(body)
    declared.write_text(body.replace("module {\n", f"module {{\n  {DECLARATION}\n"))
    in_resources.write_text(body + '{-#\n  dialect_resources: {\n    builtin: {\n      blob: "' + DECLARATION + '"\n    }\n  }\n#-}\n')
    assert [declares_storage(p) for p in (plain, declared, in_resources)] == [False, True, False]
