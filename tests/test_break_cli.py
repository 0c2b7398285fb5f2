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

from .conftest import MIXED_PROGRAM, ROOT, needs_build_tools

SPEC = "kernels/samples.toml"


def project(root: Path) -> Path:
    """A copy of the samples (spec, sources) and the mixed program under root/proj."""
    proj = root / "proj"
    (proj / "kernels").mkdir(parents=True)
    for name in ("samples.toml", "simple_mul.cu", "axpby.cu"):
        shutil.copyfile(ROOT / "kernels" / name, proj / "kernels" / name)
    shutil.copyfile(MIXED_PROGRAM, proj / "program.mlir")
    return proj


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under root (folders as None, files by bytes; links by target)."""
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = f"-> {os.readlink(path)}".encode()
        elif path.is_dir():
            found[rel] = None
        elif path.is_file():
            found[rel] = path.read_bytes() if path.stat().st_size < (1 << 20) else f"{path.stat().st_size} bytes".encode()
        else:
            found[rel] = b"special"
    return found


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
    Case("the objects folder would replace the folder holding the spec", lambda proj: ["build", str(proj / "samples.objects" / "samples.toml"), "-o", str(proj / "m.vmfb")],
         _p("samples.objects"), setup=_nested_spec, message="own input"),
    # 2. outputs that are each other
    Case("-o equals --emit-mlir", _build("-o", "{p}/out/m.vmfb", "--emit-mlir={p}/out/m.vmfb"), _p("out/m.vmfb"), message="different paths"),
    Case("--depfile equals -o", _build("-o", "{p}/out/m.vmfb", "--depfile", "{p}/out/m.vmfb"), _p("out/m.vmfb"), message="different paths"),
    Case("--depfile equals --emit-mlir", _build("-o", "{p}/out/m.vmfb", "--emit-mlir={p}/out/m.mlir", "--depfile", "{p}/out/m.mlir"), _p("out/m.mlir"), message="different paths"),
    Case("-o is the objects folder", _build("-o", "{p}/out/samples.objects"), _p("out/samples.objects"), message="different paths"),
    Case("--depfile inside the objects folder", _build("-o", "{p}/out/m.vmfb", "--depfile", "{p}/out/samples.objects/m.d"), _p("out/samples.objects"), message="replaces"),
    # 3. outputs that can't be written
    Case("-o names a folder", _build("-o", "{p}/out"), _p("out"), setup=_mkdir("out"), message="is a folder"),
    Case("--emit-mlir names a folder", _build("-o", "{p}/m.vmfb", "--emit-mlir={p}/out"), _p("out"), setup=_mkdir("out"), message="is a folder"),
    Case("--depfile names a folder", _build("-o", "{p}/m.vmfb", "--depfile", "{p}/out"), _p("out"), setup=_mkdir("out"), message="is a folder"),
    Case("-o under a file", _build("-o", "{p}/file/m.vmfb"), _p("file"), setup=_touch("file"), message="not a folder"),
    Case("-o two levels under a file", _build("-o", "{p}/file/a/b/m.vmfb"), _p("file"), setup=_touch("file"), message="not a folder"),
    Case("--emit-mlir under a file", _build("-o", "{p}/m.vmfb", "--emit-mlir={p}/file/m.mlir"), _p("file"), setup=_touch("file"), message="not a folder"),
    Case("--depfile under a file", _build("-o", "{p}/m.vmfb", "--depfile", "{p}/file/m.d"), _p("file"), setup=_touch("file"), message="not a folder"),
    Case("the objects folder's name is taken by a file", _build("-o", "{p}/out/m.vmfb"), _p("out/samples.objects"), setup=_touch("out/samples.objects"), message="not a folder"),
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


def test_at_least_30_cases():
    assert len(CASES) >= 30


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
    assert lines[3].startswith("CUDA compiler: ")


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
