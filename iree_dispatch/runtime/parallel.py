"""One kernel over several GPUs: the inputs split along a dimension, one module instance per
GPU, the parts called concurrently (IREE's invoke releases the GIL), the outputs joined.

    dp = runtime.DataParallel("build/samples.vmfb", ["cuda://0", "cuda://1"])
    out = dp.call("simple_mul", a, b)                 # numpy in, numpy out, split along dim 0
    parts = dp.scatter(a)                              # per-GPU parts that stay on their GPUs
    outs = dp.call_parts("simple_mul", parts, dp.scatter(b))   # per-GPU results, not joined

Every tensor argument is split along `dim` into near-equal parts (the first GPUs take one row
more when the size doesn't divide); scalars go to every part unchanged. Outputs are
concatenated along `dim` ("concat") or summed ("sum", for partial reductions).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .loading import Module

COMBINE = ("concat", "sum")


class DataParallel:
    def __init__(self, vmfb: str | Path, devices: Sequence[str]):
        if len(devices) < 1:
            raise ValueError("DataParallel needs at least one device")
        self.modules = [Module(vmfb, d) for d in devices]
        ordinals = [m.gpu.ordinal for m in self.modules]
        if len(set(ordinals)) != len(ordinals):
            raise ValueError(f"DataParallel: devices {list(devices)} name one GPU twice (cuda ordinals {ordinals})")
        self._threads = ThreadPoolExecutor(len(self.modules), thread_name_prefix="iree_dispatch-gpu")

    def scatter(self, array: np.ndarray, dim: int = 0) -> list:
        """`array` split along `dim`, each part copied to its GPU."""
        return [m.to_device(part) for m, part in zip(self.modules, np.array_split(np.ascontiguousarray(array), len(self.modules), axis=dim))]

    def call_parts(self, kernel: str, *parts_or_scalars) -> list:
        """Calls `kernel` on every GPU at once, GPU i with the i-th part of each per-GPU list
        (scalars are passed to all); returns the per-GPU results."""
        count = len(self.modules)
        for value in parts_or_scalars:
            if isinstance(value, list) and len(value) != count:
                raise ValueError(f"{kernel}: a list of parts must have one part per GPU ({count}), got {len(value)}")

        def part(i: int):
            args = [v[i] if isinstance(v, list) else v for v in parts_or_scalars]
            return self.modules[i][kernel](*args)

        return list(self._threads.map(part, range(count)))

    def call(self, kernel: str, *args, dim: int = 0, combine: str = "concat"):
        """`kernel` over all GPUs with host arrays split along `dim`; numpy results joined."""
        if combine not in COMBINE:
            raise ValueError(f"combine must be one of {', '.join(COMBINE)}, got {combine!r}")
        count = len(self.modules)
        for a in args:
            if isinstance(a, np.ndarray) and a.shape[dim] < count:
                raise ValueError(f"{kernel}: can't split {a.shape[dim]} rows over {count} GPUs (dim {dim} of shape {list(a.shape)})")
        split = [np.array_split(np.ascontiguousarray(a), count, axis=dim) if isinstance(a, np.ndarray) else a for a in args]
        results = self.call_parts(kernel, *split)
        first = results[0]
        if isinstance(first, tuple):
            return tuple(self._join([r[j] for r in results], dim, combine) for j in range(len(first)))
        return self._join(results, dim, combine)

    @staticmethod
    def _join(parts: list, dim: int, combine: str) -> np.ndarray:
        host = [np.asarray(p) for p in parts]
        return np.concatenate(host, axis=dim) if combine == "concat" else np.sum(host, axis=0)

    def close(self) -> None:
        self._threads.shutdown()
