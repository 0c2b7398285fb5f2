"""Triton kernels dispatched through IREE (iree_dispatch.frontend.triton). Each comes with the C
signature iree_dispatch needs (which pointers are inputs and outputs, the element types); the
numpy references they are checked against on a GPU are in tests/frontend/test_gpu_prebuilt.py.

    from iree_dispatch.frontend.triton import triton_kernel
    from kernels.triton_kernels import axpy, AXPY_SIGNATURE
    spec = triton_kernel(axpy, AXPY_SIGNATURE, grid="ceildiv(n, BLOCK)", constexprs={"BLOCK": 1024}, shape=["n"])
"""

from __future__ import annotations

import triton
import triton.language as tl

AXPY_SIGNATURE = "void axpy(const float* x_ptr, const float* y_ptr, float* out_ptr, float alpha, int n)"


@triton.jit
def axpy(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    """out = alpha * x + y, BLOCK elements per program."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, alpha * x + y, mask=mask)


SOFTMAX_SIGNATURE = "void softmax_rows(const float* x_ptr, float* out_ptr, int rows, int cols)"


@triton.jit
def softmax_rows(x_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr):
    """Numerically stable softmax of each row of a row-major rows × cols matrix; one program
    per row, the whole row in registers (BLOCK ≥ cols, a power of two)."""
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    # int64 row offset: rows * cols may exceed 2**31 elements.
    start = row.to(tl.int64) * cols
    x = tl.load(x_ptr + start + offsets, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + start + offsets, e / tl.sum(e, axis=0), mask=mask)
