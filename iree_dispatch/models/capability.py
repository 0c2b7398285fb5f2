"""What a kernel can replace in a model: the `replaces` table of a `[[kernel]]` in a spec file.

```toml
[[kernel]]
name = "gemm_bf16"
...
replaces = { op = "matmul", accumulate = "f32", divisible = { K = 8, N = 8 } }
```

The op's operands map to the kernel's input tensors in parameter order, its result to the
kernel's one output, and (LayerNorm) its epsilon to the kernel's one float scalar argument. Element
types are the kernel's own (its pointers' types); shape constraints name the kernel's shape
symbols. Each rule is checked when the spec is loaded, against the kernel's declaration.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core import expr as ex
from ..core.errors import SpecError
from ..core.files import check_text_file
from ..frontend.spec import KernelSpec, ModuleSpec
from .kinds import REGISTRY, OpKind, Registry

_KEYS = {"op", "accumulate", "divisible", "max", "eps", "priority", "pad"}
_FLOAT_RANK = {"f16": 1, "bf16": 1, "f32": 2, "f64": 3}


@dataclass(frozen=True)
class Capability:
    """One op form one kernel can replace."""

    module: ModuleSpec
    kernel: KernelSpec
    op: str
    accumulate: str
    divisible: tuple[tuple[str, int], ...] = ()
    maximum: tuple[tuple[str, int], ...] = ()
    eps: float | None = None  # the kernel's own epsilon, if it has no eps argument
    priority: int = 0
    pad: tuple[str, ...] = ()  # shape symbols the rewrite may zero-pad up to their `divisible` multiple (matmuls)
    order: int = 0  # position among all capabilities given (ties of priority: first given wins)
    where: str = field(default="", compare=False)

    @property
    def label(self) -> str:
        return f"{self.module.name}.{self.kernel.function}"

    @property
    def input_dtypes(self) -> tuple[str, ...]:
        return tuple(t.dtype for t in self.kernel.inputs)

    @property
    def output_dtype(self) -> str:
        return self.kernel.outputs[0].dtype

    def symbols(self, shapes: list[tuple[int, ...]]) -> dict[str, int]:
        """The kernel's shape symbols bound by the op's operand shapes (inputs, in order)."""
        bound: dict[str, int] = {}
        for t, shape in zip(self.kernel.inputs, shapes):
            for d, size in zip(t.shape, shape):
                if isinstance(d, ex.Sym):
                    bound.setdefault(d.name, size)
        return bound

    def describe(self) -> str:
        sig = ", ".join(self.input_dtypes) + f" -> {self.output_dtype}"
        extra = [f"{n} % {k} == 0" for n, k in self.divisible] + [f"{n} <= {k}" for n, k in self.maximum]
        return f"{self.label} ({sig}" + (f"; {', '.join(extra)}" if extra else "") + ")"


@dataclass(frozen=True)
class KernelSet:
    """The modules given with --kernels and every capability their kernels declare."""

    modules: tuple[ModuleSpec, ...]
    capabilities: tuple[Capability, ...]

    def for_op(self, op: str) -> list[Capability]:
        return sorted((c for c in self.capabilities if c.op == op), key=lambda c: (-c.priority, c.order))


def spec_files(paths: Sequence[str | Path]) -> list[Path]:
    """The spec files `paths` name, in order: a file as given; a folder (a kernel library, such as
    the repository's kernels/) as every `*.toml` directly in it, sorted by name, that declares at
    least one `replaces` (the others hold kernels for other uses and are skipped). A file named
    twice (by itself and through its folder) counts once, where first named."""
    if not paths:
        raise SpecError("no kernel spec given (--kernels SPEC.toml, or a folder of specs)")
    found: dict[str, Path] = {}
    for path in map(Path, paths):
        files = [path]
        if path.is_dir():
            files = [spec for spec in sorted(path.glob("*.toml")) if spec.is_file() and _declares_replacements(spec)]
            if not files:
                raise SpecError(
                    f"kernel folder {path} holds no spec (*.toml) whose kernels declare what they replace (replaces = {{ op = ... }}); "
                    "give a folder of such specs, or the spec files themselves"
                )
        for spec in files:
            found.setdefault(os.path.realpath(spec), spec)
    return list(found.values())


def _declares_replacements(path: Path) -> bool:
    """Whether any [[kernel]] of the spec at `path` has a `replaces` key (read as TOML only: a
    spec skipped for lacking one is not loaded, so its type probes never run)."""
    kernels = _read_spec_toml(path).get("kernel", [])
    return any(isinstance(k, dict) and "replaces" in k for k in (kernels if isinstance(kernels, list) else []))


def load_kernels(paths: Sequence[str | Path], registry: Registry = REGISTRY) -> KernelSet:
    """Loads each spec file with its `replaces` tables (ops: the kinds of `registry`); a folder
    stands for its specs that declare replacements (spec_files)."""
    modules, capabilities, given_by = [], [], []
    for path in spec_files(paths):
        module, replaces = load_spec_with_replaces(path)
        modules.append(module)
        given_by.append(path)
        by_name = {k.name: k for k in module.kernels}
        for kernel_name, label, tables in replaces:
            for table in tables:
                capabilities.append(_capability(module, by_name[kernel_name], table, label, len(capabilities), registry))
    names = [m.name for m in modules]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        specs = ", ".join(str(path) for path, module in zip(given_by, modules) if module.name in clashes)
        raise SpecError(f"module name {', '.join(clashes)} given by more than one kernel spec ({specs}); each module needs its own name")
    return KernelSet(tuple(modules), tuple(capabilities))


def load_spec_with_replaces(path: Path) -> tuple[ModuleSpec, list[tuple[str, str, list[dict]]]]:
    """The spec's ModuleSpec and, per kernel with a `replaces` key: (kernel name, label, tables)."""
    from ..frontend.spec_file import load_spec

    data = _read_spec_toml(path)
    kernels = data.get("kernel", [])
    replaces = []
    for i, k in enumerate(kernels if isinstance(kernels, list) else [], start=1):
        if isinstance(k, dict) and "replaces" in k:
            label = f"{path}: [[kernel]] #{i} ({k.get('name')})"
            tables = k["replaces"]
            tables = [tables] if isinstance(tables, dict) else tables
            if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
                raise SpecError(f"{label}: replaces must be a table (replaces = {{ op = \"matmul\" }}) or a list of tables")
            replaces.append((k.get("name"), label, tables))
    return load_spec(path), replaces


def _read_spec_toml(path: Path) -> dict:
    check_text_file("kernel spec", path, "a TOML kernel spec; give the .toml file")
    try:
        raw = path.read_bytes()
        return tomllib.loads(raw.decode("utf-8").removeprefix("\ufeff"))
    except OSError as exc:
        raise SpecError(f"can't read spec {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError(f"{path}:{line}: spec is not valid UTF-8 (byte 0x{raw[exc.start]:02x}); save it as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: invalid TOML: {exc}") from None


def _capability(module: ModuleSpec, kernel: KernelSpec, table: dict, label: str, order: int, registry: Registry) -> Capability:
    unknown = set(table) - _KEYS
    if unknown:
        raise SpecError(f"{label}: replaces: unknown keys {sorted(unknown)}; allowed: {sorted(_KEYS)}")
    op = table.get("op")
    if op not in registry:
        raise SpecError(f"{label}: replaces.op must be one of {', '.join(repr(k) for k in registry.names)}, got {op!r}")
    kind = registry.kind(op)
    ranks = tuple(len(t.shape) for t in kernel.inputs)
    if ranks != kind.input_ranks:
        raise SpecError(f"{label}: replaces {op!r} needs input tensors of ranks {list(kind.input_ranks)} in parameter order; the kernel's inputs have ranks {list(ranks)}")
    if len(kernel.outputs) != 1 or len(kernel.outputs[0].shape) != kind.output_rank:
        raise SpecError(f"{label}: replaces {op!r} needs one output tensor of rank {kind.output_rank}; the kernel has {[len(t.shape) for t in kernel.outputs]}")
    _check_shapes(kernel, kind, label)
    floats = [s for s in kernel.scalar_args if s.stype.kind == "float"]
    others = [s.name for s in kernel.scalar_args if s.stype.kind != "float"]
    if others:
        raise SpecError(f"{label}: replaces {op!r}: scalar arguments {others} have no value in a model; give them values with scalars = {{ ... }}")
    eps = table.get("eps")
    if eps is not None and (not kind.epsilon or not isinstance(eps, (int, float)) or isinstance(eps, bool)):
        with_eps = " or ".join(f'"{k.name}"' for k in registry if k.epsilon)
        raise SpecError(f"{label}: replaces.eps is a number, for op = {with_eps} kernels whose epsilon is built in")
    wanted = 0 if eps is not None else int(kind.epsilon or kind.takes_scale)
    if len(floats) != wanted:
        what = ("its epsilon" if kind.epsilon else "the softmax scale") + " as one float argument" if wanted else "no float argument"
        raise SpecError(f"{label}: replaces {op!r} passes {what}; the kernel takes {[s.name for s in floats] or 'none'}")
    symbols = {d.name for t in kernel.inputs for d in t.shape if isinstance(d, ex.Sym)}
    constraints = {}
    for key in ("divisible", "max"):
        raw = table.get(key, {})
        if not isinstance(raw, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in raw.values()):
            raise SpecError(f"{label}: replaces.{key} must be a table of positive integers per shape symbol, e.g. {key} = {{ K = 8 }}")
        missing = sorted(set(raw) - symbols)
        if missing:
            raise SpecError(f"{label}: replaces.{key} names {missing}, which are not shape symbols of the kernel's inputs ({', '.join(sorted(symbols))})")
        constraints[key] = tuple(sorted(raw.items()))
    accumulate = table.get("accumulate", kind.accumulate or kernel.outputs[0].dtype)
    if accumulate not in _FLOAT_RANK:
        raise SpecError(f"{label}: replaces.accumulate must be one of {', '.join(_FLOAT_RANK)}, got {accumulate!r}")
    priority = table.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise SpecError(f"{label}: replaces.priority must be an integer")
    pad = table.get("pad", [])
    if not isinstance(pad, list) or not all(isinstance(p, str) for p in pad):
        raise SpecError(f"{label}: replaces.pad must be a list of shape symbols, e.g. pad = [\"N\"]")
    if pad and not kind.pads:
        raise SpecError(f"{label}: replaces.pad is for matmul kernels (zeros padded along M, N or K add nothing to the other results); {op!r} would change")
    not_divisible = sorted(set(pad) - {n for n, _ in constraints["divisible"]})
    if not_divisible:
        raise SpecError(f"{label}: replaces.pad names {not_divisible}, which replaces.divisible does not constrain (a size is padded up to its divisible multiple)")
    return Capability(module, kernel, op, accumulate, constraints["divisible"], constraints["max"], None if eps is None else float(eps), priority, tuple(sorted(set(pad))),
                      order, label)


def _check_shapes(kernel: KernelSpec, kind: OpKind, label: str) -> None:
    """The kernel's declared shapes say the op (kind.declared_shapes): a matmul's K shared and its
    output [M, N], a row op's output (and vectors) the shape of its rows."""
    ins = [tuple(str(d) for d in t.shape) for t in kernel.inputs]
    out = tuple(str(d) for d in kernel.outputs[0].shape)
    want_out, same = kind.declared_shapes(ins)
    bad = [f"{x} vs {y}" for x, y in same if x != y]
    if out != want_out or bad:
        shapes = "; ".join(f"{t.name} {list(shape)}" for t, shape in zip((*kernel.inputs, kernel.outputs[0]), (*ins, out)))
        agree = f"; sizes that must agree: {', '.join(bad)}" if bad else ""
        raise SpecError(f"{label}: replaces {kind.name!r}, but the kernel's shapes ({shapes}) don't say it: the output must be {list(want_out)}{agree}")


def widens_exactly(a: str, b: str) -> bool:
    """True when every value of float type `a` is a value of float type `b` (bf16 → f32, f16 → f32 ...)."""
    return a != b and (a, b) in {("bf16", "f32"), ("bf16", "f64"), ("f16", "f32"), ("f16", "f64"), ("f32", "f64")}


def wider(a: str, b: str) -> bool:
    """True when float type `a` is wider than `b` (bf16 and f16 count as equally wide)."""
    return _FLOAT_RANK.get(a, 0) > _FLOAT_RANK.get(b, 0)
