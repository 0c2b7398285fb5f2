"""The ABI kernels' GPU tests that run twice: in backend/test_gpu_abi.py on the modules built by
the system nvcc, and in toolchains/test_gpu_toolchains.py on each toolchain's modules (each
module that imports them collects them, with its own `abi` and `cxx` fixtures: the module as
built and its in-place copy). Also the scalar cases and random arrays runtime/test_gpu_launch.py
calls the ABI kernels with."""

from __future__ import annotations

import numpy as np
import pytest

from .artifacts.abi import ELEMENT_TYPES

SENTINEL_I, SENTINEL_U, SENTINEL_F = -0x5A5A5A5A5A5A5A5A, 0xA5A5A5A5A5A5A5A5, np.nan


def bf16_value(bits: int) -> float:
    return float(np.array(bits << 16, np.uint32).view(np.float32))


CASES = [
    # b, i8, u8, i16, u16, i32, u32, i64, u64, size_t, f32, f64, f16, bf16, tail
    (True, -128, 255, -32768, 65535, -(2**31), 2**32 - 1, -(2**63), 2**64 - 1, 2**40 + 3, -1.5, 1e300, 65504.0, 3.140625, 2**63 - 1),
    (False, 127, 0, 32767, 0, 2**31 - 1, 0, 2**63 - 1, 2**63 + 1, 0, float("inf"), -0.0, float("-inf"), float("inf"), -(2**35) - 5),
    (True, -1, 1, -1, 1, -1, 1, -(2**32) - 7, 2**32 + 9, 2**64 - 1, float("nan"), float("nan"), float("nan"), float("nan"), -1),
]


def random_case(rng):
    return (
        bool(rng.integers(2)), int(rng.integers(-128, 128)), int(rng.integers(256)), int(rng.integers(-32768, 32768)),
        int(rng.integers(65536)), int(rng.integers(-(2**31), 2**31)), int(rng.integers(2**32)),
        int(rng.integers(-(2**63), 2**63 - 1)), int(rng.integers(0, 2**64 - 1, dtype=np.uint64)),
        int(rng.integers(0, 2**64 - 1, dtype=np.uint64)), float(rng.standard_normal()), float(rng.standard_normal() * 1e100),
        float(np.float16(rng.standard_normal())), bf16_value(int(rng.integers(0, 0x7F7F))), int(rng.integers(-(2**63), 2**63 - 1)),
    )


@pytest.mark.parametrize("case", CASES + [random_case(np.random.default_rng()) for _ in range(5)])
def test_every_scalar_type_arrives_intact(abi, case):
    module, poisonable = abi
    b, i8, u8, i16, u16, i32, u32, i64, u64, sz, f32, f64, f16, bf16, tail = case
    want_ints = np.array([b, i8, i16, i32, i64, tail], np.int64)
    want_uints = np.array([u8, u16, u32, u64, sz], np.uint64)
    want_reals = np.array([np.float32(f32), f64, np.float16(f16), bf16], np.float64)
    outs = [
        module.echo_scalars(*case),
        poisonable.echo_scalars(np.full(6, SENTINEL_I, np.int64), np.full(5, SENTINEL_U, np.uint64), np.full(4, SENTINEL_F), *case),
    ]
    for ints, uints, reals in outs:
        np.testing.assert_array_equal(ints, want_ints)
        np.testing.assert_array_equal(uints, want_uints)
        assert np.array_equal(reals, want_reals, equal_nan=True), (reals, want_reals)
        finite = ~np.isnan(want_reals)
        assert np.array_equal(np.signbit(reals[finite]), np.signbit(want_reals[finite]))  # -0.0 stays -0.0


def random_array(rng, dtype: str, n: int) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if dtype in ("f16", "f32", "f64"):
        return rng.standard_normal(n).astype({"f16": np.float16, "f32": np.float32, "f64": np.float64}[dtype])
    if dtype == "bf16":
        import ml_dtypes

        return rng.standard_normal(n).astype(ml_dtypes.bfloat16)
    info = np.iinfo({"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}[dtype])
    return rng.integers(info.min, info.max, n, dtype=info.dtype, endpoint=True)


@pytest.mark.parametrize("dtype", ELEMENT_TYPES)
@pytest.mark.parametrize("n", (1, 7, 1000, 4097))
def test_every_pointer_element_type_round_trips(abi, dtype, n):
    module, poisonable = abi
    rng = np.random.default_rng()
    data = random_array(rng, dtype, n)
    want = data[::-1]
    got = getattr(module, f"reverse_{dtype}")(data)
    assert got.dtype == data.dtype and got.shape == (n,)
    assert got.tobytes() == want.tobytes()
    poison = np.frombuffer(b"\xa5" * (n * data.dtype.itemsize), data.dtype).copy()
    got = getattr(poisonable, f"reverse_{dtype}")(data, poison)
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("n", (1, 1000, 2**20 + 3))
def test_size_t_as_argument_and_from_a_shape(abi, n):
    module, poisonable = abi
    np.testing.assert_array_equal(module.iota_sized(n), np.arange(n))  # n: a size_t argument
    np.testing.assert_array_equal(poisonable.iota_sized(np.full(n, -1, np.int64)), np.arange(n))  # n: out's length


@pytest.mark.parametrize("n", (1, 7, 1000, 2**20 + 3))
def test_template_instantiations(cxx, n):
    module, poisonable = cxx
    rng = np.random.default_rng()
    for function, dtype in (("scale_float", np.float32), ("scale_double", np.float64)):
        x = rng.standard_normal(n).astype(dtype)
        factor = float(rng.uniform(-4, 4))
        want = x * dtype(factor)
        np.testing.assert_array_equal(getattr(module, function)(x, factor), want)
        np.testing.assert_array_equal(getattr(poisonable, function)(x, np.full(n, np.nan, dtype), factor), want)


@pytest.mark.parametrize("rows, cols", [(1, 1), (7, 33), (1000, 7), (33, 4097), (3, 100003)])
def test_block_reduction_in_dynamic_shared_memory(cxx, rows, cols):
    module, poisonable = cxx
    rng = np.random.default_rng()
    data = rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
    want = data.astype(np.float64).sum(axis=1)
    # float32 partial sums in a different order than numpy: error grows like sqrt(cols) ulps.
    tolerance = 8 * np.finfo(np.float32).eps * np.sqrt(cols) * np.abs(data).sum(axis=1).max()
    for got in (module.row_sum(data), poisonable.row_sum(data, np.full(rows, np.nan, np.float32))):
        assert got.shape == (rows,) and np.all(np.abs(got - want) <= tolerance)


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (9, 17, 33), (5, 64, 129)])
def test_3d_grid_and_blocks(cxx, shape):
    module, poisonable = cxx
    rng = np.random.default_rng()
    data = rng.uniform(-1, 1, shape).astype(np.float32)
    z, y, x = (a.astype(np.float32) for a in np.meshgrid(*(np.arange(d) for d in shape), indexing="ij"))
    # The kernel's float32 order: ((in + 1000 z) + 100 y) + x; each product is exact.
    want = ((data + np.float32(1000) * z) + np.float32(100) * y) + x
    np.testing.assert_array_equal(module.index3d(data), want)
    np.testing.assert_array_equal(poisonable.index3d(data, np.full(shape, np.nan, np.float32)), want)
