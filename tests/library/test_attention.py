"""The fused attention kernels (kernels/attention.toml) on the CPU: it builds for sm_80 and sm_90
(the build checks its ABI against its PTX), its signature and shapes are as the model rewrite
expects, ptxas reports no spills, and it has a float64 reference. Runs on a GPU:
tests/library/test_gpu_attention.py."""

from __future__ import annotations

import re
import subprocess

import numpy as np

from iree_dispatch.backend.pipeline import build
from iree_dispatch.cli import main
from iree_dispatch.frontend.spec_file import load_spec

from ..support.environment import ROOT, needs_build_tools
from ..support.references import load_references

SPEC = ROOT / "kernels" / "attention.toml"


def test_reference_against_a_loop():
    references = load_references()
    rng = np.random.default_rng(0)
    z, batch, s = 4, 2, 5
    q, kt, v = rng.standard_normal((z, s, 64)), rng.standard_normal((z, 64, s)), rng.standard_normal((z, s, 64))
    mask = rng.standard_normal((batch, s, s))
    want = np.empty((z, s, 64))
    for i in range(z):
        for r in range(s):
            x = np.array([q[i, r] @ kt[i, :, j] / 8.0 + mask[i // 2, r, j] for j in range(s)])
            w = np.exp(x - x.max())
            want[i, r] = (w / w.sum()) @ v[i]
    np.testing.assert_allclose(references.attention_bf16(q, kt, v, mask), want, rtol=1e-5, atol=1e-6)  # scores pass through float32


def test_qkv_reference_reads_each_head_from_its_columns():
    """attention_qkv_bf16's reference: head h of entry b is attention on qkv[b, :, 0..2, h], into out[b, :, h]."""
    references = load_references()
    rng = np.random.default_rng(1)
    batch, heads, s = 2, 3, 5
    qkv, mask = rng.standard_normal((batch, s, 3, heads, 64)), rng.standard_normal((batch, s, s))
    got = references.attention_qkv_bf16(qkv, mask)
    assert got.shape == (batch, s, heads, 64)
    for b in range(batch):
        for h in range(heads):
            q, k, v = qkv[b, :, 0, h][None], qkv[b, :, 1, h][None], qkv[b, :, 2, h][None]
            want = references.attention_bf16(q, np.transpose(k, (0, 2, 1)), v, mask[b][None])[0]
            np.testing.assert_allclose(got[b, :, h], want, rtol=1e-12)


@needs_build_tools
def test_builds_for_sm80_and_sm90(tmp_path):
    spec = load_spec(SPEC)
    assert sorted(a.name for a in spec.archs) == ["sm_80", "sm_90"]
    result = build(spec, tmp_path / "attention.vmfb", emit_mlir=tmp_path / "attention.mlir")
    mlir = result.mlir.read_text()
    assert ("func.func @attention_bf16(%q: tensor<?x?x64xbf16>, %kt: tensor<?x64x?xbf16>, %v: tensor<?x?x64xbf16>, %mask: tensor<?x?x?xbf16>)"
            " -> tensor<?x?x64xbf16>") in mlir
    assert "func.func @attention_qkv_bf16(%qkv: tensor<?x?x3x?x64xbf16>, %mask: tensor<?x?x?xbf16>) -> tensor<?x?x?x64xbf16>" in mlir


@needs_build_tools
def test_no_spills(tmp_path):
    from iree_dispatch.toolchains import find_nvcc

    for arch in ("sm_80", "sm_90"):
        out = subprocess.run([str(find_nvcc()), "-cubin", "-O3", "-std=c++17", f"-arch={arch}", "-Xptxas", "-v", str(ROOT / "kernels" / "attention.cu"),
                              "-o", str(tmp_path / f"attention.{arch}.cubin")], check=True, capture_output=True, text=True)
        spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out.stderr)
        assert len(spills) == 2 and all(store == load == "0" for store, load in spills), out.stderr  # both kernels
        assert all(int(n) <= 255 for n in re.findall(r"Used (\d+) registers", out.stderr)), out.stderr


@needs_build_tools
def test_inspect_spec(capsys):
    assert main(["inspect", str(SPEC)]) == 0
    out = capsys.readouterr().out
    assert "kernel attention_bf16(q: bf16[Z, S, 64], kt: bf16[Z, 64, S], v: bf16[Z, S, 64], mask: bf16[B, S, S]) -> (out: bf16[Z, S, 64])" in out
