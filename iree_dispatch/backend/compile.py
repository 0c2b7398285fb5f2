"""Stage 5: parse-check emitted IR in-process, link user programs, run iree-compile → .vmfb.

The only module of the package that imports `iree.compiler` (lazily, so `--help` stays fast).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.archs import Arch
from ..core.contract import DEVICES_REFLECTION_KEY
from ..core.errors import CompileError, SpecError
from .transients import allocate_storage, declares_storage, stores_storage, with_allocation


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
#   --iree-hal-target-backends, and --iree-hal-target-device naming anything but CUDA devices:
#     the executables hold CUDA objects only (CUDA devices may be named: `target_devices`);
#   --iree-hal-default-device: the default device is the first one named, where the program's
#     arguments arrive;
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
    "iree-hal-target-device": "the executables hold CUDA objects only (target device cuda; several GPUs: NAME=cuda[N] for each)",
    "iree-hal-target-backends": "the executables hold CUDA objects only (target device cuda)",
    "iree-hal-default-device": "the default device is the first --iree-hal-target-device (name the devices in that order)",
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
        if name == TARGET_DEVICE_FLAG and _CUDA_DEVICE.match(flag.split("=", 1)[1] if "=" in flag else ""):
            continue  # a CUDA device, named or not: target_devices checks them together
        if name in DENIED_IREE_COMPILE_FLAGS:
            raise SpecError(f"iree-compile flag {flag!r} can't be given: {DENIED_IREE_COMPILE_FLAGS[name]}")
    target_devices(flags)


TARGET_DEVICE_FLAG = "iree-hal-target-device"
# A CUDA device as --iree-hal-target-device spells it: `cuda`, `cuda[N]`, `NAME=cuda`, `NAME=cuda[N]`
# (N: the device's ordinal among the CUDA devices the module is loaded with).
_CUDA_DEVICE = re.compile(r"^(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)=)?cuda(?:\[(?P<ordinal>\d+)\])?$")


@dataclass(frozen=True)
class TargetDevice:
    """A CUDA device a program targets, as the user's --iree-hal-target-device flag names it."""

    name: str  # the program's `@name` (`#hal.device.affinity<@name>`)
    ordinal: int  # its place among the devices the module is loaded with (runtime.load(devices=...))


def target_devices(flags: Sequence[str]) -> tuple[TargetDevice, ...]:
    """The CUDA devices the user's flags name, in their order; () when they name none (the
    build's one `cuda` device). Several devices must each have a name and a distinct ordinal:
    IREE matches a device to the N-th CUDA device the module is loaded with, so two `cuda`
    devices without ordinals would both be the first GPU. Raises SpecError otherwise."""
    given = [f.split("=", 1)[1] for f in flags if f.lstrip("-").split("=", 1)[0] == TARGET_DEVICE_FLAG and "=" in f]
    matches = [_CUDA_DEVICE.match(value) for value in given]
    if len(matches) < 2:
        return tuple(TargetDevice(m["name"] or "__device_0", int(m["ordinal"] or 0)) for m in matches if m)
    example = "--iree-hal-target-device=gpu0=cuda[0] --iree-hal-target-device=gpu1=cuda[1]"
    for value, match in zip(given, matches):
        if match is None or match["name"] is None or match["ordinal"] is None:
            raise SpecError(f"iree-compile flag '--{TARGET_DEVICE_FLAG}={value}': a program on several devices names each with its ordinal, like {example}")
    devices = tuple(TargetDevice(m["name"], int(m["ordinal"])) for m in matches if m)
    for attribute in ("name", "ordinal"):
        values = [getattr(d, attribute) for d in devices]
        twice = sorted({str(v) for v in values if values.count(v) > 1})
        if twice:
            raise SpecError(f"--{TARGET_DEVICE_FLAG}: device {attribute} {', '.join(twice)} given twice; each device needs its own name and ordinal, like {example}")
    return devices


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
    # The user's flags may name the CUDA devices themselves (a program over several GPUs).
    check_iree_compile_flags(extra_flags)
    devices = [] if target_devices(extra_flags) else ["--iree-hal-target-device=cuda"]
    flags = [*devices, f"--iree-cuda-target={codegen_arch.name}", "--iree-input-demote-f64-to-f32=false"]
    if object_search_path is not None:
        flags.append(f"--iree-hal-executable-object-search-path={object_search_path}")
    if asynchronous:
        flags.append("--iree-execution-model=async-external")
    if strip_assertions:
        flags.append("--iree-opt-strip-assertions")
    return flags + list(extra_flags)


def compile_vmfb(mlir: Path, out: Path, codegen_arch: Arch, **options) -> None:
    """Compiles `mlir`, whose objects are relative to its folder, into `out`.

    Runs in the MLIR file's folder with relative paths: the vmfb records the source file name
    for debug locations, and an absolute (temporary) path would make every build differ.
    """
    run_iree_compile(compile_flags(codegen_arch, Path("."), **options), mlir, out)


def run_iree_compile(flags: Sequence[str], mlir: Path, out: Path) -> None:
    """iree-compile with `flags` of `mlir`, in its folder, into `out`. A module that declares the
    transient-storage global (transients.py) is compiled in two steps: to the end of IREE's
    stream phase, where the storage's size is known and `allocate_storage` completes the IR, and
    from there to the vmfb; `mlir` (a build's private copy) then gets the storage's allocation
    too, so that the file compiles with plain iree-compile as well. The intermediate file lies
    beside it until then."""
    what = f"iree-compile of {mlir.name}"
    if not declares_storage(mlir):
        _run_tool("iree-compile", [*flags, mlir.name, "-o", str(out.absolute())], what, cwd=mlir.parent)
        return
    text = mlir.read_text(encoding="utf-8")
    stream = mlir.with_name(mlir.stem + ".stream.mlir")
    try:
        # The debug locations go along, so that the vmfb names the source, not this intermediate.
        _run_tool("iree-compile", [*flags, "--compile-to=stream", "--mlir-print-debuginfo", mlir.name, "-o", stream.name], what, cwd=mlir.parent)
        completed, size = allocate_storage(stream.read_text(encoding="utf-8"))
        stream.write_text(completed, encoding="utf-8")
        _run_tool("iree-compile", [*flags, "--compile-from=stream", stream.name, "-o", str(out.absolute())], f"{what} (from its stream phase)", cwd=mlir.parent)
    finally:
        stream.unlink(missing_ok=True)
    if size is not None and not stores_storage(text):
        mlir.write_text(with_allocation(text, size), encoding="utf-8")


def link_program(program: Path, modules: Sequence[tuple[str, str, Sequence[str]]], devices: Sequence[TargetDevice] = ()) -> str:
    """Resolves the program's `func.func private @<module>.<kernel>(...)` declarations.

    `modules` holds (module name, kernels module emitted `for_linking`, kernel names) for each
    module the program calls, several when it calls kernels of several specs. Each module's
    executables and wrappers are copied into the program, replacing the declarations; the
    program's other functions are untouched. An executable whose symbol is already taken (two
    modules built from a source of the same name, or the program's own symbol) is renamed
    `<module>_<symbol>` together with its uses. (iree-link would do this, but in IREE 3.13 it
    renames the nested `@exe::@variant::@kernel` references together with the wrapper and
    breaks them.)

    devices: the devices a program over several GPUs names (`target_devices`): each kernel call
    is placed on one of them (`_place_kernel_calls`), and every public function records their
    names for the runtime (reflection key DEVICES_REFLECTION_KEY).
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
        wrappers: set[str] = set()
        for module_name, kernels_mlir_text, kernel_names in modules:
            kernels = ir.Module.parse(kernels_mlir_text)
            _declarations_to_wrappers(program, prog, kernels, module_name, kernel_names)
            wrappers |= {ir.StringAttr(op.attributes["sym_name"]).value for op in kernels.body.operations if op.operation.name == "func.func"}
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
        if len(devices) > 1:
            _place_kernel_calls(program, prog, wrappers, [d.name for d in devices])
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


_AFFINITY = re.compile(r"^#hal\.device\.affinity<@([A-Za-z_][A-Za-z0-9_]*)")


def _place_kernel_calls(program: Path, prog, wrappers: set[str], device_names: Sequence[str]) -> None:
    """Places each call of a kernel's function on the device its `stream.affinity` names.

    A kernel's function allocates its fresh outputs (`flow.tensor.alloca`) and dispatches into
    them. Neither op names a device, so IREE 3.13 puts both on one device of its choosing (the
    default device's allocation pulls the dispatch there, whatever its inputs' devices). So a
    call names its device, as any op of an IREE program does: `stream.affinity =
    #hal.device.affinity<@name>` on the call or on an op around it (its function). The call is
    then redirected to a copy of the function, `<function>.on_<name>`, whose flow ops carry that
    affinity; the executables are declared once and loaded on every device that runs them.
    """
    from iree.compiler import ir

    calls = []

    def collect(op):
        if op.name == "func.call" and ir.FlatSymbolRefAttr(op.attributes["callee"]).value in wrappers:
            calls.append(op)
        return ir.WalkResult.ADVANCE

    for op in prog.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value not in wrappers:
            op.operation.walk(collect)
    functions = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in prog.body.operations if op.operation.name == "func.func"}
    placed: dict[str, str] = {}
    for call in calls:
        callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
        where = f"{program}{_line_col(str(call.location))}"
        affinity = _affinity_of(call)
        if affinity is None:
            raise CompileError(
                f"{where}: the call of @{callee} names no device; in a program on devices {', '.join(device_names)} each kernel call says where it runs: "
                f"add {{stream.affinity = #hal.device.affinity<@{device_names[0]}>}} to the call (or to its function)"
            )
        match = _AFFINITY.match(str(affinity))
        if match is None or match[1] not in device_names:
            raise CompileError(f"{where}: the call of @{callee} is placed on {affinity}, which is none of the program's devices ({', '.join(device_names)})")
        copy_name = f"{callee}.on_{match[1]}"
        if copy_name not in placed:
            placed[copy_name] = callee
            with ir.InsertionPoint(prog.body):
                copy = functions[callee].operation.clone()
            copy.attributes["sym_name"] = ir.StringAttr.get(copy_name)

            def pin(op, affinity=affinity):
                if op.name.startswith("flow."):
                    op.attributes["stream.affinity"] = affinity
                return ir.WalkResult.ADVANCE

            copy.walk(pin)
        call.attributes["callee"] = ir.FlatSymbolRefAttr.get(copy_name)
    _record_devices(prog, functions, device_names)


def _affinity_of(op):
    """The `stream.affinity` of `op` or of the nearest op around it that has one (IREE's rule)."""
    while op is not None and op.name != "builtin.module":
        if "stream.affinity" in op.attributes:
            return op.attributes["stream.affinity"]
        op = op.parent
    return None


def _record_devices(prog, functions: dict, device_names: Sequence[str]) -> None:
    """Adds DEVICES_REFLECTION_KEY to every public function's `iree.reflection` (IREE copies it
    into the function's reflection in the vmfb, where the runtime reads it)."""
    from iree.compiler import ir

    names = ir.StringAttr.get(",".join(device_names))
    for function in functions.values():
        if "sym_visibility" in function.attributes or len(function.regions[0].blocks) == 0:
            continue
        entries = {}
        if "iree.reflection" in function.attributes:
            existing = ir.DictAttr(function.attributes["iree.reflection"])
            entries = {existing[i].name: existing[i].attr for i in range(len(existing))}
        entries[DEVICES_REFLECTION_KEY] = names
        function.attributes["iree.reflection"] = ir.DictAttr.get(entries)
