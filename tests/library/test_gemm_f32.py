"""The f32 CUDA-core GEMMs (kernels/gemm_f32.cu: gemm_f32, gemm_nt_f32) on the CPU: the spec
declares what they take, the module builds for sm_90 and sm_80 with the signatures IREE calls
(three buffers, then M, N, K), ptxas reports no spills, the PTX multiplies with f32 FMAs only (no
tensor cores, no TF32), the model-rewrite copy of the spec launches them the same way and replaces
an f32 GPT-2 layer's matmuls and its LM head, the float64 references are the products they name,
and the kernel source itself, compiled for the host with its few CUDA features emulated (a thread
per CUDA thread, __syncthreads as a barrier), computes every element of c within the GPU tests'
bound, aligned and with pointers only 4-byte aligned; all of it also for the 96-row gemm_f32 of
kernels/gemm_f32_m96.toml (SGEMM_BM=96). Runs on a GPU: tests/library/test_gpu_gemm_f32.py."""

from __future__ import annotations

import math
import re
import subprocess
import tomllib

import numpy as np
import pytest

from iree_dispatch.backend.pipeline import build
from iree_dispatch.cli import main
from iree_dispatch.frontend.spec_file import load_spec

from ..support.environment import ROOT, needs_build_tools
from ..support.host_emulation import build_host_emulation
from ..support.references import load_references

SOURCE = ROOT / "kernels" / "gemm_f32.cu"
SPEC = ROOT / "kernels" / "gemm_f32.toml"
SPEC_M96 = ROOT / "kernels" / "gemm_f32_m96.toml"  # the same source with 96-row tiles
KERNELS = ("gemm_f32", "gemm_nt_f32", "gemm_nt_bias_f32", "gemm_nt_bias_gelu_erf_f32", "gemm_nt_bias_residual_f32", "gemm_batched_f32")
ARCHS = ("sm_90", "sm_80")
B_SHAPE = {"gemm_f32": ["K", "N"], "gemm_batched_f32": ["B", "K", "N"]}  # the others: [N, K]
# The inputs after a and b: a Linear's bias [N], and the residual [M, N] added after it.
EXTRA_INPUTS = {"gemm_nt_bias_f32": ["bias"], "gemm_nt_bias_gelu_erf_f32": ["bias"], "gemm_nt_bias_residual_f32": ["bias", "residual"]}
EXTRA_SHAPES = {"bias": ["N"], "residual": ["M", "N"]}
REPLACES = {"gemm_f32": "matmul", "gemm_nt_f32": "matmul_nt", "gemm_nt_bias_f32": "matmul_nt+bias", "gemm_nt_bias_gelu_erf_f32": "matmul_nt+bias+gelu_erf",
            "gemm_nt_bias_residual_f32": "matmul_nt+bias+residual", "gemm_batched_f32": "batch_matmul"}


def _kernels(path) -> tuple[dict, dict[str, dict]]:
    spec = tomllib.loads(path.read_text())
    return spec["module"], {k["name"]: k for k in spec["kernel"]}


def test_spec_declares_shapes_block_and_grid():
    spec = load_spec(SPEC)
    assert spec.name == "gemm_f32"
    assert [a.name for a in spec.archs] == list(ARCHS)
    assert [k.function for k in spec.kernels] == list(KERNELS)
    for kernel in spec.kernels:
        d = kernel.describe().to_dict()
        batch = ["B"] if kernel.function == "gemm_batched_f32" else []
        extra = [(name, "f32", EXTRA_SHAPES[name]) for name in EXTRA_INPUTS.get(kernel.function, [])]
        assert [(t["name"], t["dtype"], t["shape"]) for t in d["inputs"]] == [("a", "f32", [*batch, "M", "K"]),
                                                                             ("b", "f32", B_SHAPE.get(kernel.function, ["N", "K"])), *extra]
        assert [(t["name"], t["dtype"], t["shape"], t["inplace"]) for t in d["outputs"]] == [("c", "f32", [*batch, "M", "N"], False)]
        assert d["scalars"] == []  # M, N, K come from the shapes
        assert d["block"] == [256, 1, 1]
        assert d["grid"] == ["ceildiv(M, 128)", "ceildiv(N, 128)", "B" if batch else "1"]


def test_spec_declares_what_they_replace_in_a_model():
    module, kernels = _kernels(SPEC)
    assert module["archs"] == list(ARCHS)
    assert list(kernels) == list(KERNELS)
    for name in KERNELS:  # the NN bodies' tiles are static shared memory, the NT bodies' dynamic
        assert kernels[name].get("shared_memory") == (33792 if name.startswith("gemm_nt") else None)
    for name in KERNELS:
        assert kernels[name]["replaces"] == {"op": REPLACES[name], "accumulate": "f32"}


def test_96_row_spec_launches_96_row_tiles_for_narrow_n():
    """gemm_f32_m96.toml: the same source's gemm_f32 with SGEMM_BM=96, one block per 96 x 128 tile,
    preferred over the 128-row kernel where N <= 768 (the NT kernels' tiles are 128 rows in every
    build: not declared there)."""
    module, kernels = _kernels(SPEC_M96)
    assert module["archs"] == list(ARCHS) and module["nvcc_flags"] == ["-DSGEMM_BM=96"]
    assert list(kernels) == ["gemm_f32"]
    _, base = _kernels(SPEC)
    for name, kernel in kernels.items():
        assert kernel["source"] == "gemm_f32.cu" and kernel["block"] == [256] and kernel["shapes"] == base[name]["shapes"]
        assert kernel["grid"] == ["ceildiv(M, 96)", "ceildiv(N, 128)"]
        assert kernel["replaces"] == {**base[name]["replaces"], "max": {"N": 768}, "priority": 2}


def _entry(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}(")
    return ptx[start : ptx.index("{", start)]


@needs_build_tools
@pytest.mark.parametrize("spec, kernels", [(SPEC, KERNELS), (SPEC_M96, ("gemm_f32",))], ids=["128-row", "96-row"])
def test_builds_for_sm90_and_sm80_with_the_abi_iree_calls(tmp_path, spec, kernels):
    module = spec.stem
    result = build(load_spec(spec), tmp_path / f"{module}.vmfb", emit_mlir=tmp_path / f"{module}.mlir")
    assert result.vmfb.stat().st_size > 0
    assert sorted(p.name for p in result.objects_dir.iterdir()) == [f"gemm_f32.{arch}.{kind}" for arch in ("sm_80", "sm_90") for kind in ("cubin", "ptx")]  # named after the source
    mlir = result.mlir.read_text()
    for arch in ARCHS:
        ptx = (result.objects_dir / f"gemm_f32.{arch}.ptx").read_text()
        for name in kernels:
            assert f"func.func @{name}(" in mlir
            entry = _entry(ptx, name)
            # a, b, the extra inputs, c, then M, N, K as 32-bit push constants.
            buffers = 3 + len(EXTRA_INPUTS.get(name, []))
            assert len(re.findall(r"\.param \.u64", entry)) == buffers and len(re.findall(r"\.param \.u32", entry)) == 3, entry
            assert ".maxntid 256, 1, 1" in entry
        # f32 FMAs only: no tensor-core instruction, no conversion to TF32.
        assert "fma.rn.f32" in ptx
        assert not re.search(r"\b(w?gmma|mma|wmma)\.", ptx) and "tf32" not in ptx


@needs_build_tools
def test_inspect_shows_the_signatures(capsys):
    assert main(["inspect", str(SPEC)]) == 0
    out = capsys.readouterr().out
    assert "kernel gemm_f32(a: f32[M, K], b: f32[K, N]) -> (c: f32[M, N])" in out
    assert "kernel gemm_nt_f32(a: f32[M, K], b: f32[N, K]) -> (c: f32[M, N])" in out
    assert "kernel gemm_batched_f32(a: f32[B, M, K], b: f32[B, K, N]) -> (c: f32[B, M, N])" in out
    assert "kernel gemm_nt_bias_residual_f32(a: f32[M, K], b: f32[N, K], bias: f32[N], residual: f32[M, N]) -> (c: f32[M, N])" in out


@needs_build_tools
@pytest.mark.parametrize("rows", [128, 96])
def test_no_spills(tmp_path, rows):
    from iree_dispatch.toolchains import find_nvcc

    for arch in ARCHS:
        proc = subprocess.run([str(find_nvcc()), "-cubin", "-O3", "-std=c++17", f"-arch={arch}", f"-DSGEMM_BM={rows}", "-Xptxas", "-v", str(SOURCE),
                               "-o", str(tmp_path / f"{arch}.cubin")], check=True, capture_output=True, text=True)
        log = proc.stderr
        spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
        assert spills == [("0", "0")] * len(KERNELS), log
        # __launch_bounds__(256, 2): two blocks per SM, 128 registers a thread at most (the
        # batched kernel: (256, 1), one block per SM).
        registers = dict(zip(re.findall(r"Compiling entry function '(\w+)'", log), (int(n) for n in re.findall(r"Used (\d+) registers", log))))
        assert sorted(registers) == sorted(KERNELS), log
        assert all(n <= (255 if name == "gemm_batched_f32" else 128) for name, n in registers.items()), log


def test_references_are_the_products_they_name():
    references = load_references()
    rng = np.random.default_rng(0)
    a, b, bt = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    want = [[sum(float(a[i, k]) * float(b[k, j]) for k in range(3)) for j in range(4)] for i in range(5)]
    want_nt = [[sum(float(a[i, k]) * float(bt[j, k]) for k in range(3)) for j in range(4)] for i in range(5)]
    got, got_nt = references.gemm_f32(a, b), references.gemm_nt_f32(a, bt)
    assert got.dtype == got_nt.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-15)
    np.testing.assert_allclose(got_nt, want_nt, rtol=1e-15)
    # The Linear kernels': the NT product plus bias [N] (and residual [M, N]), erf-GELU of it.
    bias, residual = rng.standard_normal(4), rng.standard_normal((5, 4))
    linear = np.asarray(want_nt) + bias
    np.testing.assert_allclose(references.gemm_nt_bias_f32(a, bt, bias), linear, rtol=1e-15)
    np.testing.assert_allclose(references.gemm_nt_bias_residual_f32(a, bt, bias, residual), linear + residual, rtol=1e-15)
    gelu = [[0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))) for x in row] for row in linear]
    np.testing.assert_allclose(references.gemm_nt_bias_gelu_erf_f32(a, bt, bias), gelu, rtol=1e-13, atol=1e-15)
    batched = references.gemm_batched_f32(np.stack([a, 2 * a]), np.stack([b, -b]))
    np.testing.assert_allclose(batched, [want, -2 * np.asarray(want)], rtol=1e-15)


@needs_build_tools
def test_gpt2_layer_f32_matmuls_and_lm_head_are_replaced():
    """The f32 GPT-2 layer's four Linear matmuls (qkv, out-projection, MLP up and down) go to
    gemm_f32, its LM head (a batch matmul with the tied embedding transposed) to gemm_nt_f32, and
    attention's two batch matmuls (scores, context) to gemm_batched_f32."""
    from iree_dispatch.models import compile_model

    report = compile_model(ROOT / "tests" / "models" / "gpt2_layer_f32.torch.mlir", [SPEC], dry_run=True)
    assert report.kernel_counts() == {"gemm_f32.gemm_f32": 4, "gemm_f32.gemm_nt_f32": 1, "gemm_f32.gemm_batched_f32": 2}
    assert report.counts()["batch_matmul"] == {"found": 3, "replaced": 3, "left": 0}
    assert report.counts()["matmul"] == {"found": 4, "replaced": 4, "left": 0}
    assert [d.form.kind for d in report.replaced if d.capability.label == "gemm_f32.gemm_nt_f32"] == ["matmul_nt"]


# Host emulation of what gemm_f32.cu uses from CUDA: each CUDA thread a std::thread, the block's
# __syncthreads a std::barrier, __shared__ arrays function statics (one per kernel body, shared by
# the block's threads; the blocks run one after another; the NT body's dynamic shared memory an
# array the driver defines, sgemm::nt_shared), an asynchronous copy a copy made at
# once (the kernel waits for its copies before the barrier that publishes them, so the order the
# block sees is the same); <cuda_pipeline_primitives.h> is an empty file (`_PIPELINE_HEADER`).
_SHIM = r"""
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
using std::min;
inline void __pipeline_memcpy_async(void* dst, const void* src, std::size_t size, std::size_t zfill = 0) {
  std::memcpy(dst, src, size - zfill);
  std::memset(static_cast<char*>(dst) + (size - zfill), 0, zfill);
}
inline void __pipeline_commit() {}
inline void __pipeline_wait_prior(std::size_t) {}
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct emu_dim3 { unsigned x, y, z; };
extern thread_local emu_dim3 threadIdx, blockIdx;
extern std::barrier<>* emu_block_barrier;
#define __syncthreads() emu_block_barrier->arrive_and_wait()
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
template <class T> inline T __ldg(const T* p) { return *p; }
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float x, float y) { return x / y; }
"""

# Runs one kernel on random inputs (per-row means in a, per-column means in b, so a value taken
# from another row or column is off by far more than the bound) at given element offsets of a, b
# and c from 16-byte aligned allocations, with c and the words around it filled with a sentinel,
# and checks every element against the double-precision sum, |c - c64| <= 1e-5 * (|a| @ |b|),
# and that nothing outside c was written.
_DRIVER = r"""
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>
thread_local emu_dim3 threadIdx, blockIdx;
std::barrier<>* emu_block_barrier;
namespace sgemm {  // the NT body's dynamic shared memory: one array (the blocks run one after another)
float* nt_shared() { alignas(16) static float tiles[33792 / 4]; return tiles; }
}
extern "C" void gemm_f32(const float*, const float*, float*, int, int, int);
extern "C" void gemm_nt_f32(const float*, const float*, float*, int, int, int);

int main(int argc, char** argv) {
  const bool nt = atoi(argv[1]);
  const int M = atoi(argv[2]), N = atoi(argv[3]), K = atoi(argv[4]), off_a = atoi(argv[5]), off_b = atoi(argv[6]), off_c = atoi(argv[7]);
  std::mt19937 rng(M * 131 + N * 7 + K);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> A((size_t)M * K + 4), B((size_t)K * N + 4), C((size_t)M * N + 8, 12345.f);
  for (int i = 0; i < M; ++i) { float mean = d(rng); for (int k = 0; k < K; ++k) A[off_a + (size_t)i * K + k] = d(rng) + 0.5f * mean; }
  std::vector<float> col_mean(N);
  for (auto& v : col_mean) v = d(rng);
  for (int k = 0; k < K; ++k) for (int j = 0; j < N; ++j) B[off_b + (nt ? (size_t)j * K + k : (size_t)k * N + j)] = d(rng) + 0.5f * col_mean[j];
  const float* a = A.data() + off_a; const float* b = B.data() + off_b; float* c = C.data() + off_c;
  for (size_t i = 0; i < (size_t)M * N; ++i) c[i] = NAN;
#ifndef SGEMM_BM
#define SGEMM_BM 128
#endif
  const unsigned bm = nt ? 128 : SGEMM_BM;  // the NT kernels' tiles are 128 rows in every build
  const unsigned gx = (M + bm - 1) / bm, gy = (N + 127) / 128;
  std::barrier<> barrier(256);
  emu_block_barrier = &barrier;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 256; ++t) threads.emplace_back([&, t] {
    threadIdx = {t, 0, 0};
    for (unsigned y = 0; y < gy; ++y) for (unsigned x = 0; x < gx; ++x) {
      blockIdx = {x, y, 0};
      (nt ? gemm_nt_f32 : gemm_f32)(a, b, c, M, N, K);
      barrier.arrive_and_wait();
    }
  });
  for (auto& t : threads) t.join();
  long bad = 0; double worst = 0;
  for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) {
    double s = 0, s_abs = 0;
    for (int k = 0; k < K; ++k) {
      double p = (double)a[(size_t)i * K + k] * (double)(nt ? b[(size_t)j * K + k] : b[(size_t)k * N + j]);
      s += p; s_abs += std::fabs(p);
    }
    double got = c[(size_t)i * N + j], err = std::fabs(got - s), bound = 1e-5 * s_abs + 1e-30;
    if (!(err <= bound)) { if (bad++ < 3) printf("c[%d, %d] = %.9g, want %.9g\n", i, j, got, s); }
    else if (err / bound > worst) worst = err / bound;
  }
  for (int i = 0; i < off_c; ++i) if (C[i] != 12345.f) { ++bad; printf("written before c at %d\n", i - off_c); }
  for (size_t i = off_c + (size_t)M * N; i < C.size(); ++i) if (C[i] != 12345.f) { ++bad; printf("written past c at %zu\n", i - off_c); }
  printf("%ld bad, max err/bound %.3f\n", bad, worst);
  return bad != 0;
}
"""

# (M, N, K): single elements, edges that are not multiples of the 128 x 128 x 8 (96 x 128 x 8;
# NT: 128 x 128 x 16) tiles, K and N not multiples of 4 (element loads and stores), N odd, exact multiples of the tiles
# (float4 loads and stores), several K steps.
EMULATED_SIZES = [(1, 1, 1), (1, 77, 5), (37, 101, 13), (129, 129, 33), (200, 1001, 9), (130, 260, 24), (128, 128, 8), (96, 128, 8), (193, 130, 16),
                  (256, 256, 256)]


@pytest.fixture(scope="module", params=[128, 96], ids=["128-row", "96-row"])
def emulated(tmp_path_factory, request):
    """The source and driver built with SGEMM_BM (tile rows) = the parameter."""
    folder = tmp_path_factory.mktemp("gemm_f32_host")
    (folder / "include").mkdir()
    (folder / "include" / "cuda_pipeline_primitives.h").write_text("// emulated in shim.h\n")
    return build_host_emulation(folder, SOURCE, _SHIM, _DRIVER, ["-x", "none", f"-DSGEMM_BM={request.param}", f"-I{folder / 'include'}"])


@pytest.mark.parametrize("offsets", [(0, 0, 0), (1, 3, 2)], ids=["aligned", "4-byte-aligned"])
@pytest.mark.parametrize("nt", [False, True], ids=["gemm_f32", "gemm_nt_f32"])
@pytest.mark.parametrize("m, n, k", EMULATED_SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in EMULATED_SIZES])
def test_source_computes_every_element_on_the_host(emulated, m, n, k, nt, offsets):
    """Offsets (1, 3, 2) floats leave a, b and c 4-byte aligned only, as IREE's bindings may
    be: the kernel must take its element-by-element loads and stores."""
    proc = subprocess.run([str(emulated), str(int(nt)), str(m), str(n), str(k), *map(str, offsets)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_build_tools
def test_narrow_matmuls_take_the_96_row_tiles():
    """With both specs, the f32 GPT-2 layer's Linear matmuls (N <= 768 at its tiny width) take the
    96-row gemm_f32 (`priority = 2`); its LM head (NT) and attention batch matmuls, which only the
    128-row spec declares, stay there."""
    from iree_dispatch.models import compile_model

    report = compile_model(ROOT / "tests" / "models" / "gpt2_layer_f32.torch.mlir", [SPEC, SPEC_M96], dry_run=True)
    assert report.kernel_counts() == {"gemm_f32_m96.gemm_f32": 4, "gemm_f32.gemm_nt_f32": 1, "gemm_f32.gemm_batched_f32": 2}
