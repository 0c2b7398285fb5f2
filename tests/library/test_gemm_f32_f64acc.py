"""The f64-accumulating f32 GEMMs (kernels/gemm_f32_f64acc.cu) on the CPU: ptxas reports no spills for
either arch's body (mma m16n8k16 on sm_90, m8n8k4 on sm_80), the spec's launch shape and shared
memory agree with the source, and an f32 model's Linears take them only with
--allow-wider-accumulation. Runs on a GPU: tests/library/test_gpu_gemm_f32_f64acc.py."""

from __future__ import annotations

import re
import subprocess
import tomllib

import pytest

from ..support.environment import ROOT, needs_build_tools

SOURCE = ROOT / "kernels" / "gemm_f32_f64acc.cu"
SPEC = ROOT / "kernels" / "gemm_f32_f64acc.toml"
STRICT = ROOT / "kernels" / "gemm_f32.toml"
BERT_F32 = ROOT / "tests" / "models" / "bert_default_padded_f32.torch.mlir"
ENTRY_POINTS = ("gemm_nt_f32_f64acc", "gemm_nt_bias_f32_f64acc", "gemm_nt_bias_gelu_erf_f32_f64acc", "gemm_nt_bias_residual_f32_f64acc")


@needs_build_tools
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_no_spills(tmp_path, arch):
    from iree_dispatch.toolchains import find_nvcc

    proc = subprocess.run([str(find_nvcc()), "-cubin", "-O3", "-std=c++17", f"-arch={arch}", "-Xptxas", "-v", str(SOURCE), "-o", str(tmp_path / "k.cubin")],
                          check=True, capture_output=True, text=True)
    assert re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", proc.stderr) == [("0", "0")] * len(ENTRY_POINTS), proc.stderr
    mma = "m16n8k16" if arch == "sm_90" else "m8n8k4"
    ptx = subprocess.run([str(find_nvcc()), "-ptx", "-std=c++17", f"-arch={arch}", str(SOURCE), "-o", "-"], check=True, capture_output=True, text=True).stdout
    assert f"mma.sync.aligned.{mma}.row.col.f64.f64.f64.f64" in ptx


def test_spec_matches_the_source():
    """Every kernel: the source's entry point, 256 threads (its __launch_bounds__), one block per
    128 x 128 tile of c, and the dynamic shared memory the source's static_assert states."""
    spec = tomllib.loads(SPEC.read_text())
    source = SOURCE.read_text()
    (shared,) = re.findall(r"static_assert\(SHARED_BYTES == (\d+)", source)
    assert spec["module"]["archs"] == ["sm_90", "sm_80"]
    assert [k["name"] for k in spec["kernel"]] == list(ENTRY_POINTS)
    for kernel in spec["kernel"]:
        assert f"__launch_bounds__(256, 1)\n{kernel['name']}(" in source
        assert kernel["block"] == [256] and kernel["grid"] == ["ceildiv(M, 128)", "ceildiv(N, 128)"]
        assert kernel["shared_memory"] == int(shared)
        assert kernel["replaces"]["accumulate"] == "f64"


def test_an_f32_model_takes_them_only_with_wider_accumulation():
    """BERT f32's Linears: gemm_f32.toml's kernels in a strict build, these (priority 1) with
    --allow-wider-accumulation, the report saying so."""
    pytest.importorskip("iree.compiler")
    from iree_dispatch.models.compiler import compile_model

    strict = compile_model(BERT_F32, [STRICT, SPEC], dry_run=True)
    assert strict.kernel_counts() == {"gemm_f32.gemm_nt_bias_f32": 6, "gemm_f32.gemm_nt_bias_gelu_erf_f32": 2, "gemm_f32.gemm_nt_bias_residual_f32": 4}
    wide = compile_model(BERT_F32, [STRICT, SPEC], dry_run=True, allow_wider_accumulation=True)
    assert wide.kernel_counts() == {"gemm_f32_f64acc.gemm_nt_bias_f32_f64acc": 6, "gemm_f32_f64acc.gemm_nt_bias_gelu_erf_f32_f64acc": 2,
                                    "gemm_f32_f64acc.gemm_nt_bias_residual_f32_f64acc": 4}
    assert wide.text().count("note: computes in f64 where the model computes in f32 (--allow-wider-accumulation)") == 12
