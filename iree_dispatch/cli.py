"""`iree-dispatch`: build | run | inspect | cache | samples.

Every error a user can cause ends as one line `iree-dispatch CMD: error: ...` naming the path
involved, exit 1 (never a traceback); Ctrl-C stops the command and its compilers at once, exit
130; a closed stdout (`| head`) ends it quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import os
import signal
import sys
import threading
from pathlib import Path

from .core.contract import TensorDescription
from .core.errors import DispatchError
from .core.files import check_given_file, check_input_file, check_outputs, check_text_file, quoted_includes, spec_declares

_print_lock = threading.Lock()

_COMPILER_INSTALL = "pip install iree-dispatch (it brings iree-base-compiler==3.13.0; or pip install iree-base-compiler==3.13.0 into this environment)"


def _progress(message: str) -> None:
    with _print_lock:
        print(f"[iree-dispatch] {message}", file=sys.stderr, flush=True)


def _require_compiler() -> None:
    """A runtime-only install (iree-base-runtime, no compiler) can run and inspect, not build."""
    import importlib.metadata
    import importlib.util

    try:
        importlib.metadata.version("iree-base-compiler")
        found = importlib.util.find_spec("iree.compiler") is not None
    except (importlib.metadata.PackageNotFoundError, ImportError, ValueError):
        found = False
    if not found:
        raise DispatchError(f"building needs iree-base-compiler, which is not installed here (a runtime-only install?): {_COMPILER_INSTALL}")


def _check_iree_compile_knows(flags: list[str]) -> None:
    """iree-compile's own verdict on the user's flags (an unknown name, a bad value), asked with
    `--version` (about 20 ms), so a typo fails before the CUDA compilers run, not after."""
    if not flags:
        return
    import re
    import subprocess

    from iree.compiler.tools.binaries import find_tool

    try:
        proc = subprocess.run([find_tool("iree-compile"), *flags, "--version"], capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return  # the compile itself will say what is wrong
    complaints = [re.sub(r"\s*Try: '[^']*'", "", line.removeprefix("iree-compile: ")).strip() for line in proc.stderr.splitlines() if line.startswith("iree-compile: ")]
    if proc.returncode != 0 or complaints:
        detail = " ".join(complaints) or (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise DispatchError(f"iree-compile refuses the flags given with --iree-compile-arg/--: {detail} (iree-compile --help lists its flags)")


def _cmd_build(args) -> int:
    _require_compiler()
    from .backend.compile import check_iree_compile_flags
    from .backend.pipeline import build, build_inputs, objects_dirname, write_depfile
    from .frontend.spec_file import load_spec

    iree_compile_flags = [*args.iree_compile_arg, *getattr(args, "passthrough", [])]
    check_iree_compile_flags(iree_compile_flags)  # before any compiler runs (a spec's type probe included)
    _check_iree_compile_knows(iree_compile_flags)

    spec_paths = [Path(path) for path in args.spec]
    program = Path(args.program) if args.program else None
    inputs: list[tuple[str, Path]] = []
    declared_names = []
    for path in spec_paths:
        check_text_file("spec", path, "a TOML kernel spec; give the .toml file")
        name, sources = spec_declares(path)
        declared_names.append(name)
        inputs += [("spec", path), *(("kernel source", src) for src in sources)]
    if program is not None:
        check_input_file("program", program)
        inputs.append(("program", program))
    for what, path in inputs:
        check_input_file(what, path)
    inputs += [("included header", header) for header in quoted_includes(path for what, path in inputs if what == "kernel source")]

    def outputs(names: list[str]) -> list[tuple[str, Path, str]]:
        stem = program.stem if program else names[0]
        output = Path(args.output or Path("build") / f"{stem}.vmfb")
        emit = None
        if args.emit_mlir is not None:
            emit = Path(args.emit_mlir) if args.emit_mlir else output.with_suffix(".mlir")
        found = [("-o" if args.output else "output", output, "file")] + ([("--emit-mlir", emit, "file")] if emit else [])
        found += [("--depfile", Path(args.depfile), "file")] if args.depfile else []
        # The objects are written only for the MLIR that refers to them; otherwise they stay in
        # the build's private folder. (The same name twice is the spec's error, which build() names.)
        if emit and not args.embed_objects:
            found += [(f"module {n}'s objects folder", emit.parent / objects_dirname(n), "folder") for n in dict.fromkeys(names)]
        return found

    # Before anything is compiled (a spec's type probe included): outputs writable, none an input.
    check_outputs(outputs(declared_names), inputs)
    specs = [load_spec(path) for path in spec_paths]
    if args.arch:
        specs = [s.with_archs([a for item in args.arch for a in item.split(",")]) for s in specs]
    if args.objects:
        specs = [s.with_objects(args.objects) for s in specs]
    planned = outputs([s.name for s in specs])
    check_outputs(planned, [*(("spec", path) for path in spec_paths), *build_inputs(specs, program)])
    output = planned[0][1]
    emit = planned[1][1] if len(planned) > 1 and planned[1][0] == "--emit-mlir" else None
    result = build(
        specs[0] if len(specs) == 1 else specs, output, emit_mlir=emit, program=args.program, embed_objects=args.embed_objects,
        asynchronous=args.asynchronous, strip_assertions=args.strip_assertions, iree_compile_flags=iree_compile_flags, progress=args.progress,
        cache=not args.no_cache, toolchain=args.toolchain, keep_objects=False,
    )
    if args.depfile:
        check_outputs([("--depfile", Path(args.depfile), "file")], [("file the build read", d) for d in result.dependencies])
        write_depfile(args.depfile, result.vmfb, [*(path.absolute() for path in spec_paths), *result.dependencies])
    stages = ", ".join(f"{k} {v:.2f}s" for k, v in result.timings.items())
    print(f"wrote {result.vmfb}" + (f" and {result.mlir}" if result.mlir else "") + f" ({stages})")
    return 0


def _run_module_path(args) -> str:
    """The module to run: the positional FILE or iree-run-module's --module=FILE (both only if
    they name one file)."""
    if "" in args.module_flag:
        raise DispatchError("--module= names no file: give the module, --module=FILE.vmfb")
    given = ([(args.vmfb, args.vmfb)] if args.vmfb else []) + [(f"--module={m}", m) for m in args.module_flag]
    if not given:
        raise DispatchError("no module given: iree-dispatch run FILE.vmfb --function=NAME [--input=...] (or --module=FILE.vmfb)")
    (first_label, first), *others = given
    for label, other in others:
        same = os.path.abspath(other) == os.path.abspath(first)
        with contextlib.suppress(OSError):
            same = same or os.path.samefile(other, first)
        if not same:
            raise DispatchError(f"{first_label} and {label} are different modules; run takes one module: drop one of them")
    return first


def _vector(scalar) -> bool:
    """Whether a struct argument is a CUDA vector (its fields the lanes x, y, z, w)."""
    return all(f.name in "xyzw" and len(f.name) == 1 for f, _ in scalar.fields)


def _cmd_run(args) -> int:
    import numpy as np

    from . import runtime
    from .cli_io import format_result, parse_input, parse_max_element_count

    path = _run_module_path(args)
    max_elements = parse_max_element_count(args.output_max_element_count)
    if not args.function:
        raise DispatchError(f"no function given: add --function=NAME (iree-dispatch inspect {path} lists them)")
    check_given_file("module", Path(path), "run takes a built module (.vmfb) file")
    # The function and the inputs are checked against the module's own descriptions before a
    # device is opened: a typo fails the same way, and at once, on a machine without a GPU.
    try:
        _, descriptions = runtime.read_descriptions(path)
    except (RuntimeError, ValueError) as exc:
        raise DispatchError(f"{path}: not a module IREE can read ({str(exc).strip().splitlines()[-1]}); run takes a built .vmfb") from None
    if args.function not in descriptions:
        raise DispatchError(f"{path}: no function {args.function!r} (functions: {', '.join(descriptions)})")
    inputs = [parse_input(text) for text in args.input]
    struct = next((s for s in descriptions[args.function].scalars if s.kind == "struct" and not _vector(s)), None) if descriptions[args.function] else None
    if struct is not None:
        raise DispatchError(
            f"{args.function} takes {struct.ctype} {struct.name!r} by value, which --input can't spell; call it from Python with a "
            "dict of its fields (a vector such as float2 takes its lanes as a tensor: --input=2xf32=1,2)"
        )
    if descriptions[args.function]:
        runtime.KernelFunction(descriptions[args.function], lambda *_: None, device=None).check(*inputs)
    module = runtime.load(path, args.device)
    results = module.functions[args.function](*inputs)
    results = results if isinstance(results, tuple) else (results,)
    print(f"EXEC @{args.function}")
    for i, result in enumerate(results):
        value = result.to_host() if hasattr(result, "to_host") else result
        # As iree-run-module: a tensor's line follows `result[i]: hal.buffer_view`; a scalar is on the same line.
        if isinstance(value, np.ndarray):
            print(f"result[{i}]: hal.buffer_view\n{format_result(value, max_elements)}")
        else:
            print(f"result[{i}]: {format_result(value, max_elements)}")
    return 0


def _cmd_inspect(args) -> int:
    path = Path(args.path)
    check_given_file("spec" if path.suffix == ".toml" else "module", path, "inspect takes a spec (.toml) or a module (.vmfb) file")
    if path.suffix == ".toml":
        from .frontend.spec_file import load_spec

        spec = load_spec(path)
        print(f"module {spec.name}  archs: {', '.join(a.name for a in spec.archs)} (variant order: newest first)")
        # Undeclared non-const pointers get their roles when the build reads the PTX: say so.
        descriptions = {k.function: dataclasses.replace(k.describe(), archs=tuple(a.name for a in spec.archs)) for k in spec.kernels}
        undecided = {k.function: k.inferred for k in spec.kernels}
    else:
        from .runtime import read_descriptions

        try:
            name, found = read_descriptions(path)
        except (RuntimeError, ValueError) as exc:
            raise DispatchError(f"{path}: not a module IREE can read ({str(exc).strip().splitlines()[-1]}); inspect takes a spec (.toml) or a built .vmfb") from None
        print(f"module {name}  ({path})")
        descriptions = {k: v for k, v in found.items() if v}
        undecided = {}
        for other in (k for k, v in found.items() if not v):
            print(f"  function {other}: not an iree_dispatch kernel (no description)")
        if descriptions:
            archs = next(iter(descriptions.values())).archs
            print(f"  variants: {', '.join(archs)} (newest first; each guarded by a compute-capability condition)")
    for name, d in descriptions.items():
        def tensor(t: TensorDescription) -> str:
            return f"{t.name}: {t.dtype}[{', '.join(map(str, t.shape))}]{' (in place)' if t.inplace else ''}{' (zero-filled)' if t.zero else ''}"

        params = [tensor(t) for t in d.inputs] + [s.signature() for s in d.scalars]
        outs = ", ".join(tensor(t) for t in d.outputs)
        print(f"  kernel {name}({', '.join(params)}) -> ({outs})")
        if undecided.get(name):
            print(f"    roles of {', '.join(undecided[name])} read from the PTX when built (shown here as until then)")
        entry = f"  ({d.name})" if d.name != name else ""
        sizes = d.shared_memory
        if isinstance(sizes, tuple):  # per arch (spec.py)
            sizes = ", ".join(f"{arch} {n}" for arch, n in sizes)
        shared = f"  shared memory {sizes} B" if sizes else ""
        if d.shared_memory_size is not None:
            shared = f"  shared memory {d.shared_memory_size} B (at most {sizes})"
        print(f"    source {d.source}{entry}  block {list(d.block)}  grid {list(d.grid)}{shared}")
    return 0


def _cmd_cache(args) -> int:
    from .backend.cache import Cache

    cache = Cache()
    if cache.root.exists() and not cache.root.is_dir():
        raise DispatchError(f"build cache {cache.root} is a file, not a folder: remove it, or set IREE_DISPATCH_CACHE_DIR to a folder")
    if args.action == "clear":
        kept = cache.clear()
        print(f"cleared {cache.root}" + (f"; kept {len(kept)} file(s) that are not the cache's, e.g. {kept[0]}" if kept else ""))
    else:
        info = cache.info()
        print(f"{info['path']}: {info['entries']} builds, {info.get('objects', 0)} compiled objects, {info['bytes'] / 1e6:.1f} MB")
    return 0


def _cmd_samples(args) -> int:
    from .samples import main

    return main(Path(args.root), Path(args.out), args.device)


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (what is wrong, where help is), exit 2; options
    only as spelled (no prefixes: iree-run-module's --output= is not --output_max_element_count)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} -h)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="iree-dispatch", description="Hand-written CUDA kernels as IREE dispatches.")
    p.add_argument("--version", action=_Version, help="print the versions of iree-dispatch and IREE, the runtime's launch path and the CUDA compiler a build would use")
    sub = p.add_subparsers(dest="command", required=True, help="what to do (iree-dispatch COMMAND -h for its options)")

    b = sub.add_parser("build", help="spec (.toml) + .cu sources -> .vmfb",
                       epilog="Everything after a lone -- goes to iree-compile, e.g. iree-dispatch build k.toml -o k.vmfb -- --iree-opt-level=O3")
    b.add_argument("spec", nargs="+", help="kernel spec file(s) (TOML); several only with --program, which calls @<module>.<kernel> of each")
    b.add_argument("-o", "--output", help="output .vmfb (default: build/<module>.vmfb)")
    b.add_argument("--emit-mlir", nargs="?", const="", metavar="PATH",
                   help="also keep the generated MLIR, at PATH (--emit-mlir=PATH) or beside the .vmfb, with the objects it refers to in <module>.objects/ "
                        "beside it; a .toml after it is a spec, not PATH")
    b.add_argument("--arch", action="append", help="CUDA archs, e.g. sm_80,sm_90 (repeatable; overrides the spec)")
    b.add_argument("--objects", choices=("cubin", "ptx", "fatbin"), help="objects per arch (overrides the spec; default cubin + PTX fallback)")
    b.add_argument("--embed-objects", action="store_true", help="write the object bytes into the MLIR (compiles anywhere with plain iree-compile)")
    b.add_argument("--async", dest="asynchronous", action="store_true", help="functions take wait/signal fences and return at once (experimental)")
    b.add_argument("--strip-assertions", action="store_true", help="drop the generated shape checks (Python still checks calls; callers that skip Python are unchecked)")
    b.add_argument("--no-cache", action="store_true", help="build from scratch, neither reading nor writing the build cache")
    b.add_argument("--toolchain", choices=("auto", "nvcc", "nvrtc"), default="auto",
                   help="CUDA compiler (default auto: nvcc if found, incl. the nvidia-cuda-nvcc wheel, else NVRTC)")
    b.add_argument("--program", help="MLIR program calling the kernels via func.func private @<module>.<kernel> declarations")
    b.add_argument("--depfile", metavar="PATH", help="also write a Makefile-style depfile: the .vmfb and every file it was built from (spec, sources, headers, program)")
    b.add_argument("--iree-compile-arg", action="append", default=[], metavar="FLAG",
                   help="pass FLAG (--name or --name=value) to iree-compile, after the build's own flags (repeatable); "
                        "everything after a lone -- is passed too")
    b.set_defaults(func=_cmd_build)

    r = sub.add_parser("run", help="run a function of a .vmfb on a CUDA device (like iree-run-module)")
    r.add_argument("vmfb", nargs="?", help=".vmfb file (or --module=FILE, as iree-run-module spells it)")
    r.add_argument("--module", dest="module_flag", action="append", default=[], metavar="FILE",
                   help="the .vmfb file, as iree-run-module spells it (instead of the positional FILE, or the same file)")
    r.add_argument("--function", help="the function to call (iree-dispatch inspect lists them)")
    r.add_argument("--input", action="append", default=[], help="e.g. 8xf32=2, 2x2xi32=1 2 3 4, f32=0.5, @x.npy")
    r.add_argument("--device", default=None, help="cuda, cuda://N or cuda://GPU-<uuid> (default: $IREE_DISPATCH_DEVICE, else cuda)")
    r.add_argument("--output_max_element_count", "--output-max-element-count", "--print-max-element-count", default="1024", metavar="N",
                   help="print at most N elements of each result, eliding the rest with ... like iree-run-module (default: 1024; -1: all)")
    r.set_defaults(func=_cmd_run)

    i = sub.add_parser("inspect", help="kernels, ABI and variants of a spec (.toml) or .vmfb")
    i.add_argument("path", help="a spec (.toml) or a built module (.vmfb)")
    i.set_defaults(func=_cmd_inspect)

    c = sub.add_parser("cache", help="the build cache ($IREE_DISPATCH_CACHE_DIR or ~/.cache/iree_dispatch)")
    c.add_argument("action", choices=("info", "clear"), help="info: location, number of builds and compiled objects, size; clear: remove every cached build and object")
    c.set_defaults(func=_cmd_cache)

    from .models.cli import add_compile_command

    add_compile_command(sub)  # iree-dispatch compile MODEL.mlir --kernels SPEC.toml (docs/models.md)

    s = sub.add_parser("samples", help="build the samples and run them on the first CUDA device")
    s.add_argument("--root", default=".", help="repository root (holds kernels/ and mlir/)")
    s.add_argument("--out", default="build", help="artifact folder (default: build)")
    s.add_argument("--device", default=None, help="cuda, cuda://N or cuda://GPU-<uuid> (default: $IREE_DISPATCH_DEVICE, else cuda)")
    s.set_defaults(func=_cmd_samples)
    return p


def version_text() -> str:
    """iree-dispatch's version, iree-base-compiler's and iree-base-runtime's, the runtime's
    launch path and the CUDA compiler a build would use: what to put in a bug report. Never fails."""
    import importlib.metadata
    import shutil

    from . import __version__

    lines = [f"iree-dispatch {__version__} ({Path(__file__).resolve().parent})"]
    for package in ("iree-base-compiler", "iree-base-runtime"):
        try:
            lines.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            lines.append(f"{package}: not installed" + (f" (needed to build: {_COMPILER_INSTALL})" if package == "iree-base-compiler" else ""))
    lines.append(f"launch path: {_launch_path_text()}")
    try:
        from .toolchains import NvccToolchain, select_toolchain
        from .toolchains.base import host_compiler_setting

        tc = select_toolchain()
        host = host_compiler_setting()[1]
        host = f", host compiler {host} ({shutil.which(host) or host})" if isinstance(tc, NvccToolchain) else ""
        lines.append(f"CUDA compiler: {tc.describe()}{host}")
    except Exception as exc:  # noqa: BLE001 - a report, whatever is missing
        lines.append(f"CUDA compiler: none found ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
    return "\n".join(lines)


def _launch_path_text() -> str:
    """How the runtime would launch kernels here (runtime/compiled.py): "compiled extension
    (installed)", "compiled at first use" or "ctypes fallback", and where or why."""
    import warnings

    try:
        from .runtime.compiled import launch_path

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fallback's warning says what this line says
            return launch_path().describe()
    except Exception as exc:  # noqa: BLE001 - a report, whatever is missing
        return f"unknown ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"


class _Version(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def _split_emit_mlir(argv: list[str]) -> list[str]:
    """build's `--emit-mlir` takes an optional PATH; `--emit-mlir k.toml` means the default PATH
    and the spec k.toml, never "write the MLIR over the spec". (compile's takes a PATH always,
    and refuses one that is an input.)"""
    out = list(argv)
    if next((token for token in out if not token.startswith("-")), None) != "build":
        return out
    for i, token in enumerate(out[:-1]):
        if token == "--emit-mlir" and out[i + 1].lower().endswith(".toml"):
            out[i] = "--emit-mlir="
    return out


def _children() -> list[int]:
    """Our child processes (nvcc, ptxas, iree-compile): Linux's /proc, else none known."""
    me, found = os.getpid(), []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    with open(f"/proc/{entry}/stat") as handle:
                        if int(handle.read().rsplit(")", 1)[1].split()[1]) == me:
                            found.append(int(entry))
    return found


def _stop_children() -> None:
    for pid in _children():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)


@contextlib.contextmanager
def _interrupts_stop_compilers():
    """Ctrl-C in a terminal reaches the compilers too; a SIGINT sent to this process alone
    (a build system, kill -INT) is passed on to them, so no compile outlives the command."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum, frame):
        _stop_children()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


_WRITE_ERRORS = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EISDIR, errno.EEXIST, errno.ENOTEMPTY}


def os_error_message(exc: OSError) -> str:
    """One line for any OSError: the path, what failed, what to do."""
    path = exc.filename if exc.filename is not None else exc.filename2
    reason = exc.strerror or str(exc)
    if path is None:
        return f"{reason}"
    verb = "can't write" if exc.errno in _WRITE_ERRORS else "can't read" if exc.errno == errno.ENOENT else "can't access"
    text = f"{verb} {path}" + (f" (to {exc.filename2})" if exc.filename2 is not None and exc.filename is not None else "") + f": {reason}"
    try:
        from .core.paths import cache_dir

        root = os.path.abspath(cache_dir())
        if os.path.abspath(path) == root or os.path.abspath(path).startswith(root + os.sep):
            return text + "; this is the build cache: make it a writable folder, set IREE_DISPATCH_CACHE_DIR to one, or build with --no-cache"
    except Exception:  # noqa: BLE001 - the hint is optional
        pass
    hints = {errno.ENOSPC: "free some space", errno.EDQUOT: "free some space", errno.EROFS: "choose a writable location",
             errno.EACCES: "check its permissions", errno.EPERM: "check its permissions", errno.ENOENT: "check the path"}
    return text + (f"; {hints[exc.errno]}" if exc.errno in hints else "")


def _quiet_stdout() -> None:
    """stdout's reader is gone (`| head`): point stdout at /dev/null, so the exit flush is silent."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _split_passthrough(argv: list[str]) -> tuple[list[str], list[str]]:
    """`iree-dispatch build ... -- FLAGS`: what follows the first lone `--` is iree-compile's."""
    command = next((token for token in argv if not token.startswith("-")), None)
    if command != "build" or "--" not in argv:
        return argv, []
    at = argv.index("--")
    return argv[:at], argv[at + 1 :]


def _join_iree_compile_args(argv: list[str]) -> list[str]:
    """`--iree-compile-arg --flag` as `--iree-compile-arg=--flag` (argparse reads a value that
    starts with '-' as another option)."""
    out, tokens = [], iter(argv)
    for token in tokens:
        out.append(f"{token}={next(tokens, '')}" if token == "--iree-compile-arg" else token)
    return out


def main(argv: list[str] | None = None) -> int:
    from . import toolchains

    def progress(message: str) -> None:  # this command's own: what is said once is said once per command
        _progress(message)

    # Toolchain lines no build passes on (a fallback's warning, Triton's cubins) go to stderr too.
    previous = toolchains.base._default_progress
    toolchains.set_default_progress(progress)
    try:
        return _main(argv, progress)
    finally:
        toolchains.set_default_progress(previous)


def _main(argv: list[str] | None, progress) -> int:
    argv, passthrough = _split_passthrough(sys.argv[1:] if argv is None else list(argv))
    args = parser().parse_args(_split_emit_mlir(_join_iree_compile_args(argv)))
    args.passthrough = passthrough
    args.progress = progress
    prefix = f"iree-dispatch {args.command}: error:"
    with _interrupts_stop_compilers():
        try:
            code = args.func(args)
            sys.stdout.flush()
            return code
        except KeyboardInterrupt:
            _stop_children()
            print(f"iree-dispatch {args.command}: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:
            _quiet_stdout()
            return 141  # 128 + SIGPIPE, as the tools a pipe usually ends do
        except (DispatchError, ValueError, TypeError) as exc:
            print(f"{prefix} {exc}", file=sys.stderr)
        except ImportError as exc:  # incl. importlib.metadata.PackageNotFoundError
            name = getattr(exc, "name", None) or str(exc)
            if str(name).startswith("iree_dispatch"):
                print(f"{prefix} iree-dispatch itself is incomplete or was changed while running ({exc}); reinstall it: pip install --force-reinstall iree-dispatch",
                      file=sys.stderr)
            else:
                need = _COMPILER_INSTALL if "compiler" in str(name) or args.command == "build" else "pip install iree-dispatch"
                print(f"{prefix} a package iree-dispatch needs is missing ({name}): {need}", file=sys.stderr)
        except MemoryError:
            print(f"{prefix} out of memory; is an input (a spec, source or program) far larger than it should be?", file=sys.stderr)
        except OSError as exc:
            print(f"{prefix} {os_error_message(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
