"""`iree-run-module`-style values on the command line: `--input=8xf32=2`, `2x2xi32=1 2 3 4`,
`f32=2.5`, `@file.npy`; and results printed as `8xf32=96 96 ...`."""

from __future__ import annotations

import math
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
                number = float(text)
            except ValueError:
                raise ValueError(f"--input={text}: expected SHAPExTYPE=VALUES (e.g. 8xf32=2), TYPE=VALUE (f32=2.5), a number, or @file.npy") from None
            if math.isinf(number) and "inf" not in text.lower():
                raise ValueError(f"--input={text}: {text} is beyond any floating type (it would arrive as infinity); write inf if that is meant") from None
            return number
    dtype_name = match["dtype"]
    if dtype_name not in ELEMENT_TYPES:
        raise ValueError(f"--input={text}: unknown element type {dtype_name!r} (known: {', '.join(ELEMENT_TYPES)})")
    dtype = np.dtype(ELEMENT_TYPES[dtype_name].numpy) if dtype_name != "bf16" else None
    if dtype is None:
        raise ValueError(f"--input={text}: bf16 inputs can't be given on the command line; use @file.npy")
    dims = [int(d) for d in match["dims"].split("x") if d]
    raw = (match["values"] or "0").replace("[", " ").replace("]", " ").replace(",", " ").split()
    try:
        numbers = [float(v) if dtype.kind == "f" else int(v, 0) for v in raw]
    except ValueError:
        raise ValueError(f"--input={text}: values must be numbers of type {dtype_name}") from None
    _check_range(text, dtype_name, dtype, raw, numbers)
    with np.errstate(over="ignore"):  # only values that round to the largest finite one are left
        values = np.array(numbers).astype(dtype)
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


def _check_range(text: str, dtype_name: str, dtype: np.dtype, raw: list[str], numbers: list) -> None:
    """Every value fits the element type: integers in its range, finite floats finite in it (no
    silent wrap-around or rounding to infinity)."""
    if dtype.kind == "f":
        largest = float(np.finfo(dtype).max)
        for given, number in zip(raw, numbers):
            with np.errstate(over="ignore"):
                overflows = math.isfinite(number) and abs(number) > largest and np.isinf(np.array(number).astype(dtype))
            if overflows:
                raise ValueError(f"--input={text}: {given} is beyond {dtype_name} (largest {largest:G}; it would arrive as infinity)")
        return
    low, high = (0, 1) if dtype.kind == "b" else (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
    for given, number in zip(raw, numbers):
        if not low <= number <= high:
            raise ValueError(f"--input={text}: {given} is out of range for {dtype_name} ({low} to {high})")


def _mlir_type(dtype: np.dtype) -> str:
    for name, et in ELEMENT_TYPES.items():
        if et.numpy == dtype.name:
            return name
    return dtype.name


def format_element(value, kind: str) -> str:
    """One element as iree-run-module prints it: floats with C's `%G`, integers in decimal."""
    if kind == "f":
        return format(float(value), "G")
    return str(int(value))


def format_result(value, max_elements: int | None = 1024) -> str:
    """A result as iree-run-module prints it: `8xf32=96 96 ...`, `2x3xf32=[1 2 3][4 5 6]` (one
    bracket pair per row of each outer dimension), `f32=2.5` for scalars and rank-0 tensors.

    `max_elements` (--output_max_element_count; None: all) bounds the elements printed in the
    whole result: a row cut short ends in `...`, and the rows after it print as `[...]`.
    """
    if not isinstance(value, np.ndarray):
        array = np.asarray(value)
        return f"{_mlir_type(array.dtype)}={format_element(value, array.dtype.kind)}"
    budget = [value.size if max_elements is None else max(0, max_elements)]
    kind = value.dtype.kind

    def rows(array: np.ndarray) -> str:
        if array.ndim > 1:
            return "".join(f"[{rows(row)}]" for row in array)
        count = min(budget[0], array.shape[0])
        budget[0] -= count
        return " ".join(format_element(v, kind) for v in array[:count]) + ("..." if count < array.shape[0] else "")

    shape = "".join(f"{d}x" for d in value.shape)
    return f"{shape}{_mlir_type(value.dtype)}={rows(value.reshape(1) if value.ndim == 0 else value)}"


def parse_max_element_count(text: str) -> int | None:
    """--output_max_element_count's value: N >= 0, or -1 for every element (as iree-run-module,
    which reads it as an unsigned count)."""
    try:
        count = int(text.strip(), 10)
    except ValueError:
        raise ValueError(f"--output_max_element_count={text}: expected a whole number of elements (e.g. 1024; -1 prints all)") from None
    if count < -1:
        raise ValueError(f"--output_max_element_count={text}: expected a count >= 0 (or -1 to print all)")
    return None if count == -1 else count
