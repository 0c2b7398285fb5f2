"""Property-based: random valid declarations give IR that parses and compiles; random invalid
ones give one of our errors, never an exception from deep inside a dependency."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iree_dispatch.backend.emit import CompiledObjects, emit_module
from iree_dispatch.core.dtypes import POINTEE_TYPES, SCALAR_TYPES
from iree_dispatch.core.errors import DispatchError
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

from ..support.environment import needs_build_tools

SYMBOLS = ["n", "m", "k"]
POINTEES = sorted(POINTEE_TYPES)
SCALARS = sorted(SCALAR_TYPES)


def grid_expr(symbols):
    leaf = st.one_of(st.sampled_from(symbols), st.integers(1, 4096).map(str))
    return st.recursive(
        leaf,
        lambda sub: st.one_of(
            st.tuples(sub, st.integers(1, 1024)).map(lambda t: f"ceildiv({t[0]}, {t[1]})"),
            st.tuples(sub, sub).map(lambda t: f"max({t[0]}, {t[1]})"),
            st.tuples(sub, sub).map(lambda t: f"min({t[0]}, {t[1]})"),
            st.tuples(sub, sub).map(lambda t: f"({t[0]} + {t[1]})"),
            st.tuples(sub, st.integers(1, 64)).map(lambda t: f"{t[0]} // {t[1]}"),
        ),
        max_leaves=5,
    )


@st.composite
def kernels(draw):
    rank = draw(st.integers(1, 3))
    shape = SYMBOLS[:rank]
    pointers = draw(st.lists(st.tuples(st.sampled_from(POINTEES), st.booleans()), min_size=2, max_size=6))
    pointers[0] = (pointers[0][0], True)  # an input defines the sizes
    pointers[draw(st.integers(1, len(pointers) - 1))] = (pointers[1][0], False)  # at least one output
    scalars = draw(st.lists(st.sampled_from(SCALARS), max_size=5))
    named = draw(st.lists(st.sampled_from(shape), max_size=len(shape), unique=True))  # scalars taking a size
    params = [f"{'const ' if const else ''}{t}* p{i}" for i, (t, const) in enumerate(pointers)]
    params += [f"int {s}" for s in named] + [f"{t} s{i}" for i, t in enumerate(scalars)]
    block = draw(st.lists(st.integers(1, 32), min_size=1, max_size=3).filter(lambda b: b[0] * (b[1:] or [1])[0] * (b[2:] or [1])[0] <= 1024))
    grid = draw(st.lists(grid_expr(shape).map(lambda e: f"max({e}, 1)"), min_size=1, max_size=3))  # never 0 blocks
    return f'extern "C" __global__ void k({", ".join(params)}) {{}}\n', dict(block=block, grid=grid, shape=shape)


def declare(source: str, **kw) -> KernelSpec:
    folder = Path(tempfile.mkdtemp())
    (folder / "k.cu").write_text(source)
    return KernelSpec.declare(folder / "k.cu", "k", **kw)


def emit(spec: ModuleSpec) -> str:
    paths = {(s, v.name): f"objects/{v.object_filename(s.stem)}" for s in spec.sources for v in spec.variants}
    return emit_module(CompiledObjects.of(spec, paths, {k.name: k.name for k in spec.kernels}, ()))


@needs_build_tools
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kernels())
def test_valid_declarations_give_ir_that_parses(kernel):
    from iree_dispatch.backend.compile import parse_check

    source, kw = kernel
    spec = ModuleSpec("m", (declare(source, **kw),))
    parse_check(emit(spec), "m.mlir")


@needs_build_tools
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kernels())
def test_valid_declarations_compile(tmp_path_factory, kernel):
    """iree-compile embeds object bytes as they are, so placeholder PTX files suffice here."""
    from iree_dispatch.backend.compile import compile_vmfb
    from iree_dispatch.core.archs import parse_archs

    source, kw = kernel
    spec = ModuleSpec("m", (declare(source, **kw),))
    folder = tmp_path_factory.mktemp("compile")
    (folder / "objects").mkdir()
    for variant in spec.variants:
        (folder / "objects" / variant.object_filename("k")).write_text("// placeholder\n")
    (folder / "m.mlir").write_text(emit(spec))
    compile_vmfb(folder / "m.mlir", folder / "m.vmfb", parse_archs(["sm_80"])[0])
    assert (folder / "m.vmfb").stat().st_size > 0


junk = st.one_of(st.none(), st.booleans(), st.integers(-10, 5000), st.floats(allow_nan=True), st.text(max_size=30))
junk_lists = st.one_of(junk, st.lists(junk, max_size=4))


@settings(max_examples=300, deadline=None)
@given(
    block=junk_lists,
    grid=junk_lists,
    shape=junk_lists,
    shapes=st.one_of(st.none(), st.dictionaries(st.sampled_from(["a", "out", "n", "x"]), junk_lists, max_size=3)),
    scalars=st.one_of(st.none(), st.dictionaries(st.sampled_from(["a", "n", "s"]), junk, max_size=3)),
    inplace=st.lists(st.sampled_from(["a", "out", "n", "x"]), max_size=2),
    shared_memory=junk,
)
def test_invalid_declarations_raise_our_errors(block, grid, shape, shapes, scalars, inplace, shared_memory):
    source = 'extern "C" __global__ void k(const float* a, float* out, int n, float s) {}\n'
    try:
        declare(source, block=block, grid=grid, shape=shape, shapes=shapes, scalars=scalars, inplace=inplace, shared_memory=shared_memory)
    except DispatchError:
        pass
