"""The f32 flash attention summed in f64 (kernels/flash_attention_f32_f64acc.cu) on the CPU: ptxas
reports no spills for any entry point on either arch (mma m16n8k16 on sm_90, m8n8k4 on sm_80),
the spec is flash_attention_f32.toml's head-dim-64 kernels renamed (the same shapes, `requires`,
grid and replaced ops, f64 accumulation, priority 1) with this kernel's block and shared memory,
and an f32 model's attention takes it only with --allow-wider-accumulation. Runs on a GPU:
tests/models/test_gpu_flash_attention_f32_f64acc.py."""

from __future__ import annotations

import re
import subprocess
import tomllib

import pytest

from ..support.environment import ROOT, needs_build_tools

SOURCE = ROOT / "kernels" / "flash_attention_f32_f64acc.cu"
SPEC = ROOT / "kernels" / "flash_attention_f32_f64acc.toml"
STRICT = ROOT / "kernels" / "flash_attention_f32.toml"


def _kernels(path) -> dict[str, dict]:
    return {k["name"]: k for k in tomllib.loads(path.read_text())["kernel"]}


@needs_build_tools
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_no_spills(tmp_path, arch):
    from iree_dispatch.toolchains import find_nvcc

    nvcc = str(find_nvcc())
    proc = subprocess.run([nvcc, "-cubin", "-O3", "-std=c++17", f"-arch={arch}", "-Xptxas", "-v", str(SOURCE), "-o", str(tmp_path / "k.cubin")],
                          check=True, capture_output=True, text=True)
    assert re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", proc.stderr) == [("0", "0")] * len(_kernels(SPEC)), proc.stderr
    ptx = subprocess.run([nvcc, "-ptx", "-std=c++17", f"-arch={arch}", str(SOURCE), "-o", "-"], check=True, capture_output=True, text=True).stdout
    assert f"mma.sync.aligned.{'m16n8k16' if arch == 'sm_90' else 'm8n8k4'}.row.col.f64.f64.f64.f64" in ptx


def test_spec_is_the_f32_kernels_at_head_dim_64():
    ours, strict = _kernels(SPEC), _kernels(STRICT)
    (shared,) = re.findall(r"static_assert\(SHARED_BYTES == (\d+)", SOURCE.read_text())
    assert sorted(ours) == sorted(name.replace("_d64", "_f64acc_d64") for name in strict if "_d64" in name)
    for name, kernel in ours.items():
        twin = strict[name.replace("_f64acc", "")]
        for key in ("shapes", "grid", "requires"):
            assert kernel.get(key) == twin.get(key), (name, key)
        assert kernel["replaces"] == {"op": twin["replaces"]["op"], "accumulate": "f64", "priority": 1}
        assert kernel["block"] == [128] and kernel["shared_memory"] == int(shared)
        assert re.search(rf"__global__ void FA64_BOUNDS {name}\(", SOURCE.read_text())


def test_an_f32_model_takes_it_only_with_wider_accumulation():
    pytest.importorskip("iree.compiler")
    from iree_dispatch.models.compiler import compile_model

    model = ROOT / "tests" / "models" / "sdpa_f32.torch.mlir"
    strict = compile_model(model, [STRICT, SPEC], dry_run=True)
    assert strict.kernel_counts() == {"flash_attention_f32.flash_attn_f32_d64": 1, "flash_attention_f32.flash_attn_f32_d64_causal": 1}
    wide = compile_model(model, [STRICT, SPEC], dry_run=True, allow_wider_accumulation=True)
    assert wide.kernel_counts() == {"flash_attention_f32_f64acc.flash_attn_f32_f64acc_d64": 1, "flash_attention_f32_f64acc.flash_attn_f32_f64acc_d64_causal": 1}
    assert "computes in f64 where the model computes in f32 (--allow-wider-accumulation)" in wide.text()
