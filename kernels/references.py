"""float64 numpy references for the kernels in this folder, keyed by kernel name.

Each takes the kernel's inputs and scalar arguments in the order of its generated function
and returns its results (one array, or a tuple).
"""

from __future__ import annotations

import numpy as np


def simple_mul(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return lhs.astype(np.float64) * rhs.astype(np.float64)


def simple_mul_inplace(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return rhs.astype(np.float64) * lhs.astype(np.float64)


def axpby(x: np.ndarray, y: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    return alpha * x.astype(np.float64) + beta * y.astype(np.float64)


def mixed_invocation(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """mlir/mixed_invocation.mlir: (lhs*rhs + rhs) * (lhs*rhs), with float32 rounding between steps."""
    product = (lhs * rhs).astype(np.float32)
    total = (product + rhs).astype(np.float32)
    return total.astype(np.float64) * product
