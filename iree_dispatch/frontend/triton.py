"""Triton kernels as iree_dispatch kernels, compiled offline for a target arch (no GPU needed).

`triton_kernel(add_kernel, "void add_kernel(const float* x, float* out, float alpha, int n)",
grid="ceildiv(n, BLOCK)", constexprs={"BLOCK": 1024}, shape=["n"])` returns a `KernelSpec` that
is checked now and compiled by the build: its objects stage (backend/pipeline.py) compiles it,
in the build's private folder, into Triton's PTX and a cubin per arch, and from there on it is a
prebuilt kernel. A build that fails or is interrupted leaves nothing behind, and a build the
cache serves runs (and imports) no Triton at all. A TOML spec's kernel (`source = "kernels.py"`)
is read without importing the file: its parameters come from the Python syntax tree, and the
file is imported only when the build compiles it.

- the C signature says what Triton's can't: which pointers are inputs (`const`) and outputs,
  and the element types. It is mapped to Triton's (`const float*` → `*fp32`, `int` → `i32`);
  every parameter of the `@triton.jit` function that is not a constexpr must be in it, in order;
- each arch is compiled with `triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))`;
  the metadata gives the block size (32 × num_warps, which Triton's PTX demands with `.reqntid`)
  and the dynamic shared memory (`metadata.shared`, set on the export as IREE does per kernel);
- Triton 3.x appends two hidden pointer parameters to every kernel, `global_scratch` and
  `profile_scratch`, after the user's scalars. IREE passes all buffers before all scalars, so
  they can't be bindings; when the metadata sizes are 0, Triton 3.6's own launcher passes NULL
  for both, so the parameters are removed from the PTX entry and any load of them becomes a
  0 (`mov.b64 %rd, 0`). A kernel that needs scratch (sizes > 0: e.g. device-side tensor
  descriptors) is refused, as are clusters (num_ctas > 1), cooperative grids and PDL, which
  IREE's CUDA HAL does not launch;
- the cubin is assembled by ptxas from that rewritten PTX (Triton's own cubin still takes the
  hidden parameters). Triton's PTX for sm_90 targets `sm_90a`, so it runs on 9.0 GPUs only; on
  other GPUs the sm_80 PTX is JIT-compiled forward.

Pointer alignment: like Triton's launcher does for 16-byte-aligned tensors, every pointer is
declared 16-byte aligned (`tt.divisibility = 16`, vectorized loads). Buffers IREE allocates
for a call are aligned far beyond that; a pointer that may not be (a slice of a buffer in a
linked program) must be left out: `aligned=False`, or a list of the aligned pointers' names.
Integer scalars are not specialized (Triton's JIT does that per value; here one object serves
every value), so `n % 16 == 0` is not assumed.

Needs `triton` (`pip install iree-dispatch[triton]`, triton==3.6.0) and ptxas (CUDA toolkit).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..core import expr as ex
from ..core.archs import parse_archs
from ..core.dtypes import POINTEE_TYPES, SCALAR_TYPES
from ..core.errors import SpecError
from ..core.files import atomic_output, write_atomic
from ..toolchains import Toolchain, assemble_cubin
from .prebuilt import ptx_arch
from .signature import Param, parse_signature
from .spec import KernelSpec, ModuleSpec, TritonSource

# Triton's kernel-ABI names for the element types iree_dispatch knows (MLIR name → Triton).
_POINTEE = {"f16": "fp16", "bf16": "bf16", "f32": "fp32", "f64": "fp64", "i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64",
            "ui8": "u8", "ui16": "u16", "ui32": "u32", "ui64": "u64"}
_FLOATS = {"float": "fp32", "double": "fp64", "half": "fp16", "bf16": "bf16"}
HIDDEN_PARAMS = 2  # global_scratch, profile_scratch (Triton 3.x)
_BANNED = {"num_ctas": 1, "launch_cooperative_grid": False, "launch_pdl": False, "global_scratch_size": 0, "profile_scratch_size": 0}


def triton_type(p: Param) -> str:
    """Triton's signature type for a C parameter: `const float*` → `*fp32`, `int` → `i32`."""
    if p.pointer:
        return "*" + _POINTEE[POINTEE_TYPES[p.ctype]]
    stype = SCALAR_TYPES[p.ctype]
    if stype.kind == "bool":
        return "i1"
    if stype.integer:
        return f"{'u' if stype.kind == 'uint' else 'i'}{8 * stype.nbytes}"
    return _FLOATS[stype.kind]


class JitParam(NamedTuple):
    """A parameter of a `@triton.jit` function, as Triton sees it (its `fn.params`)."""

    name: str
    is_constexpr: bool  # annotated tl.constexpr
    has_default: bool
    default: Any  # _UNKNOWN: a default that isn't a literal (known only when the file is imported)


_UNKNOWN = object()


def triton_kernel(
    fn: Any,
    signature: str,
    *,
    grid: str | int | Sequence[str | int],
    constexprs: Mapping[str, int | float | bool] | None = None,
    num_warps: int = 4,
    num_stages: int = 3,
    archs: Sequence[str] = ("sm_80", "sm_90"),
    aligned: bool | Sequence[str] = True,
    shape: Sequence[str | int] | None = None,
    shapes: Mapping[str, Sequence[str | int]] | None = None,
    scalars: Mapping[str, str | int] | None = None,
    inplace: Sequence[str] = (),
    readonly: Sequence[str] = (),
    outputs: Sequence[str] = (),
    zero: Sequence[str] = (),
    function: str | None = None,
    requires: Sequence[str] = (),
    out_dir: str | Path | None = None,
) -> KernelSpec:
    """Declares the `@triton.jit` function `fn` as a kernel, compiled for each of `archs` by the build.

    signature: the kernel's C declaration without its constexprs, named like `fn`.
    grid: blocks per grid, expressions over shape symbols and integer constexprs
    (`"ceildiv(n, BLOCK)"`). constexprs: values of the `tl.constexpr` parameters (defaults
    are used for those left out). num_warps, num_stages: Triton's options.
    aligned: which pointers may be assumed 16-byte aligned (see the module docstring).
    shape, shapes, scalars, inplace, readonly, outputs, zero, function, requires: as in KernelSpec.declare.
    out_dir: compile now and write the objects there: the kernel returned is then a prebuilt
    one, its objects and shared memory known at once. Default: the build compiles it (the
    kernel is `pending` until then: no objects, shared memory unknown).
    """
    name = getattr(fn, "__name__", None)
    params = getattr(fn, "params", None)
    if name is None or params is None:
        raise SpecError(f"{fn!r} is not a @triton.jit function")
    params = [JitParam(p.name, p.is_constexpr, p.has_default, p.default) for p in params]
    kernel = _declare(Path(fn.fn.__code__.co_filename), name, params, signature, fn=fn, grid=grid, constexprs=constexprs, num_warps=num_warps,
                      num_stages=num_stages, archs=archs, aligned=aligned, shape=shape, shapes=shapes, scalars=scalars, inplace=inplace,
                      readonly=readonly, outputs=outputs, zero=zero, function=function, requires=requires)
    return kernel if out_dir is None else compile_triton(kernel, Path(out_dir))[0]


def load_triton_kernel(path: Path, name: str, signature: str | None, *, out_dir: str | Path | None = None, **options: Any) -> KernelSpec:
    """`triton_kernel` for the function `name` of the Python file `path` (a TOML spec's
    `source = "kernels.py"`), read without importing the file: its parameters, which are
    constexprs and their defaults come from the syntax tree. The build imports it (as a module
    of its own) when it compiles the kernel."""
    if signature is None:
        raise SpecError(f"{path}: Triton kernel {name}: needs signature = \"void {name}(...)\" (its C declaration, constexprs left out)")
    kernel = _declare(path, name, jit_params(path, name), signature, fn=None, **options)
    return kernel if out_dir is None else compile_triton(kernel, Path(out_dir))[0]


def jit_params(path: Path, name: str) -> list[JitParam]:
    """The parameters of the decorated top-level function `name` of the Python file `path`,
    read from its syntax tree: constexpr as Triton decides it (the annotation mentions
    `constexpr`), defaults when they are literals."""
    try:
        if not path.is_file():
            raise OSError
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, ValueError):
        raise SpecError(f"can't read Triton source {path}") from None
    except SyntaxError as exc:
        raise SpecError(f"{path}:{exc.lineno}: importing it would fail: SyntaxError: {exc.msg}") from None
    found = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    if not found:
        raise SpecError(f"{path}: no function {name!r} (a @triton.jit function of that name)")
    node = found[-1]
    if not node.decorator_list:
        raise SpecError(f"{path}:{node.lineno}: {name} is not a @triton.jit function (it has no decorator)")
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = [*zip(positional, defaults), *zip(args.kwonlyargs, args.kw_defaults)]
    params = []
    for arg, default in pairs:
        constexpr = arg.annotation is not None and "constexpr" in ast.unparse(arg.annotation)
        value: Any = None
        if default is not None:
            try:
                value = ast.literal_eval(default)
            except (ValueError, TypeError, SyntaxError, RecursionError):  # not a literal: a name, a call
                value = _UNKNOWN
        params.append(JitParam(arg.arg, constexpr, default is not None, value))
    return params


def _declare(origin: Path, name: str, params: Sequence[JitParam], signature: str, *, fn: Any, grid: str | int | Sequence[str | int],
             constexprs: Mapping[str, int | float | bool] | None = None, num_warps: int = 4, num_stages: int = 3, archs: Sequence[str] = ("sm_80", "sm_90"),
             aligned: bool | Sequence[str] = True, shape=None, shapes=None, scalars=None, inplace: Sequence[str] = (), readonly: Sequence[str] = (), outputs: Sequence[str] = (),
             zero: Sequence[str] = (), function: str | None = None, requires: Sequence[str] = ()) -> KernelSpec:
    """The pending KernelSpec of a Triton function with these parameters, checked."""
    if isinstance(num_warps, bool) or not isinstance(num_warps, int) or num_warps not in (1, 2, 4, 8, 16, 32):
        raise SpecError(f"Triton kernel {name}: num_warps must be a power of two from 1 to 32 (a block of at most 1024 threads), got {num_warps!r}")
    where = f"{origin}: Triton kernel {name}"
    c_sig = parse_signature(signature, origin, name)
    given = dict(constexprs or {})
    values = _constexpr_values(params, given, where)
    runtime_params = [p.name for p in params if not p.is_constexpr]
    if [p.name for p in c_sig.params] != runtime_params:
        raise SpecError(
            f"{where}: signature {signature!r} has parameters {[p.name for p in c_sig.params]}, the kernel's non-constexpr parameters are "
            f"{runtime_params}; they must match in order"
        )
    if isinstance(aligned, bool):
        aligned = [p.name for p in c_sig.params if p.pointer] if aligned else []
    unknown = set(aligned) - {p.name for p in c_sig.params if p.pointer}
    if unknown:
        raise SpecError(f"{where}: aligned names {sorted(unknown)}, which are not pointer parameters")
    for p in c_sig.params:
        if (POINTEE_TYPES.get(p.ctype) if p.pointer else SCALAR_TYPES.get(p.ctype)) is None:
            raise SpecError(f"{where}: parameter {p.name!r} has type {p.ctype!r}, which has no Triton equivalent here")
    source = TritonSource(origin, name, tuple(sorted(given.items())), num_warps, num_stages, tuple(parse_archs(list(archs))), tuple(aligned), fn)

    ints = {k: v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}
    grid_items = list(grid) if isinstance(grid, (list, tuple)) else [grid]
    grid_exprs = []
    for i, g in enumerate(grid_items):
        e = ex.parse(g, f"{where}: grid[{i}]")
        unknown_default = [n for n in ex.symbols(e) if values.get(n, None) is _UNKNOWN]
        if unknown_default:
            raise SpecError(f"{where}: grid[{i}] uses constexpr {unknown_default[0]!r}, whose default is not a literal; give it: constexprs = {{ {unknown_default[0]} = ... }}")
        grid_exprs.append(str(_substitute(e, ints)))
    return KernelSpec.declare(origin, name, signature=signature, block=32 * num_warps, grid=grid_exprs, shape=shape, shapes=shapes, scalars=scalars,
                              inplace=inplace, readonly=readonly, outputs=outputs, zero=zero, function=function, requires=requires, triton=source)


def _constexpr_values(params: Sequence[JitParam], given: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Each constexpr parameter's value: the one given, else its default."""
    given = dict(given)
    values: dict[str, Any] = {}
    for p in params:
        if p.is_constexpr:
            if p.name not in given and not p.has_default:
                raise SpecError(f"{where}: constexpr {p.name!r} needs a value: constexprs={{{p.name!r}: ...}}")
            values[p.name] = given.pop(p.name, p.default)
    if given:
        name = where.rpartition(" ")[2]
        raise SpecError(f"{where}: constexprs names {sorted(given)}, which are not tl.constexpr parameters of {name}")
    return values


Compile = Callable[[KernelSpec, Path, "Toolchain | None"], tuple[KernelSpec, list[Path]]]


def compile_module(spec: ModuleSpec, out: Path, toolchain: Toolchain | None = None, progress: Callable[[str], None] | None = None,
                   compile: Compile | None = None) -> tuple[ModuleSpec, list[Path]]:
    """`spec` with every pending Triton kernel compiled into `out` (the objects stage of a build
    calls this in its private folder), and the files the compiles read: each kernel's .py file
    and the files of the jit functions its module holds. compile: what compiles one kernel
    (default compile_triton; the build's takes the objects from its cache when it holds them)."""
    kernels, dependencies = [], []
    for k in spec.kernels:
        if k.pending:
            if progress:
                progress(f"triton {k.triton.path.name}:{k.triton.function} -> {', '.join(a.name for a in k.triton.archs)}")
            k, read = (compile or compile_triton)(k, out / k.function, toolchain)
            dependencies += read
        kernels.append(k)
    return dataclasses.replace(spec, kernels=tuple(kernels)), list(dict.fromkeys(dependencies))


def compile_triton(kernel: KernelSpec, out: Path, toolchain: Toolchain | None = None) -> tuple[KernelSpec, list[Path]]:
    """Compiles the pending Triton kernel `kernel` for each of its archs into `out`: Triton's
    PTX (its hidden parameters removed) and a cubin assembled from it, per arch. Returns the
    kernel declared as the prebuilt kernel of those objects, with the shared memory Triton's
    metadata gives, and the files the compile read (absolute)."""
    source = kernel.triton
    if source is None or kernel.objects:
        raise ValueError(f"kernel {kernel.name} is not a pending Triton kernel")
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError:
        raise SpecError(f"{source.path}: Triton kernel {source.function}: needs triton: pip install 'iree-dispatch[triton]' (triton==3.6.0)") from None

    fn = source.fn if source.fn is not None else _import_function(source.path, source.function)
    where = f"{source.path}: Triton kernel {source.function}"
    params = getattr(fn, "params", None)
    if params is None:
        raise SpecError(f"{where}: {fn!r} is not a @triton.jit function")
    values = _constexpr_values([JitParam(p.name, p.is_constexpr, p.has_default, p.default) for p in params], dict(source.constexprs), where)
    if [p.name for p in kernel.signature.params] != [p.name for p in params if not p.is_constexpr]:
        raise SpecError(f"{where}: the function's parameters changed since it was declared; declare it again")
    tsig: dict[str, str] = {p.name: triton_type(p) for p in kernel.signature.params}
    tsig.update({n: "constexpr" for n in values})
    tsig = {p.name: tsig[p.name] for p in params}  # Triton wants the function's order
    indices = {n: i for i, n in enumerate(tsig)}
    attrs = {(indices[n],): [["tt.divisibility", 16]] for n in source.aligned}

    out.mkdir(parents=True, exist_ok=True)
    objects: list[Path] = []
    ptx_objects: list[Path] = []
    shared = 0
    for arch in source.archs:
        cc = arch.major * 10 + arch.minor
        try:
            options = {"num_warps": source.num_warps, "num_stages": source.num_stages}
            compiled = triton.compile(ASTSource(fn, tsig, values, attrs), target=GPUTarget("cuda", cc, 32), options=options)
        except Exception as exc:  # Triton reports its compile errors as many exception types
            raise SpecError(f"{where}: Triton failed to compile it for {arch.name}: {exc}") from exc
        meta = compiled.metadata
        for key, allowed in _BANNED.items():
            if getattr(meta, key, allowed) != allowed:
                raise SpecError(
                    f"{where}: for {arch.name} Triton compiled it with {key} = {getattr(meta, key)}; IREE's CUDA HAL launches only "
                    "single-CTA kernels without hidden scratch buffers, cooperative grids or PDL"
                )
        shared = max(shared, meta.shared)
        stem = f"{meta.name}-{meta.hash[:16]}"
        ptx = strip_hidden_params(compiled.asm["ptx"], meta.name, len(kernel.signature.params), where)
        ptx_path = out / f"{stem}.{arch.name}.ptx"
        write_atomic(ptx_path, ptx.encode())
        target = ptx_arch(ptx.encode(), ptx_path)  # sm_90a for cc 90
        cubin = out / f"{stem}.{target.name}.cubin"
        if not cubin.exists():
            with atomic_output(cubin) as partial:
                toolchain.assemble_cubin(ptx_path, target, partial) if toolchain else assemble_cubin(ptx_path, target, partial)
        objects.append(cubin)
        ptx_objects.append(ptx_path)
    # The jit functions the module holds (and so the ones the kernel may call) are read too.
    module_globals = getattr(getattr(fn, "fn", None), "__globals__", {})
    module_files = [Path(v.fn.__code__.co_filename) for v in module_globals.values() if isinstance(v, triton.runtime.JITFunction)]
    read = list(dict.fromkeys(p.absolute() for p in [source.path, *module_files] if p.is_file()))
    return kernel.compiled_as(objects + ptx_objects, shared), read


def _import_function(path: Path, name: str) -> Any:
    """The function `name` of the Python file `path`, imported as a module of its own."""
    module_name = "_iree_dispatch_triton_" + re.sub(r"\W", "_", str(path.absolute()))
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or not path.is_file():
        raise SpecError(f"can't read Triton source {path}")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # the user's module: any error it raises on import
        raise SpecError(f"{path}: importing it failed: {type(exc).__name__}: {exc}") from exc
    fn = getattr(module, name, None)
    if fn is None:
        raise SpecError(f"{path}: no function {name!r} (a @triton.jit function of that name)")
    return fn


def strip_hidden_params(ptx: str, entry: str, declared: int, where: str) -> str:
    """Triton's PTX with the trailing global_scratch/profile_scratch parameters of `entry`
    removed and every load of them replaced by 0 (what Triton's launcher passes when their
    sizes are 0). `declared`: the parameters the signature declares; the entry must have
    exactly HIDDEN_PARAMS more, both pointers."""
    match = re.search(rf"\.entry\s+{re.escape(entry)}\s*\(([^)]*)\)", ptx)
    if not match:
        raise SpecError(f"{where}: Triton's PTX has no entry {entry!r}")
    decls = [d.strip() for d in match[1].split(",") if d.strip()]
    if len(decls) != declared + HIDDEN_PARAMS or not all(".u64" in d for d in decls[declared:]):
        raise SpecError(
            f"{where}: Triton's PTX entry has {len(decls)} parameters, expected the {declared} declared plus {HIDDEN_PARAMS} hidden "
            "64-bit scratch pointers (Triton 3.6's ABI); is another Triton version installed?"
        )
    hidden = [d.split()[-1] for d in decls[declared:]]
    ptx = ptx[: match.start(1)] + "\n\t" + ",\n\t".join(decls[:declared]) + "\n" + ptx[match.end(1) :]
    for name in hidden:
        ptx = re.sub(rf"ld\.param\.[bus]64\s+(%\w+)\s*,\s*\[{re.escape(name)}\]\s*;", r"mov.b64 \1, 0;", ptx)
        if re.search(rf"\b{re.escape(name)}\b", ptx):
            raise SpecError(f"{where}: Triton's PTX uses hidden parameter {name} other than by a plain load; can't remove it")
    return ptx


def _substitute(e: ex.Expr, values: Mapping[str, int]) -> ex.Expr:
    """`e` with the constexpr names in `values` replaced by their integers."""
    if isinstance(e, ex.Sym) and e.name in values:
        return ex.Num(values[e.name])
    if isinstance(e, ex.BinOp):
        return ex.BinOp(e.op, _substitute(e.lhs, values), _substitute(e.rhs, values))
    if isinstance(e, ex.Call):
        return ex.Call(e.func, tuple(_substitute(a, values) for a in e.args))
    return e

