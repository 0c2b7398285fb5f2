"""Break-it suite for the shell nvcc runs its sub-steps in: no path or flag value a user gives
reaches it. Every shell metacharacter (and non-ASCII) in every path position, -D values that
would run commands, and an $NVCC that is no nvcc. A build either succeeds with the right source
compiled, or fails with a clear message and non-zero exit; a canary file that a `touch` in a
path would create never appears, the inputs stay byte for byte as they were, and nothing partial
(no private folder, no output) is left."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from iree_dispatch.cli import main
from iree_dispatch.core.archs import parse_arch
from iree_dispatch.core.errors import ToolchainError

from ..support.break_it import snapshot
from ..support.environment import have_nvcc, needs_build_tools

needs_nvcc = pytest.mark.skipif(not have_nvcc(), reason="needs nvcc")
SM90 = parse_arch("sm_90")

# Inserted into folder and file names; each would run `touch CANARY`, expand to another path,
# split a word or end a command if it reached a shell unquoted or inside double quotes.
METACHARACTERS = {
    "dollar": "x$HOME",
    "backtick": "`touch CANARY`",
    "subshell": "$(touch CANARY)",
    "double quote": 'q"uote',
    "single quote": "it's",
    "space": "a b",
    "semicolon": "a;touch CANARY",
    "ampersand": "a&touch CANARY&",
    "pipe": "a|touch CANARY",
    "star": "st*r",
    "hash": "h#sh",
    "newline": "new\nline",
    "accent": "café",
    "cjk": "模块",
}
# nvcc can be given a file of any name but these only through an #include, which can't spell them.
UNINCLUDABLE = ("double quote", "newline")

# The source includes a header beside it, one in the folder above and one from an -I folder;
# each leaves a marker in the PTX, so the PTX shows which files were compiled.
SOURCE = """#include "local.h"
#include "../parent.h"
#include "included.h"
__device__ int source_marker;
extern "C" __global__ void simple_mul(const float* lhs, const float* rhs, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = lhs[i] * rhs[i];
}
"""
HEADERS = {"local.h": "__device__ int local_marker;\n", "../parent.h": "__device__ int parent_marker;\n",
           "../INCLUDE/included.h": "__device__ int included_marker;\n"}
MARKERS = ("source_marker", "local_marker", "parent_marker", "included_marker")


def toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def project(root: Path, folder: str, source: str, include: str, flags: tuple[str, ...] = ()) -> tuple[Path, Path, Path]:
    """(spec, source, -I folder): root/<folder>/kernels/{spec.toml, <source>, local.h},
    root/<folder>/parent.h, root/<folder>/<include>/included.h."""
    kernels = root / folder / "kernels"
    kernels.mkdir(parents=True)
    (kernels / source).write_text(SOURCE, encoding="utf-8")
    for name, text in HEADERS.items():
        path = (kernels / name.replace("INCLUDE", include)).resolve()
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    spec = kernels / "spec.toml"
    all_flags = [f"-I{root / folder / include}", *flags]
    spec.write_text(f"[module]\nname = \"m\"\narchs = [\"sm_90\"]\nnvcc_flags = [{', '.join(map(toml_string, all_flags))}]\n"
                    f"[[kernel]]\nname = \"simple_mul\"\nsource = {toml_string(source)}\nblock = [64]\ngrid = [\"ceildiv(n, 64)\"]\nshape = [\"n\"]\n", encoding="utf-8")
    return spec, kernels / source, root / folder / include


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """tmp_path as the working folder (where a stray `touch CANARY` lands) and as the temporary
    folder (where nvcc's private folders go: they must be gone after each build)."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    yield tmp_path
    assert not list(tmp_path.rglob("CANARY")) and not Path.home().joinpath("CANARY").exists(), "a shell ran a command from a path"
    assert os.listdir(tmp_path / "tmp") == [], "a private folder was left behind"


def build(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err + captured.out


@needs_build_tools
@pytest.mark.parametrize("what", METACHARACTERS)
def test_every_path_position(sandbox, capsys, what):
    """The metacharacter in the spec's folder, the source's name, the -I folder and the output
    folder and file, all at once: the right files are compiled into the vmfb."""
    bad = METACHARACTERS[what]
    spec, source, include = project(sandbox, f"p{bad}", f"k{bad}.cu", f"inc{bad}")
    out = sandbox / f"o{bad}" / f"m{bad}.vmfb"
    inputs = snapshot(sandbox / f"p{bad}")
    argv = ["build", str(spec), "-o", str(out), "--objects", "ptx", "--no-cache", "--emit-mlir"]  # (the objects are kept beside the MLIR)
    code, said = build(argv, capsys)
    if what in UNINCLUDABLE:  # the source's name can't be compiled by nvcc: said, nothing written
        assert code == 1 and f"nvcc can't be given a file whose name has {next(c for c in bad if c in chr(34) + chr(10))!r}" in said and "--toolchain nvrtc" in said, said
        assert not out.parent.exists()
        source.rename(source.with_name("k.cu"))
        spec.write_text(spec.read_text(encoding="utf-8").replace(toml_string(source.name), '"k.cu"'), encoding="utf-8")
        inputs = snapshot(sandbox / f"p{bad}")
        code, said = build(argv, capsys)
    assert code == 0, said
    assert out.is_file() and snapshot(sandbox / f"p{bad}") == inputs
    ptx = "".join(p.read_text() for p in out.parent.glob("m.objects/*.ptx"))
    assert all(marker in ptx for marker in MARKERS), ptx[:2000]


@needs_nvcc
@pytest.mark.parametrize("what", METACHARACTERS)
def test_dependencies_and_messages_name_the_real_files(sandbox, what):
    """nvcc's list of the files it read names the user's files, headers included, never the
    private links; so does its error log."""
    from iree_dispatch.toolchains import select_toolchain

    bad = METACHARACTERS[what]
    name = "k.cu" if what in UNINCLUDABLE else f"k{bad}.cu"
    _spec, source, include = project(sandbox, f"p{bad}", name, f"inc{bad}")
    tc = select_toolchain("nvcc")
    compiled = tc.compile_ptx(source, SM90, sandbox / "k.ptx", (f"-I{include}",))
    read = set(compiled.dependencies)
    kernels = source.parent
    assert {source, kernels / "local.h", kernels / ".." / "parent.h", include / "included.h"} <= read, read
    assert not any("iree_dispatch_nvcc." in str(p) for p in read)
    (kernels / "local.h").write_text("this is no C++;\n")
    with pytest.raises(ToolchainError) as error:
        tc.compile_ptx(source, SM90, sandbox / "k.ptx", (f"-I{include}",))
    message = str(error.value)
    assert f"{kernels / 'local.h'}" in message and "iree_dispatch_nvcc." not in message and "/d1/" not in message, message
    assert not (sandbox / "k.ptx").exists()


@needs_build_tools
def test_definitions_with_metacharacters_reach_the_source_unchanged(sandbox, capsys):
    """-D values a shell would run or split become #define lines: the source sees the text as
    written, and nothing runs."""
    checks = ('constexpr char msg[] = MSG; static_assert(sizeof(msg) == 4 && msg[1] == \';\', "MSG");\n'
              '#define TEXT(...) #__VA_ARGS__\n#define STR(x) TEXT(x)\n'
              'static_assert(sizeof(STR(X)) == sizeof("$(touch CANARY)"), "X");\n'
              'static_assert(sizeof(STR(Y)) == sizeof("`touch CANARY` & | * #"), "Y");\n'
              'static_assert(PLAIN == 7 && F(2, 3) == 5, "plain");\n')
    flags = ('-DMSG="a;b"', "-DX=$(touch CANARY)", "-D", "Y=`touch CANARY` & | * #", "-DPLAIN=7", "-DF(a,b)=(a+b)", "-UGONE", "-DGONE")
    spec, source, _ = project(sandbox, "p", "k.cu", "inc", flags)
    source.write_text(checks + source.read_text())
    code, said = build(["build", str(spec), "-o", str(sandbox / "o" / "m.vmfb"), "--objects", "ptx", "--no-cache"], capsys)
    assert code == 0, said


@needs_build_tools
@pytest.mark.parametrize("flag, character", [("-Xcompiler=-Wall;touch CANARY", ";"), ("--diag-suppress=$(touch CANARY)", "$"),
                                             ("-D", "$"), ("-DNOT A NAME=1", " ")])
def test_other_unsafe_flags_are_refused(sandbox, capsys, flag, character):
    """A flag that isn't a definition or a path, and has an unsafe character, is refused before
    nvcc runs: the message names the flag, the character and what to do instead."""
    flags = (flag, "$(touch CANARY)=1") if flag == "-D" else (flag,)
    spec, _, _ = project(sandbox, "p", "k.cu", "inc", flags)
    inputs = snapshot(sandbox / "p")
    code, said = build(["build", str(spec), "-o", str(sandbox / "o" / "m.vmfb"), "--no-cache"], capsys)
    assert code == 1 and "--toolchain nvrtc" in said and "header" in said, said
    assert (f"{character!r}" in said) if flag != "-D" else "'$(touch CANARY)' is no macro name" in said, said
    assert not (sandbox / "o").exists() and snapshot(sandbox / "p") == inputs


def fake_nvcc(folder: Path, version: str = "Cuda compilation tools, release 13.0") -> Path:
    """A script that says it is nvcc and records its arguments (one a line) when it compiles."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvcc"
    script.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "nvcc: NVIDIA (R) Cuda compiler driver"; echo "{version}"; exit 0; fi\n'
                      f'printf "%s\\n" "$@" > "{folder / "args"}"; exit 1\n')
    script.chmod(0o755)
    return script


def test_ordinary_flags_reach_nvcc_unchanged(sandbox, monkeypatch):
    """Safe flags, paths and definitions are passed as they are (the command line ordinary
    builds always had); unsafe ones only as private links and a forced-include header."""
    from iree_dispatch.toolchains import NvccToolchain

    nvcc = fake_nvcc(sandbox / "bin")
    ordinary = ("-O3", "-DFOO=1", "-I", "rel/path", "--use_fast_math", "-lineinfo", "-std=c++17", "-Xptxas=-v,-O3")
    source = sandbox / "k.cu"
    source.write_text("")
    with pytest.raises(ToolchainError):
        NvccToolchain(nvcc).compile_ptx(source, SM90, sandbox / "k.ptx", ordinary)
    args = (sandbox / "bin" / "args").read_text().splitlines()
    assert args[args.index("-arch=sm_90") + 1: args.index("-MD")] == list(ordinary) and str(source) in args
    odd = sandbox / "a$(touch CANARY) b"
    odd.mkdir()
    (odd / "k.cu").write_text("")
    with pytest.raises(ToolchainError) as error:
        NvccToolchain(nvcc).compile_ptx(odd / "k.cu", SM90, sandbox / "k.ptx", ("-DMSG=\"a;b\"", f"-I{odd}", "-DFOO=1"))
    args = (sandbox / "bin" / "args").read_text().splitlines()
    assert all(re.fullmatch(r"[A-Za-z0-9_./+=,:@%-]+", a) for a in args), args
    assert "-DFOO=1" not in args and args.count("-include") == 1 and str(odd) not in "\n".join(args)
    assert str(odd) in str(error.value) and "iree_dispatch_nvcc." not in str(error.value)


@pytest.mark.parametrize("kind", ["missing", "folder", "not executable", "true", "another program"])
def test_a_bad_nvcc_variable_is_an_error_not_a_fallback(sandbox, monkeypatch, kind):
    from iree_dispatch.toolchains import find_nvcc, select_toolchain

    value = {"missing": sandbox / "nope" / "nvcc", "folder": sandbox, "true": Path("/bin/true")}.get(kind, sandbox / "nvcc")
    if kind == "not executable":
        value.write_text("#!/bin/sh\n")
    if kind == "another program":
        value.write_text("#!/bin/sh\necho 'gcc (Debian 12.2.0-14) 12.2.0'\n")
        value.chmod(0o755)
    monkeypatch.setenv("NVCC", str(value))
    for find in (find_nvcc, select_toolchain, lambda: select_toolchain("nvcc")):
        with pytest.raises(ToolchainError) as error:
            find()
        assert f"$NVCC={str(value)!r}" in str(error.value), str(error.value)
    monkeypatch.setenv("NVCC", str(fake_nvcc(sandbox / "bin")))  # one that says it is nvcc is taken
    assert find_nvcc() == sandbox / "bin" / "nvcc"


@needs_build_tools
def test_a_bad_nvcc_variable_fails_the_build(sandbox, monkeypatch, capsys):
    monkeypatch.setenv("NVCC", "/bin/true")
    spec, _, _ = project(sandbox, "p", "k.cu", "inc")
    code, said = build(["build", str(spec), "-o", str(sandbox / "o" / "m.vmfb")], capsys)
    assert code == 1 and "$NVCC='/bin/true' is not nvcc" in said and not (sandbox / "o").exists(), said


@pytest.mark.parametrize("variable, value", [("NVCC_CCBIN", "/usr/bin/g++$(touch CANARY)"), ("NVCC_APPEND_FLAGS", "-O3 -DX=`touch CANARY`"),
                                             ("NVCC_PREPEND_FLAGS", "-Xcompiler=-Wall;touch CANARY")])
def test_unsafe_nvcc_variables_are_refused(sandbox, monkeypatch, variable, value):
    """nvcc reads these itself and puts them into its shell commands."""
    from iree_dispatch.toolchains import NvccToolchain

    monkeypatch.setenv(variable, value)
    source = sandbox / "k.cu"
    source.write_text("")
    with pytest.raises(ToolchainError) as error:
        NvccToolchain(fake_nvcc(sandbox / "bin")).compile_ptx(source, SM90, sandbox / "k.ptx")
    assert f"${variable}" in str(error.value) and "--toolchain nvrtc" in str(error.value)
    assert not (sandbox / "bin" / "args").exists()  # refused before nvcc ran


@needs_build_tools
@pytest.mark.parametrize("what", ["subshell", "double quote", "newline", "cjk"])
def test_nvrtc_builds_from_odd_paths(sandbox, capsys, what):
    """NVRTC runs in-process, no shell: any folder and file name works."""
    from ..support.toolchains import toolchain_or_skip

    toolchain_or_skip("nvrtc")
    bad = METACHARACTERS[what]
    spec, _, _ = project(sandbox, f"p{bad}", f"k{bad}.cu", f"inc{bad}")
    out = sandbox / f"o{bad}" / "m.vmfb"
    code, said = build(["build", str(spec), "-o", str(out), "--objects", "ptx", "--toolchain", "nvrtc", "--no-cache", "--emit-mlir"], capsys)
    assert code == 0, said
    assert all(marker in "".join(p.read_text() for p in out.parent.glob("m.objects/*.ptx")) for marker in MARKERS)


@needs_nvcc
@pytest.mark.parametrize("what", ["subshell", "double quote", "newline"])
def test_type_probe_from_odd_folders(sandbox, what):
    """The type probe (a parameter spelled through an alias) compiles through nvcc too."""
    from iree_dispatch.frontend.signature import parse_kernels, read_source
    from iree_dispatch.frontend.type_probe import resolve_types

    folder = sandbox / f"p{METACHARACTERS[what]}"
    folder.mkdir()
    (folder / "alias.h").write_text("typedef float real;\n")
    source = folder / "k.cu"
    source.write_text('#include "alias.h"\nextern "C" __global__ void k(const real* x, real* y) { y[threadIdx.x] = x[threadIdx.x]; }\n')
    (signature,) = parse_kernels(read_source(source), source)
    resolved = resolve_types(signature, (), SM90, "nvcc")
    assert [p.ctype for p in resolved.params] == ["float", "float"]
