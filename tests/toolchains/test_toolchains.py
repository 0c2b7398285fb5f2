"""Toolchains (iree_dispatch/toolchains/__init__.py, iree_dispatch/toolchains/nvrtc.py): each builds the samples, its
PTX passes the ABI check, NVRTC's PTX is nvcc's, errors carry the compiler log with file:line,
NVRTC's header list is complete for the build cache, the cache key tells toolchains apart, and
auto-selection. Tests of a toolchain that is not installed skip, naming what to install
(`pip install -e '.[nvrtc]'` / `'.[nvcc]'`)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from iree_dispatch.core.archs import parse_archs
from iree_dispatch.core.errors import ToolchainError

from ..support.artifacts.abi import abi_module, cxx_module
from ..support.environment import ROOT, SAMPLES_SPEC, have_compiler
from ..support.toolchains import toolchain_or_skip

(SM80,), (SM90,) = parse_archs(["sm_80"]), parse_archs(["sm_90"])
# The newest PTX ISA a CUDA 13.0 driver (580) JIT-compiles: the pip routes pin 13.0.*.
MAX_PTX_ISA = (9, 0)


@pytest.fixture(params=("nvcc", "nvcc_wheel", "nvrtc"))
def toolchain(request):
    return toolchain_or_skip(request.param)


@pytest.fixture
def nvrtc():
    return toolchain_or_skip("nvrtc")


needs_iree_compiler = pytest.mark.skipif(not have_compiler(), reason="needs iree-base-compiler")


def ptx_isa(text: str) -> tuple[int, int]:
    major, minor = re.search(r"^\.version (\d+)\.(\d+)", text, re.M).groups()
    return int(major), int(minor)


def code_of(ptx: str) -> str:
    """PTX without its comment lines (compiler banner, `// .globl` notes)."""
    return "\n".join(line for line in ptx.splitlines() if not line.lstrip().startswith("//"))


@needs_iree_compiler
def test_each_toolchain_builds_the_samples(toolchain, tmp_path):
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec_file import load_spec
    from iree_dispatch.runtime import read_descriptions

    result = build(load_spec(SAMPLES_SPEC), tmp_path / "samples.vmfb", toolchain=toolchain, cache=False)
    assert toolchain.name in result.timings
    objects = {p.name for p in result.objects_dir.iterdir()}
    # a cubin per arch for each source, and the newest arch's PTX for newer GPUs
    assert {f"{s}.{o}" for s in ("axpby", "simple_mul") for o in ("sm_80.cubin", "sm_90.cubin", "sm_90.ptx")} <= objects
    for ptx in result.objects_dir.glob("*.ptx"):
        assert ptx_isa(ptx.read_text()) <= MAX_PTX_ISA, ptx
    for cubin in result.objects_dir.glob("*.cubin"):
        assert cubin.read_bytes()[:4] == b"\x7fELF"
    name, functions = read_descriptions(result.vmfb)
    assert name == "samples" and sorted(f for f, d in functions.items() if d) == ["axpby", "simple_mul", "simple_mul_inplace"]
    assert (ROOT / "kernels" / "simple_mul.cu") in result.dependencies


@pytest.mark.parametrize("module", ("samples", "abi", "cxx"))
def test_each_toolchains_ptx_passes_the_abi_check(toolchain, module, tmp_path):
    """What the pipeline checks after compiling, on every kernel of three modules (extern "C",
    every scalar and element type, C++ templates): entry found, parameters of the C types'
    sizes, and the adapted entry what IREE passes."""
    from iree_dispatch.backend.abi import check_adapted, check_entry, resolve_entry
    from iree_dispatch.backend.ptx_adapt import adapt_module
    from iree_dispatch.frontend.spec_file import load_spec

    spec = {"samples": lambda: load_spec(SAMPLES_SPEC), "abi": abi_module, "cxx": cxx_module}[module]()
    for source in spec.sources:
        text = toolchain.compile_ptx(source, SM80, tmp_path / f"{source.stem}.ptx").text()
        kernels = [k for k in spec.kernels if k.source == source]
        entries = {k.name: resolve_entry(k, text, "sm_80") for k in kernels}
        for kernel in kernels:
            check_entry(kernel, entries[kernel.name], text, "sm_80")
        adapted = adapt_module(text, kernels, entries, "sm_80")
        for kernel in kernels:
            check_adapted(kernel, entries[kernel.name], adapted, "sm_80")


def same_cuda_release(nvcc, nvrtc) -> bool:
    out = subprocess.run([str(nvcc.nvcc), "--version"], capture_output=True, text=True).stdout
    return f"release {nvrtc.version[0]}.{nvrtc.version[1]}," in out


@pytest.mark.parametrize("source", ["kernels/simple_mul.cu", "kernels/axpby.cu", "kernels/elementwise.cu", "tests/kernels/abi.cu", "tests/kernels/probe.cu"])
def test_nvrtc_ptx_is_nvccs(nvrtc, source, tmp_path):
    """With the shims (<cstdint>, <cstddef>, ...) and the CUDA headers, NVRTC compiles these
    sources to nvcc's PTX, instruction for instruction (same CUDA release)."""
    nvcc = toolchain_or_skip("nvcc")
    if not same_cuda_release(nvcc, nvrtc):
        pytest.skip(f"nvcc {nvcc.nvcc} is not CUDA {nvrtc.version}")
    for arch in (SM80, SM90):
        want = nvcc.compile_ptx(ROOT / source, arch, tmp_path / "nvcc.ptx").text()
        got = nvrtc.compile_ptx(ROOT / source, arch, tmp_path / "nvrtc.ptx").text()
        assert code_of(got) == code_of(want), (source, arch.name)


def test_integer_types_and_cxx_kernels_mangle_as_with_nvcc(nvrtc, cu, tmp_path):
    """The shims' types are the host ABI's (int64_t is long, as glibc has it), so a C++ kernel
    instantiated on them has nvcc's entry name; template kernels come out `.visible` as nvcc's."""
    nvcc = toolchain_or_skip("nvcc")
    types = ["int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "intptr_t", "uintptr_t",
             "int_fast16_t", "uint_fast32_t", "int_least64_t", "intmax_t", "size_t", "ptrdiff_t", "std::int64_t", "std::size_t"]
    source = cu(
        "#include <cstdint>\n#include <cstddef>\n#include <climits>\n#include <cfloat>\n"
        "static_assert(sizeof(long) == 8 && INT64_MAX == LONG_MAX && SIZE_MAX == ULONG_MAX && CHAR_BIT == 8, \"LP64\");\n"
        "static_assert(FLT_MAX > 3.4e38f && DBL_EPSILON < 1e-15, \"IEEE\");\n"
        # one template per name: two names of one type can't both be instantiated from one template
        + "".join(f"template <typename T> __global__ void fill{i}(T* out, T v) {{ out[threadIdx.x] = v; }}\n"
                  f"template __global__ void fill{i}<{t}>({t}*, {t});\n" for i, t in enumerate(types))
    )
    entries = {}
    for name, tc in (("nvcc", nvcc), ("nvrtc", nvrtc)):
        text = tc.compile_ptx(source, SM80, tmp_path / f"{name}.ptx").text()
        entries[name] = sorted(re.findall(r"^\.(\w+) \.entry (\w+)\(", text, re.M), key=lambda e: int(re.search(r"fill(\d+)", e[1])[1]))
    assert entries["nvrtc"] == entries["nvcc"]
    assert [e for _, e in entries["nvrtc"]][types.index("int64_t")] == "_Z5fill6IlEvPT_S0_"  # long, not long long (x)
    assert all(linkage == "visible" for linkage, _ in entries["nvrtc"])


def test_nvrtc_shims_mean_what_the_host_headers_mean(nvrtc, cu, tmp_path):
    """offsetof, std::byte/nullptr_t, the limit and constant macros, INFINITY and __is_same
    compile under NVRTC (as constant expressions where C++ requires) to nvcc's PTX."""
    nvcc = toolchain_or_skip("nvcc")
    if not same_cuda_release(nvcc, nvrtc):
        pytest.skip(f"nvcc {nvcc.nvcc} is not CUDA {nvrtc.version}")
    source = cu(
        "#include <cstddef>\n#include <stddef.h>\n#include <cstdint>\n#include <stdint.h>\n#include <climits>\n#include <cfloat>\n"
        "struct S { int a; double b; };\n"
        "static_assert(offsetof(S, b) == 8, \"offsetof\");\n"
        "static_assert(sizeof(std::byte) == 1 && sizeof(std::nullptr_t) == 8, \"cstddef\");\n"
        "static_assert((UINT64_C(1) << 63) == 9223372036854775808UL && INT64_C(-1) < 0 && INT32_MIN < 0 && UINT32_MAX == 4294967295U, \"C\");\n"
        "static_assert(__is_same(int, int32_t) && !__is_same(long, long long), \"__is_same\");\n"
        'extern "C" __global__ void k(float* p, double* q) {\n'
        "  p[0] = FLT_MAX; p[1] = -INFINITY; p[2] = NAN; p[3] = FLT_EPSILON; p[4] = HUGE_VALF; q[0] = DBL_MIN; q[1] = HUGE_VAL;\n}\n"
    )
    want = nvcc.compile_ptx(source, SM80, tmp_path / "nvcc.ptx").text()
    assert code_of(nvrtc.compile_ptx(source, SM80, tmp_path / "nvrtc.ptx").text()) == code_of(want)


@pytest.mark.parametrize("name", ("nvcc", "nvrtc"))
def test_compile_error_carries_the_log_with_file_and_line(name, cu, tmp_path):
    toolchain = toolchain_or_skip(name)
    source = cu('extern "C" __global__ void k(float* p) {\n  p[0] = 1.0f;\n  undeclared_thing(p);\n}\n')
    with pytest.raises(ToolchainError) as error:
        toolchain.compile_ptx(source, SM80, tmp_path / "k.ptx")
    message = str(error.value)
    assert f"{source}(3): error" in message and "undeclared_thing" in message and "sm_80" in message
    assert not (tmp_path / "k.ptx").exists()


def test_nvrtc_takes_the_specs_nvcc_flags(nvrtc, cu, tmp_path):
    """Flags common to both mean the same; the constexpr/lambda ones NVRTC lacks are implied by
    -default-device and dropped; any other nvcc-only flag fails with NVRTC's own message."""
    source = cu('constexpr float twice(float x) { return 2.0f * x; }\n'
                'extern "C" __global__ void k(float* p) { auto f = [](float v) { return twice(v) * SCALE; }; p[0] = f(p[0]); }\n')
    flags = ("--expt-relaxed-constexpr", "--extended-lambda", "-lineinfo", "-DSCALE=3.0f")
    text = nvrtc.compile_ptx(source, SM80, tmp_path / "k.ptx", flags).text()
    assert "0f40400000" in text and re.search(r"^\s*\.loc\s", text, re.M)  # SCALE = 3.0f; line info
    with pytest.raises(ToolchainError, match="unrecognized option -Xcompiler"):
        nvrtc.compile_ptx(source, SM80, tmp_path / "k.ptx", ("-Xcompiler", "-fPIC"))


def test_nvrtc_missing_header_says_where_it_looked(nvrtc, cu, tmp_path):
    from iree_dispatch.toolchains.nvrtc import SHIM_DIR

    source = cu('#include <no_such_header.h>\nextern "C" __global__ void k(float* p) { p[0] = 1.0f; }\n')
    with pytest.raises(ToolchainError, match=r"cannot open source file") as error:
        nvrtc.compile_ptx(source, SM80, tmp_path / "k.ptx")
    assert f"{source}(1)" in str(error.value) and str(SHIM_DIR) in str(error.value)


def write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_nvrtc_dependencies_follow_its_include_search(nvrtc, tmp_path):
    """"name" is looked up beside the including file first (sub/b.h, not the b.h beside k.cu),
    then in -I folders; <name> in -I folders. Lines in #if 0 count too (a superset is safe for
    the cache); a name found nowhere is an NVRTC built-in; -include'd headers count. The
    compiled value proves NVRTC read the same files."""
    write_tree(tmp_path, {
        "src/k.cu": '#include "sub/a.h"\n#include <c.h>\n#if 0\n#include "unused.h"\n#include <nvrtc_builtin_or_missing.h>\n#endif\n'
                    'extern "C" __global__ void k(int* p) { p[0] = A * 10000 + B * 100 + C * 10 + PRE; }\n',
        "src/sub/a.h": '#include "b.h"\n#define A 1\n',
        "src/sub/b.h": "#define B 2\n",
        "src/b.h": "#define B 99\n",
        "src/unused.h": "#error never included\n",
        "inc/c.h": "#define C 3\n",
        "inc/pre.h": "#define PRE 4\n",
    })
    flags = ("-I", str(tmp_path / "inc"), "-include", "pre.h")  # -include: found in the -I folder
    obj = nvrtc.compile_ptx(tmp_path / "src" / "k.cu", SM80, tmp_path / "k.ptx", flags)
    assert re.search(r"\b10234;", obj.text())
    user_files = {p.relative_to(tmp_path).as_posix() for p in obj.dependencies if tmp_path in p.parents}
    assert user_files == {"src/k.cu", "src/sub/a.h", "src/sub/b.h", "src/unused.h", "inc/c.h", "inc/pre.h"}


def test_nvrtc_refuses_an_include_it_cannot_follow(nvrtc, cu, tmp_path):
    source = cu('#define HEADER "a.h"\n#include HEADER\nextern "C" __global__ void k(float* p) { p[0] = 1.0f; }\n')
    with pytest.raises(ToolchainError, match=re.escape(f"{source}:2: #include of a macro")):
        nvrtc.compile_ptx(source, SM80, tmp_path / "k.ptx")


@needs_iree_compiler
def test_nvrtc_build_cache_sees_a_nested_header_change(nvrtc, tmp_path, monkeypatch):
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    write_tree(tmp_path, {
        "k.cu": '#include "scale.h"\nextern "C" __global__ void k(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = SCALE * x[i]; }\n',
        "scale.h": '#include "inner/factor.h"\n#define SCALE (FACTOR * 1.0f)\n',
        "inner/factor.h": "#define FACTOR 2.0f\n",
    })
    spec = ModuleSpec("m", (KernelSpec.declare(tmp_path / "k.cu", "k", block=32, grid=1, shape=["n"]),), (SM80,), objects="ptx")
    out = tmp_path / "out" / "m.vmfb"
    first = build(spec, out, toolchain=nvrtc)
    assert "nvrtc" in first.timings and tmp_path / "inner" / "factor.h" in first.dependencies
    assert "cache" in build(spec, out, toolchain=nvrtc).timings
    (tmp_path / "inner" / "factor.h").write_text("#define FACTOR 3.0f\n")
    again = build(spec, out, toolchain=nvrtc)
    assert "nvrtc" in again.timings  # rebuilt, not taken from the cache
    assert "0f40400000" in (again.objects_dir / "k.sm_80.ptx").read_text()  # 3.0f


@needs_iree_compiler
def test_cache_key_includes_the_toolchain(nvrtc, tmp_path, monkeypatch, cu):
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

    nvcc = toolchain_or_skip("nvcc")
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    source = cu('extern "C" __global__ void k(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 2.0f * x[i]; }\n')
    spec = ModuleSpec("m", (KernelSpec.declare(source, "k", block=32, grid=1, shape=["n"]),), (SM80,), objects="ptx")
    out = tmp_path / "out" / "m.vmfb"
    assert "nvcc" in build(spec, out, toolchain=nvcc).timings
    assert "nvrtc" in build(spec, out, toolchain=nvrtc).timings  # not nvcc's entry
    assert "cache" in build(spec, out, toolchain=nvcc).timings
    assert "cache" in build(spec, out, toolchain=nvrtc).timings
    # The identities name the compiler and its version.
    assert re.search(r"release \d+\.\d+|cuda_\d+\.\d+", nvcc.identity())
    assert "nvidia-cuda-nvrtc 13.0." in nvrtc.identity() and "cubins: nvJitLink" in nvrtc.identity()


def test_auto_selection_prefers_nvcc_then_nvrtc_then_says_what_to_install(monkeypatch):
    from iree_dispatch import toolchains as tc
    from iree_dispatch.toolchains import nvrtc as nvrtc_module

    if not _try(tc.find_nvcc):
        pytest.skip("no nvcc to prefer")
    assert isinstance(tc.select_toolchain(), tc.NvccToolchain)
    assert isinstance(tc.select_toolchain("auto"), tc.NvccToolchain)

    def no_nvcc() -> Path:
        raise ToolchainError("nvcc not found: (test)")

    monkeypatch.setattr(tc, "find_nvcc", no_nvcc)
    if _try(nvrtc_module.NvrtcToolchain):
        assert isinstance(tc.select_toolchain(), nvrtc_module.NvrtcToolchain)

    def no_bindings():
        raise ToolchainError("NVRTC needs cuda-bindings (test)")

    monkeypatch.setattr(nvrtc_module, "_require_bindings", no_bindings)
    with pytest.raises(ToolchainError) as error:
        tc.select_toolchain()
    message = str(error.value)
    assert "nvcc not found" in message and "NVRTC needs cuda-bindings" in message
    assert "iree-dispatch[nvcc]" in message and "iree-dispatch[nvrtc]" in message
    with pytest.raises(ToolchainError, match="unknown toolchain 'clang'"):
        tc.select_toolchain("clang")


def _try(make) -> bool:
    try:
        make()
        return True
    except ToolchainError:
        return False


def test_wheel_nvcc_is_found_and_its_missing_companions_named(tmp_path, monkeypatch):
    """The nvidia-cuda-nvcc wheel's nvcc runs only with cicc and the CUDA headers of four
    other wheels beside it (site-packages/nvidia/cu13/...)."""
    from iree_dispatch.toolchains import base as tc

    root = tmp_path / "nvidia" / "cu13"
    write_tree(root, {"bin/nvcc": "#!/bin/sh\n"})
    (root / "bin" / "nvcc").chmod(0o755)
    monkeypatch.setattr(tc, "nvidia_wheel_dirs", lambda: [root])
    with pytest.raises(ToolchainError) as error:
        tc.wheel_nvcc()
    assert all(p in str(error.value) for p in ("nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-runtime", "nvidia-cuda-cccl", "==13.0.*"))
    write_tree(root, {"nvvm/bin/cicc": "", "include/crt/host_config.h": "", "include/cuda_runtime.h": "", "include/cccl/nv/target": ""})
    assert tc.wheel_nvcc() == root / "bin" / "nvcc"
    monkeypatch.setattr(tc, "nvidia_wheel_dirs", lambda: [])
    assert tc.wheel_nvcc() is None


def test_nvrtc_fatbin_needs_the_fatbinary_tool(nvrtc, monkeypatch, tmp_path):
    from iree_dispatch.toolchains import nvrtc as nvrtc_module

    def missing(name: str, nvcc=None) -> Path:
        raise ToolchainError(f"{name} not found on PATH or beside an nvcc")

    monkeypatch.setattr(nvrtc_module, "find_cuda_tool", missing)
    with pytest.raises(ToolchainError, match=r"fatbinary not found.*NVRTC has no fatbinary of its own: use objects \"cubin\" or \"ptx\""):
        nvrtc.make_fatbin({}, (SM80, tmp_path / "k.ptx"), tmp_path / "k.fatbin")


@pytest.fixture
def nvrtc_without_nvjitlink(monkeypatch):
    """The nvrtc toolchain module, with nvJitLink hidden (skips without NVRTC or a ptxas)."""
    from iree_dispatch.toolchains import nvrtc as nvrtc_module

    toolchain_or_skip("nvrtc")
    try:
        nvrtc_module.find_cuda_tool("ptxas")
    except ToolchainError:
        pytest.skip("no ptxas")
    import cuda.bindings

    monkeypatch.delattr(cuda.bindings, "nvjitlink", raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvjitlink", None)
    return nvrtc_module


def test_nvrtc_cubins_come_from_ptxas_without_nvjitlink(nvrtc_without_nvjitlink, cu, tmp_path):
    """nvJitLink is the NVRTC route's assembler; where it is missing a ptxas found is used."""
    nvrtc_module = nvrtc_without_nvjitlink
    without = nvrtc_module.NvrtcToolchain()
    assert "cubins: ptxas" in without.identity()
    source = cu('extern "C" __global__ void k(float* p) { p[threadIdx.x] = 1.0f; }\n')
    ptx = without.compile_ptx(source, SM90, tmp_path / "k.ptx")
    assert without.assemble_cubin(ptx.path, SM90, tmp_path / "k.cubin").read_bytes()[:4] == b"\x7fELF"


@needs_iree_compiler
def test_cli_build_takes_a_toolchain(nvrtc, tmp_path, capsys):
    from iree_dispatch import cli

    out = tmp_path / "samples.vmfb"
    assert cli.main(["build", str(SAMPLES_SPEC), "-o", str(out), "--toolchain", "nvrtc", "--objects", "ptx", "--no-cache"]) == 0
    assert out.stat().st_size > 0 and "(nvrtc " in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["build", str(SAMPLES_SPEC), "--toolchain", "clang"])


# ---- progress: which compiler runs, and ptxas's own line ----

SIMPLE = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] = 1.0f; }\n'


def test_progress_names_the_compiler_and_the_assembler(toolchain, cu, tmp_path):
    """`compiling with nvcc 13.0 (/path/nvcc)` (or NVRTC and its library), once; a line per
    compile; `assembling cubins with ptxas 13.0 (/path/ptxas)` (or nvJitLink), once; a line per cubin."""
    lines: list[str] = []

    def progress(line: str) -> None:
        lines.append(line)

    source = cu(SIMPLE)
    ptx = toolchain.compile_all([(source, SM80, tmp_path / "k.sm_80.ptx"), (source, SM90, tmp_path / "k.sm_90.ptx")], progress=progress)
    for o in ptx:
        toolchain.assemble_cubin(o.path, o.arch, tmp_path / f"k.{o.arch.name}.cubin")
    if toolchain.name == "nvcc":
        compiler = rf"nvcc \d+\.\d+ \({re.escape(str(toolchain.nvcc))}\)"
        assembler = r"ptxas \d+\.\d+ \(/\S+/ptxas\)"
    else:
        compiler = r"NVRTC \d+\.\d+ \(libnvrtc\.so[.\d]* from /\S+\)"
        assembler = r"(nvJitLink \d+\.\d+ \(libnvJitLink\.so[.\d]* from /\S+\)|ptxas \d+\.\d+ \(/\S+/ptxas\))"
    assert re.fullmatch(f"compiling with {compiler}", lines[0]), lines
    assert sorted(lines[1:3]) == [f"{toolchain.name} k.cu -> sm_80", f"{toolchain.name} k.cu -> sm_90"]
    assert re.fullmatch(f"assembling cubins with {assembler}", lines[3]), lines
    tool = lines[3].split()[3]
    assert lines[4:] == [f"{tool} k.sm_80.ptx -> sm_80 cubin", f"{tool} k.sm_90.ptx -> sm_90 cubin"]
    # said once per progress callback: a second build in the same process names only its files
    toolchain.compile_all([(source, SM80, tmp_path / "again.ptx")], progress=progress)
    assert lines[6:] == [f"{toolchain.name} k.cu -> sm_80"]


def test_nvrtc_without_nvjitlink_says_ptxas_runs(nvrtc_without_nvjitlink, cu, tmp_path):
    nvrtc_module = nvrtc_without_nvjitlink
    lines: list[str] = []
    without = nvrtc_module.NvrtcToolchain()
    (ptx,) = without.compile_all([(cu(SIMPLE), SM90, tmp_path / "k.ptx")], progress=lines.append)
    without.assemble_cubin(ptx.path, SM90, tmp_path / "k.cubin")
    assert re.fullmatch(r"assembling cubins with ptxas \d+\.\d+ \(/\S+/ptxas\)", lines[-2]) and lines[-1] == "ptxas k.ptx -> sm_90 cubin", lines


def test_assemble_cubin_without_a_build_says_so_to_the_default_progress(monkeypatch, cu, tmp_path):
    """Triton's cubins (toolchains.assemble_cubin, no build's progress): the command line's lines."""
    from iree_dispatch import toolchains

    tc = toolchain_or_skip("nvcc")
    ptx = tc.compile_ptx(cu(SIMPLE), SM90, tmp_path / "k.ptx")
    lines: list[str] = []
    monkeypatch.setattr(toolchains.base, "_default_progress", None)
    toolchains.set_default_progress(lines.append)
    toolchains.assemble_cubin(ptx.path, SM90, tmp_path / "k.cubin", toolchain="nvcc")
    assert lines[-1] == "ptxas k.ptx -> sm_90 cubin" and lines[0].startswith("assembling cubins with ptxas ")
    own: list[str] = []
    toolchains.assemble_cubin(ptx.path, SM90, tmp_path / "k.cubin", toolchain="nvcc", progress=own.append)
    assert own[-1] == "ptxas k.ptx -> sm_90 cubin"


def test_compiler_versions_are_asked_once_per_process(monkeypatch, tmp_path):
    """`--version` of a program runs once per process (and again only if the program changes)."""
    from iree_dispatch.toolchains import base

    program = tmp_path / "nvcc"
    program.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\necho 'Build cuda_13.0.r13.0/compiler.1_0'\n")
    program.chmod(0o755)
    runs = []
    real = subprocess.run
    monkeypatch.setattr(base.subprocess, "run", lambda cmd, *a, **kw: (runs.append(cmd), real(cmd, *a, **kw))[1])
    for _ in range(3):
        assert base.describe_program("nvcc", program) == f"nvcc 13.0 ({program})"
        assert base.program_identity(program).endswith("Build cuda_13.0.r13.0/compiler.1_0")
    assert runs == [[str(program), "--version"]]


# ---- auto: NVRTC when nvcc can't run its host compiler ----

@pytest.fixture
def fresh_warnings(monkeypatch):
    """Warnings are said once per process: each test starts afresh, its lines collected."""
    from iree_dispatch.toolchains import base

    lines: list[str] = []
    monkeypatch.setattr(base, "_warned", set())
    monkeypatch.setattr(base, "_default_progress", lines.append)
    for var in ("NVCC_CCBIN", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"):
        monkeypatch.delenv(var, raising=False)
    return lines


def _script(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("how", ["NVCC_CCBIN missing", "PATH without gcc", "gcc without C++", "-ccbin in NVCC_PREPEND_FLAGS"])
def test_auto_falls_back_to_nvrtc_without_a_host_compiler(monkeypatch, tmp_path, fresh_warnings, how):
    from iree_dispatch import toolchains as tc
    from iree_dispatch.toolchains import base

    toolchain_or_skip("nvrtc")
    if not _try(tc.find_nvcc):
        pytest.skip("no nvcc to pass over")
    if how == "NVCC_CCBIN missing":
        monkeypatch.setenv("NVCC_CCBIN", str(tmp_path / "nope" / "g++"))
        reason = f"no host C++ compiler: {tmp_path / 'nope' / 'g++'} ($NVCC_CCBIN) is not an executable file"
    elif how == "PATH without gcc":
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # nvcc is still found: $CUDA_HOME, /usr/local/cuda, the wheel
        monkeypatch.setattr(tc, "find_nvcc", lambda: Path("/opt/cuda/bin/nvcc"))
        reason = "no host C++ compiler: gcc (nvcc's default) is not on PATH"
    elif how == "gcc without C++":
        gcc = _script(tmp_path / "bin", "gcc", "echo \"gcc: fatal error: cannot execute 'cc1plus'\" >&2; exit 1")
        monkeypatch.setenv("PATH", f"{gcc.parent}:/usr/bin:/bin")
        reason = f"the host C++ compiler {gcc} (nvcc's default) can't compile C++: gcc: fatal error: cannot execute 'cc1plus'"
    else:
        monkeypatch.setenv("NVCC_PREPEND_FLAGS", f"-O2 -ccbin {tmp_path / 'nope'}")
        reason = f"{tmp_path / 'nope'} (-ccbin in $NVCC_PREPEND_FLAGS) is not an executable file"
    assert base.host_compiler_problem() is not None and reason in base.host_compiler_problem()
    assert isinstance(tc.select_toolchain(), tc.NvrtcToolchain) and isinstance(tc.select_toolchain("auto"), tc.NvrtcToolchain)
    assert len(fresh_warnings) == 1, fresh_warnings  # said once, however often it is asked
    assert fresh_warnings[0].startswith("warning: nvcc (") and reason in fresh_warnings[0] and "using NVRTC instead" in fresh_warnings[0]
    assert isinstance(tc.select_toolchain("nvcc"), tc.NvccToolchain)  # asked for by name: nvcc, whose error will say why


def test_host_compiler_setting_follows_nvcc(monkeypatch, tmp_path, fresh_warnings):
    """-ccbin in $NVCC_APPEND_FLAGS beats one in $NVCC_PREPEND_FLAGS, which beats $NVCC_CCBIN; a
    folder means the gcc in it; a usable compiler is no problem."""
    from iree_dispatch.toolchains import base

    assert base.host_compiler_setting() == ("nvcc's default", "gcc")
    monkeypatch.setenv("NVCC_CCBIN", "g++")
    assert base.host_compiler_setting() == ("$NVCC_CCBIN", "g++")
    monkeypatch.setenv("NVCC_PREPEND_FLAGS", "--compiler-bindir=/a")
    assert base.host_compiler_setting() == ("-ccbin in $NVCC_PREPEND_FLAGS", "/a")
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-ccbin /b -ccbin /c")
    assert base.host_compiler_setting() == ("-ccbin in $NVCC_APPEND_FLAGS", "/c")
    good = _script(tmp_path / "cc", "gcc", "exit 0")
    monkeypatch.setenv("NVCC_APPEND_FLAGS", f"-ccbin {good.parent}")
    assert base.host_compiler_problem() is None
    monkeypatch.setenv("NVCC_APPEND_FLAGS", f"-ccbin {tmp_path}")
    assert f"{tmp_path / 'gcc'} (-ccbin in $NVCC_APPEND_FLAGS) is not an executable file" in base.host_compiler_problem()


def test_no_host_compiler_and_no_nvrtc_is_one_error_naming_both(monkeypatch, tmp_path, fresh_warnings):
    from iree_dispatch import toolchains as tc
    from iree_dispatch.toolchains import nvrtc as nvrtc_module

    monkeypatch.setattr(tc, "find_nvcc", lambda: Path("/opt/cuda/bin/nvcc"))
    monkeypatch.setenv("NVCC_CCBIN", "/nope/g++")

    def no_bindings():
        raise ToolchainError("NVRTC needs cuda-bindings (test)")

    monkeypatch.setattr(nvrtc_module, "_require_bindings", no_bindings)
    with pytest.raises(ToolchainError) as error:
        tc.select_toolchain()
    message = str(error.value)
    assert "\n" not in message and "nvcc (/opt/cuda/bin/nvcc) has no host C++ compiler" in message and "/nope/g++" in message
    assert "NVRTC needs cuda-bindings" in message and "iree-dispatch[nvrtc]" in message and fresh_warnings == []


def test_nvcc_by_name_without_a_host_compiler_says_what_to_do(monkeypatch, cu, tmp_path, fresh_warnings):
    tc = toolchain_or_skip("nvcc")
    monkeypatch.setenv("NVCC_CCBIN", str(tmp_path / "nope" / "g++"))
    with pytest.raises(ToolchainError) as error:
        tc.compile_ptx(cu(SIMPLE), SM90, tmp_path / "k.ptx")
    assert "is not an executable file: install g++ (or set NVCC_CCBIN to a C++ compiler), or build with --toolchain nvrtc" in str(error.value)
    assert not (tmp_path / "k.ptx").exists()


@needs_iree_compiler
def test_cli_build_falls_back_to_nvrtc_and_says_so_once(nvrtc, tmp_path):
    import os

    from iree_dispatch.toolchains import find_nvcc

    if not _try(find_nvcc):
        pytest.skip("no nvcc to pass over")
    env = {**os.environ, "NVCC_CCBIN": str(tmp_path / "nope" / "g++"), "IREE_DISPATCH_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-m", "iree_dispatch.cli", "build", str(SAMPLES_SPEC), "-o", str(tmp_path / "m.vmfb"), "--objects", "ptx"],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith("[iree-dispatch] warning: nvcc (") and "using NVRTC instead" in warnings[0], result.stderr
    assert "[iree-dispatch] compiling with NVRTC " in result.stderr and "(nvrtc " in result.stdout
