"""No command writes over one of its inputs or over another of its own outputs.

Through the real command line, for `build` and `compile`: every output flag pointed at every
kind of input (model, spec, .cu source, an included header, program) and at every other output,
directly, through a symlink, a hard link and a `..` path. Each is refused in one line before
anything is compiled, with every file byte for byte as it was and nothing left in any folder.
Then what `compile` refuses later (a model that clashes with a kernel's name, a model or spec
that is a binary file) and what a failure half-way leaves (nothing)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("iree.compiler")  # build and compile need the compiler

from iree_dispatch.cli import main  # noqa: E402

from ..support.break_it import snapshot  # noqa: E402
from ..support.environment import ROOT, needs_build_tools  # noqa: E402

MODELS = ROOT / "tests" / "models"

# Where each kind of input lives in the project `proj` makes.
INPUTS = {"model": "m.mlir", "spec": "k/naive.toml", "source": "k/naive.cu", "header": "k/scale.cuh", "program": "prog.mlir"}
BUILD_OUTPUTS = ("-o", "--emit-mlir", "--depfile")
COMPILE_OUTPUTS = ("-o", "--program", "--emit-mlir", "--report-json")
WAYS = ("direct", "symlink", "hardlink", "dotdot")


@pytest.fixture
def proj(tmp_path, monkeypatch):
    """The MLP model, the naive matmul kernels (their source including a header), a program."""
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    proj = tmp_path / "proj"
    (proj / "k").mkdir(parents=True)
    (proj / "out").mkdir()
    (proj / "links").mkdir()
    shutil.copyfile(MODELS / "mlp_f32.mlir", proj / "m.mlir")
    shutil.copyfile(MODELS / "kernels" / "naive.toml", proj / "k" / "naive.toml")
    (proj / "k" / "scale.cuh").write_text("#define SCALE 1.0f\n")
    (proj / "k" / "naive.cu").write_text('#include "scale.cuh"\n' + (MODELS / "kernels" / "naive.cu").read_text())
    (proj / "prog.mlir").write_text("// a program: never read by a refused build\n")
    return proj


def way_to(proj: Path, target: Path, way: str) -> Path:
    """A path naming `target` the given way (links are made in proj/links)."""
    if way == "direct":
        return target
    if way == "dotdot":
        return proj / "out" / ".." / target.relative_to(proj)
    link = proj / "links" / f"{way}-{target.name}"
    if way == "symlink":
        link.symlink_to(target)
    else:
        os.link(target, link)
    return link


def command(proj: Path, command_name: str, outputs: dict[str, Path]) -> list[str]:
    """argv for `build` (with --program) or `compile`, with `outputs` by flag (-o always)."""
    outputs = {"-o": proj / "out" / "m.vmfb", **outputs}
    if command_name == "build":
        argv = ["build", str(proj / INPUTS["spec"]), "--program", str(proj / INPUTS["program"])]
    else:
        argv = ["compile", str(proj / INPUTS["model"]), "--kernels", str(proj / INPUTS["spec"]), "-q"]
    for flag, path in outputs.items():
        argv += [f"--emit-mlir={path}"] if flag == "--emit-mlir" and command_name == "build" else [flag, str(path)]
    return argv


def refused(proj: Path, argv: list[str], capsys, *names: str, one_line: bool = True) -> str:
    """Runs argv, which must fail in one line naming `names` (or, one_line=False, with a
    compiler's log after it), changing nothing in the project (the build cache may be made)."""
    before = snapshot(proj)
    code = main(argv)
    err = capsys.readouterr().err
    assert code != 0, err
    assert "Traceback" not in err and err.startswith(f"iree-dispatch {argv[0]}: error: ") and (err.count("\n") == 1 or not one_line), err
    assert all(name in err for name in names), err
    after = snapshot(proj)
    assert after == before, f"changed: {sorted(set(after) ^ set(before))} {[k for k in after if after.get(k) != before.get(k)]}"
    return err


OVER_INPUTS = [(c, flag, kind, way) for c, flags, kinds in (("build", BUILD_OUTPUTS, ("spec", "source", "header", "program")),
                                                           ("compile", COMPILE_OUTPUTS, ("model", "spec", "source", "header")))
               for flag in flags for kind in kinds for way in WAYS]


@pytest.mark.parametrize("command_name, flag, kind, way", OVER_INPUTS, ids=["-".join(c) for c in OVER_INPUTS])
def test_an_output_over_an_input_is_refused(proj, capsys, command_name, flag, kind, way):
    target = proj / INPUTS[kind]
    path = way_to(proj, target, way)
    err = refused(proj, command(proj, command_name, {flag: path}), capsys, str(path), target.name)
    assert "own input" in err


OVER_OUTPUTS = [(c, a, b, way) for c, flags in (("build", BUILD_OUTPUTS), ("compile", COMPILE_OUTPUTS))
                for i, a in enumerate(flags) for b in flags[i + 1 :] for way in WAYS]


@pytest.mark.parametrize("command_name, first, second, way", OVER_OUTPUTS, ids=["-".join(c) for c in OVER_OUTPUTS])
def test_two_outputs_that_are_one_file_are_refused(proj, capsys, command_name, first, second, way):
    target = proj / "out" / "a.out"
    target.write_text("an earlier output")  # a hard link needs a file to link to
    err = refused(proj, command(proj, command_name, {first: target, second: way_to(proj, target, way)}), capsys, "a.out")
    assert "different paths" in err


def test_compile_objects_folder_over_the_spec_folder_is_refused(proj, capsys):
    """The objects folder replaces `<module>.objects` beside the emitted MLIR as a whole: one holding an input is refused."""
    (proj / "naive.objects").mkdir()
    spec = proj / "naive.objects" / "naive.toml"
    shutil.copyfile(proj / INPUTS["spec"], spec)
    (proj / "naive.objects" / "naive.cu").write_text((proj / INPUTS["source"]).read_text())
    shutil.copyfile(proj / INPUTS["header"], proj / "naive.objects" / "scale.cuh")
    argv = ["compile", str(proj / "m.mlir"), "--kernels", str(spec), "-o", str(proj / "m.vmfb"), "--emit-mlir", str(proj / "m.linked.mlir"), "-q"]
    assert "own input" in refused(proj, argv, capsys, "naive.objects")


# ---- what compile finds out only by reading the files ----

CLASH = "func.func @naive.matmul_f32(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n"


@pytest.mark.parametrize("model, names, message", [
    ("clash.mlir", ("@naive.matmul_f32", "clash.mlir"), "already defines"),
    ("broken.mlir", ("broken.mlir",), "input level"),
    ("vmfb.mlir", ("vmfb.mlir",), "a compiled module (.vmfb), not MLIR"),
    ("elf.mlir", ("elf.mlir",), "an executable or library (ELF), not MLIR"),
    ("latin1.mlir", ("latin1.mlir", "0xbb"), "not UTF-8"),
])
def test_a_model_compile_cannot_use_is_one_line(proj, capsys, model, names, message):
    path = proj / model
    if model == "clash.mlir":
        path.write_text(CLASH + (proj / "m.mlir").read_text())
    elif model == "broken.mlir":
        path.write_text("func.func @f( {\n")
    elif model == "vmfb.mlir":
        path.write_bytes(b"PK\x03\x04-\x00" + bytes(40) + b"module.fb" + bytes(20) + b"IREE" + bytes(100))
    elif model == "elf.mlir":
        shutil.copyfile("/bin/true" if Path("/bin/true").is_file() else os.__file__, path)
        if not path.read_bytes().startswith(b"\x7fELF"):
            pytest.skip("no ELF file at hand")
    else:
        path.write_bytes(b"// \xbb\xbf\n" + (proj / "m.mlir").read_bytes())
    argv = ["compile", str(path), "--kernels", str(proj / INPUTS["spec"]), "-o", str(proj / "out" / "m.vmfb"), "-q"]
    assert message in refused(proj, argv, capsys, *names)


@pytest.mark.parametrize("command_name", ["build", "compile"])
def test_a_binary_spec_is_named(proj, capsys, command_name):
    spec = proj / "k" / "bin.toml"
    spec.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(64))
    argv = (["build", str(spec)] if command_name == "build" else ["compile", str(proj / "m.mlir"), "--kernels", str(spec), "-q"])
    argv += ["-o", str(proj / "out" / "m.vmfb")]
    assert "not a TOML kernel spec" in refused(proj, argv, capsys, str(spec))


# ---- a compile that fails half-way leaves nothing; one that succeeds leaves its outputs only ----

ALL_OUTPUTS = ("out/m.vmfb", "out/m.program.mlir", "mlir/m.linked.mlir", "mlir/naive.objects", "report/r.json")


def compile_argv(proj: Path) -> list[str]:
    return ["compile", str(proj / "m.mlir"), "--kernels", str(proj / INPUTS["spec"]), "-o", str(proj / "out" / "m.vmfb"),
            "--program", str(proj / "out" / "m.program.mlir"), "--emit-mlir", str(proj / "mlir" / "m.linked.mlir"), "--report-json", str(proj / "report" / "r.json"), "-q"]


@needs_build_tools
def test_a_compile_failing_in_the_kernel_compiler_leaves_nothing(proj, capsys):
    source = proj / INPUTS["source"]
    source.write_text(source.read_text().replace("acc += a[row * K + k]", "acc += undeclared_name[row * K + k]", 1))
    refused(proj, compile_argv(proj), capsys, "naive.cu", "undeclared_name", one_line=False)
    assert not (proj / "mlir").exists() and not (proj / "report").exists() and os.listdir(proj / "out") == []


@needs_build_tools
def test_a_compile_writes_every_output_at_the_end_and_hits_the_cache_again(proj, capsys):
    for attempt in range(2):
        assert main(compile_argv(proj)[:-1]) == 0, capsys.readouterr().err
        err = capsys.readouterr().err
        for folder in ("out", "mlir", "report"):  # each folder holds the outputs asked for, and nothing else
            assert sorted(os.listdir(proj / folder)) == sorted(Path(rel).name for rel in ALL_OUTPUTS if rel.startswith(f"{folder}/")), os.listdir(proj / folder)
        # The program is staged in a private folder, but the cache knows it by where it ends up.
        assert ("up to date (build cache)" in err) == (attempt == 1), err
    report = (proj / "report" / "r.json").read_text()
    assert '"output": "' + str(proj / "out" / "m.vmfb") in report


@needs_build_tools
def test_report_json_over_the_vmfb_leaves_the_vmfb(proj, capsys):
    assert main(compile_argv(proj)) == 0, capsys.readouterr().err
    argv = compile_argv(proj)
    argv[argv.index("--report-json") + 1] = str(proj / "out" / "m.vmfb")
    refused(proj, argv, capsys, "m.vmfb", "--report-json")
