"""Triton kernels as iree_dispatch kernels, compiled offline for a target arch (no GPU needed).

`triton_kernel(add_kernel, "void add_kernel(const float* x, float* out, float alpha, int n)",
grid="ceildiv(n, BLOCK)", constexprs={"BLOCK": 1024}, shape=["n"])` returns a `KernelSpec` whose
objects are Triton's PTX and a cubin per arch, ready for `build` like any prebuilt kernel:

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

import importlib.util
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..backend.cache import cache_dir
from ..core import expr as ex
from ..core.archs import parse_archs
from ..core.dtypes import POINTEE_TYPES, SCALAR_TYPES
from ..core.errors import SpecError
from ..toolchains import assemble_cubin
from .prebuilt import ptx_arch
from .signature import Param, parse_signature
from .spec import KernelSpec

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
    function: str | None = None,
    out_dir: str | Path | None = None,
) -> KernelSpec:
    """Compiles the `@triton.jit` function `fn` for each of `archs` and declares it.

    signature: the kernel's C declaration without its constexprs, named like `fn`.
    grid: blocks per grid, expressions over shape symbols and integer constexprs
    (`"ceildiv(n, BLOCK)"`). constexprs: values of the `tl.constexpr` parameters (defaults
    are used for those left out). num_warps, num_stages: Triton's options.
    aligned: which pointers may be assumed 16-byte aligned (see the module docstring).
    shape, shapes, scalars, inplace, readonly, function: as in KernelSpec.declare.
    out_dir: where the objects are written (default: the build cache folder, `triton/`).
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    name = getattr(fn, "__name__", None)
    params = getattr(fn, "params", None)
    if name is None or params is None:
        raise SpecError(f"{fn!r} is not a @triton.jit function")
    if isinstance(num_warps, bool) or not isinstance(num_warps, int) or num_warps not in (1, 2, 4, 8, 16, 32):
        raise SpecError(f"Triton kernel {name}: num_warps must be a power of two from 1 to 32 (a block of at most 1024 threads), got {num_warps!r}")
    origin = Path(fn.fn.__code__.co_filename)
    where = f"{origin}: Triton kernel {name}"
    c_sig = parse_signature(signature, origin, name)
    constexprs = dict(constexprs or {})
    values: dict[str, Any] = {}
    runtime_params = []
    for p in params:
        if p.is_constexpr:
            if p.name not in constexprs and not p.has_default:
                raise SpecError(f"{where}: constexpr {p.name!r} needs a value: constexprs={{{p.name!r}: ...}}")
            values[p.name] = constexprs.pop(p.name, p.default)
        else:
            runtime_params.append(p.name)
    if constexprs:
        raise SpecError(f"{where}: constexprs names {sorted(constexprs)}, which are not tl.constexpr parameters of {name}")
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

    tsig: dict[str, str] = {}
    for p in c_sig.params:
        if (POINTEE_TYPES.get(p.ctype) if p.pointer else SCALAR_TYPES.get(p.ctype)) is None:
            raise SpecError(f"{where}: parameter {p.name!r} has type {p.ctype!r}, which has no Triton equivalent here")
        tsig[p.name] = triton_type(p)
    tsig.update({n: "constexpr" for n in values})
    tsig = {p.name: tsig[p.name] for p in params}  # Triton wants the function's order
    indices = {n: i for i, n in enumerate(tsig)}
    attrs = {(indices[n],): [["tt.divisibility", 16]] for n in aligned}

    out = Path(out_dir) if out_dir is not None else cache_dir() / "triton"
    out.mkdir(parents=True, exist_ok=True)
    objects: list[Path] = []
    ptx_objects: list[Path] = []
    shared = 0
    for arch in parse_archs(list(archs)):
        cc = arch.major * 10 + arch.minor
        try:
            compiled = triton.compile(ASTSource(fn, tsig, values, attrs), target=GPUTarget("cuda", cc, 32), options={"num_warps": num_warps, "num_stages": num_stages})
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
        ptx = strip_hidden_params(compiled.asm["ptx"], meta.name, len(c_sig.params), where)
        ptx_path = _write_atomic(out / f"{stem}.{arch.name}.ptx", ptx.encode())
        target = ptx_arch(ptx.encode(), ptx_path)  # sm_90a for cc 90
        cubin = out / f"{stem}.{target.name}.cubin"
        if not cubin.exists():
            assemble_cubin(ptx_path, target, cubin.with_name(f".{cubin.name}.{os.getpid()}"))
            os.replace(cubin.with_name(f".{cubin.name}.{os.getpid()}"), cubin)
        objects.append(cubin)
        ptx_objects.append(ptx_path)

    ints = {k: v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}
    grid_items = list(grid) if isinstance(grid, (list, tuple)) else [grid]
    grid_exprs = [str(_substitute(ex.parse(g, f"{where}: grid[{i}]"), ints)) for i, g in enumerate(grid_items)]
    return KernelSpec.declare(
        objects + ptx_objects,
        name,
        signature=signature,
        block=32 * num_warps,
        grid=grid_exprs,
        shape=shape,
        shapes=shapes,
        scalars=scalars,
        inplace=inplace,
        readonly=readonly,
        shared_memory=shared,
        function=function,
    )


def load_triton_kernel(path: Path, name: str, signature: str | None, **options: Any) -> KernelSpec:
    """`triton_kernel` for the function `name` of the Python file `path` (a TOML spec's
    `source = "kernels.py"`). The file is imported as a module of its own."""
    if signature is None:
        raise SpecError(f"{path}: Triton kernel {name}: needs signature = \"void {name}(...)\" (its C declaration, constexprs left out)")
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
    return triton_kernel(fn, signature, **options)


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


def _write_atomic(path: Path, data: bytes) -> Path:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path
