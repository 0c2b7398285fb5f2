"""The one data model: `KernelSpec` and `ModuleSpec`.

A `KernelSpec` is built once, from the kernel's C signature plus what a signature can't say
(block size, grid, tensor shapes, in-place outputs), validated here, and then flows unchanged
through every later stage. The Python API (`KernelSpec.declare`) and the TOML spec file
(`load_spec`) are two front doors to the same constructor.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..core import expr as ex
from ..core.archs import DEFAULT_ARCHS, Arch, parse_arch, parse_archs
from ..core.contract import COMBINE_KINDS, KernelDescription, ParallelPlan, Requirement, ScalarDescription, TensorDescription
from ..core.dtypes import POINTEE_TYPES, SCALAR_HINT, SCALAR_TYPES, VECTOR_TYPES, ScalarType, vector_scalar_type
from ..core.errors import SignatureError, SpecError
from ..core.variants import POLICIES, Variant, plan_variants
from .prebuilt import PrebuiltObject, is_object_source, read_objects
from .signature import KernelSignature, Param, find_kernel, parse_signature, signature_text
from .struct_layout import struct_type
from .type_probe import needs_probe, resolve_types

# IREE's CUDA HAL limits per export: bindings and 32-bit push constants per dispatch, threads per
# block (IREE_HAL_CUDA_MAX_DISPATCH_BINDING_COUNT, IREE_HAL_CUDA_MAX_DISPATCH_CONSTANT_COUNT).
MAX_BINDINGS = 16
MAX_CONSTANTS = 64
MAX_THREADS_PER_BLOCK = 1024

Dim = ex.Expr  # inputs: Sym or Num; outputs: any expression over bound symbols


@dataclass(frozen=True)
class TritonSource:
    """A `@triton.jit` function declared as a kernel but not compiled yet (frontend/triton.py).

    The build's objects stage (backend/pipeline.py) compiles it, inside the build's private
    folder, into PTX and a cubin per arch, and the kernel becomes a prebuilt one: only then are
    its objects and its dynamic shared memory known. The fields are everything Triton's output
    depends on besides the bytes of `path` (which the build key covers as the kernel's source)
    and the Triton version.
    """

    path: Path  # the .py file that defines the function
    function: str  # its name there
    constexprs: tuple[tuple[str, int | float | bool], ...]  # the values given, by name; the others take the function's defaults
    num_warps: int
    num_stages: int
    archs: tuple[Arch, ...]
    aligned: tuple[str, ...]  # the pointers declared 16-byte aligned
    # The live function (the Python API's); None: imported from `path` when the build compiles it.
    fn: Any = field(default=None, compare=False, repr=False)

    def fingerprint(self) -> dict:
        """What decides the objects, for the build key (with the digest of `path`)."""
        from importlib.metadata import PackageNotFoundError, version

        try:
            triton_version = version("triton")
        except PackageNotFoundError:
            triton_version = "not installed"
        return {
            "file": str(self.path.absolute()),
            "function": self.function,
            "constexprs": [[k, repr(v)] for k, v in self.constexprs],
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            "archs": [a.name for a in self.archs],
            "aligned": list(self.aligned),
            "triton": triton_version,
            # Triton's own hash of the function, the jit functions it calls and the globals it reads.
            "jit": self.fn.cache_key if self.fn is not None else None,
        }


@dataclass(frozen=True)
class TensorParam:
    """A pointer parameter: one binding, one tensor of the wrapper function."""

    param: Param
    dtype: str  # MLIR element type
    shape: tuple[Dim, ...]  # for a pointer to a vector type: the declared shape, then its lanes
    role: Literal["input", "output", "inplace"]
    lanes: int = 1  # a pointer to a CUDA vector type (float4: 4): the last dim of `shape` holds them

    @property
    def name(self) -> str:
        return self.param.name

    @property
    def declared_shape(self) -> tuple[Dim, ...]:
        """The shape the spec gives, in elements of the C type (float4s for a float4*)."""
        return self.shape[:-1] if self.lanes > 1 else self.shape

    @property
    def writable(self) -> bool:
        return self.role != "input"


@dataclass(frozen=True)
class ScalarParam:
    """A scalar parameter: its 32-bit push constants (a struct or vector by value: its bytes'
    words), from a size expression or a call argument."""

    param: Param
    stype: ScalarType
    value: ex.Expr | None  # None: the caller passes it as an argument

    @property
    def name(self) -> str:
        return self.param.name


@dataclass(frozen=True)
class KernelSpec:
    name: str
    signature: KernelSignature
    block: tuple[int, int, int]
    grid: tuple[ex.Expr, ex.Expr, ex.Expr]
    tensors: tuple[TensorParam, ...]
    scalars: tuple[ScalarParam, ...]
    shared_memory: int = 0  # bytes of dynamic shared memory per block (with a per-arch table: its largest entry)
    function: str = ""  # the generated function's name
    objects: tuple[PrebuiltObject, ...] = ()  # prebuilt objects (no .cu source), in variant order
    # Per-arch sizes (`shared_memory = { sm_90a = ..., sm_80 = ... }`), newest arch first; empty
    # when one size serves every arch. Each variant's export gets its own size.
    shared_memory_by_arch: tuple[tuple[Arch, int], ...] = ()
    # The nvcc flags and arch the parameter types were resolved with (type_probe.py), when a
    # type is an alias; the module re-resolves a kernel declared with other flags than its own.
    types_resolved_with: tuple[tuple[str, ...], Arch] | None = None
    # A Triton kernel: what it is compiled from. Until the build compiles it (`pending`) it has
    # no objects and no shared memory size; then it is a prebuilt kernel that remembers this.
    triton: TritonSource | None = None
    # Non-const pointers the spec leaves undeclared (not readonly, inplace or outputs): the
    # build reads their roles from the PTX (backend/ptx_roles.py). Until then they count as
    # fresh outputs (in place after with_outputs_in_place) whose named dims may also define sizes.
    inferred: tuple[str, ...] = ()
    # Made by with_outputs_in_place: a pointer the build finds only written is in place too.
    outputs_in_place: bool = False
    # `shared_memory = { size = "...", max = ... }`: the bytes each call needs, an expression
    # over sizes (and block_x/y/z); `shared_memory` is then its declared bound, which the
    # export gets, since IREE fixes the size per export. None: the size is `shared_memory`.
    shared_memory_size: ex.Expr | None = None
    # Fresh outputs zero-filled before the kernel runs (`zero = ["out"]`), in parameter order.
    zero: tuple[str, ...] = ()
    # How DataParallel splits its calls over GPUs (with_parallel), where the spec declares it.
    parallel: ParallelPlan | None = None
    # Relations between sizes the kernel needs beyond equal names (`requires = ["Hq % Hkv == 0"]`):
    # a call that breaks one is refused before launch, as a dim that disagrees is.
    requires: tuple[ex.Relation, ...] = ()

    @property
    def pending(self) -> bool:
        """A Triton kernel the build has not compiled yet (objects and shared memory unknown)."""
        return self.triton is not None and not self.objects

    def compiled_as(self, objects: Sequence[Path], shared_memory: int) -> KernelSpec:
        """This pending Triton kernel, declared again as the prebuilt kernel of `objects`."""
        return self._declared_again(source=list(objects), shared_memory=shared_memory)

    def shared_memory_for(self, variant: Variant) -> int:
        """Bytes of dynamic shared memory the export of `variant` declares. A variant carrying
        several archs (a fatbin) needs the largest of theirs: IREE sets one size per export."""
        if not self.shared_memory_by_arch:
            return self.shared_memory
        table = dict(self.shared_memory_by_arch)
        missing = [a.name for a in variant.archs if a not in table]
        if missing:
            raise SpecError(
                f"{self.signature.where}: kernel {self.name}: shared_memory has no size for {missing[0]} "
                f"(given for {', '.join(a.name for a in table)}); add {missing[0]} = <bytes> to the table"
            )
        return max(table[a] for a in variant.archs)

    @property
    def source(self) -> Path:
        """The .cu file, or for a prebuilt kernel its first object: kernels of one source share
        an executable."""
        return self.signature.source

    @property
    def inputs(self) -> tuple[TensorParam, ...]:
        return tuple(t for t in self.tensors if t.role != "output")

    @property
    def outputs(self) -> tuple[TensorParam, ...]:
        return tuple(t for t in self.tensors if t.role != "input")

    @property
    def scalar_args(self) -> tuple[ScalarParam, ...]:
        return tuple(s for s in self.scalars if s.value is None)

    @property
    def workloads(self) -> tuple[str, ...]:
        """Symbols the grid depends on: the workload operands of the dispatch."""
        seen: dict[str, None] = {}
        for dim in self.grid:
            for name in ex.symbols(dim):
                seen.setdefault(name, None)
        return tuple(seen)

    def size_divisors(self) -> list[tuple[str, ex.Expr]]:
        """(where, divisor) of each division by a value that depends on sizes, in the grid, the
        fresh outputs' dims, the scalars computed from sizes and the relations the kernel
        requires: the generated function checks each is not 0 before anything divides by it."""
        sized = [(f"grid[{i}] = {g}", g) for i, g in enumerate(self.grid)]
        sized += [(f"output {t.name} dim {i} = {d}", d) for t in self.outputs for i, d in enumerate(t.shape) if t.role == "output"]
        sized += [(f"scalar {s.name} = {s.value}", s.value) for s in self.scalars if s.value is not None]
        if self.shared_memory_size is not None:
            sized.append((f"shared_memory = {self.shared_memory_size}", self.shared_memory_size))
        divided = [(label, d) for label, e in sized for d in dict.fromkeys(ex.divisors(e))]
        divided += [(f"requires {r.text}", d) for r in self.requires for d in dict.fromkeys(ex.relation_divisors(r))]
        return [(label, d) for label, d in divided if ex.symbols(d)]

    def describe(self) -> KernelDescription:
        """The kernel's description as declared (no archs, objects or launch plan: the build
        adds them); embedded in the vmfb for call-time checks and `inspect`."""
        return KernelDescription(
            name=self.name,
            function=self.function,
            source=self.source.name,  # a pending Triton kernel's: its .py file
            # A number, or (arch, bytes) pairs as declared per arch.
            shared_memory=tuple((a.name, n) for a, n in self.shared_memory_by_arch) if self.shared_memory_by_arch else self.shared_memory,
            shared_memory_size=None if self.shared_memory_size is None else str(self.shared_memory_size),
            block=tuple(self.block),
            grid=tuple(str(g) for g in self.grid),
            inputs=tuple(TensorDescription(t.name, t.dtype, tuple(_dim_json(d) for d in t.shape)) for t in self.inputs),
            scalars=tuple(ScalarDescription.of(s.name, s.stype) for s in self.scalar_args),
            outputs=tuple(
                TensorDescription(t.name, t.dtype, tuple(_dim_json(d) for d in t.shape), t.role == "inplace", t.name in self.zero) for t in self.outputs
            ),
            parallel=self.parallel,
            requires=tuple(Requirement(r.text, f"requires {r.text}") for r in self.requires),
        )

    def with_parallel(self, declared: Mapping) -> KernelSpec:
        """This kernel with its split over GPUs declared (the spec's `parallel` table):
        `split` maps inputs to the dim each splits along; `combine` maps each output to "concat"
        (joined along the dim holding the size the first split input's split dim has) or "sum".
        Checked against the kernel's tensors."""
        where = f"{self.signature.where}: kernel {self.name}: parallel"
        if not isinstance(declared, Mapping) or set(declared) != {"split", "combine"}:
            raise SpecError(f"{where} must be a table of split and combine, like {{ split = {{ x = 0 }}, combine = {{ out = \"concat\" }} }}")
        split, combine = declared["split"], declared["combine"]
        inputs, outputs = {t.name: t for t in self.inputs}, {t.name: t for t in self.outputs}
        if not isinstance(split, Mapping) or not split or not isinstance(combine, Mapping):
            raise SpecError(f"{where}: split must name at least one input and its dim, combine each output's join")
        for name, dim in split.items():
            if name not in inputs:
                raise SpecError(f"{where}: split names {name!r}, which is no input tensor (inputs: {', '.join(inputs)})")
            if not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim < len(inputs[name].shape):
                raise SpecError(f"{where}: split {name} = {dim!r} is not a dim of {name} (rank {len(inputs[name].shape)})")
        if set(combine) != set(outputs):
            raise SpecError(f"{where}: combine must say how each output joins ({', '.join(outputs)}), got {', '.join(combine) or 'none'}")
        first, first_dim = next(iter(split.items()))
        size = inputs[first].shape[first_dim]
        joins = []
        for name, kind in combine.items():
            if kind not in COMBINE_KINDS:
                raise SpecError(f"{where}: combine {name} = {kind!r}; expected one of {', '.join(COMBINE_KINDS)}")
            dims = [i for i, d in enumerate(outputs[name].shape) if d == size]
            if kind == "concat" and not dims:
                raise SpecError(f"{where}: combine {name} = \"concat\", but no dim of {name} has the size {first} is split along ({_dim_json(size)})")
            joins.append((name, kind, dims[0] if kind == "concat" else -1))
        return dataclasses.replace(self, parallel=ParallelPlan(tuple(split.items()), tuple(joins)))

    def fingerprint(self) -> dict:
        """describe() plus what it leaves out because callers don't pass it, but the generated
        code depends on: the C signature (a declared one may differ from the source's) and the
        expressions of the scalars computed from sizes."""
        return {
            **self.describe().to_dict(),
            "signature": signature_text(self.signature),
            "extern_c": self.signature.extern_c,
            "declared": self.signature.declared,
            "computed_scalars": {s.name: str(s.value) for s in self.scalars if s.value is not None},
            # Roles the build decides from the PTX, and how (describe() shows them as outputs).
            "inferred": list(self.inferred),
            "outputs_in_place": self.outputs_in_place,
            **({"triton": self.triton.fingerprint()} if self.triton is not None else {}),
        }

    @classmethod
    def declare(
        cls,
        source: str | Path,
        name: str,
        *,
        block: int | Sequence[int] | None,
        grid: str | int | Sequence[str | int] | None,
        shape: Sequence[str | int] | None = None,
        shapes: Mapping[str, Sequence[str | int]] | None = None,
        scalars: Mapping[str, str | int] | None = None,
        inplace: Sequence[str] = (),
        readonly: Sequence[str] = (),
        outputs: Sequence[str] = (),
        zero: Sequence[str] = (),
        shared_memory: str | int | Mapping[str, str | int] = 0,
        function: str | None = None,
        signature: str | None = None,
        requires: Sequence[str] = (),
        nvcc_flags: Sequence[str] = (),
        arch: str | Arch | None = None,
        triton: TritonSource | None = None,
    ) -> KernelSpec:
        """Reads kernel `name` from `source` and completes it with what the signature can't say.

        source: a .cu file, or prebuilt objects: a .ptx, .cubin or .fatbin file or a list of them
        (one variant each, the arch read from the file). A prebuilt kernel needs `signature`, its
        C declaration (`"void k(const float* x, int n)"`), since machine code can't tell a pointer
        from a 64-bit integer or an input from an output; `name` is its entry name. In a .cu
        source, `signature` declares an extern "C" kernel that a macro defines (the signature
        reader doesn't expand macros); the build checks it against the compiled entry.

        block: threads per block, 1-3 ints. grid: blocks per grid, 1-3 expressions.
        shape: the shape of every pointer param not in `shapes` (dims: symbol names or ints).
        scalars: expressions for scalar params; a scalar named like a shape symbol takes its
        value; any other scalar becomes an argument of the generated function.
        inplace: non-const pointers that are read and written (input and result, same buffer).
        readonly: non-const pointers the kernel only reads.
        outputs: non-const pointers the kernel only writes (fresh, uninitialised outputs).
        zero: fresh outputs zero-filled before the kernel runs (a kernel that accumulates into
        its output with atomicAdd): each is a fresh output the kernel may read, never an input
        or an in-place pointer (zeroing those would destroy the caller's data).
        A non-const pointer in none of these lists takes the role its compiled PTX shows (read
        only: input; read and written: in place; only written: output; not traceable: in
        place); until the build has read it, it counts as an output. The build also refuses a
        declaration the PTX contradicts.
        shared_memory: bytes of dynamic shared memory (`extern __shared__`), an integer or an
        expression of block_x, block_y, block_z. IREE fixes it per kernel (on the export, not per
        launch): a size that depends on sizes is given with its bound, `{"size": "(3*Bc*d +
        Bc*Br)*4", "max": 49152}`; the export gets `max`, each call checks its size against it,
        and a direct launch passes the call's exact size. A mapping arch → size
        (`{"sm_90a": 197632, "sm_80": 62592}`) sizes each arch's variant on its own (each has its
        own export); the module must then build only archs the mapping names.
        requires: relations between sizes (shape names and integer arguments) the kernel needs
        beyond equal names, each two expressions compared with == != < <= > >=, several joined
        by `or`: `["Hq % Hkv == 0", "MB == 1 or MB == B"]`; a call that breaks one is refused
        before launch (by the runtime, the generated function and model substitution).
        function: name of the generated function (default: `name` with every run of other
        characters than letters, digits and _ replaced by one _: `scale<float>` → `scale_float`,
        `ns::kernel` → `ns_kernel`).
        nvcc_flags, arch: what parameter types spelled through aliases (`typedef`, `using`, a
        `-D`-selected `#if`) are resolved with, by compiling a probe (type_probe.py); default: no
        flags, the newest default arch. A ModuleSpec with other flags or archs resolves its
        kernels again with its own.
        triton: a Triton kernel (frontend/triton.py declares these): with `source` its .py file,
        pending until the build compiles it; with `source` its objects, compiled.
        """
        objects: tuple[PrebuiltObject, ...] = ()
        if is_object_source(source):
            objects = read_objects(source, f"kernel {name}")
            if signature is None:
                raise SpecError(f"{objects[0].path}: kernel {name}: a prebuilt object needs signature = \"void {name}(...)\" (its C declaration)")
            namespace, _, leaf = name.removeprefix("::").rpartition("::")
            signature = dataclasses.replace(parse_signature(signature, objects[0].path, leaf), namespace=namespace)
        elif triton is not None:
            if signature is None:
                raise SpecError(f"{source}: Triton kernel {name}: needs signature = \"void {name}(...)\" (its C declaration, constexprs left out)")
            signature = parse_signature(signature, Path(source), name)
        elif signature is not None:
            signature = _declared_in_source(Path(source), name, signature)
        else:
            signature = find_kernel(Path(source), name)
        types_resolved_with = None
        if not objects and triton is None and needs_probe(signature):
            probe_arch = arch if isinstance(arch, Arch) else parse_arch(arch or DEFAULT_ARCHS[-1])
            signature = resolve_types(signature, tuple(nvcc_flags), probe_arch)
            types_resolved_with = (tuple(nvcc_flags), probe_arch)
        where = f"{signature.where}: kernel {name}"
        function = function or re.sub(r"\W+", "_", name).strip("_")
        if not function.isidentifier():
            raise SpecError(f"{where}: function name {function!r} must be an identifier (letters, digits, _)")
        params_by_name = {p.name: p for p in signature.params}
        shapes = _table(shapes, f"{where}: shapes")
        scalar_exprs = _table(scalars, f"{where}: scalars")
        inplace = _names(inplace, f"{where}: inplace")
        readonly = _names(readonly, f"{where}: readonly")
        outputs = _names(outputs, f"{where}: outputs")
        zero = _names(zero, f"{where}: zero")
        if function is not None and not isinstance(function, str):
            raise SpecError(f"{where}: function must be a string, got {function!r}")
        _check_names(where, "shapes", shapes, params_by_name, want_pointer=True)
        _check_names(where, "scalars", scalar_exprs, params_by_name, want_pointer=False)
        _check_names(where, "inplace", dict.fromkeys(inplace), params_by_name, want_pointer=True)
        _check_names(where, "readonly", dict.fromkeys(readonly), params_by_name, want_pointer=True)
        _check_names(where, "outputs", dict.fromkeys(outputs), params_by_name, want_pointer=True)
        _check_names(where, "zero", dict.fromkeys(zero), params_by_name, want_pointer=True)

        # IREE passes every binding before every push constant. A PTX entry is reordered to
        # match (ptx_adapt.py); machine code can't be rewritten, so its kernel must agree.
        first_scalar = next((p for p in signature.params if not p.pointer), None)
        machine_code = [o.path.name for o in objects if o.kind != "ptx"]
        if first_scalar and machine_code:
            late = next((p for p in signature.params[signature.params.index(first_scalar) :] if p.pointer), None)
            if late:
                raise SpecError(
                    f"{where}: pointer parameter {late.name!r} comes after scalar {first_scalar.name!r}; IREE passes all buffers "
                    f"first and then all scalars. PTX entries are reordered to match, machine code ({', '.join(machine_code)}) "
                    "can't be: give the kernel's PTX instead, or compile it with its pointer parameters first"
                )

        tensors = []
        inferred: list[str] = []
        bound: dict[str, str] = {}  # symbol → where it is bound, for error messages
        tentative: dict[str, str] = {}  # symbols only undeclared pointers may bind
        for p in (p for p in signature.params if p.pointer):
            if p.ctype not in POINTEE_TYPES and p.ctype not in VECTOR_TYPES:
                written = f" (written {p.written!r})" if p.written and p.written != p.ctype else ""
                raise SpecError(
                    f"{_param_where(signature, p)}: unknown element type {p.ctype!r}{written} of pointer {p.name!r}; supported: "
                    f"{', '.join(sorted(POINTEE_TYPES))} and the CUDA vector types (float4, half2, uchar4, ...)"
                )
            lists = [field for field, names in (("inplace", inplace), ("readonly", readonly), ("outputs", outputs)) if p.name in names]
            if len(lists) > 1:
                raise SpecError(f"{where}: {p.name!r} is listed both in {lists[0]} and {lists[1]}; a pointer has one role")
            if p.const and lists and lists[0] != "readonly":
                role_name = "in-place" if lists[0] == "inplace" else "an output"
                raise SpecError(f"{where}: {p.name!r} points to const data, so it can't be {role_name}; drop const or the {lists[0]} entry")
            if p.name in zero and (p.const or lists[:1] in (["inplace"], ["readonly"])):
                what = "points to const data (an input)" if p.const else f"is listed in {lists[0]}, so the caller passes it in"
                raise SpecError(
                    f"{where}: zero = [\"{p.name}\"] zero-fills a fresh output before the kernel runs, but {p.name!r} {what}: zeroing it would "
                    f"destroy the caller's data; drop it from zero, or make it a fresh output (outputs = [\"{p.name}\"])"
                )
            role = "input" if (p.const or p.name in readonly) else ("inplace" if p.name in inplace else "output")
            # A zero-filled pointer is a fresh output by declaration (the kernel may read it).
            undecided = not p.const and not lists and p.name not in zero and triton is None
            if undecided:
                inferred.append(p.name)
            dims_src = shapes.get(p.name, shape)
            if dims_src is None:
                raise SpecError(f"{where}: pointer parameter {p.name!r} needs a shape; add shape = [...] for all tensors or shapes.{p.name} = [...]")
            if not isinstance(dims_src, (list, tuple)) or not dims_src:
                raise SpecError(f"{where}: shape of {p.name!r} must be a non-empty list of dims, got {dims_src!r}")
            dims = tuple(ex.parse(d, f"{where}: shape of {p.name}[{i}]") for i, d in enumerate(dims_src))
            if undecided:
                # Its role is known after the compile: if it turns out an input its named dims
                # define sizes, so expressions may use them already (the build checks them
                # again); a scalar of that name stays an argument until then, as for an output.
                for i, d in enumerate(dims):
                    if isinstance(d, ex.Sym):
                        tentative.setdefault(d.name, f"{p.name} dim {i}")
            elif role != "output":
                for i, d in enumerate(dims):
                    if not isinstance(d, (ex.Sym, ex.Num)):
                        raise SpecError(f"{where}: input {p.name!r} dim {i} is {d}; input dims must be a name or an integer (expressions are for output shapes)")
                    if isinstance(d, ex.Num) and d.value < 0:
                        raise SpecError(f"{where}: input {p.name!r} dim {i} is negative")
                    if isinstance(d, ex.Sym):
                        bound.setdefault(d.name, f"{p.name} dim {i}")
            if p.ctype in VECTOR_TYPES:
                # A float4* of [n] float4s is, for the caller, an f32 array [n, 4]: shape names keep
                # counting what the kernel indexes, and the call checks the lanes like any dim.
                vector = VECTOR_TYPES[p.ctype]
                lanes = (ex.Num(vector.lanes),) if vector.lanes > 1 else ()
                tensors.append(TensorParam(p, vector.element, dims + lanes, role, vector.lanes))
            else:
                tensors.append(TensorParam(p, POINTEE_TYPES[p.ctype], dims, role))

        scalar_list = []
        for p in (p for p in signature.params if not p.pointer):
            stype = SCALAR_TYPES.get(p.ctype)
            if stype is None and p.ctype in VECTOR_TYPES:
                stype = vector_scalar_type(p.ctype)
            elif stype is None and not objects and triton is None and re.fullmatch(r"[A-Za-z_][\w:]*", p.ctype):
                # A struct by value: its layout from the compiler, with the flags its types were resolved with.
                probe_arch = arch if isinstance(arch, Arch) else parse_arch(arch or DEFAULT_ARCHS[-1])
                stype = struct_type(signature, p, tuple(nvcc_flags), probe_arch)
                types_resolved_with = (tuple(nvcc_flags), probe_arch)
            if stype is None:
                written = f" (written {p.written!r})" if p.written and p.written != p.ctype else ""
                raise SpecError(f"{_param_where(signature, p)}: scalar {p.name!r} has type {p.ctype!r}{written}; {SCALAR_HINT}")
            if stype.kind == "struct":
                if p.name in scalar_exprs:
                    raise SpecError(f"{where}: scalars.{p.name}: a {p.ctype} is passed by the caller, not computed from sizes; drop the entry")
                if stype.slots > MAX_CONSTANTS:
                    raise SpecError(
                        f"{_param_where(signature, p)}: {p.ctype} {p.name!r} is {stype.nbytes} bytes, {stype.slots} 32-bit push constants, "
                        f"but IREE's CUDA HAL allows at most {MAX_CONSTANTS} per dispatch; pass it in a tensor instead"
                    )
                # Its integer fields of one word may size things, by their dotted names (`s.m`).
                for f in stype.fields:
                    if f.stype.integer and f.stype.nbytes == 4 and f.offset % 4 == 0:
                        bound.setdefault(f"{p.name}.{f.name}", f"field {f.name} of argument {p.name}")
                scalar_list.append(ScalarParam(p, stype, None))
                if machine_code and stype.nbytes != 4:
                    raise SpecError(
                        f"{where}: {p.ctype} {p.name!r} is {stype.nbytes} bytes, but IREE passes each push constant as its own 32-bit "
                        f"parameter; PTX is rewritten to match, machine code ({', '.join(machine_code)}) can't be: give PTX instead"
                    )
                continue
            if p.name in scalar_exprs:
                if not (stype.integer or stype.kind == "float"):
                    raise SpecError(f"{where}: scalars.{p.name}: a {p.ctype} can't be computed from sizes (only integer types and float can); make it an argument")
                value = ex.parse(scalar_exprs[p.name], f"{where}: scalars.{p.name}")
            elif p.name in bound:
                value = ex.Sym(p.name)
            else:
                value = None
                if stype.integer:
                    bound.setdefault(p.name, f"argument {p.name}")
            scalar_list.append(ScalarParam(p, stype, value))
            if stype.nbytes != 4 and machine_code:
                raise SpecError(
                    f"{where}: scalar {p.name!r} is a {stype.nbytes}-byte {p.ctype}, but IREE passes each scalar as one 32-bit push "
                    f"constant; PTX is rewritten to match (64-bit values split in two, narrow ones widened), machine code "
                    f"({', '.join(machine_code)}) can't be: give PTX instead, or make the parameter 32-bit"
                )

        bound = {**tentative, **bound}
        for s in scalar_list:
            if s.value is not None:
                _check_bound(s.value, bound, f"{where}: scalars.{s.name}")
        for t in tensors:
            if t.role == "output" and t.name not in inferred:
                for i, d in enumerate(t.shape):
                    _check_bound(d, bound, f"{where}: output {t.name!r} dim {i}")

        block_dims = _parse_block(block, where)
        shared_size = None
        if isinstance(shared_memory, Mapping) and _SIZED_KEYS & set(shared_memory):
            by_arch = ()
            shared_size, shared_bytes = _parse_sized_shared_memory(shared_memory, block_dims, bound, where)
        elif isinstance(shared_memory, Mapping):
            by_arch = _parse_shared_memory_table(shared_memory, block_dims, bound, where)
            shared_bytes = max(n for _, n in by_arch)
        else:
            by_arch, shared_bytes = (), _parse_shared_memory(shared_memory, block_dims, bound, where)
        grid_exprs = _parse_grid(grid, where)
        for i, g in enumerate(grid_exprs):
            _check_bound(g, bound, f"{where}: grid[{i}]")
        relations = _parse_requires(requires, bound, where)

        # IREE removes a dispatch none of whose results is used, and a function returns only
        # tensors: a kernel that writes none would never run.
        if not tensors:
            raise SpecError(
                f"{where}: the kernel has no pointer parameter, so it has no tensor result; IREE runs a kernel for the tensors its "
                "generated function returns (a dispatch with no result is removed as dead code), so it would never run. Give it a "
                "pointer it writes its result through (e.g. float* out, shape = [...])"
            )
        if not any(t.writable for t in tensors):
            raise SpecError(
                f"{where}: the kernel writes no tensor (every pointer, {', '.join(t.name for t in tensors)}, is const or readonly), so it has "
                "no result; IREE removes a dispatch with no result as dead code, so it would never run. If it writes through one of them, "
                f"drop const (the build then reads its role from the PTX) or declare it inplace = [\"{tensors[0].name}\"]; else give it a pointer it "
                "writes its result through"
            )
        if len(tensors) > MAX_BINDINGS:
            raise SpecError(f"{where}: {len(tensors)} pointer parameters, but IREE's CUDA HAL allows at most {MAX_BINDINGS} bindings per dispatch")
        slots = sum(s.stype.slots for s in scalar_list)
        if slots > MAX_CONSTANTS:
            raise SpecError(
                f"{where}: the scalar parameters need {slots} 32-bit push constants (64-bit values take two, a struct its bytes' words), "
                f"but IREE allows at most {MAX_CONSTANTS} per dispatch"
            )
        return cls(name, signature, block_dims, grid_exprs, tuple(tensors), tuple(scalar_list), shared_bytes, function, objects, by_arch, types_resolved_with, triton,
                   tuple(inferred), shared_memory_size=shared_size, zero=tuple(t.name for t in tensors if t.name in zero), requires=relations)

    def with_outputs_in_place(self, function: str | None = None) -> KernelSpec:
        """The same kernel with every fresh output declared in place: its generated function
        takes the output buffers as arguments (in the kernel's parameter order) and writes into
        them, so no output is allocated per call (the `out=` form).

        function: the new function's name (default: unchanged). Both forms of one kernel can't
        share a module yet (the executable names its export after the PTX entry): build the
        out= form into a module of its own.

        Declared again from the source with everything else unchanged (block, grid, shapes,
        scalar expressions, readonly pointers). A scalar that sized an output and was a call
        argument is then taken from the output buffer's size instead.
        """
        where = f"{self.signature.where}: kernel {self.name}"
        if self.zero:
            raise SpecError(
                f"{where}: zero = {json.dumps(list(self.zero))} zero-fills fresh outputs, but the out= form writes into the caller's buffers, which it "
                "must not overwrite before the kernel runs; declare the out= form without zero and zero the buffers before the call"
            )
        for t in self.tensors:
            for i, d in enumerate(t.shape):
                if t.role == "output" and not isinstance(d, (ex.Sym, ex.Num)):
                    raise SpecError(
                        f"{where}: output {t.name!r} dim {i} is {d}; a caller-provided output needs dims that are names or "
                        f"integers (declare shapes.{t.name} with a name, or keep the output allocated by IREE)"
                    )
        # Undeclared pointers count as in place too until the build reads their roles.
        moved = self._declared_again(inplace=[t.name for t in self.tensors if t.writable], outputs=[], function=function or self.function)
        return dataclasses.replace(moved, outputs_in_place=True)

    def with_roles(self, roles: Mapping[str, Literal["input", "output", "inplace"]]) -> KernelSpec:
        """The same kernel with the roles of its undeclared pointers decided (`roles`: one per
        name in `inferred`, as the build read them from the PTX), checked again as declared."""
        if set(roles) != set(self.inferred):
            raise ValueError(f"kernel {self.name}: roles given for {sorted(roles)}, undecided: {sorted(self.inferred)}")
        decided = {name: ("inplace" if role == "output" and self.outputs_in_place else role) for name, role in roles.items()}
        declared = self._declared_again(
            keep_inferred=False,
            inplace=[*self._declared("inplace"), *(n for n, r in decided.items() if r == "inplace")],
            readonly=[*self._declared("input"), *(n for n, r in decided.items() if r == "input")],
            outputs=[*self._declared("output"), *(n for n, r in decided.items() if r == "output")],
        )
        return declared

    def _declared(self, role: str) -> list[str]:
        """The non-const pointers the spec itself declares with `role`."""
        return [t.name for t in self.tensors if t.role == role and not t.param.const and t.name not in self.inferred]

    def with_types_resolved(self, nvcc_flags: Sequence[str], arch: Arch) -> KernelSpec:
        """The same kernel with its aliased parameter types resolved with these flags and arch
        (a module's), or itself when it has no aliases or was resolved with them already."""
        if self.types_resolved_with is None or self.types_resolved_with == (tuple(nvcc_flags), arch):
            return self
        return self._declared_again(nvcc_flags=nvcc_flags, arch=arch)

    def _shared_memory_declared(self) -> int | dict:
        """`shared_memory` as declare() takes it: bytes, a per-arch table, or a size and its bound."""
        if self.shared_memory_size is not None:
            return {"size": _dim_json(self.shared_memory_size), "max": self.shared_memory}
        return {a.name: n for a, n in self.shared_memory_by_arch} if self.shared_memory_by_arch else self.shared_memory

    def _declared_again(self, *, keep_inferred: bool = True, **changes) -> KernelSpec:
        """Declared again from the source, with `changes` to the declaration's arguments.
        keep_inferred: the undeclared pointers stay to be read from the PTX (False: `changes`
        declares them)."""
        flags, arch = self.types_resolved_with or ((), None)
        provisional = list(self.inferred) if self.outputs_in_place else []  # in place until the build reads them
        arguments = dict(
            signature=signature_text(self.signature, written=True) if self.signature.declared else None,
            block=list(self.block),
            grid=[_dim_json(g) for g in self.grid],
            shapes={t.name: [_dim_json(d) for d in t.declared_shape] for t in self.tensors},
            scalars={s.name: _dim_json(s.value) for s in self.scalars if s.value is not None and s.value != ex.Sym(s.name)},
            inplace=[*self._declared("inplace"), *provisional],
            readonly=self._declared("input"),
            outputs=self._declared("output"),
            shared_memory=self._shared_memory_declared(),
            zero=list(self.zero),
            function=self.function,
            requires=[r.text for r in self.requires],
            nvcc_flags=flags,
            arch=arch,
            triton=self.triton,
        )
        source = changes.pop("source", [o.path for o in self.objects] if self.objects else self.source)
        again = KernelSpec.declare(source, self.name, **{**arguments, **changes})
        return dataclasses.replace(again, inferred=self.inferred if keep_inferred else again.inferred, outputs_in_place=self.outputs_in_place, parallel=self.parallel)


def _declared_in_source(source: Path, name: str, signature: str) -> KernelSignature:
    """The declared signature of a kernel in a .cu source: for one a macro defines (the reader
    can't see it), or to state the types of one it can see. The build checks it against the
    compiled PTX entry, as any signature. A kernel the reader sees keeps its name, namespace and
    linkage; the declaration must agree with it on the parameters' names and pointer-ness."""
    leaf = name.partition("<")[0].rpartition("::")[2]
    try:
        found = find_kernel(source, name)
    except SignatureError:
        return dataclasses.replace(parse_signature(signature, source, leaf), name=name.removeprefix("::"))
    declared = parse_signature(signature, source, leaf)
    shape_of = lambda params: [f"{p.name}{'*' if p.pointer else ''}" for p in params]  # noqa: E731
    if shape_of(declared.params) != shape_of(found.params):
        raise SpecError(
            f"{found.where}: kernel {name}: signature {signature!r} disagrees with the source's parameters "
            f"({', '.join(shape_of(found.params))}); give the same parameters, in order"
        )
    params = tuple(dataclasses.replace(d, line=f.line) for d, f in zip(declared.params, found.params))
    return dataclasses.replace(found, params=params, declared=True)


def _param_where(signature: KernelSignature, p: Param) -> str:
    return f"{signature.source}:{p.line}: kernel {signature.name}"


def _dim_json(d: ex.Expr) -> str | int:
    return d.value if isinstance(d, ex.Num) else str(d)


def _table(value, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise SpecError(f"{what} must be a table of parameter names, got {value!r}")
    return dict(value)


def _names(value, what: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{what} must be a list of parameter names, got {value!r}")
    return tuple(value)


def _check_names(where, field_name, given: Mapping, params: Mapping[str, Param], want_pointer: bool) -> None:
    for key in given:
        if key not in params:
            raise SpecError(f"{where}: {field_name} names {key!r}, which is not a parameter (parameters: {', '.join(params) or 'none'})")
        p = params[key]
        if p.pointer != want_pointer:
            kind = f"a pointer ({p.ctype}*), a tensor" if p.pointer else f"a scalar ({p.ctype})"
            raise SpecError(f"{where}: {field_name} names {key!r}, but the signature declares it as {kind}")


def _check_bound(e: ex.Expr, bound: Mapping[str, str], what: str) -> None:
    for name in ex.symbols(e):
        if name not in bound:
            known = ", ".join(sorted(bound)) or "none"
            raise SpecError(f"{what}: {str(e)!r} uses {name!r}, which no input dim or integer argument defines (known: {known})")


def _parse_requires(requires, bound: Mapping[str, str], where: str) -> tuple[ex.Relation, ...]:
    """The `requires` list, each relation parsed and its names checked: every name must be a size
    the call gives (an input dim or an integer argument)."""
    if isinstance(requires, str) or not isinstance(requires, (list, tuple)):
        raise SpecError(f"{where}: requires must be a list of relation strings, like requires = [\"Hq % Hkv == 0\"], got {requires!r}")
    relations = []
    for i, text in enumerate(requires):
        relation = ex.parse_relation(text, f"{where}: requires[{i}]")
        for name in ex.relation_symbols(relation):
            if name not in bound:
                known = ", ".join(sorted(bound)) or "none"
                raise SpecError(f"{where}: requires[{i}]: {relation.text!r} uses {name!r}, which no input dim or integer argument defines (known: {known})")
        relations.append(relation)
    return tuple(relations)


def _parse_block(block, where) -> tuple[int, int, int]:
    if block is None:
        raise SpecError(f"{where}: missing block size; add block = [threads_x, threads_y, threads_z] (e.g. block = [256])")
    dims = list(block) if isinstance(block, (list, tuple)) else [block]
    if not 1 <= len(dims) <= 3 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
        raise SpecError(f"{where}: block must be 1 to 3 positive integers, got {block!r}")
    dims += [1] * (3 - len(dims))
    if dims[0] * dims[1] * dims[2] > MAX_THREADS_PER_BLOCK:
        raise SpecError(f"{where}: block {dims} has {dims[0] * dims[1] * dims[2]} threads; CUDA allows at most {MAX_THREADS_PER_BLOCK}")
    return tuple(dims)  # type: ignore[return-value]


def _block_names(block: tuple[int, int, int]) -> dict[str, int]:
    return {"block_x": block[0], "block_y": block[1], "block_z": block[2]}


def _parse_shared_memory(value, block: tuple[int, int, int], bound: Mapping[str, str], where: str) -> int:
    """A fixed size: bytes, or an expression of block_x/y/z. bound: the sizes and integer
    arguments (a size expression over them needs a declared bound: see _parse_sized_shared_memory)."""
    e = ex.parse(value, f"{where}: shared_memory")
    names = _block_names(block)
    unknown = [n for n in ex.symbols(e) if n not in names]
    if unknown and unknown[0] in bound:
        raise SpecError(
            f"{where}: shared_memory uses {unknown[0]!r} (from {bound[unknown[0]]}), a size: IREE fixes the dynamic shared memory per kernel, "
            f"not per launch, so declare its upper bound: shared_memory = {{ size = \"{value}\", max = <bytes> }} (the kernel gets max "
            "bytes through IREE and its exact size when launched directly; a call that needs more than max is refused)"
        )
    if unknown:
        raise SpecError(
            f"{where}: shared_memory uses {unknown[0]!r}, which is neither block_x, block_y, block_z nor a size (an input dim or "
            f"integer argument; known: {', '.join(sorted(bound)) or 'none'})"
        )
    size = ex.evaluate(e, names)
    if size < 0:
        raise SpecError(f"{where}: shared_memory is {size} bytes")
    return size


_SIZED_KEYS = {"size", "max"}  # shared_memory = { size = "<expression over sizes>", max = <bytes> }


def _parse_sized_shared_memory(table: Mapping, block: tuple[int, int, int], bound: Mapping[str, str], where: str) -> tuple[ex.Expr, int]:
    """`{ size = "(3*Bc*d + Bc*Br)*4", max = 49152 }`: the expression each call evaluates, and
    the bound the export declares (IREE fixes one size per export)."""
    if set(table) != _SIZED_KEYS:
        raise SpecError(
            f"{where}: shared_memory = {dict(table)!r}: a size that depends on sizes is given as {{ size = \"<expression>\", max = <bytes> }} "
            f"(both keys, nothing else); a per-arch table names archs only"
        )
    limit = table["max"]
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise SpecError(f"{where}: shared_memory max must be a positive number of bytes, got {limit!r}")
    e = ex.parse(table["size"], f"{where}: shared_memory size")
    unknown = [n for n in ex.symbols(e) if n not in bound and n not in _block_names(block)]
    if unknown:
        raise SpecError(
            f"{where}: shared_memory size uses {unknown[0]!r}, which is neither block_x, block_y, block_z nor a size (an input dim or "
            f"integer argument; known: {', '.join(sorted(bound)) or 'none'})"
        )
    if not any(n in bound for n in ex.symbols(e)):
        fixed = ex.evaluate(e, _block_names(block))
        raise SpecError(f"{where}: shared_memory size {table['size']!r} depends on no size ({fixed} bytes); give it as shared_memory = {fixed}")
    return e, limit


def _parse_shared_memory_table(table: Mapping, block: tuple[int, int, int], bound: Mapping[str, str], where: str) -> tuple[tuple[Arch, int], ...]:
    if not table:
        raise SpecError(f"{where}: shared_memory is an empty table; give bytes per arch, e.g. {{ sm_90a = 197632, sm_80 = 98304 }}")
    sizes: dict[Arch, int] = {}
    for key, value in table.items():
        try:
            arch = parse_arch(key)
        except SpecError as exc:
            raise SpecError(f"{where}: shared_memory key {key!r}: {exc}") from None
        if arch in sizes:
            raise SpecError(f"{where}: shared_memory gives {arch.name} twice")
        sizes[arch] = _parse_shared_memory(value, block, bound, f"{where}: shared_memory.{key}")
    return tuple(sorted(sizes.items(), key=lambda item: (item[0].major, item[0].minor, item[0].suffix != ""), reverse=True))


def _parse_grid(grid, where) -> tuple[ex.Expr, ex.Expr, ex.Expr]:
    if grid is None:
        raise SpecError(f"{where}: missing grid; add grid = [\"ceildiv(n, 256)\"] (expressions over shape symbols)")
    items = list(grid) if isinstance(grid, (list, tuple)) else [grid]
    if not 1 <= len(items) <= 3:
        raise SpecError(f"{where}: grid must have 1 to 3 expressions, got {grid!r}")
    exprs = [ex.parse(g, f"{where}: grid[{i}]") for i, g in enumerate(items)]
    for i, e in enumerate(exprs):
        if not ex.symbols(e) and ex.evaluate(e, {}) < 1:
            raise SpecError(f"{where}: grid[{i}] is {ex.evaluate(e, {})}; a grid dimension must be at least 1")
    exprs += [ex.Num(1)] * (3 - len(exprs))
    return tuple(exprs)  # type: ignore[return-value]


# nvcc/NVRTC flags that pick the target architecture: the module's archs decide that.
_ARCH_FLAG = re.compile(r"^(-arch|--gpu-architecture|-gencode|--generate-code|-code|--gpu-code)(=|$)")


@dataclass(frozen=True)
class ModuleSpec:
    """What one `.vmfb` holds: kernels, the archs to build them for, and nvcc flags."""

    name: str
    kernels: tuple[KernelSpec, ...]
    archs: tuple[Arch, ...] = field(default_factory=lambda: tuple(parse_archs(DEFAULT_ARCHS)))
    nvcc_flags: tuple[str, ...] = ()
    objects: str = "cubin"  # object policy, see variants.py: "ptx", "cubin" or "fatbin"

    @property
    def variants(self) -> tuple[Variant, ...]:
        return plan_variants(self.archs, self.objects)

    def variants_for(self, source: Path) -> tuple[Variant, ...]:
        """The variants of `source`'s executable: the policy's for a .cu file, one per object
        for prebuilt objects (their archs are the objects', not the module's)."""
        kernel = next(k for k in self.kernels if k.source == source)
        return tuple(o.variant for o in kernel.objects) if kernel.objects else self.variants

    def __post_init__(self) -> None:
        # Kernels whose types are aliases mean what this module's flags make them mean.
        if self.archs:
            resolved = tuple(k.with_types_resolved(self.nvcc_flags, self.archs[0]) for k in self.kernels)
            object.__setattr__(self, "kernels", resolved)
        arch_flags = [f for f in self.nvcc_flags if _ARCH_FLAG.match(f)]
        if arch_flags:
            raise SpecError(
                f"module {self.name}: nvcc_flags {arch_flags} choose the target architecture, but iree_dispatch compiles each arch "
                f"the module builds itself (archs: {', '.join(a.name for a in self.archs)}); drop the flag and list the archs in "
                "[module] archs (or --arch)"
            )
        if self.objects not in POLICIES:
            raise SpecError(f"module {self.name}: objects = {self.objects!r}; choose one of {', '.join(POLICIES)}")
        if not self.name.isidentifier():
            raise SpecError(f"module name {self.name!r} must be an identifier (letters, digits, _)")
        if not self.kernels:
            raise SpecError(f"module {self.name}: no kernels declared")
        seen: dict[str, KernelSpec] = {}
        entries: dict[tuple[Path, str, TritonSource | None], KernelSpec] = {}
        for k in self.kernels:
            # One executable per source holds each kernel once: its export is named by the entry.
            # (Pending Triton kernels of one .py file get objects, so executables, of their own.)
            if (k.source, k.name, k.triton if k.pending else None) in entries:
                raise SpecError(
                    f"module {self.name}: kernel {k.name} of {k.source.name} is declared twice ({entries[(k.source, k.name, k.triton if k.pending else None)].function}, "
                    f"{k.function}); put the second declaration (e.g. an out= form) in another module"
                )
            entries[(k.source, k.name, k.triton if k.pending else None)] = k
            other = next((o for o in self.kernels if o.source == k.source and o.objects != k.objects), None)
            if other is not None:
                raise SpecError(f"module {self.name}: kernels {other.name} and {k.name} both come from {k.source.name} but list different objects; list the same objects for both")
            if k.function in seen:
                raise SpecError(f"module {self.name}: two kernels generate function {k.function!r} ({seen[k.function].name}, {k.name}); set function = ... on one")
            seen[k.function] = k
            # Each variant's export declares its own size, which every arch it carries must allow.
            for variant in self.variants_for(k.source):
                size = k.shared_memory_for(variant)
                for arch in variant.archs:
                    if size > arch.max_shared_memory:
                        raise SpecError(
                            f"{k.signature.where}: kernel {k.name}: shared_memory {size} bytes exceeds the {arch.max_shared_memory} bytes "
                            f"a block can have on {arch.name}"
                        )

    @property
    def sources(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys(k.source for k in self.kernels))

    def with_archs(self, archs) -> ModuleSpec:
        return dataclasses.replace(self, archs=tuple(parse_archs(archs)))

    def with_objects(self, policy: str) -> ModuleSpec:
        return dataclasses.replace(self, objects=policy)

    def fingerprint(self) -> str:
        """Stable text of everything declared, for reproducibility checks."""
        return json.dumps(
            {
                "name": self.name,
                "archs": [a.name for a in self.archs],
                "objects": self.objects,
                "nvcc_flags": list(self.nvcc_flags),
                "kernels": [k.fingerprint() for k in self.kernels],
            },
            sort_keys=True,
        )
