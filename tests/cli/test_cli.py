"""The `iree-dispatch` command line, and iree-run-module-style value syntax."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from iree_dispatch import cli
from iree_dispatch.cli import main
from iree_dispatch.cli_io import format_result, parse_input
from iree_dispatch.core.errors import OutputError
from iree_dispatch.runtime import cuda_device_available

from ..support.environment import ROOT, SAMPLES_SPEC, needs_build_tools


@pytest.mark.parametrize(
    "text, shape, dtype, values",
    [
        ("8xf32=2", (8,), np.float32, [2.0] * 8),
        ("2x2xi32=1 2 3 4", (2, 2), np.int32, [1, 2, 3, 4]),
        ("3xf64=[1,2.5,-3]", (3,), np.float64, [1, 2.5, -3]),
        ("4xui8=0x10", (4,), np.uint8, [16] * 4),
    ],
)
def test_parse_tensor_inputs(text, shape, dtype, values):
    array = parse_input(text)
    assert array.shape == shape and array.dtype == dtype and array.reshape(-1).tolist() == values


def test_parse_scalars_and_files(tmp_path):
    assert parse_input("f32=2.5") == 2.5 and parse_input("i32=-3") == -3 and parse_input("7") == 7 and parse_input("0.5") == 0.5
    np.save(tmp_path / "x.npy", np.arange(3, dtype=np.int64))
    assert parse_input(f"@{tmp_path / 'x.npy'}").tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    "text, message",
    [
        ("8xq32=1", "unknown element type 'q32'"),
        ("2x2xf32=1 2 3", "needs 4 values"),
        ("f32=1 2", "exactly one value"),
        ("4xi32=a", "values must be numbers"),
        ("banana", "expected SHAPExTYPE=VALUES"),
        ("@/nonexistent.npy", "can't load .npy"),
        ("4xi8=300", r"300 is out of range for i8 \(-128 to 127\)"),
        ("i32=99999999999", "out of range for i32"),
        ("2xui8=-1", "out of range for ui8"),
        ("2xi1=2", "out of range for i1"),
        ("2xf32=1e40", r"1e40 is beyond f32 \(largest 3.40282E\+38; it would arrive as infinity\)"),
        ("f16=70000", "beyond f16"),
        ("1e400", "beyond any floating type"),
    ],
)
def test_bad_inputs(text, message):
    with pytest.raises(ValueError, match=message):
        parse_input(text)


def test_format_results():
    assert format_result(np.full(8, 96, np.float32)) == "8xf32=96 96 96 96 96 96 96 96"
    assert format_result(np.arange(4, dtype=np.int32).reshape(2, 2)) == "2x2xi32=[0 1][2 3]"
    assert format_result(np.arange(5, dtype=np.int32), max_elements=2) == "5xi32=0 1..."


@needs_build_tools
def test_build_and_inspect(tmp_path, capsys):
    out = tmp_path / "k.vmfb"
    assert main(["build", str(SAMPLES_SPEC), "-o", str(out), "--emit-mlir", "--arch", "sm_86,sm_90"]) == 0
    assert out.exists() and out.with_suffix(".mlir").exists() and (tmp_path / "samples.objects" / "axpby.sm_86.ptx").exists()
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "variants: sm_90, sm_86" in text
    assert "kernel axpby(x: f32[n], y: f32[n], alpha: float, beta: float) -> (out: f32[n])" in text
    assert "kernel simple_mul_inplace(lhs: f32[n], rhs: f32[n]) -> (rhs: f32[n] (in place))" in text
    assert main(["inspect", str(SAMPLES_SPEC)]) == 0
    assert "block [256, 1, 1]  grid ['max(min(ceildiv(n, 1024), 4096), 1)', '1', '1']" in capsys.readouterr().out


@needs_build_tools
@pytest.mark.parametrize(
    "flags, written",
    [
        ([], ["k.vmfb"]),
        (["--depfile", "<dir>/k.d"], ["k.d", "k.vmfb"]),
        (["--emit-mlir"], ["k.mlir", "k.vmfb", "samples.objects"]),  # the MLIR refers to the objects beside it
        (["--emit-mlir", "--embed-objects"], ["k.mlir", "k.vmfb"]),  # the MLIR holds them
    ],
    ids=["vmfb", "depfile", "emit-mlir", "embed-objects"],
)
def test_build_writes_only_what_was_asked_for(tmp_path, capsys, flags, written):
    """No objects folder, MLIR or temporary is left beside the outputs unless asked for."""
    out = tmp_path / "k.vmfb"
    argv = ["build", str(SAMPLES_SPEC), "-o", str(out), "--arch", "sm_90", *(f.replace("<dir>", str(tmp_path)) for f in flags)]
    assert main(argv) == 0, capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == written


@needs_build_tools
def test_compile_writes_only_what_was_asked_for(tmp_path, capsys):
    """A model's compile leaves the vmfb only; --program, --emit-mlir (with the objects it refers
    to) and --report-json each add what they name."""
    model, spec = ROOT / "tests" / "models" / "mlp_f32.mlir", ROOT / "tests" / "models" / "kernels" / "naive.toml"
    plain = tmp_path / "plain"
    assert main(["compile", str(model), "--kernels", str(spec), "-o", str(plain / "m.vmfb"), "-q"]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in plain.iterdir()) == ["m.vmfb"]
    kept = tmp_path / "kept"
    argv = ["compile", str(model), "--kernels", str(spec), "-o", str(kept / "m.vmfb"), "--program", str(kept / "m.program.mlir"),
            "--emit-mlir", str(kept / "m.linked.mlir"), "--report-json", str(kept / "m.json"), "-q"]
    assert main(argv) == 0, capsys.readouterr().err
    assert sorted(p.name for p in kept.iterdir()) == ["m.json", "m.linked.mlir", "m.program.mlir", "m.vmfb", "naive.objects"]
    assert "func.call @naive.matmul_f32" in (kept / "m.program.mlir").read_text()


def test_compile_takes_the_kernel_library_folder(tmp_path, capsys):
    """--kernels kernels/: every spec there that declares replacements, by name; the others (the
    samples, the transformer block's) are skipped."""
    pytest.importorskip("iree.compiler")
    model = ROOT / "tests" / "models" / "mlp_f32.mlir"
    assert main(["compile", str(model), "--kernels", str(ROOT / "kernels"), "--dry-run", "--report-json", str(tmp_path / "r.json"), "-q"]) == 0
    out = capsys.readouterr().out
    modules = json.loads((tmp_path / "r.json").read_text())["modules"]
    assert modules == sorted(modules) and {"library", "gemm", "gemm_f32", "gemm_nt", "attention", "flash_attention"} <= set(modules)
    assert "samples" not in modules and "transformer" not in modules
    # N = 128 <= 768: the 96-row tiles (gemm_f32_m96.toml, preferred there)
    assert "#1 matmul 32x64 @ 64x128 f32 x f32 -> 32x128 f32 at mlp_f32.mlir:7 -> gemm_f32_m96.gemm_f32" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    assert main(["compile", str(model), "--kernels", str(tmp_path), "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert err == (f"iree-dispatch compile: error: kernel folder {tmp_path} holds no spec (*.toml) whose kernels declare what they replace "
                   "(replaces = { op = ... }); give a folder of such specs, or the spec files themselves\n")


@needs_build_tools
def test_build_errors_are_one_clear_line(tmp_path, capsys):
    assert main(["build", str(SAMPLES_SPEC), "-o", str(tmp_path / "k.vmfb"), "--arch", "sm_8x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("iree-dispatch build: error: malformed CUDA architecture 'sm_8x'") and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(cuda_device_available(), reason="checks the no-GPU path")
def test_run_without_gpu_says_so(capsys):
    assert main(["run", "whatever.vmfb", "--function=f"]) == 1
    assert "no such file; run takes a built module" in capsys.readouterr().err
    built = ROOT / "build" / "samples.vmfb"
    if built.exists():
        assert main(["run", str(built), "--function=simple_mul", "--input=4xf32=1", "--input=4xf32=2"]) == 1
        assert "no CUDA device available for 'cuda'" in capsys.readouterr().err


@needs_build_tools
@pytest.mark.skipif(cuda_device_available(), reason="checks the no-GPU path")
def test_samples_main_job_without_gpu(tmp_path):
    """The README's main command: builds everything, says no GPU was found, exits 0."""
    import os

    env = {**os.environ, "IREE_DISPATCH_CACHE_DIR": str(tmp_path / "cache")}  # a cold build: the compilers run and say so
    result = subprocess.run(
        [sys.executable, "-m", "iree_dispatch.cli", "samples", "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert result.returncode == 0, result.stderr
    assert "No CUDA device found" in result.stdout and str(tmp_path / "mixed_invocation.vmfb") in result.stdout
    assert "[iree-dispatch] nvcc simple_mul.cu -> sm_90" in result.stdout and "[iree-dispatch] compiling with nvcc " in result.stdout
    for name in ("samples.vmfb", "samples.mlir", "mixed_invocation.vmfb", "mixed_invocation.mlir"):
        assert (tmp_path / name).stat().st_size > 0


@needs_build_tools
@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--function=nope"], r"no function 'nope' \(functions: simple_mul, simple_mul_inplace, axpby\)"),
        (["--function=simple_mul", "--input=8xf32=2"], r"simple_mul\(\) missing 1 argument\(s\): rhs"),
        (["--function=simple_mul", "--input=8xf64=2", "--input=8xf32=1"], r"argument 'lhs' must have dtype float32"),
        (["--function=simple_mul", "--input=8xf32=2", "--input=7xf32=1"], r"argument 'rhs' dim 0 is 7, but n = 8"),
    ],
)
def test_run_checks_the_function_and_inputs_before_opening_a_device(tmp_path, capsys, arguments, message):
    """These fail the same way with or without a GPU: the device is opened only after them."""
    out = tmp_path / "samples.vmfb"
    assert main(["build", str(SAMPLES_SPEC), "-o", str(out), "--arch", "sm_90"]) == 0
    capsys.readouterr()
    assert main(["run", str(out), *arguments]) == 1
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err and "CUDA" not in err, err


# ---- run: iree-run-module's spellings and printing ----

def test_format_results_as_iree_run_module():
    """What iree-run-module 3.13 prints for the same values (checked against it below)."""
    a = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    assert format_result(a * 2) == "2x3xf32=[2 4 6][8 10 12]"
    assert [format_result(a, n) for n in (0, 1, 4, 6)] == ["2x3xf32=[...][...]", "2x3xf32=[1...][...]", "2x3xf32=[1 2 3][4...]", "2x3xf32=[1 2 3][4 5 6]"]
    assert format_result(np.arange(1, 13, dtype=np.float32).reshape(2, 2, 3), 5) == "2x2x3xf32=[[1 2 3][4 5...]][[...][...]]"
    assert format_result(np.array([0.1, 1e-8, 123456789, -0.0, 3, 1e30], np.float32)) == "6xf32=0.1 1E-08 1.23457E+08 -0 3 1E+30"
    assert format_result(np.array([0.1, 1, 65504], np.float16)) == "3xf16=0.0999756 1 65504"
    assert format_result(np.zeros(0, np.float32)) == "0xf32=" and format_result(np.zeros((2, 0, 3), np.float32)) == "2x0x3xf32=[][]"
    assert format_result(np.full((), 3, np.float32)) == "f32=3" and format_result(np.array([-1, 2, 127], np.int8)) == "3xi8=-1 2 127"
    assert format_result(np.arange(5, dtype=np.int32), max_elements=None) == "5xi32=0 1 2 3 4"


IREE_RUN_MODULE_PROGRAM = """
func.func @f(%a: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = arith.addf %a, %a : tensor<2x3xf32>
  return %0, %a : tensor<2x3xf32>, tensor<2x3xf32>
}
func.func @g(%a: tensor<2x2x3xf32>) -> tensor<2x2x3xf32> {
  return %a : tensor<2x2x3xf32>
}
func.func @v(%a: tensor<6xf32>) -> tensor<6xf32> {
  return %a : tensor<6xf32>
}
"""


def _iree_tool(name: str):
    import shutil
    from pathlib import Path

    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if not found:
        pytest.skip(f"{name} not installed")
    return found


@pytest.mark.parametrize("count", [None, 0, 1, 4, 5, 12])
def test_format_results_match_iree_run_module(tmp_path_factory, count):
    """The same values through iree-run-module itself (on the CPU): the same text."""
    compiler, runner = _iree_tool("iree-compile"), _iree_tool("iree-run-module")
    folder = tmp_path_factory.getbasetemp() / "iree-run-module"
    vmfb = folder / "t.vmfb"
    if not vmfb.exists():
        folder.mkdir(exist_ok=True)
        (folder / "t.mlir").write_text(IREE_RUN_MODULE_PROGRAM)
        subprocess.run([compiler, "--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=generic", str(folder / "t.mlir"), "-o", str(vmfb)],
                       check=True, capture_output=True)
    cases = [("f", "2x3xf32=1 2 3 4 5 6", [np.arange(1, 7, dtype=np.float32).reshape(2, 3) * 2, np.arange(1, 7, dtype=np.float32).reshape(2, 3)]),
             ("g", "2x2x3xf32=" + " ".join(map(str, range(1, 13))), [np.arange(1, 13, dtype=np.float32).reshape(2, 2, 3)]),
             ("v", "6xf32=0.1 1e-8 123456789 -0 3.0 1e30", [np.array([0.1, 1e-8, 123456789, -0.0, 3.0, 1e30], np.float32)])]
    for function, given, values in cases:
        flags = [f"--output_max_element_count={count}"] if count is not None else []
        out = subprocess.run([runner, f"--module={vmfb}", "--device=local-task", f"--function={function}", f"--input={given}", *flags],
                             check=True, capture_output=True, text=True).stdout
        ours = [f"EXEC @{function}"] + [line for i, v in enumerate(values) for line in (f"result[{i}]: hal.buffer_view", format_result(v, 1024 if count is None else count))]
        assert out.splitlines() == ours


class _FakeModule:
    def __init__(self, results):
        self.functions = {"f": lambda *inputs: results}


def _fake_runtime(monkeypatch, results, description=None):
    from iree_dispatch import runtime

    monkeypatch.setattr(runtime, "read_descriptions", lambda path: ("m", {"f": description}))
    monkeypatch.setattr(runtime, "load", lambda path, device: _FakeModule(results))


@pytest.mark.parametrize("spelling", [["{m}"], ["--module={m}"], ["--module", "{m}"], ["{m}", "--module={m}"], ["--module={m}", "--module={m}"]])
def test_run_takes_the_module_as_iree_run_module_does(tmp_path, monkeypatch, capsys, spelling):
    vmfb = tmp_path / "m.vmfb"
    vmfb.write_bytes(b"module")
    _fake_runtime(monkeypatch, (np.arange(6, dtype=np.float32).reshape(2, 3), 2.5))
    assert main(["run", *(s.format(m=vmfb) for s in spelling), "--function=f", "--output_max_element_count=4"]) == 0
    assert capsys.readouterr().out.splitlines() == ["EXEC @f", "result[0]: hal.buffer_view", "2x3xf32=[0 1 2][3...]", "result[1]: f64=2.5"]


@pytest.mark.parametrize("flag, value, printed", [("--output_max_element_count", "0", "3xi32=..."), ("--output-max-element-count", "-1", "3xi32=0 1 2"),
                                                  ("--print-max-element-count", "2", "3xi32=0 1..."), (None, None, "3xi32=0 1 2")])
def test_run_output_max_element_count(tmp_path, monkeypatch, capsys, flag, value, printed):
    vmfb = tmp_path / "m.vmfb"
    vmfb.write_bytes(b"module")
    _fake_runtime(monkeypatch, np.arange(3, dtype=np.int32))
    assert main(["run", str(vmfb), "--function=f", *([f"{flag}={value}"] if flag else [])]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == printed


@pytest.mark.parametrize(
    "argv, message",
    [
        (["{m}", "--module={o}", "--function=f"], "{m} and --module={o} are different modules; run takes one module: drop one of them"),
        (["--module={m}", "--module={o}", "--function=f"], "--module={m} and --module={o} are different modules"),
        (["--function=f"], "no module given"),
        (["--module=", "--function=f"], "--module= names no file"),
        (["{m}"], "no function given: add --function=NAME"),
        (["{m}", "--function=f", "--output_max_element_count=many"], "--output_max_element_count=many: expected a whole number"),
        (["{m}", "--function=f", "--output_max_element_count=-5"], "--output_max_element_count=-5: expected a count >= 0"),
        (["{m}", "--function=f", "--output_max_element_count=1.5"], "expected a whole number"),
    ],
)
def test_run_argument_errors_are_one_line(tmp_path, capsys, argv, message):
    """Refused before the module is read or a device opened, on any machine."""
    vmfb, other = tmp_path / "m.vmfb", tmp_path / "o.vmfb"
    vmfb.write_bytes(b"module")
    other.write_bytes(b"other")
    assert main(["run", *(a.format(m=vmfb, o=other) for a in argv)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("iree-dispatch run: error: ") and err.count("\n") == 1 and message.format(m=vmfb, o=other) in err, err


def test_usage_errors_are_one_line():
    result = subprocess.run([sys.executable, "-m", "iree_dispatch.cli", "run", "m.vmfb", "--function=f", "--output=@x.npy"], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "unrecognized arguments: --output=@x.npy" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "(see iree-dispatch -h)" in result.stderr


# ---- build: flags for iree-compile ----

def test_build_collects_iree_compile_flags(tmp_path, monkeypatch, capsys):
    """--iree-compile-arg=FLAG (repeatable) and everything after a lone --, in that order."""
    from iree_dispatch.backend import pipeline

    seen = {}

    def fake_build(*args, **kw):
        seen.update(kw)
        raise OutputError("stop here")

    monkeypatch.setattr(pipeline, "build", fake_build)
    argv = ["build", str(SAMPLES_SPEC), "-o", str(tmp_path / "m.vmfb"), "--iree-compile-arg=--iree-opt-level=O3", "--iree-compile-arg", "--mlir-timing",
            "--", "--iree-opt-strip-assertions", "--iree-hal-dump-executable-sources-to=" + str(tmp_path / "dump")]
    assert main(argv) == 1 and "stop here" in capsys.readouterr().err
    assert seen["iree_compile_flags"] == ["--iree-opt-level=O3", "--mlir-timing", "--iree-opt-strip-assertions", f"--iree-hal-dump-executable-sources-to={tmp_path / 'dump'}"]
    assert cli._split_passthrough(["run", "m.vmfb", "--", "x"]) == (["run", "m.vmfb", "--", "x"], [])


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--", "-o", "x.vmfb"], "iree-compile flag '-o' can't be given"),
        (["--", "--iree-opt-level", "O3"], "iree-compile flag 'O3' is not one flag"),
        (["--iree-compile-arg=--iree-hal-target-device=vulkan"], "iree-compile flag '--iree-hal-target-device=vulkan' can't be given"),
        (["--", "--iree-bogus-flag"], "iree-compile refuses the flags given with --iree-compile-arg/--: Unknown command line argument '--iree-bogus-flag'"),
        (["--iree-compile-arg=--iree-opt-level=O9"], "'O9' value not a valid optimization level"),
    ],
)
def test_build_refuses_bad_iree_compile_flags_before_compiling(tmp_path, capsys, flags, message):
    """One line, before nvcc or the type probe runs (no progress line), nothing written."""
    pytest.importorskip("iree.compiler")
    assert main(["build", str(SAMPLES_SPEC), "-o", str(tmp_path / "out" / "m.vmfb"), *flags]) == 1
    err = capsys.readouterr().err
    assert err.startswith("iree-dispatch build: error: ") and err.count("\n") == 1 and message in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


@needs_build_tools
def test_build_passes_iree_compile_flags(tmp_path, capsys):
    """The flags reach iree-compile (it dumps the executables where told) and key the cache."""
    out, dump = tmp_path / "m.vmfb", tmp_path / "dump"
    assert main(["build", str(SAMPLES_SPEC), "-o", str(out), "--arch", "sm_90", "--", f"--iree-hal-dump-executable-sources-to={dump}"]) == 0
    assert sorted(p.name for p in dump.iterdir()) == ["samples_axpby_cu.mlir", "samples_simple_mul_cu.mlir"]
    assert main(["build", str(SAMPLES_SPEC), "-o", str(out), "--arch", "sm_90", f"--iree-compile-arg=--iree-hal-dump-executable-sources-to={dump}"]) == 0
    assert "(cache " in capsys.readouterr().out  # the same flags: the same entry
    assert main(["build", str(SAMPLES_SPEC), "-o", str(out), "--arch", "sm_90", "--", "--iree-opt-level=O1"]) == 0
    assert "iree-compile " in capsys.readouterr().out  # other flags: built again


def test_version_names_the_runtime_launch_path(monkeypatch):
    from iree_dispatch.runtime import compiled

    for path in (compiled.LaunchPath(compiled.INSTALLED, None, "/site/_launch.so"), compiled.LaunchPath(compiled.CTYPES, None, "no C compiler: cc, gcc or $CC")):
        monkeypatch.setattr(compiled, "launch_path", lambda path=path: path)
        lines = cli.version_text().splitlines()
        assert lines[0].startswith("iree-dispatch ") and any(line.startswith("iree-base-runtime ") for line in lines)
        assert f"launch path: {path.kind} ({path.detail})" in lines
