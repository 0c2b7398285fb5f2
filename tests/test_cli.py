"""The `iree-dispatch` command line, and iree-run-module-style value syntax."""

import re
import subprocess
import sys

import numpy as np
import pytest

from iree_dispatch.cli import main
from iree_dispatch.cli_io import format_result, parse_input
from iree_dispatch.runtime import cuda_device_available

from .conftest import ROOT, SAMPLES_SPEC, needs_build_tools


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
    ],
)
def test_bad_inputs(text, message):
    with pytest.raises(ValueError, match=message):
        parse_input(text)


def test_format_results():
    assert format_result(np.full(8, 96, np.float32)) == "8xf32=96 96 96 96 96 96 96 96"
    assert format_result(np.arange(4, dtype=np.int32).reshape(2, 2)) == "2x2xi32=0 1 2 3"
    assert format_result(np.arange(5, dtype=np.int32), max_elements=2) == "5xi32=0 1 ..."


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
def test_build_errors_are_one_clear_line(tmp_path, capsys):
    assert main(["build", str(SAMPLES_SPEC), "-o", str(tmp_path / "k.vmfb"), "--arch", "sm_8x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("iree-dispatch build: error: malformed CUDA architecture 'sm_8x'") and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(cuda_device_available(), reason="checks the no-GPU path")
def test_run_without_gpu_says_so(capsys):
    assert main(["run", "whatever.vmfb", "--function=f"]) == 1
    assert "no such module" in capsys.readouterr().err
    built = ROOT / "build" / "samples.vmfb"
    if built.exists():
        assert main(["run", str(built), "--function=simple_mul", "--input=4xf32=1", "--input=4xf32=2"]) == 1
        assert "no CUDA device available for 'cuda'" in capsys.readouterr().err


@needs_build_tools
@pytest.mark.skipif(cuda_device_available(), reason="checks the no-GPU path")
def test_samples_main_job_without_gpu(tmp_path):
    """The README's main command: builds everything, says no GPU was found, exits 0."""
    result = subprocess.run(
        [sys.executable, "-m", "iree_dispatch.cli", "samples", "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert "No CUDA device found" in result.stdout and str(tmp_path / "mixed_invocation.vmfb") in result.stdout
    assert "[iree-dispatch] nvcc simple_mul.cu -> sm_90" in result.stdout
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
