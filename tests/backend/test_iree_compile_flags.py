"""Extra iree-compile flags: checked, part of the cache key, passed after the build's own."""

import pytest

from iree_dispatch.backend import compile as iree_compile
from iree_dispatch.backend.pipeline import BuildOptions, build
from iree_dispatch.core.errors import CompileError, SpecError
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

from ..support.environment import needs_build_tools

KERNEL = 'extern "C" __global__ void k(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 2.0f * x[i]; }\n'


@pytest.mark.parametrize(
    "flag",
    ["-o=x.vmfb", "--o", "--compile-to=flow", "--output-format=vm-asm", "--iree-hal-target-device=llvm-cpu", "-iree-hal-target-backends=vulkan-spirv",
     "--iree-cuda-target=sm_90", "--iree-hal-executable-object-search-path=/tmp", "--iree-input-demote-f64-to-f32", "--iree-execution-model=async-external",
     "--split-input-file"],
)
def test_flags_that_break_the_build_are_refused(flag):
    name = flag.lstrip("-").split("=")[0]
    with pytest.raises(SpecError, match=f"iree-compile flag '{flag}' can't be given: ") as info:
        BuildOptions(iree_compile_flags=(flag,))
    assert iree_compile.DENIED_IREE_COMPILE_FLAGS[name] in str(info.value)


@pytest.mark.parametrize("flags", [("x.mlir",), ("--iree-opt-level", "O0"), ("",), ("-",), ("--a b",)])
def test_each_item_must_be_one_flag(flags):
    with pytest.raises(SpecError, match="is not one flag"):
        BuildOptions(iree_compile_flags=flags)


def test_a_string_is_not_a_list_of_flags():
    with pytest.raises(SpecError, match="a sequence of flags, not the string"):
        BuildOptions(iree_compile_flags="--iree-opt-level=O0")
    with pytest.raises(SpecError, match="must be a string"):
        BuildOptions(iree_compile_flags=(3,))


def test_flags_are_a_tuple_in_the_fingerprint():
    options = BuildOptions(iree_compile_flags=["--iree-opt-level=O0"])
    assert options.iree_compile_flags == ("--iree-opt-level=O0",) and hash(options)
    assert options.fingerprint() != BuildOptions().fingerprint()
    assert options.compile_options["extra_flags"] == ("--iree-opt-level=O0",)


def test_user_flags_come_after_ours():
    from iree_dispatch.core.archs import parse_arch

    flags = iree_compile.compile_flags(parse_arch("sm_80"), None, strip_assertions=True, extra_flags=("--iree-opt-level=O0",))
    assert flags[-1] == "--iree-opt-level=O0" and flags[0] == "--iree-hal-target-device=cuda"


@needs_build_tools
def test_flags_change_the_key_and_reach_iree_compile(tmp_path, monkeypatch, cu):
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    spec = ModuleSpec("m", (KernelSpec.declare(cu(KERNEL), "k", block=32, grid=1, shape=["n"]),)).with_archs(["sm_80"])
    runs = []
    real = iree_compile._run_tool

    def recording(tool, args, what, cwd=None):
        runs.append(args)
        return real(tool, args, what, cwd)

    monkeypatch.setattr(iree_compile, "_run_tool", recording)
    plain = build(spec, tmp_path / "a" / "m.vmfb")
    assert "cache" not in plain.timings and not any(a.startswith("--iree-opt-level") for a in runs[-1])
    o0 = build(spec, tmp_path / "b" / "m.vmfb", iree_compile_flags=["--iree-opt-level=O0"])
    assert "cache" not in o0.timings, "a new flag must miss the cache"
    flags = runs[-1][: runs[-1].index("-o")]
    assert flags[-2:] == ["--iree-opt-level=O0", "m.mlir"] and flags.index("--iree-hal-target-device=cuda") < flags.index("--iree-opt-level=O0")
    again = build(spec, tmp_path / "c" / "m.vmfb", iree_compile_flags=("--iree-opt-level=O0",))
    assert "cache" in again.timings and len(runs) == 2
    assert again.vmfb.read_bytes() == o0.vmfb.read_bytes()
    with pytest.raises(CompileError, match="iree-no-such-option"):  # iree-compile itself saw it
        build(spec, tmp_path / "d" / "m.vmfb", iree_compile_flags=("--iree-no-such-option=1",))
    assert not (tmp_path / "d" / "m.vmfb").exists()
