"""iree_dispatch: hand-written CUDA kernels as first-class IREE dispatches.

Build half (needs nvcc and iree-base-compiler): `KernelSpec`, `ModuleSpec`, `load_spec`,
`build`. Run-time half (needs only iree-base-runtime and numpy): `iree_dispatch.runtime`.
Names are imported lazily so `import iree_dispatch.runtime` never loads the build half.
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "KernelSpec": "frontend.spec",
    "ModuleSpec": "frontend.spec",
    "load_spec": "frontend.spec_file",
    "build": "backend.pipeline",
    "BuildResult": "backend.pipeline",
    "load": "runtime",
    "Module": "runtime",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'iree_dispatch' has no attribute {name!r}")
