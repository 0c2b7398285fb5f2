"""Models: compile an imported model for CUDA with its ops replaced by hand-written kernels.

`compile_model(model.mlir, [spec.toml, ...], out.vmfb)` (or `iree-dispatch compile`): every op
that a kernel declares it can replace (`replaces` in its spec: matmul, matmul+bias,
batch_matmul, softmax, layernorm) and that keeps the model's types, shapes and numerics becomes a
call to that kernel; the rest is left to IREE, each with the reason (docs/models.md).
`iree_dispatch.models.torch_export` imports torch models (needs torch).
"""

from __future__ import annotations

_LAZY = {"compile_model": "compiler", "ModelReport": "compiler", "load_kernels": "capability"}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'iree_dispatch.models' has no attribute {name!r}")
