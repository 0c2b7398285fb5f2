"""`iree-run-module`-style values on the command line: `--input=8xf32=2`, `2x2xi32=1 2 3 4`,
`f32=2.5`, `@file.npy`; and results printed as `8xf32=96 96 ...`."""

from __future__ import annotations

import re

import numpy as np

from .core.dtypes import ELEMENT_TYPES

_TENSOR = re.compile(r"^(?P<dims>(?:\d+x)*)(?P<dtype>[a-z]+\d+)(?:=(?P<values>.*))?$", re.S)


def parse_input(text: str) -> np.ndarray | int | float:
    """An array (with a shape) or a Python scalar (`f32=2.5`, `i32=3`, or a bare number)."""
    text = text.strip()
    if text.startswith("@"):
        try:
            return np.load(text[1:])
        except (OSError, ValueError) as exc:
            raise ValueError(f"--input={text}: can't load .npy file: {exc}") from None
    match = _TENSOR.match(text)
    if not match:
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                raise ValueError(f"--input={text}: expected SHAPExTYPE=VALUES (e.g. 8xf32=2), TYPE=VALUE (f32=2.5), a number, or @file.npy") from None
    dtype_name = match["dtype"]
    if dtype_name not in ELEMENT_TYPES:
        raise ValueError(f"--input={text}: unknown element type {dtype_name!r} (known: {', '.join(ELEMENT_TYPES)})")
    dtype = np.dtype(ELEMENT_TYPES[dtype_name].numpy) if dtype_name != "bf16" else None
    if dtype is None:
        raise ValueError(f"--input={text}: bf16 inputs can't be given on the command line; use @file.npy")
    dims = [int(d) for d in match["dims"].split("x") if d]
    raw = (match["values"] or "0").replace("[", " ").replace("]", " ").replace(",", " ").split()
    try:
        values = np.array([float(v) if dtype.kind == "f" else int(v, 0) for v in raw]).astype(dtype)
    except ValueError:
        raise ValueError(f"--input={text}: values must be numbers of type {dtype_name}") from None
    if not dims:
        if values.size != 1:
            raise ValueError(f"--input={text}: a scalar takes exactly one value")
        return float(values[0]) if dtype.kind == "f" else int(values[0])
    count = int(np.prod(dims))
    if values.size == 1:
        return np.full(dims, values[0], dtype=dtype)
    if values.size != count:
        raise ValueError(f"--input={text}: shape {'x'.join(map(str, dims))} needs {count} values (or 1 to splat), got {values.size}")
    return values.reshape(dims)


def _mlir_type(dtype: np.dtype) -> str:
    for name, et in ELEMENT_TYPES.items():
        if et.numpy == dtype.name:
            return name
    return dtype.name


def format_result(value, max_elements: int = 1024) -> str:
    """`8xf32=96 96 ...` for arrays (elided past `max_elements`), `f32=2.5` for scalars."""
    if not isinstance(value, np.ndarray):
        array = np.asarray(value)
        return f"{_mlir_type(array.dtype)}={value}"
    flat = value.reshape(-1)
    shown = [format(v.item(), "g") if value.dtype.kind == "f" else str(v.item()) for v in flat[:max_elements]]
    if flat.size > max_elements:
        shown.append("...")
    shape = "x".join(str(d) for d in value.shape)
    return f"{shape}{'x' if shape else ''}{_mlir_type(value.dtype)}={' '.join(shown)}"
