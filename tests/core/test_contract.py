"""The build↔run contract (core/contract.py): every description dataclass survives its JSON form
unchanged, a description of another version is refused with a message that says to rebuild, and
the descriptions a real build writes parse into the dataclasses with what the spec declared."""

from __future__ import annotations

import json

import pytest

from iree_dispatch.backend.pipeline import build
from iree_dispatch.backend.program import Program
from iree_dispatch.core.contract import (
    CONTRACT_VERSION,
    PROGRAM_REFLECTION_KEY,
    REFLECTION_KEY,
    KernelDescription,
    LaunchPlan,
    LaunchVariant,
    ProgramDescription,
    PushConstant,
    ScalarDescription,
    SizeCheck,
    TensorDescription,
    decode,
    encode,
    read_description,
)
from iree_dispatch.core.errors import ContractError
from iree_dispatch.frontend.spec_file import load_spec
from iree_dispatch.runtime import read_descriptions

from ..support.environment import SAMPLES_SPEC, needs_build_tools

ALPHA = ScalarDescription("alpha", "float", "float", 4)
COUNT = ScalarDescription("count", "int64_t", "int", 8)
PLAN = LaunchPlan(
    executable="axpby_cu",
    entry="_Z5axpbyPKfS0_Pfiff",
    block=(256, 2, 1),
    variants=(LaunchVariant("sm_90a_cubin", ((9, 0, "family"),), 4096), LaunchVariant("sm_80", ((8, 0, "at_least"),), 1024)),
    bindings=("x", "y", "out"),
    constants=(PushConstant(ScalarDescription("n", "int", "int", 4), "(rows * cols)"), PushConstant(ALPHA, None), PushConstant(COUNT, None)),
)
KERNEL = KernelDescription(
    name="ns::axpby<float>",
    function="axpby",
    source="axpby.cu",
    shared_memory=(("sm_90a", 4096), ("sm_80", 1024)),
    block=(256, 2, 1),
    grid=("ceildiv(n, 256)", "rows", "1"),
    inputs=(TensorDescription("x", "f32", ("rows", "cols")), TensorDescription("y", "bf16", ("rows", 4), inplace=True)),
    scalars=(ALPHA, COUNT),
    outputs=(TensorDescription("y", "bf16", ("rows", 4), inplace=True), TensorDescription("out", "f32", ("(rows * cols)",))),
    archs=("sm_90a", "sm_80"),
    objects="cubin+ptx",
    launch=PLAN,
)
PROGRAM = ProgramDescription(
    name="chain",
    function="chain",
    calls=3,
    inputs=(TensorDescription("x", "f32", ("n",)),),
    scalars=(ALPHA,),
    outputs=(TensorDescription("result0", "f32", ("?",)),),
    checks=(SizeCheck("sge", "(n - 2)", "0", "output out dim 0 = (n - 2) is negative"),),
    archs=("sm_90",),
)


@pytest.mark.parametrize(
    "value",
    [ALPHA, PLAN.variants[0], PLAN.constants[0], PLAN, TensorDescription("y", "bf16", ("rows", 4), inplace=True), PROGRAM.checks[0]],
    ids=lambda v: type(v).__name__,
)
def test_each_part_round_trips_through_its_json_form(value):
    text = json.dumps(value.to_dict())
    assert type(value).from_dict(json.loads(text)) == value


@pytest.mark.parametrize("description", [KERNEL, PROGRAM, KernelDescription(name="k", function="k", source="k.cu", block=(64, 1, 1), grid=("n", "1", "1"),
                                                                            inputs=(), outputs=())], ids=["kernel", "program", "kernel without a plan"])
def test_descriptions_round_trip_through_their_reflection_entry(description):
    text = encode(description)
    assert json.loads(text)["version"] == CONTRACT_VERSION
    key = REFLECTION_KEY if isinstance(description, KernelDescription) else PROGRAM_REFLECTION_KEY
    assert read_description({key: text, "iree.abi.model": "coarse-fences"}, "m.vmfb: function f") == description
    assert read_description({"iree.abi.model": "coarse-fences"}, "m.vmfb: function f") is None


def test_a_description_an_older_build_wrote_is_refused_with_how_to_fix_it():
    old = {"kernel": "axpby", "function": "axpby", "inputs": [{"name": "x", "dtype": "f32", "shape": ["n"]}], "scalars": [], "outputs": [],
           "launch": {"executable": "axpby_cu"}}
    with pytest.raises(ContractError, match=r"^m\.vmfb: function axpby: built with an iree_dispatch older than description versions, but this "
                                             rf"iree_dispatch reads description version {CONTRACT_VERSION}; rebuild the module with this iree_dispatch version$"):
        read_description({REFLECTION_KEY: json.dumps(old)}, "m.vmfb: function axpby")
    newer = dict(KERNEL.to_dict(), version=CONTRACT_VERSION + 1)
    with pytest.raises(ContractError, match=rf"built with description version {CONTRACT_VERSION + 1}, .*rebuild the module"):
        decode(KernelDescription, json.dumps(newer), "m.vmfb: function axpby")
    damaged = {k: v for k, v in KERNEL.to_dict().items() if k != "block"}
    with pytest.raises(ContractError, match=r"description is malformed \(KeyError: 'block'\); rebuild the module"):
        decode(KernelDescription, json.dumps(damaged), "m.vmfb: function axpby")


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    return load_spec(SAMPLES_SPEC)


@needs_build_tools
def test_a_built_modules_descriptions_parse_as_declared(samples, tmp_path):
    result = build(samples, tmp_path / "samples.vmfb")
    name, found = read_descriptions(result.vmfb)
    assert name == "samples" and set(found) == {k.function for k in samples.kernels}
    for k in samples.kernels:
        d = found[k.function]
        assert isinstance(d, KernelDescription)
        # What the spec declared, with what the build added: archs, objects and the launch plan.
        assert d.to_dict() | {"archs": [], "objects": "", "launch": None} == k.describe().to_dict()
        assert d.archs == tuple(a.name for a in samples.archs) and d.objects == samples.objects
        assert d.launch.block == d.block and d.launch.bindings == tuple(t.name for t in k.tensors)
        assert [c.scalar.name for c in d.launch.constants] == [s.name for s in k.scalars]


@needs_build_tools
def test_a_built_programs_description_parses(samples, tmp_path):
    import iree.runtime as rt

    from iree_dispatch.runtime.loading import descriptions_of

    axpby = next(k for k in samples.kernels if k.function == "axpby")
    p = Program("twice")
    x, y = p.input("x", "f32", ["n"]), p.input("y", "f32", ["n"])
    alpha = p.scalar("alpha", "float")
    once = p.call(axpby, x, y, alpha, 2.0)
    p.output(p.call(axpby, once, y, alpha, 0.5))
    result = p.build(samples, tmp_path / "twice.vmfb")
    found = descriptions_of(rt.VmModule.mmap(rt.VmInstance(), str(result.vmfb)), result.vmfb)
    assert found["twice"] == p.describe([a.name for a in samples.archs])
    assert found["twice"].calls == 2 and [s.name for s in found["twice"].scalars] == ["alpha"]
    # read_descriptions lists kernels' descriptions only: a program's function has none there.
    assert read_descriptions(result.vmfb)[1] == {"twice": None}
