"""Grid / shape expressions: parsing, evaluation, and lowering to arith (checked by parsing)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iree_dispatch.core import expr as ex
from iree_dispatch.core.errors import SpecError


def test_evaluate_matches_python_semantics():
    e = ex.parse("max(min(ceildiv(n, 1024), 4096), 1) + m % 3 - (n // 7) * 2", "t")
    for n in (0, 1, 1023, 1024, 1025, 10**7):
        for m in (0, 5):
            want = max(min(-(-n // 1024), 4096), 1) + m % 3 - (n // 7) * 2
            assert ex.evaluate(e, {"n": n, "m": m}) == want
    assert ex.symbols(e) == ["n", "m"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("n / 2", "use '//' .* or ceildiv"),
        ("ceildiv(n)", "takes 2 arguments"),
        ("min(n)", "at least 2 arguments"),
        ("n ** 2", "unsupported term"),
        ("foo(n)", "unsupported term"),
        ("n +", "can't parse"),
        ("ceildiv(n, 0)", "divides by zero"),
        ("n // (4 - 4)", "divides by zero"),
        ("n % 0", "divides by zero"),
        ("1.5 * n", "unsupported term"),
    ],
)
def test_rejected_expressions(text, message):
    with pytest.raises(SpecError, match=message):
        ex.parse(text, "kernel k: grid[0]")


def _exprs():
    leaves = st.one_of(st.integers(1, 5000).map(ex.Num), st.sampled_from(["n", "m"]).map(ex.Sym))
    return st.recursive(
        leaves,
        lambda sub: st.one_of(
            st.tuples(st.sampled_from(["+", "*", "-"]), sub, sub).map(lambda t: ex.BinOp(*t)),
            st.tuples(sub, st.integers(1, 512)).map(lambda t: ex.Call("ceildiv", (t[0], ex.Num(t[1])))),
            st.tuples(sub, st.integers(1, 512)).map(lambda t: ex.BinOp("//", t[0], ex.Num(t[1]))),
            st.lists(sub, min_size=2, max_size=3).map(lambda a: ex.Call("min", tuple(a))),
            st.lists(sub, min_size=2, max_size=3).map(lambda a: ex.Call("max", tuple(a))),
        ),
        max_leaves=8,
    )


@settings(max_examples=200, deadline=None)
@given(_exprs(), st.integers(0, 10**6), st.integers(0, 10**6))
def test_printed_expressions_reparse_to_the_same_value(e, n, m):
    assert ex.evaluate(ex.parse(str(e), "t"), {"n": n, "m": m}) == ex.evaluate(e, {"n": n, "m": m})


def test_lowering_names_every_value_once():
    lines: list[str] = []
    counter = iter(range(100))
    result = ex.lower_to_arith(ex.parse("ceildiv(n, 64) * max(m, 2)", "t"), {"n": "%n", "m": "%m"}, lambda: f"%t{next(counter)}", lines)
    defined = [line.split(" = ")[0] for line in lines]
    assert len(defined) == len(set(defined)) and result == defined[-1]
    assert any("arith.ceildivsi %n" in line for line in lines) and any("arith.maxsi %m" in line for line in lines)
