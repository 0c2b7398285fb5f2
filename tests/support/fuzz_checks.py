"""How the ABI fuzz's GPU test calls a generated kernel and compares its results
(backend/test_gpu_abi_fuzz.py; backend/test_abi_fuzz.py checks the comparison on the CPU)."""

from __future__ import annotations

import numpy as np

from .artifacts import fuzz_kernels


def call_arguments(kernel: fuzz_kernels.FuzzKernel, in_place: bool, arrays: dict, scalars: dict, poison: dict, n: int) -> list:
    """The generated function's arguments: input tensors in parameter order, then scalar
    arguments in parameter order (the size, where no tensor argument has it; a struct as a dict
    of its fields, a vector as a tuple of its lanes)."""
    tensors = [poison[p.name] if p.role == "out" else arrays[p.name] for p in kernel.call_tensors(in_place)]
    values = kernel.scalar_values(scalars, n)
    return tensors + [values[p.name] for p in kernel.call_scalars(in_place)]


def mismatches(kernel: fuzz_kernels.FuzzKernel, got, want: dict[str, np.ndarray], label: str) -> tuple[int, list[str]]:
    """(mismatched elements, descriptions) of every output against its reference."""
    got = list(got) if isinstance(got, tuple) else [got]
    if len(got) != len(want):
        return 1, [f"{label}: {len(got)} results, expected {len(want)} ({', '.join(want)})"]
    count, problems = 0, []
    for (name, expected), result in zip(want.items(), got):
        result = np.asarray(result)
        if result.dtype != expected.dtype or result.shape != expected.shape:
            count += expected.size
            problems.append(f"{label}: {name} is {result.dtype}{list(result.shape)}, expected {expected.dtype}{list(expected.shape)}")
            continue
        size = expected.dtype.itemsize
        # Bytes, element by element: NaN poison and bools that are neither 0 nor 1 compare as they are.
        bad = np.nonzero((np.ascontiguousarray(result).view(np.uint8).reshape(-1, size) != expected.view(np.uint8).reshape(-1, size)).any(axis=1))[0]
        if bad.size:
            count += bad.size
            i = bad[:4]  # flat indices ([n, lanes] vector arrays: i // lanes, i % lanes)
            where = [tuple(int(x) for x in np.unravel_index(j, expected.shape)) if expected.ndim > 1 else int(j) for j in i]
            problems.append(f"{label}: {name} ({kernel.param(name).value_type}) differs in {bad.size} of {expected.size} elements, "
                            f"e.g. at {where}: got {result.reshape(-1)[i].tolist()}, expected {expected.reshape(-1)[i].tolist()}")
    return count, problems
