// Included by reduce.cu as "reduce_ops.h": resolved from reduce.cu's own folder, also when
// iree_dispatch compiles reduce.cu through its generated translation unit.
#pragma once

// Dynamic shared memory typed as T (the CUDA samples' SharedMemory<T>).
template <class T>
struct SharedMemory {
  __device__ inline operator T*() {
    extern __shared__ int __smem[];
    return (T*)__smem;
  }
};
