// The f64 tensor-core product the f64-accumulating f32 kernels share (gemm_f32_f64acc.cu,
// flash_attention_f32_f64acc.cu).
#pragma once

// d += a @ b for one 16 x 8 x 16 tile, in the PTX ISA's fragment layout for .f64 m16n8k16: lane
// (g, t) = (lane / 4, lane % 4) holds a[i] = A[g + 8 (i % 2)][t + 4 (i / 2)], b[i] = B[t + 4 i][g],
// d = D[g][2t, 2t + 1], D[g + 8][2t, 2t + 1]. sm_80 has the 8 x 8 x 4 shape only, whose layout is
// that one's quarter (A[g][t], B[t][g], D[g][2t, 2t + 1]): eight of them, k quarter j taking
// a[2j] (rows g) and a[2j + 1] (rows g + 8) with b[j].
__device__ __forceinline__ void mma_m16n8k16_f64(double (&d)[4], const double (&a)[8], const double (&b)[4]) {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, "
      "{%0,%1,%2,%3};\n"
      : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
      : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]), "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
#else
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int half = 0; half < 2; ++half)
      asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
                   : "+d"(d[2 * half]), "+d"(d[2 * half + 1])
                   : "d"(a[2 * j + half]), "d"(b[j]));
  }
#endif
}
