"""One kernel over several GPUs: the inputs split along a dimension, one module instance per
GPU, the parts called concurrently (IREE's invoke releases the GIL), the outputs joined.

    dp = runtime.DataParallel("build/samples.vmfb", ["cuda://0", "cuda://1"])
    out = dp.call("simple_mul", a, b)                 # numpy in, numpy out, split along dim 0
    parts = dp.scatter(a)                              # per-GPU parts that stay on their GPUs
    outs = dp.call_parts("simple_mul", parts, dp.scatter(b))   # per-GPU results, not joined

Every tensor argument is split along `dim` into near-equal parts (the first GPUs take one row
more when the size doesn't divide); scalars go to every part unchanged. Outputs are
concatenated along `dim` ("concat") or summed ("sum", for partial reductions).

By declaration: a kernel whose spec declares its split (`parallel = { split = { x = 0 },
combine = { out = "concat" } }`, in its description as a ParallelPlan) is split as declared:
the named inputs along their dims, the other inputs whole to every GPU, each output joined as
declared. `dim` and `combine` are then refused: the spec is the one place that says how the
kernel splits (a call that wants another split calls call_parts with its own parts).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.contract import ParallelPlan
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

    def call(self, kernel: str, *args, dim: int | None = None, combine: str | None = None):
        """`kernel` over all GPUs with host arrays split along `dim` (default 0), numpy results
        joined by `combine` (default "concat"); or as the kernel's spec declares (module docstring)."""
        plan = self.declared_plan(kernel)
        if plan is not None and (dim is not None or combine is not None):
            raise ValueError(f"{kernel}: its spec declares how it splits over GPUs (parallel = ...); call it without dim= and combine=")
        if plan is None:
            plan = uniform_plan(len(args), dim or 0, combine or "concat")
        count = len(self.modules)
        split = split_arguments(kernel, plan, args, count)
        results = self.call_parts(kernel, *split)
        outputs = [list(r) if isinstance(r, tuple) else [r] for r in results]
        joined = tuple(self._join([o[j] for o in outputs], *plan.join(j)) for j in range(len(outputs[0])))
        return joined if len(joined) > 1 else joined[0]

    def declared_plan(self, kernel: str) -> CallPlan | None:
        """The split `kernel`'s spec declares, in call positions; None where it declares none."""
        description = getattr(self.modules[0][kernel], "description", None)
        declared: ParallelPlan | None = getattr(description, "parallel", None)
        if declared is None:
            return None
        split = dict(declared.split)
        names = [t.name for t in description.inputs]
        return CallPlan(tuple(split.get(name) for name in names), tuple((kind, dim) for _, kind, dim in declared.combine))

    @staticmethod
    def _join(parts: list, combine: str, dim: int) -> np.ndarray:
        host = [np.asarray(p) for p in parts]
        return np.concatenate(host, axis=dim) if combine == "concat" else np.sum(host, axis=0)

    def close(self) -> None:
        self._threads.shutdown()


@dataclass(frozen=True)
class CallPlan:
    """One call's split, by argument position: the dim each argument splits along (None: whole
    to every GPU; scalars are never split), and each output's (combine, dim); outputs beyond
    those listed join like the last."""

    split: tuple[int | None, ...]
    joins: tuple[tuple[str, int], ...]

    def join(self, output: int) -> tuple[str, int]:
        return self.joins[min(output, len(self.joins) - 1)]


def uniform_plan(argument_count: int, dim: int, combine: str) -> CallPlan:
    """Every array argument split along `dim`, every output joined by `combine` along `dim`."""
    if combine not in COMBINE:
        raise ValueError(f"combine must be one of {', '.join(COMBINE)}, got {combine!r}")
    return CallPlan((dim,) * argument_count, ((combine, dim),))


def split_arguments(kernel: str, plan: CallPlan, args: Sequence, count: int) -> list:
    """Per argument: a list of `count` parts where the plan splits a numpy array, else the
    argument itself (passed to every GPU)."""
    split = []
    for i, a in enumerate(args):
        dim = plan.split[i] if i < len(plan.split) else None
        if not isinstance(a, np.ndarray) or dim is None:
            split.append(a)
            continue
        if a.shape[dim] < count:
            raise ValueError(f"{kernel}: can't split {a.shape[dim]} rows over {count} GPUs (dim {dim} of shape {list(a.shape)})")
        split.append(np.array_split(np.ascontiguousarray(a), count, axis=dim))
    return split
