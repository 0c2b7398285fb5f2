"""`requires`: relations between sizes a kernel spec declares, parsed once into typed data, with
spec errors naming the kernel and the relation; carried into the description (the contract's
JSON) and into the generated function as asserts."""

from __future__ import annotations

import json
import re

import pytest

from iree_dispatch.backend.emit import UNCHECKED_SUFFIX, CompiledObjects, emit_module
from iree_dispatch.core import expr as ex
from iree_dispatch.core.contract import REFLECTION_KEY, Requirement, encode, read_description
from iree_dispatch.core.errors import SpecError
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec
from iree_dispatch.frontend.spec_file import load_spec

# q [B, Hq, S], k [B, Hkv, S], mask [MB, S]: a grouped-query kernel with a broadcast mask.
ATTEND = 'extern "C" __global__ void attend(const float* q, const float* k, const float* mask, float* out, int group) {}\n'
REQUIRES = ["Hq % Hkv == 0", "MB == 1 or MB == B", "group >= 1"]


def declare(cu, requires=REQUIRES, **kw) -> KernelSpec:
    return KernelSpec.declare(cu(ATTEND), "attend", block=64, grid="B * Hq", shapes={"q": ["B", "Hq", "S"], "k": ["B", "Hkv", "S"], "mask": ["MB", "S"],
                              "out": ["B", "Hq", "S"]}, requires=requires, **kw)


def test_relations_are_parsed_once_into_comparisons(cu):
    k = declare(cu)
    assert [r.text for r in k.requires] == REQUIRES
    gqa, mask, group = k.requires
    assert gqa.any_of == (ex.Comparison("==", ex.BinOp("%", ex.Sym("Hq"), ex.Sym("Hkv")), ex.Num(0)),)
    assert [str(c) for c in mask.any_of] == ["MB == 1", "MB == B"] and ex.relation_symbols(mask) == ["MB", "B"]
    assert group.any_of == (ex.Comparison(">=", ex.Sym("group"), ex.Num(1)),)  # an integer argument may be named
    assert [ex.holds(mask, {"MB": mb, "B": 3}) for mb in (1, 2, 3)] == [True, False, True]
    # Hkv divides: the generated function checks it is not 0 before computing Hq % Hkv.
    assert ("requires Hq % Hkv == 0", ex.Sym("Hkv")) in k.size_divisors()


def test_every_comparison_operator(cu):
    ops = ["==", "!=", "<", "<=", ">", ">="]
    k = declare(cu, requires=[f"S {op} 8" for op in ops])
    assert [r.any_of[0].op for r in k.requires] == ops
    assert [ex.holds(r, {"S": 8}) for r in k.requires] == [True, False, False, True, False, True]


def test_description_carries_them_and_json_round_trips(cu):
    k = declare(cu)
    description = k.describe()
    assert description.requires == tuple(Requirement(text, f"requires {text}") for text in REQUIRES)
    text = encode(description)
    assert json.loads(text)["requires"][1] == {"relation": "MB == 1 or MB == B", "message": "requires MB == 1 or MB == B"}
    assert read_description({REFLECTION_KEY: text}, "m.vmfb: function attend") == description
    # Part of what the build key covers: another relation is another build.
    assert k.fingerprint() != declare(cu, requires=REQUIRES[:1]).fingerprint()


def test_kept_by_the_out_form(cu):
    k = declare(cu)
    assert k.with_outputs_in_place(function="attend_out").requires == k.requires


def test_toml_key(cu, tmp_path):
    cu(ATTEND, "attend.cu")
    (tmp_path / "k.toml").write_text(
        "[[kernel]]\nname = 'attend'\nsource = 'attend.cu'\nblock = [64]\ngrid = ['B * Hq']\n"
        "shapes = { q = ['B', 'Hq', 'S'], k = ['B', 'Hkv', 'S'], mask = ['MB', 'S'], out = ['B', 'Hq', 'S'] }\n"
        "requires = ['Hq % Hkv == 0', 'MB == 1 or MB == B']\n"
    )
    (k,) = load_spec(tmp_path / "k.toml").kernels
    assert [r.text for r in k.requires] == ["Hq % Hkv == 0", "MB == 1 or MB == B"]


@pytest.mark.parametrize(
    "requires, message",
    [
        (["Hq % Hkv"], r"kernel attend: requires\[0\]: 'Hq % Hkv' is not a relation; a relation is two expressions compared with == != < <= > >="),
        (["Hq >= 1", "MB == 1 or MB"], r"requires\[1\]: 'MB' in 'MB == 1 or MB' is not a comparison"),
        (["1 <= S <= 8"], r"'1 <= S <= 8' is not a relation; .* relations that must all hold are entries of their own"),
        (["S >= 1 and S <= 8"], r"'S >= 1 and S <= 8' is not a relation"),
        (["Hq % H == 0"], r"requires\[0\]: 'Hq % H == 0' uses 'H', which no input dim or integer argument defines \(known: .*Hkv.*\)"),
        (["2 == 2"], r"'2 == 2' uses no size, so it is always true or always false"),
        (["S % (Hq - Hq) == 0"], r"divides by zero \(\(Hq - Hq\) is 0 for every size\)"),
        (["S / 2 == 1"], r"'/' in 'S / 2 == 1' is ambiguous"),
        (["Hq % Hkv = 0"], r"can't parse relation 'Hq % Hkv = 0'"),
        ("Hq % Hkv == 0", r"requires must be a list of relation strings"),
        ([3], r"requires\[0\]: expected a relation string"),
    ],
)
def test_bad_relations_are_spec_errors(cu, requires, message):
    with pytest.raises(SpecError, match=message):
        declare(cu, requires=requires)


def _mlir(spec: ModuleSpec, for_linking: bool = False) -> str:
    paths = {(s, v.name): f"objects/{v.object_filename(s.stem)}" for s in spec.sources for v in spec.variants}
    return emit_module(CompiledObjects.of(spec, paths, {k.name: k.name for k in spec.kernels}, ()), for_linking=for_linking)


def _function(mlir: str, name: str) -> str:
    body = mlir.split(f"func.func {name}(", 1)[1]
    return body.split("\n  }", 1)[0]


def test_generated_function_asserts_each_relation_before_the_dispatch(cu):
    spec = ModuleSpec("m", (declare(cu),))
    body = _function(_mlir(spec), "@attend")
    messages = re.findall(r'cf\.assert %[\w.]+, "([^"]*)"', body)
    for text in REQUIRES:
        assert f"attend: requires {text}" in messages
    assert "attend: requires Hq % Hkv == 0 divides by Hkv, which is 0 for these sizes" in messages
    assert messages.index("attend: requires Hq % Hkv == 0 divides by Hkv, which is 0 for these sizes") < messages.index("attend: requires Hq % Hkv == 0")
    # `or`: both comparisons, joined before the one assert.
    assert re.search(r"arith\.cmpi eq, %\S+, %\S+ : index\n\s*(%\S+) = arith\.cmpi eq, %\S+, %\S+ : index\n\s*(%\S+) = arith\.ori %\S+, \1 : i1\n\s*cf\.assert \2, "
                     r'"attend: requires MB == 1 or MB == B"', body)
    assert "arith.cmpi sge" in body and body.index('"attend: requires group >= 1"') < body.index("flow.dispatch")
    # The form programs call, which checks at its own entry, has none.
    unchecked = _function(_mlir(spec, for_linking=True), f"private @m.attend{UNCHECKED_SUFFIX}")
    assert "requires" not in unchecked and "cf.assert" not in unchecked


def test_generated_function_parses(cu):
    pytest.importorskip("iree.compiler")
    from iree_dispatch.backend.compile import parse_check

    parse_check(_mlir(ModuleSpec("m", (declare(cu),))), "m.mlir")
