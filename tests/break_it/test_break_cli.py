"""Break-it suite for the command line: every user mistake ends as one line naming the path and
saying what to do, exit code != 0, no traceback, nothing written (no temporary, no partial
artifact), and every input byte for byte as it was. Most cases fail before any compiler runs."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from iree_dispatch import cli
from iree_dispatch.cli import main

from ..support.break_it import project, snapshot
from ..support.environment import ROOT, needs_build_tools

SPEC = "kernels/samples.toml"


@dataclass(frozen=True)
class Case:
    title: str
    argv: Callable[[Path], list[str]]  # given the project folder
    names: Callable[[Path], str]  # the path the message must name
    setup: Callable[[Path], object] = lambda proj: None
    message: str = ""  # a further substring the message must have


def _p(rel: str) -> Callable[[Path], str]:
    return lambda proj: str((proj / rel).absolute())


def _build(*extra: str) -> Callable[[Path], list[str]]:
    return lambda proj: ["build", str(proj / SPEC), *(e.replace("{p}", str(proj)) for e in extra)]


def _touch(rel: str, text: str = "x"):
    def make(proj: Path) -> None:
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_text(text)

    return make


def _mkdir(rel: str):
    return lambda proj: (proj / rel).mkdir(parents=True)


def _symlink(rel: str, target: str):
    return lambda proj: (proj / rel).symlink_to(target if target.startswith("/") else proj / target)


def _hardlink(rel: str, target: str):
    return lambda proj: os.link(proj / target, proj / rel)


def _spec_with_source(source: str, name: str = "bad.toml"):
    def make(proj: Path) -> None:
        text = (proj / SPEC).read_text().replace('source = "simple_mul.cu"', f'source = "{source}"', 1)
        assert text != (proj / SPEC).read_text()
        (proj / "kernels" / name).write_text(text)

    return make


def _sparse(rel: str, size: int):
    def make(proj: Path) -> None:
        with open(proj / rel, "wb") as handle:
            handle.truncate(size)

    return make


def _nested_spec(proj: Path) -> None:
    """The spec and its sources inside the folder the build would replace (samples.objects)."""
    shutil.copytree(proj / "kernels", proj / "samples.objects")


def _spec_file(text: str | bytes, name: str = "bad.toml", sources: dict[str, str] | None = None):
    """A spec (text, or bytes as they are) beside the samples' sources, and more sources."""
    def make(proj: Path) -> None:
        for source, code in (sources or {}).items():
            (proj / "kernels" / source).write_text(code)
        (proj / "kernels" / name).write_bytes(text if isinstance(text, bytes) else text.encode())

    return make


def _build_spec(name: str = "bad.toml") -> Callable[[Path], list[str]]:
    return lambda proj: ["build", str(proj / "kernels" / name), "-o", str(proj / "out" / "m.vmfb")]


MUL_KERNEL = '[[kernel]]\nname = "simple_mul"\nsource = "simple_mul.cu"\nblock = [64]\nshape = ["n"]\n'


def _cache_folder(mode: int | None = None, files: dict[str, str] | None = None):
    """The build cache folder (the fixture's IREE_DISPATCH_CACHE_DIR, beside proj) made now."""
    def make(proj: Path) -> None:
        cache = proj.parent / "cache"
        cache.mkdir()
        for name, text in (files or {}).items():
            (cache / name).write_text(text)
        if mode is not None:
            os.chmod(cache, mode)

    return make


def _vmfb(rel: str = "m.vmfb"):
    return _touch(rel, "not really a module")


CASES = [
    # 1. outputs that are inputs (data loss)
    Case("-o is a kernel source", _build("-o", "{p}/kernels/simple_mul.cu"), _p("kernels/simple_mul.cu"), message="own input"),
    Case("-o is the spec", _build("-o", "{p}/kernels/samples.toml"), _p("kernels/samples.toml"), message="own input"),
    Case("--emit-mlir=spec", _build("-o", "{p}/out/m.vmfb", "--emit-mlir={p}/kernels/samples.toml"), _p("kernels/samples.toml"), message="own input"),
    Case("--emit-mlir is a source", _build("-o", "{p}/out/m.vmfb", "--emit-mlir", "{p}/kernels/axpby.cu"), _p("kernels/axpby.cu"), message="own input"),
    Case("--depfile is the spec", _build("-o", "{p}/out/m.vmfb", "--depfile", "{p}/kernels/samples.toml"), _p("kernels/samples.toml"), message="own input"),
    Case("--depfile is a source", _build("-o", "{p}/out/m.vmfb", "--depfile", "{p}/kernels/simple_mul.cu"), _p("kernels/simple_mul.cu"), message="own input"),
    Case("-o is the program", lambda proj: ["build", str(proj / SPEC), "--program", str(proj / "program.mlir"), "-o", str(proj / "program.mlir")],
         _p("program.mlir"), message="own input"),
    Case("-o via a relative path to the source", lambda proj: ["build", str(proj / SPEC), "-o", str(proj / "out" / ".." / "kernels" / "simple_mul.cu")],
         lambda proj: "simple_mul.cu", setup=_mkdir("out"), message="own input"),
    Case("-o is a symlink to the source", _build("-o", "{p}/link.cu"), _p("link.cu"), setup=_symlink("link.cu", "kernels/simple_mul.cu"), message="own input"),
    Case("-o is a hard link to the spec", _build("-o", "{p}/hard.toml"), _p("hard.toml"), setup=_hardlink("hard.toml", "kernels/samples.toml"), message="own input"),
    Case("the objects folder would replace the folder holding the spec",
         lambda proj: ["build", str(proj / "samples.objects" / "samples.toml"), "-o", str(proj / "m.vmfb"), "--emit-mlir"],
         _p("samples.objects"), setup=_nested_spec, message="own input"),
    # 2. outputs that are each other
    Case("-o equals --emit-mlir", _build("-o", "{p}/out/m.vmfb", "--emit-mlir={p}/out/m.vmfb"), _p("out/m.vmfb"), message="different paths"),
    Case("--depfile equals -o", _build("-o", "{p}/out/m.vmfb", "--depfile", "{p}/out/m.vmfb"), _p("out/m.vmfb"), message="different paths"),
    Case("--depfile equals --emit-mlir", _build("-o", "{p}/out/m.vmfb", "--emit-mlir={p}/out/m.mlir", "--depfile", "{p}/out/m.mlir"), _p("out/m.mlir"), message="different paths"),
    Case("-o is the objects folder", _build("-o", "{p}/out/samples.objects", "--emit-mlir={p}/out/m.mlir"), _p("out/samples.objects"), message="different paths"),
    Case("--depfile inside the objects folder", _build("-o", "{p}/out/m.vmfb", "--emit-mlir", "--depfile", "{p}/out/samples.objects/m.d"), _p("out/samples.objects"),
         message="replaces"),
    # 3. outputs that can't be written
    Case("-o names a folder", _build("-o", "{p}/out"), _p("out"), setup=_mkdir("out"), message="is a folder"),
    Case("--emit-mlir names a folder", _build("-o", "{p}/m.vmfb", "--emit-mlir={p}/out"), _p("out"), setup=_mkdir("out"), message="is a folder"),
    Case("--depfile names a folder", _build("-o", "{p}/m.vmfb", "--depfile", "{p}/out"), _p("out"), setup=_mkdir("out"), message="is a folder"),
    Case("-o under a file", _build("-o", "{p}/file/m.vmfb"), _p("file"), setup=_touch("file"), message="not a folder"),
    Case("-o two levels under a file", _build("-o", "{p}/file/a/b/m.vmfb"), _p("file"), setup=_touch("file"), message="not a folder"),
    Case("--emit-mlir under a file", _build("-o", "{p}/m.vmfb", "--emit-mlir={p}/file/m.mlir"), _p("file"), setup=_touch("file"), message="not a folder"),
    Case("--depfile under a file", _build("-o", "{p}/m.vmfb", "--depfile", "{p}/file/m.d"), _p("file"), setup=_touch("file"), message="not a folder"),
    Case("the objects folder's name is taken by a file", _build("-o", "{p}/out/m.vmfb", "--emit-mlir"), _p("out/samples.objects"), setup=_touch("out/samples.objects"),
         message="not a folder"),
    Case("-o under a broken symlink", _build("-o", "{p}/dangling/m.vmfb"), _p("dangling"), setup=_symlink("dangling", "/nonexistent/folder"), message="broken symbolic link"),
    Case("-o is a device", _build("-o", "/dev/null"), lambda proj: "/dev/null", message="not a regular file"),
    # 4. inputs that must not be read
    Case("source is /dev/zero", lambda proj: ["build", str(proj / "kernels/bad.toml"), "-o", str(proj / "m.vmfb")], _p("kernels/zero.cu"),
         setup=lambda proj: (_symlink("kernels/zero.cu", "/dev/zero")(proj), _spec_with_source("zero.cu")(proj)), message="not a regular file"),
    Case("source over 64 MiB", lambda proj: ["build", str(proj / "kernels/bad.toml"), "-o", str(proj / "m.vmfb")], _p("kernels/huge.cu"),
         setup=lambda proj: (_sparse("kernels/huge.cu", 65 << 20)(proj), _spec_with_source("huge.cu")(proj)), message="64 MiB"),
    Case("source is a folder", lambda proj: ["build", str(proj / "kernels/bad.toml"), "-o", str(proj / "m.vmfb")], _p("kernels/dir.cu"),
         setup=lambda proj: (_mkdir("kernels/dir.cu")(proj), _spec_with_source("dir.cu")(proj)), message="is a folder"),
    Case("spec is a device", lambda proj: ["build", str(proj / "zero.toml"), "-o", str(proj / "m.vmfb")], _p("zero.toml"),
         setup=_symlink("zero.toml", "/dev/zero"), message="not a regular file"),
    Case("spec is a folder", lambda proj: ["build", str(proj / "kernels"), "-o", str(proj / "m.vmfb")], _p("kernels"), message="is a folder"),
    Case("spec is missing", lambda proj: ["build", str(proj / "nope.toml"), "-o", str(proj / "m.vmfb")], lambda proj: str(proj / "nope.toml")),
    Case("program is a folder", lambda proj: ["build", str(proj / SPEC), "--program", str(proj / "kernels"), "-o", str(proj / "m.vmfb")], _p("kernels"), message="is a folder"),
    Case("program over 64 MiB", lambda proj: ["build", str(proj / SPEC), "--program", str(proj / "big.mlir"), "-o", str(proj / "m.vmfb")], _p("big.mlir"),
         setup=_sparse("big.mlir", 65 << 20), message="64 MiB"),
    # 5. other commands
    Case("inspect a folder", lambda proj: ["inspect", str(proj / "kernels")], _p("kernels"), message="is a folder"),
    Case("inspect a missing file", lambda proj: ["inspect", str(proj / "nope.vmfb")], _p("nope.vmfb"), message="no such file"),
    Case("inspect a file that is no module", lambda proj: ["inspect", str(proj / "kernels" / "axpby.cu")], _p("kernels/axpby.cu"), message="not a module"),
    Case("run a folder", lambda proj: ["run", str(proj / "kernels"), "--function=f"], _p("kernels"), message="is a folder"),
    # 6. specs and sources the build must refuse (through the command line: one line naming the file)
    Case("grid divides by n - n, zero for every size", _build_spec(), lambda proj: "grid[0]", setup=_spec_file(MUL_KERNEL + 'grid = ["n % (n - n)"]\n'),
         message="divides by zero"),
    Case("-arch= in nvcc_flags", _build_spec(), _p("kernels/bad.toml"), setup=_spec_file('[module]\nnvcc_flags = ["-arch=sm_75"]\n' + MUL_KERNEL + 'grid = ["n"]\n'),
         message="choose the target architecture"),
    Case("integer constant beyond 64 bits", _build_spec(), lambda proj: "99999999999999999999",
         setup=_spec_file(MUL_KERNEL + 'grid = ["ceildiv(n, 99999999999999999999)"]\n'), message="doesn't fit a 64-bit"),
    Case("spec not in UTF-8", _build_spec(), _p("kernels/bad.toml"), setup=_spec_file(b"# caf\xe9\n" + (MUL_KERNEL + 'grid = ["n"]\n').encode()),
         message="not valid UTF-8"),
    Case("source = [\"k.cu\"]", _build_spec(), _p("kernels/bad.toml"), setup=_spec_file(MUL_KERNEL.replace('"simple_mul.cu"', '["simple_mul.cu"]') + 'grid = ["n"]\n'),
         message="source is a list"),
    Case("variadic template kernel", _build_spec(), lambda proj: "vt.cu", message="variadic template",
         setup=_spec_file('[[kernel]]\nname = "vt<int>"\nsource = "vt.cu"\nblock = [64]\nshape = ["n"]\ngrid = ["n"]\n',
                          sources={"vt.cu": "template <typename... Ts> __global__ void vt(float* out, Ts... rest) {}\n"})),
    Case("a macro's parameter listed as the kernel", _build_spec(), lambda proj: "mac.cu", message="signature",
         setup=_spec_file('[[kernel]]\nname = "name"\nsource = "mac.cu"\nblock = [64]\nshape = ["n"]\ngrid = ["n"]\n',
                          sources={"mac.cu": '#define KERNEL(name) extern "C" __global__ void name(float* out, int n) {}\nKERNEL(foo)\n'})),
    # 7. flags for iree-compile
    Case("--iree-compile-arg=-o", _build("-o", "{p}/out/m.vmfb", "--iree-compile-arg=-o"), lambda proj: "'-o'", message="can't be given"),
    Case("a value after -- as its own item", _build("-o", "{p}/out/m.vmfb", "--", "--iree-opt-level", "O3"), lambda proj: "'O3'", message="not one flag"),
    Case("an iree-compile flag that doesn't exist", _build("-o", "{p}/out/m.vmfb", "--", "--iree-no-such-flag"), lambda proj: "--iree-no-such-flag",
         message="Unknown command line argument"),
    # 8. the build cache
    Case("cache writable by everyone", _build("-o", "{p}/out/m.vmfb"), lambda proj: str(proj.parent / "cache"), setup=_cache_folder(0o777),
         message="writable by group and others"),
    Case("cache writable by the group", _build("-o", "{p}/out/m.vmfb"), lambda proj: str(proj.parent / "cache"), setup=_cache_folder(0o770),
         message="writable by group"),
    Case("cache clear on a folder of unrelated files", lambda proj: ["cache", "clear"], lambda proj: str(proj.parent / "cache"),
         setup=_cache_folder(0o700, {"notes.txt": "mine", "CACHEDIR.TAG": "Signature: something else\n"}), message="refusing to clear"),
    # 9. run, iree-run-module's way (refused before a device is opened)
    Case("run: the file and --module= differ", lambda proj: ["run", str(proj / "m.vmfb"), f"--module={proj / 'o.vmfb'}", "--function=f"], _p("o.vmfb"),
         setup=lambda proj: (_vmfb()(proj), _vmfb("o.vmfb")(proj)), message="different modules"),
    Case("run: --output_max_element_count not a number", lambda proj: ["run", str(proj / "m.vmfb"), "--function=f", "--output_max_element_count=lots"],
         lambda proj: "--output_max_element_count=lots", setup=_vmfb(), message="whole number"),
    Case("run: no --function", lambda proj: ["run", f"--module={proj / 'm.vmfb'}"], lambda proj: "--function=NAME", setup=_vmfb()),
    Case("run: a file that is no module", lambda proj: ["run", str(proj / "kernels" / "samples.toml"), "--function=f"], _p("kernels/samples.toml"),
         message="not a module"),
]


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    return project(tmp_path)


def check_refused(proj: Path, argv: list[str], capsys, names: str, message: str = "") -> str:
    before = snapshot(proj.parent)
    code = main(argv)
    captured = capsys.readouterr()
    assert code != 0, captured
    err = captured.err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"iree-dispatch {argv[0]}: error: ") and names in err, err
    assert message in err, err
    after = snapshot(proj.parent)
    assert after == before, f"changed: {sorted(set(after.items()) ^ set(before.items()))}"
    return err


@pytest.mark.parametrize("case", CASES, ids=[c.title for c in CASES])
def test_refused(case: Case, proj, capsys):
    case.setup(proj)
    check_refused(proj, case.argv(proj), capsys, case.names(proj), case.message)


def test_at_least_50_cases():
    assert len(CASES) >= 50


def test_read_only_output_folder(proj, capsys, monkeypatch):
    """A folder that can't be written (checked with access(2), which root passes: simulated)."""
    locked = proj / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if Path(path) == locked else real(path, mode, **kw))
    check_refused(proj, ["build", str(proj / SPEC), "-o", str(locked / "m.vmfb")], capsys, str(locked), "not writable")
    check_refused(proj, ["build", str(proj / SPEC), "-o", str(locked / "new" / "m.vmfb")], capsys, str(locked), "not writable")
    check_refused(proj, ["build", str(proj / SPEC), "-o", str(proj / "m.vmfb"), "--depfile", str(locked / "m.d")], capsys, str(locked), "not writable")


@needs_build_tools
@pytest.mark.parametrize("where", ["file", "under-file"])
def test_cache_that_is_not_a_folder(proj, capsys, monkeypatch, where):
    cache = proj / "cachefile"
    cache.write_text("not a folder")
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(cache if where == "file" else cache / "sub"))
    check_refused(proj, ["build", str(proj / SPEC), "-o", str(proj / "out" / "m.vmfb")], capsys, str(cache))


def test_cache_info_on_a_file(proj, capsys, monkeypatch):
    cache = proj / "cachefile"
    cache.write_text("not a folder")
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(cache))
    check_refused(proj, ["cache", "clear"], capsys, str(cache), "not a folder")


def test_runtime_only_install(proj, capsys, monkeypatch):
    """No iree-base-compiler: `build` says how to get it."""
    real = importlib.metadata.version

    def version(name):
        if name == "iree-base-compiler":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    err = check_refused(proj, ["build", str(proj / SPEC), "-o", str(proj / "m.vmfb")], capsys, "iree-base-compiler", "pip install iree-dispatch")
    assert "not installed" in err
    assert "iree-base-compiler: not installed" in cli.version_text()


def test_os_errors_are_one_line_naming_the_path():
    import errno

    assert cli.os_error_message(OSError(errno.EROFS, "Read-only file system", "/x/y.vmfb")) == "can't write /x/y.vmfb: Read-only file system; choose a writable location"
    assert cli.os_error_message(PermissionError(errno.EACCES, "Permission denied", "/x")).startswith("can't access /x: Permission denied")
    assert cli.os_error_message(OSError(errno.ENOSPC, "No space left on device", "/x/a", None)).endswith("free some space")


def test_an_unexpected_os_error_during_the_build_is_one_line(proj, capsys, monkeypatch):
    """Whatever OSError a stage hits (here: the final rename) is one line, and no temporary stays."""
    import errno

    from iree_dispatch.backend import pipeline

    def fail(*args, **kw):
        raise OSError(errno.EROFS, "Read-only file system", str(proj / "out"))

    monkeypatch.setattr(pipeline, "select_toolchain", fail)
    check_refused(proj, ["build", str(proj / SPEC), "-o", str(proj / "out" / "m.vmfb")], capsys, str(proj / "out"), "Read-only file system")


def run_cli(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "iree_dispatch.cli", *argv], capture_output=True, text=True, **kw)


def test_version_never_fails():
    result = run_cli("--version")
    assert result.returncode == 0 and "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("iree-dispatch 0.") and lines[1].startswith("iree-base-compiler") and lines[2].startswith("iree-base-runtime")
    assert lines[3].startswith("launch path: ") and lines[4].startswith("CUDA compiler: ")


def test_version_without_a_cuda_compiler(monkeypatch, capsys):
    from iree_dispatch import toolchains
    from iree_dispatch.core.errors import ToolchainError

    def missing(*args, **kw):
        raise ToolchainError("no CUDA compiler found.\n  nvcc: ...")

    monkeypatch.setattr(toolchains, "select_toolchain", missing)
    assert "CUDA compiler: none found (no CUDA compiler found.)" in cli.version_text()


def test_every_option_has_help():
    parser = cli.parser()
    subparsers = next(a for a in parser._actions if a.choices and isinstance(a.choices, dict))
    for p in [parser, *subparsers.choices.values()]:
        for action in p._actions:
            assert action.help, f"{p.prog} {action.option_strings or action.dest} has no help"


def test_emit_mlir_does_not_swallow_the_spec():
    args = cli.parser().parse_args(cli._split_emit_mlir(["build", "--emit-mlir", "k.toml", "-o", "m.vmfb"]))
    assert args.spec == ["k.toml"] and args.emit_mlir == ""
    args = cli.parser().parse_args(cli._split_emit_mlir(["build", "k.toml", "--emit-mlir", "m.mlir"]))
    assert args.spec == ["k.toml"] and args.emit_mlir == "m.mlir"
    args = cli.parser().parse_args(cli._split_emit_mlir(["build", "k.toml", "--emit-mlir=x.mlir"]))
    assert args.emit_mlir == "x.mlir"


@needs_build_tools
def test_emit_mlir_without_value_before_the_spec_builds(proj, capsys, monkeypatch):
    monkeypatch.chdir(proj)
    assert main(["build", "--emit-mlir", str(proj / SPEC), "-o", str(proj / "out" / "m.vmfb")]) == 0
    assert (proj / "out" / "m.vmfb").is_file() and (proj / "out" / "m.mlir").is_file() and (proj / "out" / "samples.objects").is_dir()
    assert (proj / SPEC).read_bytes() == (ROOT / SPEC).read_bytes()


def test_inspect_into_a_closed_pipe_exits_quietly(proj):
    """`iree-dispatch inspect ... | head`: the reader is gone before the output is written."""
    proc = subprocess.Popen([sys.executable, "-m", "iree_dispatch.cli", "inspect", str(proj / SPEC)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and err == "", err


def test_inspect_piped_to_head(proj):
    result = subprocess.run(f"{sys.executable} -m iree_dispatch.cli inspect {proj / SPEC} | head -1", shell=True, capture_output=True, text=True)
    assert result.stdout.startswith("module samples") and result.stderr == ""


def test_a_build_error_through_the_real_command_has_no_traceback(proj):
    before = snapshot(proj.parent)
    result = run_cli("build", str(proj / SPEC), "-o", str(proj / "kernels" / "simple_mul.cu"))
    assert result.returncode == 1 and "Traceback" not in result.stderr and str(proj / "kernels" / "simple_mul.cu") in result.stderr
    assert snapshot(proj.parent) == before


@needs_build_tools
@pytest.mark.parametrize("flag", ["-o", "--emit-mlir", "--depfile"])
def test_output_is_an_included_header(tmp_path, capsys, monkeypatch, flag):
    """Headers are known once the compiler has read them: refused then, before anything moves into place."""
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "h.cuh").write_text("#define SCALE 2.0f\n")
    (proj / "k.cu").write_text('#include "h.cuh"\nextern "C" __global__ void mul(const float* a, float* out, int n) { out[0] = a[0] * SCALE; }\n')
    (proj / "k.toml").write_text("[module]\narchs = ['sm_90']\n[[kernel]]\nname = 'mul'\nsource = 'k.cu'\nblock = [64]\ngrid = ['ceildiv(n, 64)']\nshape = ['n']\n")
    header = str(proj / "h.cuh")
    argv = ["build", str(proj / "k.toml"), "-o", header if flag == "-o" else str(proj / "out" / "m.vmfb")]
    argv += [f"--emit-mlir={header}"] if flag == "--emit-mlir" else ["--depfile", header] if flag == "--depfile" else []
    before = snapshot(proj)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and header in err and "own input" in err, err
    after = snapshot(proj)
    assert after["h.cuh"] == before["h.cuh"] and after["k.cu"] == before["k.cu"]
    assert not [name for name in after if Path(name).name.startswith(".")]
    if flag != "--depfile":  # the build stops before anything moves into place
        assert after == before


@needs_build_tools
@pytest.mark.skipif(not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == os.stat(tempfile.gettempdir()).st_dev, reason="needs a second file system")
def test_emit_mlir_on_another_file_system(proj, capsys):
    """The MLIR and objects go to another file system than the vmfb (no rename reaches there): copied, then renamed into place."""
    other = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        argv = ["build", str(proj / SPEC), "-o", str(proj / "out" / "m.vmfb"), f"--emit-mlir={other / 'm.mlir'}"]
        for _ in range(2):  # cold, then a cache hit replacing the objects folder
            assert main(argv) == 0, capsys.readouterr().err
            assert sorted(p.name for p in other.iterdir()) == ["m.mlir", "samples.objects"] and sorted(p.name for p in (proj / "out").iterdir()) == ["m.vmfb"]
    finally:
        shutil.rmtree(other)


# ---- the build cache through the command line: refused in one line, or damage repaired with one warning ----

def test_cache_owned_by_another_user(proj, capsys, monkeypatch):
    cache = proj.parent / "cache"
    cache.mkdir(mode=0o700)
    real = os.stat

    def stat(path, *args, **kwargs):
        result = real(path, *args, **kwargs)
        if isinstance(path, (str, os.PathLike)) and os.path.abspath(path) == str(cache):
            fields = list(result[:10])
            fields[4] = os.geteuid() + 1000
            return os.stat_result(fields)
        return result

    monkeypatch.setattr(os, "stat", stat)
    check_refused(proj, ["build", str(proj / SPEC), "-o", str(proj / "out" / "m.vmfb")], capsys, str(cache), "owned by another user")


def test_unwritable_cache(proj, capsys, monkeypatch):
    """A cache folder that can't be written (access(2), which root passes: simulated)."""
    cache = proj.parent / "cache"
    cache.mkdir(mode=0o700)
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if os.path.abspath(path) == str(cache) else real(path, mode, *a, **k))
    check_refused(proj, ["build", str(proj / SPEC), "-o", str(proj / "out" / "m.vmfb")], capsys, str(cache), "not writable")


@needs_build_tools
def test_planted_lock_symlinks(proj, capsys):
    """Every lock of a warm cache replaced by a symlink to a file of the user's: refused, the file untouched."""
    argv = ["build", str(proj / SPEC), "-o", str(proj / "out" / "m.vmfb")]
    assert main(argv) == 0
    capsys.readouterr()
    precious = proj / "precious.txt"
    precious.write_text("keep me\n")
    locks = list((proj.parent / "cache" / "locks").iterdir())
    assert locks
    for lock in locks:
        lock.unlink()
        lock.symlink_to(precious)
    check_refused(proj, argv, capsys, "locks", "symlink")
    assert precious.read_text() == "keep me\n"


def _entry_vmfbs(proj: Path) -> list[Path]:
    return sorted((proj.parent / "cache" / "entries").glob("[!.]*/files/module.vmfb"))


@needs_build_tools
@pytest.mark.parametrize("damage", ["truncated", "swapped"])
def test_damaged_cache_entry_rebuilds_with_one_warning(proj, capsys, damage):
    """A truncated vmfb in the cache, or another entry's vmfb swapped in: the build warns once,
    rebuilds, writes the same bytes as before, and leaves no temporary; the inputs are unchanged."""
    sm80 = ["build", str(proj / SPEC), "-o", str(proj / "out" / "m.vmfb"), "--arch", "sm_80"]
    sm90 = ["build", str(proj / SPEC), "-o", str(proj / "other" / "m.vmfb"), "--arch", "sm_90"]
    assert main(sm80) == 0 and main(sm90) == 0
    good = (proj / "out" / "m.vmfb").read_bytes()
    vmfbs = _entry_vmfbs(proj)
    mine = next(v for v in vmfbs if v.read_bytes() == good)
    if damage == "truncated":
        mine.write_bytes(good[: len(good) // 2])
    else:
        mine.write_bytes(next(v for v in vmfbs if v != mine).read_bytes())
    (proj / "out" / "m.vmfb").unlink()
    inputs = snapshot(proj / "kernels")
    capsys.readouterr()
    assert main(sm80) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "damaged" in line]
    assert len(warnings) == 1 and "Traceback" not in captured.err and "up to date" not in captured.err, captured.err
    assert (proj / "out" / "m.vmfb").read_bytes() == good and snapshot(proj / "kernels") == inputs
    assert not [p for p in (proj / "out").iterdir() if p.name.startswith(".")]


def test_spec_with_a_utf8_bom_is_read(proj, capsys):
    spec = proj / "kernels" / "bom.toml"
    spec.write_bytes(b"\xef\xbb\xbf" + (proj / SPEC).read_bytes())
    assert main(["inspect", str(spec)]) == 0
    assert capsys.readouterr().out.startswith("module samples ")


@pytest.fixture(scope="module")
def samples_vmfb(tmp_path_factory):
    if needs_build_tools.args[0]:
        pytest.skip(needs_build_tools.kwargs["reason"])
    out = tmp_path_factory.mktemp("run") / "samples.vmfb"
    assert main(["build", str(ROOT / SPEC), "-o", str(out), "--arch", "sm_90"]) == 0
    return out


@pytest.mark.parametrize(
    "inputs, names, message",
    [
        (["--input=8xf32=1", "--input=8xf32=2", "--input=1e40", "--input=0.5"], "alpha", "out of the range of float"),
        (["--input=8xf32=1e40", "--input=8xf32=2", "--input=1", "--input=0.5"], "1e40", "beyond f32"),
        (["--input=8xi32=1", "--input=8xf32=2", "--input=1", "--input=0.5"], "'x'", "dtype float32"),
        (["--input=8xf32=1", "--input=8xf32=2", "--input=i32=99999999999", "--input=0.5"], "99999999999", "out of range for i32"),
        (["--input=8xf32=1", "--input=8xf32=2", "--input=1"], "beta", "missing"),
    ],
)
def test_run_refuses_bad_values_before_opening_a_device(samples_vmfb, capsys, inputs, names, message):
    before = samples_vmfb.read_bytes()
    assert main(["run", str(samples_vmfb), "--function=axpby", *inputs]) == 1
    err = capsys.readouterr().err
    assert err.startswith("iree-dispatch run: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert names in err and message in err and "CUDA" not in err, err
    assert samples_vmfb.read_bytes() == before


def test_version_and_help_are_one_command_each():
    for argv in (["--version"], ["run", "-h"], ["build", "-h"]):
        result = run_cli(*argv)
        assert result.returncode == 0 and result.stderr == "" and result.stdout, (argv, result.stderr)
    assert "--output_max_element_count" in run_cli("run", "-h").stdout and "--iree-compile-arg" in run_cli("build", "-h").stdout


@needs_build_tools
def test_cache_clear_keeps_unrelated_files(proj, capsys):
    """A tagged cache with the user's own files in it: clear removes the builds only, says what it kept."""
    assert main(["build", str(proj / SPEC), "-o", str(proj / "out" / "m.vmfb")]) == 0
    cache = proj.parent / "cache"
    (cache / "notes.txt").write_text("mine\n")
    (cache / "data").mkdir()
    (cache / "data" / "x.bin").write_bytes(b"x")
    capsys.readouterr()
    assert main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"cleared {cache}; kept 2 file(s) that are not the cache's") and out.count("\n") == 1, out
    assert (cache / "notes.txt").read_text() == "mine\n" and (cache / "data" / "x.bin").read_bytes() == b"x"
    assert not (cache / "entries").exists() or not any((cache / "entries").iterdir())
