"""The NT GEMM (kernels/gemm_nt.cu, gemm_nt_bf16 and gemm_nt_bf16_f32out) on the CPU: ptxas reports
no spills for either body of either entry point, the specs' launch shape agrees with the kernel
(block, even grid, per-arch shared memory the kernel checks against), and the model-rewrite copy
of the spec launches it the same way. Runs on a GPU: tests/library/test_gpu_gemm_nt.py."""

from __future__ import annotations

import re
import subprocess
import tomllib

from ..support.environment import ROOT, needs_build_tools

SOURCE = ROOT / "kernels" / "gemm_nt.cu"
SPEC = ROOT / "kernels" / "gemm_nt.toml"
ARCHS = ("sm_90a", "sm_80")


ENTRY_POINTS = ("gemm_nt_bf16", "gemm_nt_bf16_f32out", "gemm_nt_bias_bf16", "gemm_nt_bias_gelu_bf16", "gemm_nt_bias_gelu_erf_bf16",
                "gemm_nt_bias_residual_bf16")


def _kernel(path, name="gemm_nt_bf16"):
    spec = tomllib.loads(path.read_text())
    (kernel,) = [k for k in spec["kernel"] if k["name"] == name]
    return spec["module"], kernel


def _grid(m: int, n: int) -> int:
    _, kernel = _kernel(SPEC)
    (expr,) = kernel["grid"]
    return eval(expr, {"__builtins__": {}}, {"ceildiv": lambda a, b: -(-a // b), "min": min, "max": max, "M": m, "N": n})


def _nvcc(tmp_path, arch: str, kind: str) -> tuple[str, str]:
    from iree_dispatch.toolchains import find_nvcc

    out = tmp_path / f"gemm_nt.{arch}.{kind}"
    proc = subprocess.run([str(find_nvcc()), f"-{kind}", "-O3", "-std=c++17", f"-arch={arch}", "-Xptxas", "-v", str(SOURCE), "-o", str(out)],
                          check=True, capture_output=True, text=True)
    return proc.stderr, out.read_text() if kind == "ptx" else ""


@needs_build_tools
def test_no_spills(tmp_path):
    for arch in ARCHS:
        log, _ = _nvcc(tmp_path, arch, "cubin")
        spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
        assert spills == [("0", "0")] * len(ENTRY_POINTS), log
        # 384 threads, one block per SM: 168 registers at most (65536 / 384, in steps of 8).
        assert all(int(n) <= 168 for n in re.findall(r"Used (\d+) registers", log)), log
        assert "C7515" not in log, log  # wgmma serialized by ptxas


@needs_build_tools
def test_spec_shared_memory_is_what_the_kernel_checks(tmp_path):
    """Each arch's shared_memory is that body's SMEM_BYTES: the kernel traps below it (the PTX's
    comparison of %dynamic_smem_size), and more would only waste the SM's shared memory. Both
    entry points check the same size (a float c is staged as bf16 too)."""
    for arch in ARCHS:
        _, ptx = _nvcc(tmp_path, arch, "ptx")
        for name in ENTRY_POINTS:
            _, kernel = _kernel(SPEC, name)
            body = ptx[ptx.index(f".entry {name}("):]
            compare = re.search(r"%dynamic_smem_size;[^$]*?setp\.(\w+)\.u32\s+%p\d+, %r\d+, (\d+);", body)
            assert compare, body[:2000]
            op, value = compare.group(1), int(compare.group(2))
            assert (op, value) in (("gt", kernel["shared_memory"][arch] - 1), ("lt", kernel["shared_memory"][arch])), (name, arch, op, value)


def test_spec_launch_and_what_it_replaces():
    module, kernel = _kernel(SPEC)
    assert module["archs"] == list(ARCHS)
    assert kernel["replaces"] == {"op": "matmul_nt", "accumulate": "f32"}
    _, widened = _kernel(SPEC, "gemm_nt_bf16_f32out")  # the same launch, its result widened to f32
    assert widened["replaces"] == {"op": "matmul_nt+extf", "accumulate": "f32"}
    assert {k: v for k, v in widened.items() if k not in ("name", "replaces")} == {k: v for k, v in kernel.items() if k not in ("name", "replaces")}
    assert kernel["block"] == [384]
    assert kernel["shared_memory"]["sm_90a"] <= 227 * 1024 - 1024  # with the kernel's static barriers and map staging
    assert kernel["shared_memory"]["sm_80"] <= 99 * 1024  # sm_86 and sm_89 run the sm_80 cubin or PTX


def test_grid_is_even_and_sized_by_units():
    """Clusters of 2 need an even grid; a cluster per 256 x 256 unit up to 264, then about 8 units
    per cluster (the LM head: 6304 units, 788 clusters)."""
    for m in (1, 64, 255, 256, 257, 8192, 100000):
        for n in (1, 77, 256, 257, 50257):
            assert _grid(m, n) % 2 == 0 and _grid(m, n) >= 2
    assert _grid(1, 1) == 2
    assert _grid(1024, 1024) == 2 * 16
    assert _grid(8192, 50257) == 2 * 788
    assert _grid(4096, 4096) == 2 * 256
    assert _grid(8192, 8192) == 2 * 264  # 1024 units, 3.9 per cluster
