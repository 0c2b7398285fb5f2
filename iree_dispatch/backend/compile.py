"""Stage 5: parse-check emitted IR in-process, link user programs, run iree-compile → .vmfb.

The only module of the package that imports `iree.compiler` (lazily, so `--help` stays fast).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ..core.archs import Arch
from ..core.errors import CompileError, SpecError


def iree_compiler_version() -> str:
    from importlib.metadata import version

    return version("iree-base-compiler")


def parse_check(mlir_text: str, filename: str) -> None:
    """Parses `mlir_text` with the installed compiler; errors carry `filename:line:col`."""
    from iree.compiler import ir

    with ir.Context() as ctx:
        try:
            ir.Module.parse(mlir_text, ctx)
        except ir.MLIRError as exc:
            # Locations print as loc("-":LINE:COL); name the file instead of "-".
            details = "\n".join(f"{filename}{_line_col(str(d.location))}: {d.message}" for d in exc.error_diagnostics)
            raise CompileError(f"generated IR does not parse with this IREE compiler (a bug in iree_dispatch, please report it):\n{details}") from None


def _line_col(location: str) -> str:
    match = re.search(r":(\d+):(\d+)", location)
    return f":{match[1]}:{match[2]}" if match else ""


def _run_tool(tool: str, args: list[str], what: str, cwd: Path | None = None) -> None:
    from iree.compiler.tools.binaries import find_tool

    cmd = [find_tool(tool), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd)
    if proc.returncode != 0:
        raise CompileError(f"{what} failed (exit {proc.returncode}):\n{_shorten(proc.stderr + proc.stdout)}\ncommand: {' '.join(cmd)}")


def _shorten(log: str, keep: int = 40) -> str:
    """The diagnostics, without the whole-module IR dumps iree-compile appends to them."""
    lines = log.strip().splitlines()
    if len(lines) <= keep:
        return "\n".join(lines)
    return "\n".join(lines[:keep] + [f"... {len(lines) - keep} more lines (run the command below to see them)"])


# iree-compile flags a user's extra flags may not set, by name (what precedes '='): each would
# break what the build generates or where it looks for it.
#   -o, --output-format, --compile-to, --compile-from, --split-input-file: the build expects one
#     .vmfb, written where it says, from the whole generated module;
#   --iree-hal-target-device, --iree-hal-target-backends, --iree-hal-default-device: the
#     executables hold CUDA objects only, dispatched on the one cuda device;
#   --iree-cuda-target: set to the oldest arch of the modules, so that a program's own ops run on
#     every GPU the kernels' variants accept;
#   --iree-hal-executable-object-search-path: where the generated IR's object files are found;
#   --iree-input-demote-f64-to-f32: would hand `double*` kernels buffers of floats;
#   --iree-execution-model: the calling convention the runtime expects (use `asynchronous`).
DENIED_IREE_COMPILE_FLAGS = {
    "o": "the build writes the .vmfb where its output says",
    "output-format": "the build writes a .vmfb",
    "compile-to": "the build writes a .vmfb, the last phase",
    "compile-from": "the build compiles its generated MLIR from the start",
    "split-input-file": "the generated module is one compilation unit",
    "iree-hal-target-device": "the executables hold CUDA objects only (target device cuda)",
    "iree-hal-target-backends": "the executables hold CUDA objects only (target device cuda)",
    "iree-hal-default-device": "the kernels are dispatched on the one cuda device",
    "iree-cuda-target": "it is the oldest arch of the modules, so a program's own ops run on every GPU the kernels accept; change the module's archs instead",
    "iree-hal-executable-object-search-path": "the build tells iree-compile where the generated IR's object files are",
    "iree-input-demote-f64-to-f32": "double kernels must get double buffers and scalars (the build sets it to false)",
    "iree-execution-model": "the runtime expects the calling convention the build chose; use the asynchronous option (--async) instead",
}


def check_iree_compile_flags(flags: Sequence[str]) -> None:
    """Raises SpecError for an extra iree-compile flag the build can't accept: not a string, not
    one flag (`--name` or `--name=value`: a value in the next item would read as an input file),
    or one of DENIED_IREE_COMPILE_FLAGS."""
    for flag in flags:
        if not isinstance(flag, str):
            raise SpecError(f"iree-compile flag {flag!r} must be a string, like '--iree-opt-level=O3'")
        if not flag.startswith("-") or flag.strip("-") == "" or any(c.isspace() for c in flag.split("=", 1)[0]):
            raise SpecError(f"iree-compile flag {flag!r} is not one flag: give each as '--name' or '--name=value' (a value given separately would be read as another input file)")
        name = flag.lstrip("-").split("=", 1)[0]
        if name in DENIED_IREE_COMPILE_FLAGS:
            raise SpecError(f"iree-compile flag {flag!r} can't be given: {DENIED_IREE_COMPILE_FLAGS[name]}")


def compile_flags(
    codegen_arch: Arch, object_search_path: Path | None, *, asynchronous: bool = False, strip_assertions: bool = False, extra_flags: Sequence[str] = ()
) -> list[str]:
    """iree-compile flags. `codegen_arch` only matters for ops IREE generates itself (programs).

    asynchronous: functions take wait/signal fences (coarse-fences ABI) and return without
    waiting (runtime.load(..., asynchronous=True) calls them).
    strip_assertions: drop the generated shape/range checks (IREE ends a command buffer at each;
    programs already check once at entry, so this no longer changes their submissions:
    docs/benchmarks.md). The Python runtime still checks every call's arguments.
    extra_flags: the user's own flags (check_iree_compile_flags), after ours, so that theirs
    win where both set an option.
    """
    # IREE demotes f64 to f32 by default, which would hand a `double*` kernel a buffer of
    # floats (and a double argument its low half). Hand-written kernels get the types they declare.
    flags = ["--iree-hal-target-device=cuda", f"--iree-cuda-target={codegen_arch.name}", "--iree-input-demote-f64-to-f32=false"]
    if object_search_path is not None:
        flags.append(f"--iree-hal-executable-object-search-path={object_search_path}")
    if asynchronous:
        flags.append("--iree-execution-model=async-external")
    if strip_assertions:
        flags.append("--iree-opt-strip-assertions")
    check_iree_compile_flags(extra_flags)
    return flags + list(extra_flags)


def compile_vmfb(mlir: Path, out: Path, codegen_arch: Arch, **options) -> None:
    """Compiles `mlir`, whose objects are relative to its folder, into `out`.

    Runs in the MLIR file's folder with relative paths: the vmfb records the source file name
    for debug locations, and an absolute (temporary) path would make every build differ.
    """
    flags = compile_flags(codegen_arch, Path("."), **options)
    _run_tool("iree-compile", [*flags, mlir.name, "-o", str(out.absolute())], f"iree-compile of {mlir.name}", cwd=mlir.parent)


def link_program(program: Path, modules: Sequence[tuple[str, str, Sequence[str]]]) -> str:
    """Resolves the program's `func.func private @<module>.<kernel>(...)` declarations.

    `modules` holds (module name, kernels module emitted `for_linking`, kernel names) for each
    module the program calls, several when it calls kernels of several specs. Each module's
    executables and wrappers are copied into the program, replacing the declarations; the
    program's other functions are untouched. An executable whose symbol is already taken (two
    modules built from a source of the same name, or the program's own symbol) is renamed
    `<module>_<symbol>` together with its uses. (iree-link would do this, but in IREE 3.13 it
    renames the nested `@exe::@variant::@kernel` references together with the wrapper and
    breaks them.)
    """
    from iree.compiler import ir

    text = program.read_text(encoding="utf-8")
    with ir.Context():
        try:
            prog = ir.Module.parse(text)
        except ir.MLIRError as exc:
            details = "\n".join(f"{program}{_line_col(str(d.location))}: {d.message}" for d in exc.error_diagnostics)
            raise CompileError(f"program does not parse:\n{details}") from None
        taken = {ir.StringAttr(op.attributes["sym_name"]).value for op in prog.body.operations if "sym_name" in op.attributes}
        for module_name, kernels_mlir_text, kernel_names in modules:
            kernels = ir.Module.parse(kernels_mlir_text)
            _declarations_to_wrappers(program, prog, kernels, module_name, kernel_names)
            for op in kernels.body.operations:
                if "sym_name" not in op.attributes:
                    continue
                symbol = ir.StringAttr(op.attributes["sym_name"]).value
                if op.operation.name != "func.func" and symbol in taken:
                    renamed = f"{module_name}_{symbol}"
                    ir.SymbolTable.replace_all_symbol_uses(symbol, renamed, kernels.operation)
                    op.attributes["sym_name"] = ir.StringAttr.get(renamed)
                    symbol = renamed
                taken.add(symbol)
            with ir.InsertionPoint(prog.body):
                for op in kernels.body.operations:
                    op.operation.clone()
        if not prog.operation.verify():
            raise CompileError(f"{program}: the linked program does not verify")
        return prog.operation.get_asm(enable_debug_info=False)


def _declarations_to_wrappers(program: Path, prog, kernels, module_name: str, kernel_names: Sequence[str]) -> None:
    """Checks each `@<module_name>.<kernel>` declaration of `prog` against the wrapper of that
    name in `kernels` and erases it (the wrapper takes its place)."""
    from iree.compiler import ir

    wrappers = {}
    for op in kernels.body.operations:
        if op.operation.name == "func.func":
            wrappers[ir.StringAttr(op.attributes["sym_name"]).value] = op
    prefix = f"{module_name}."
    for op in list(prog.body.operations):
        if op.operation.name != "func.func":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if not name.startswith(prefix) or len(op.regions[0].blocks) != 0:
            continue
        where = f"{program}{_line_col(str(op.location))}"
        if name not in wrappers:
            raise CompileError(f"{where}: declares @{name}, but module {module_name} has no kernel {name[len(prefix):]!r} (kernels: {', '.join(kernel_names)})")
        declared = str(op.attributes["function_type"])
        generated = str(wrappers[name].attributes["function_type"])
        if declared != generated:
            raise CompileError(f"{where}: @{name} is declared as {declared}, but the kernel's function is {generated}")
        op.operation.erase()
