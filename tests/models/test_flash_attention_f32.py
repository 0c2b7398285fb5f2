"""The f32 flash-attention kernels (kernels/flash_attention_f32.toml) on the CPU: the spec declares
its kernels ([B, H, S, D], [B, S, H, D] and one qkv tensor) with the bf16 kernels' entry-point
shapes and the sdpa, sdpa_bshd and sdpa_qkv kinds with f32 accumulation,
the module builds for sm_90a and sm_80, ptxas reports no spills, the PTX computes with f32 FMAs
and no tensor-core instruction, and the kernel source itself, compiled for the host with its few
CUDA features emulated (a std::thread per CUDA thread, __syncthreads and each warp shuffle a
barrier of the block's threads), computes every element within the GPU tests' bound against the
float64 softmax(q @ k^T * scale + mask) @ v: tails, causal with Sq != Sk, grouped- and multi-query
attention, broadcast masks with -inf entries, a row all -inf (NaN) and one all finfo.min (finite),
pointers only 4-byte aligned (the element-copy path), and Hq % Hkv != 0 (NaN everywhere). It
checks too that nothing outside out is written. Runs on a GPU: test_gpu_flash_attention_f32.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib

import pytest

from ..support.environment import ROOT, needs_build_tools
from ..support.host_emulation import build_host_emulation

SOURCE = ROOT / "kernels" / "flash_attention_f32.cu"
SPEC = ROOT / "kernels" / "flash_attention_f32.toml"
# The [B, H, S, D] kernels, then the same on [B, S, H, D] (flash_attn_bshd_f32_*) and on one qkv
# [B, S, 3, H, D] tensor (flash_attn_qkv_f32_*).
KERNELS = [f"flash_attn{layout}_f32_d{d}{m}" for layout in ("", "_bshd", "_qkv") for d in (64, 128) for m in ("", "_causal", "_mask")]
SHARED_MEMORY = {64: 72704, 128: 79872}


def test_spec_declares_the_sdpa_kinds():
    spec = tomllib.loads(SPEC.read_text())
    assert spec["module"]["archs"] == ["sm_90a", "sm_80"]
    assert [k["name"] for k in spec["kernel"]] == KERNELS
    for k in spec["kernel"]:
        d = int(re.search(r"_d(\d+)", k["name"])[1])
        masked, bshd, qkv = k["name"].endswith("_mask"), "_bshd" in k["name"], "_qkv" in k["name"]
        assert k["block"] == [256] and k["shared_memory"] == SHARED_MEMORY[d]
        if qkv:
            assert k["grid"] == ["B * H", "ceildiv(S, 64)"]
            assert k["shapes"] == {"qkv": ["B", "S", 3, "H", d], **({"mask": ["MB", "MH", "MQ", "S"]} if masked else {}), "out": ["B", "S", "H", d]}
        else:
            assert k["grid"] == ["B * Hq", "ceildiv(Sq, 64)"]
            q, kv = (["B", "Sq", "Hq", d], ["B", "Sk", "Hkv", d]) if bshd else (["B", "Hq", "Sq", d], ["B", "Hkv", "Sk", d])
            assert k["shapes"] == {"q": q, "k": kv, "v": kv, **({"mask": ["MB", "MH", "MQ", "Sk"]} if masked else {}), "out": q}
        op = ("sdpa_qkv" if qkv else "sdpa_bshd" if bshd else "sdpa") + ("_mask" if masked else "_causal" if k["name"].endswith("_causal") else "")
        assert k["replaces"] == {"op": op, "accumulate": "f32"}


@needs_build_tools
def test_builds_without_spills_and_without_tensor_cores(tmp_path):
    """Both archs: no spills (ptxas -v), and the PTX multiplies with fma.rn.f32 only: no mma,
    no wgmma, no TF32 conversion."""
    nvcc = shutil.which("nvcc")
    for arch in ("sm_90a", "sm_80"):
        ptx = tmp_path / f"{arch}.ptx"
        subprocess.run([nvcc, "-ptx", f"-arch={arch}", "-O3", "-std=c++17", str(SOURCE), "-o", str(ptx)], check=True, capture_output=True)
        text = ptx.read_text()
        assert "fma.rn.f32" in text and not re.search(r"\b(w?gmma|mma\.sync|cvt\.rna\.tf32)", text)
        proc = subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-O3", "-std=c++17", "-Xptxas", "-v", str(SOURCE), "-o", str(tmp_path / f"{arch}.cubin")],
                              capture_output=True, text=True, check=True)
        functions = re.findall(r"Compiling entry function '(\w+)'", proc.stderr)
        assert sorted(functions) == sorted(KERNELS), proc.stderr
        assert re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", proc.stderr) == [("0", "0")] * len(KERNELS), proc.stderr


def test_module_builds(tmp_path):
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec_file import load_spec

    pytest.importorskip("iree.compiler")
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    out = tmp_path / "flash_attention_f32.vmfb"
    build(load_spec(SPEC), out)
    assert out.stat().st_size > 0


# Host emulation of what flash_attention_f32.cu uses from CUDA (its PTX has C++ stand-ins where
# __CUDA_ARCH__ is undefined): each CUDA thread a std::thread, __syncthreads a std::barrier of the
# block's 256 threads, a warp shuffle a slot per thread between two such barriers (every thread of
# the block shuffles at the same points), the dynamic shared memory one array (the blocks run one
# after another).
_SHIM = r"""
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
using std::min;
struct float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct emu_dim3 { unsigned x, y, z; };
extern thread_local emu_dim3 threadIdx, blockIdx;
extern std::barrier<>* emu_block_barrier;
extern float emu_shuffle_slots[256];
#define __syncthreads() emu_block_barrier->arrive_and_wait()
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
template <class T> inline T __ldg(const T* p) { return *p; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  emu_shuffle_slots[threadIdx.x] = v;
  emu_block_barrier->arrive_and_wait();
  const float r = emu_shuffle_slots[threadIdx.x ^ lane_mask];
  emu_block_barrier->arrive_and_wait();
  return r;
}
"""

# Runs one kernel on random inputs (v with a mean per key/value head, so a value read from another
# head is off by far more than the bound) at an element offset from 16-byte aligned allocations,
# out and the words around it filled with a sentinel, and checks every element against the
# float64 reference: NaN exactly where it is NaN, elsewhere |out - ref| <= 2e-5 + 2e-5 |ref|;
# nothing outside out written. The mask: -inf at random (a fifth of the entries), plus in each
# [MQ, Sk] slice of 3 rows or more, row 0 all -inf and row 1 all finfo(f32).min.
_DRIVER = r"""
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>
thread_local emu_dim3 threadIdx, blockIdx;
std::barrier<>* emu_block_barrier;
float emu_shuffle_slots[256];
namespace flash_attention_f32 { alignas(16) float shared[79872 / 4]; }
#define PLAIN(name) extern "C" void name(const float*, const float*, const float*, float*, int, int, int, int, int, float);
#define MASKED(name) extern "C" void name(const float*, const float*, const float*, const float*, float*, int, int, int, int, int, int, int, int, float);
PLAIN(flash_attn_f32_d64) PLAIN(flash_attn_f32_d64_causal) MASKED(flash_attn_f32_d64_mask)
PLAIN(flash_attn_f32_d128) PLAIN(flash_attn_f32_d128_causal) MASKED(flash_attn_f32_d128_mask)

int main(int argc, char** argv) {
  const std::string masking = argv[1];  // none, causal, mask
  const int D = atoi(argv[2]), B = atoi(argv[3]), Hq = atoi(argv[4]), Hkv = atoi(argv[5]), Sq = atoi(argv[6]), Sk = atoi(argv[7]);
  const int MB = atoi(argv[8]), MH = atoi(argv[9]), MQ = atoi(argv[10]), off = atoi(argv[11]);
  const float scale = 0.9f / std::sqrt((float)D);
  std::mt19937 rng(B * 7 + Hq * 131 + Sq * 17 + Sk + D + off);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  const size_t nq = (size_t)B * Hq * Sq * D, nk = (size_t)B * Hkv * Sk * D, nm = masking == "mask" ? (size_t)MB * MH * MQ * Sk : 1;
  std::vector<float> Q(nq + 4), K(nk + 4), V(nk + 4), M(nm + 4), O(nq + 8, 12345.f);
  float *q = Q.data() + off, *k = K.data() + off, *v = V.data() + off, *m = M.data() + off, *o = O.data() + off;
  for (size_t i = 0; i < nq; ++i) q[i] = 1.5f * nd(rng);
  for (size_t i = 0; i < nk; ++i) k[i] = 1.5f * nd(rng);
  for (size_t i = 0; i < nk; ++i) v[i] = nd(rng) + (float)((i / ((size_t)Sk * D)) % 7) - 3.0f;
  if (masking == "mask") {
    for (size_t i = 0; i < nm; ++i) m[i] = u(rng) < 0.2f ? -INFINITY : 2.0f * nd(rng);
    if (MQ >= 3) for (size_t s = 0; s < (size_t)MB * MH; ++s) for (int j = 0; j < Sk; ++j) m[(s * MQ) * Sk + j] = -INFINITY, m[(s * MQ + 1) * Sk + j] = -3.4028234663852886e38f;
  }
  for (size_t i = 0; i < nq; ++i) o[i] = NAN;
  std::barrier<> barrier(256);
  emu_block_barrier = &barrier;
  const unsigned gx = B * Hq, gy = (Sq + 63) / 64;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 256; ++t) threads.emplace_back([&, t] {
    threadIdx = {t, 0, 0};
    for (unsigned y = 0; y < gy; ++y) for (unsigned x = 0; x < gx; ++x) {
      blockIdx = {x, y, 0};
      if (masking == "mask") (D == 64 ? flash_attn_f32_d64_mask : flash_attn_f32_d128_mask)(q, k, v, m, o, B, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
      else if (masking == "causal") (D == 64 ? flash_attn_f32_d64_causal : flash_attn_f32_d128_causal)(q, k, v, o, B, Hq, Hkv, Sq, Sk, scale);
      else (D == 64 ? flash_attn_f32_d64 : flash_attn_f32_d128)(q, k, v, o, B, Hq, Hkv, Sq, Sk, scale);
      barrier.arrive_and_wait();
    }
  });
  for (auto& t : threads) t.join();
  long bad = 0; double worst = 0;
  const bool valid = Hq % Hkv == 0;
  std::vector<double> s(Sk);
  for (int b = 0; b < B; ++b) for (int h = 0; h < Hq; ++h) for (int i = 0; i < Sq; ++i) {
    const int kvh = valid ? h / (Hq / Hkv) : 0;
    double mx = -INFINITY;
    for (int j = 0; j < Sk; ++j) {
      double acc = 0;
      for (int d = 0; d < D; ++d) acc += (double)q[(((size_t)b * Hq + h) * Sq + i) * D + d] * k[(((size_t)b * Hkv + kvh) * Sk + j) * D + d];
      acc *= scale;
      if (masking == "mask") acc += m[(((size_t)(b % MB) * MH + h % MH) * MQ + std::min(i, MQ - 1)) * Sk + j];
      if (masking == "causal" && j > i) acc = -INFINITY;
      s[j] = acc; mx = std::max(mx, acc);
    }
    double sum = 0;
    for (int j = 0; j < Sk; ++j) sum += (s[j] = std::exp(s[j] - mx));
    for (int d = 0; d < D; ++d) {
      double want = 0;
      for (int j = 0; j < Sk; ++j) want += s[j] * v[(((size_t)b * Hkv + kvh) * Sk + j) * D + d];
      want = valid ? want / sum : NAN;
      const double got = o[(((size_t)b * Hq + h) * Sq + i) * D + d], err = std::fabs(got - want), bound = 2e-5 + 2e-5 * std::fabs(want);
      const bool ok = std::isnan(want) ? std::isnan(got) : err <= bound;
      if (!ok) { if (bad++ < 3) printf("out[%d, %d, %d, %d] = %.9g, want %.9g\n", b, h, i, d, got, want); }
      else if (!std::isnan(want) && err / bound > worst) worst = err / bound;
    }
  }
  for (int i = 0; i < off; ++i) if (O[i] != 12345.f) { ++bad; printf("written before out at %d\n", i - off); }
  for (size_t i = off + nq; i < O.size(); ++i) if (O[i] != 12345.f) { ++bad; printf("written past out at %zu\n", i - off); }
  printf("%ld bad, max err/bound %.3f\n", bad, worst);
  return bad != 0;
}
"""

# (B, Hq, Hkv, Sq, Sk, MB, MH, MQ, element offset): one query and key; tails of the 64-row and
# key tiles; Sq > Sk and Sq < Sk (causal: the last rows see every key, the keys past Sq are never
# seen); grouped-query attention with a [B, 1, 1, Sk] mask; multi-query with a [1, Hq, Sq, Sk]
# mask; pointers 4 bytes past a 16-byte boundary (element copies and stores); Hq % Hkv != 0.
CASES = [(1, 1, 1, 1, 1, 1, 1, 1, 0), (2, 3, 3, 100, 133, 2, 1, 100, 0), (1, 2, 2, 130, 70, 1, 2, 130, 0), (1, 2, 2, 40, 150, 1, 1, 40, 0),
         (2, 4, 2, 70, 33, 2, 1, 1, 0), (1, 4, 1, 65, 64, 1, 4, 65, 0), (1, 2, 2, 67, 45, 1, 1, 67, 1), (1, 3, 2, 10, 10, 1, 1, 1, 0)]


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    return build_host_emulation(tmp_path_factory.mktemp("flash_attention_f32_host"), SOURCE, _SHIM, _DRIVER, ["-x", "c++", "-include", "{shim}"])


@pytest.mark.parametrize("masking", ["none", "causal", "mask"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("case", CASES, ids=["x".join(map(str, c)) for c in CASES])
def test_source_computes_every_element_on_the_host(emulated, masking, d, case):
    proc = subprocess.run([str(emulated), masking, str(d), *map(str, case)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
