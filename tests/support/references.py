"""The float64 references of the repository's kernels, and the dtypes numpy lacks."""

from __future__ import annotations

import importlib.util

import pytest

from .environment import ROOT


def load_references():
    """kernels/references.py (the kernels' float64 references), loaded by path as a fresh module."""
    loader = importlib.util.spec_from_file_location("references", ROOT / "kernels" / "references.py")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


def bfloat16():
    """numpy has no bfloat16; ml_dtypes (as iree_dispatch.runtime) provides it."""
    import numpy as np

    ml_dtypes = pytest.importorskip("ml_dtypes")
    return np.dtype(ml_dtypes.bfloat16)
