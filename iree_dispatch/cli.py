"""`iree-dispatch`: build | run | inspect | samples."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from .core.errors import DispatchError

_print_lock = threading.Lock()


def _progress(message: str) -> None:
    with _print_lock:
        print(f"[iree-dispatch] {message}", file=sys.stderr, flush=True)


def _cmd_build(args) -> int:
    from .backend.pipeline import build, write_depfile
    from .frontend.spec_file import load_spec

    specs = [load_spec(path) for path in args.spec]
    if args.arch:
        specs = [s.with_archs([a for item in args.arch for a in item.split(",")]) for s in specs]
    if args.objects:
        specs = [s.with_objects(args.objects) for s in specs]
    stem = Path(args.program).stem if args.program else specs[0].name
    output = Path(args.output or Path("build") / f"{stem}.vmfb")
    emit = None
    if args.emit_mlir is not None:
        emit = Path(args.emit_mlir) if args.emit_mlir else output.with_suffix(".mlir")
    result = build(
        specs[0] if len(specs) == 1 else specs, output, emit_mlir=emit, program=args.program, embed_objects=args.embed_objects,
        asynchronous=args.asynchronous, strip_assertions=args.strip_assertions, progress=_progress, cache=not args.no_cache,
        toolchain=args.toolchain,
    )
    if args.depfile:
        write_depfile(args.depfile, result.vmfb, [*(Path(path).absolute() for path in args.spec), *result.dependencies])
    stages = ", ".join(f"{k} {v:.2f}s" for k, v in result.timings.items())
    print(f"wrote {result.vmfb}" + (f" and {result.mlir}" if result.mlir else "") + f" ({stages})")
    return 0


def _cmd_run(args) -> int:
    import numpy as np

    from . import runtime
    from .cli_io import format_result, parse_input

    path = args.vmfb or args.module_flag
    if not path:
        raise DispatchError("no module given: iree-dispatch run FILE.vmfb --function=NAME [--input=...]")
    module = runtime.load(path, args.device)
    if args.function not in module.functions:
        raise DispatchError(f"{path}: no function {args.function!r} (functions: {', '.join(module.functions)})")
    inputs = [parse_input(text) for text in args.input]
    results = module.functions[args.function](*inputs)
    results = results if isinstance(results, tuple) else (results,)
    print(f"EXEC @{args.function}")
    for i, result in enumerate(results):
        value = result.to_host() if hasattr(result, "to_host") else result
        print(f"result[{i}]: hal.buffer_view" if isinstance(value, np.ndarray) else f"result[{i}]:")
        print(format_result(value, args.print_max_element_count))
    return 0


def _cmd_inspect(args) -> int:
    path = Path(args.path)
    if path.suffix == ".toml":
        from .frontend.spec_file import load_spec

        spec = load_spec(path)
        print(f"module {spec.name}  archs: {', '.join(a.name for a in spec.archs)} (variant order: newest first)")
        descriptions = {k.function: dict(k.describe(), archs=[a.name for a in spec.archs]) for k in spec.kernels}
    else:
        from .runtime import read_descriptions

        name, found = read_descriptions(path)
        print(f"module {name}  ({path})")
        descriptions = {k: v for k, v in found.items() if v}
        for other in (k for k, v in found.items() if not v):
            print(f"  function {other}: not an iree_dispatch kernel (no description)")
        if descriptions:
            archs = next(iter(descriptions.values()))["archs"]
            print(f"  variants: {', '.join(archs)} (newest first; each guarded by a compute-capability condition)")
    for name, d in descriptions.items():
        ins = ", ".join(f"{t['name']}: {t['dtype']}[{', '.join(map(str, t['shape']))}]" for t in d["inputs"])
        scal = "".join(f", {s['name']}: {s['ctype']}" for s in d["scalars"])
        outs = ", ".join(f"{t['name']}: {t['dtype']}[{', '.join(map(str, t['shape']))}]{' (in place)' if t['inplace'] else ''}" for t in d["outputs"])
        print(f"  kernel {name}({ins}{scal}) -> ({outs})")
        entry = f"  ({d['kernel']})" if d.get("kernel", name) != name else ""
        sizes = d.get("shared_memory")
        if isinstance(sizes, dict):  # per arch (spec.py)
            sizes = ", ".join(f"{arch} {n}" for arch, n in sizes.items())
        shared = f"  shared memory {sizes} B" if sizes else ""
        print(f"    source {d['source']}{entry}  block {d['block']}  grid {d['grid']}{shared}")
    return 0


def _cmd_cache(args) -> int:
    from .backend.cache import Cache

    cache = Cache()
    if args.action == "clear":
        cache.clear()
        print(f"cleared {cache.root}")
    else:
        info = cache.info()
        print(f"{info['path']}: {info['entries']} builds, {info['bytes'] / 1e6:.1f} MB")
    return 0


def _cmd_samples(args) -> int:
    from .samples import main

    return main(Path(args.root), Path(args.out), args.device)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="iree-dispatch", description="Hand-written CUDA kernels as IREE dispatches.")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="spec (.toml) + .cu sources -> .vmfb")
    b.add_argument("spec", nargs="+", help="kernel spec file(s) (TOML); several only with --program, which calls @<module>.<kernel> of each")
    b.add_argument("-o", "--output", help="output .vmfb (default: build/<module>.vmfb)")
    b.add_argument("--emit-mlir", nargs="?", const="", metavar="PATH", help="also keep the generated MLIR (default: next to the .vmfb)")
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
    b.set_defaults(func=_cmd_build)

    r = sub.add_parser("run", help="run a function of a .vmfb on a CUDA device (like iree-run-module)")
    r.add_argument("vmfb", nargs="?", help=".vmfb file (or --module=FILE, as iree-run-module spells it)")
    r.add_argument("--module", dest="module_flag", metavar="FILE", help=argparse.SUPPRESS)
    r.add_argument("--function", required=True)
    r.add_argument("--input", action="append", default=[], help="e.g. 8xf32=2, 2x2xi32=1 2 3 4, f32=0.5, @x.npy")
    r.add_argument("--device", default="cuda", help="cuda or cuda://N (default: cuda)")
    r.add_argument("--print-max-element-count", type=int, default=1024)
    r.set_defaults(func=_cmd_run)

    i = sub.add_parser("inspect", help="kernels, ABI and variants of a spec (.toml) or .vmfb")
    i.add_argument("path")
    i.set_defaults(func=_cmd_inspect)

    c = sub.add_parser("cache", help="the build cache ($IREE_DISPATCH_CACHE_DIR or ~/.cache/iree_dispatch)")
    c.add_argument("action", choices=("info", "clear"))
    c.set_defaults(func=_cmd_cache)

    s = sub.add_parser("samples", help="build the samples and run them on the first CUDA device")
    s.add_argument("--root", default=".", help="repository root (holds kernels/ and mlir/)")
    s.add_argument("--out", default="build", help="artifact folder (default: build)")
    s.add_argument("--device", default="cuda")
    s.set_defaults(func=_cmd_samples)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (DispatchError, ValueError, TypeError, FileNotFoundError) as exc:
        print(f"iree-dispatch {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
