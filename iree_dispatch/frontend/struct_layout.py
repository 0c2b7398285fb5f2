"""Stage 1c: the layout of a struct a kernel takes by value, asked of the compiler.

`struct Shape { int m, n, k; float alpha; };` and `__global__ void k(const float* a, float* c,
Shape s)`: the struct travels as its bytes in IREE's 32-bit push constants, which the adapted PTX
entry hands the kernel's field loads (backend/ptx_adapt.py). The field names are read from the
struct's definition in the source (or a header it includes with quotes); everything else, each
field's type after all aliases, its offset, the struct's size and alignment, is asked of the
compiler with a probe (type_probe.compile_probe) whose one kernel takes template instances that
spell the fields' types (`decltype(Shape::m)`) and the numbers (`sizeof`, `alignof`,
`offsetof`) in its mangled name. Nested structs, vector fields and arrays of scalars are
flattened (`inner.a`, `v.x`, `dims[1]`); a pointer field is refused: a pointer inside a struct
can't be an IREE binding.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from ..core.archs import Arch
from ..core.dtypes import SCALAR_TYPES, VECTOR_TYPES, Field, ScalarType, vector_scalar_type
from ..core.errors import SignatureError
from ..core.store import CacheError, Store, digest, file_digest
from ..toolchains import select_toolchain
from .cxx_names import demangle, parse_demangled, split_top_level
from .signature import KernelSignature, Param, code_of, read_source
from .type_probe import compile_probe

_PROBE = "iree_dispatch_struct_probe"
_FIELDS = "iree_dispatch_fields"
_LAYOUT = "iree_dispatch_layout"
_RECORDS = "struct_layout"
_NESTING = 4  # structs within structs followed at most this deep


def struct_type(signature: KernelSignature, param: Param, flags: tuple[str, ...], arch: Arch, toolchain=None) -> ScalarType:
    """Parameter `param` of `signature`, a struct passed by value, as a ScalarType of kind
    "struct": its size, alignment and scalar fields as the compiler lays them out with the
    module's flags. Answers are kept per process and in the build cache (with the digests of
    every file the probe read, as type_probe.py keeps its own)."""
    tc = select_toolchain(toolchain)
    source = signature.source.absolute()
    where = f"{signature.source}:{param.line}: kernel {signature.name}: parameter {param.name!r} ({param.ctype})"
    key = digest("struct", str(source), file_digest(source), *flags, arch.name, tc.identity(), param.ctype)
    if key not in _LAID_OUT:
        _LAID_OUT[key] = _persisted(key) or _laid_out(key, source, param.ctype, flags, arch, tc, where)
    size, align, fields = _LAID_OUT[key]
    return ScalarType(param.ctype, "struct", size, "i32", tuple(Field(n, SCALAR_TYPES[c], o) for n, c, o in fields), align)


Layout = tuple[int, int, tuple[tuple[str, str, int], ...]]  # size, alignment, (field path, C type, offset)
_LAID_OUT: dict[str, Layout] = {}


def _persisted(key: str) -> Layout | None:
    try:
        record = Store().record(_RECORDS, key)
    except CacheError:
        return None
    if not record or any(file_digest(Path(path)) != sha for path, sha in record.get("read", {}).items()):
        return None
    return record["size"], record["align"], tuple((n, c, o) for n, c, o in record["fields"])


def _laid_out(key: str, source: Path, ctype: str, flags: tuple[str, ...], arch: Arch, tc, where: str) -> Layout:
    read: dict[str, str] = {}
    size, align, fields = _layout(source, ctype, flags, arch, tc, where, read, 0)
    with contextlib.suppress(CacheError, OSError):  # the record only saves time
        Store().save_record(_RECORDS, key, {"size": size, "align": align, "fields": [list(f) for f in fields], "read": read})
    return size, align, fields


def _layout(source: Path, ctype: str, flags, arch, tc, where: str, read: dict[str, str], depth: int) -> Layout:
    """The layout of struct `ctype`, its nested structs flattened into it."""
    names = field_names(source, ctype, where)
    probe = (
        # offsetof from <stddef.h>: nvcc's is __builtin_offsetof, NVRTC (which has none) gets toolchains/nvrtc_include's.
        f"#include <stddef.h>\ntemplate <class... T> struct {_FIELDS};\ntemplate <unsigned long long... V> struct {_LAYOUT};\n"
        f"__global__ void {_PROBE}({_FIELDS}<{', '.join(f'decltype({ctype}::{n})' for n in names)}>*, "
        f"{_LAYOUT}<sizeof({ctype}), alignof({ctype}), {', '.join(f'offsetof({ctype}, {n})' for n in names)}>*) {{}}\n"
    )
    failed = f"compiling the source to read the layout of struct {ctype} (fields {', '.join(names)}) failed"
    ptx, probe_read = compile_probe(source, probe, flags, arch, tc, where, failed)
    read.update(probe_read)
    entries = re.findall(rf"\.entry\s+(_Z\w*{_PROBE}\w*)\s*\(", ptx)
    demangled = parse_demangled(demangle(entries)[entries[0]]) if len(entries) == 1 else None
    types = re.fullmatch(rf"{_FIELDS}<(.*)>\*", demangled.params[0]) if demangled and len(demangled.params) == 2 else None
    numbers = [int(n) for n in re.findall(r"\d+", demangled.params[1].removeprefix(_LAYOUT))] if types else []
    if not types or len(numbers) != len(names) + 2:
        raise SignatureError(f"{where}: can't read the layout of struct {ctype} from the compiler's probe ({entries})")
    size, align, offsets = numbers[0], numbers[1], numbers[2:]
    fields: list[tuple[str, str, int]] = []
    for name, spelled, offset in zip(names, split_top_level(types[1]), offsets):
        fields += _flattened(name, _unqualified(spelled), offset, source, ctype, flags, arch, tc, where, read, depth)
    return size, align, tuple(fields)


def _flattened(name: str, spelled: str, offset: int, source: Path, ctype: str, flags, arch, tc, where: str, read, depth: int) -> list[tuple[str, str, int]]:
    """Field `name` of type `spelled` at `offset` as scalar fields: itself, a vector's lanes, an
    array's elements, or a nested struct's fields."""
    if spelled in SCALAR_TYPES:
        return [(name, spelled, offset)]
    if spelled in VECTOR_TYPES:
        return [(f"{name}.{f.name}", f.stype.ctype, offset + f.offset) for f in vector_scalar_type(spelled).fields]
    if "*" in spelled or "&" in spelled:
        raise SignatureError(
            f"{where}: field {name!r} of struct {ctype} is a pointer ({spelled}); a pointer inside a struct can't be an IREE binding: "
            "pass it as a pointer parameter of the kernel of its own"
        )
    if array := re.fullmatch(r"(.+?) ?\[(\d+)\]", spelled):
        element, count = array[1], int(array[2])
        if element not in SCALAR_TYPES:
            raise SignatureError(f"{where}: field {name!r} of struct {ctype} is an array of {element}; only arrays of scalars are read")
        return [(f"{name}[{i}]", element, offset + i * SCALAR_TYPES[element].nbytes) for i in range(count)]
    if depth + 1 >= _NESTING or not re.fullmatch(r"[A-Za-z_][\w:]*", spelled):
        raise SignatureError(f"{where}: field {name!r} of struct {ctype} has type {spelled}, which iree_dispatch can't pass; fields may be scalars, "
                             "CUDA vector types, arrays of scalars or structs of these")
    _, _, nested = _layout(source, spelled, flags, arch, tc, where, read, depth + 1)
    return [(f"{name}.{n}", c, offset + o) for n, c, o in nested]


def _unqualified(spelled: str) -> str:
    return " ".join(t for t in spelled.split() if t not in ("const", "volatile"))


def field_names(source: Path, ctype: str, where: str) -> list[str]:
    """The data members of struct `ctype` in declaration order, read from its definition in
    `source` or a header it includes with quotes (static members and member functions left out)."""
    leaf = ctype.rpartition("::")[2]
    for path in _sources(source):
        code = code_of(read_source(path))
        body = _definition(code, leaf, where)
        if body is None:
            continue
        names = []
        for statement in _statements(body):
            statement = re.sub(r"^\s*(?:public|private|protected)\s*:", "", statement).strip()
            if not statement or "(" in statement or re.match(r"(static|using|typedef|friend|template|enum|struct|class|union)\b", statement):
                continue
            if re.search(r"(?<!:):(?!:)", statement):
                raise SignatureError(f"{where}: struct {ctype} has a bit-field ({statement}); a bit-field has no byte offset to pass it at")
            for declarator in split_top_level(statement):
                declarator = re.split(r"[={]", declarator, maxsplit=1)[0]
                if found := re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$", declarator):
                    names.append(found[1])
        if not names:
            raise SignatureError(f"{where}: struct {ctype} ({path.name}) has no data members iree_dispatch can read")
        return names
    raise SignatureError(
        f"{where}: can't find the definition of struct {ctype} in {source.name} or the headers it includes with quotes; a struct "
        "passed by value must be defined there (its field names are read from the definition)"
    )


def _sources(source: Path) -> list[Path]:
    """`source` and the files it includes with quotes, transitively, that exist."""
    found, pending = [], [source]
    while pending:
        path = pending.pop(0)
        if path in found or not path.is_file():
            continue
        found.append(path)
        with contextlib.suppress(SignatureError):
            pending += [path.parent / m for m in re.findall(r'^\s*#\s*include\s*"([^"]+)"', read_source(path), re.M)]
    return found


def _definition(code: str, name: str, where: str) -> str | None:
    """The body of `struct name {...}` (or `typedef struct {...} name;`) in `code`."""
    for match in re.finditer(rf"\b(?:struct|class)\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?{re.escape(name)}\s*(?:final\s*)?(:[^{{;]*)?\{{", code):
        if match[1]:
            raise SignatureError(f"{where}: struct {name} derives from {match[1].lstrip(':').strip()}; iree_dispatch reads no base class's fields: put them in the struct")
        return code[match.end() : _closing(code, match.end() - 1)]
    for match in re.finditer(r"\btypedef\s+struct\s*(?:[A-Za-z_]\w*\s*)?\{", code):
        close = _closing(code, match.end() - 1)
        if re.match(rf"\s*{re.escape(name)}\s*;", code[close + 1 :]):
            return code[match.end() : close]
    return None


def _closing(code: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(code)):
        depth += {"{": 1, "}": -1}.get(code[i], 0)
        if depth == 0:
            return i
    return len(code)


def _statements(body: str) -> list[str]:
    """The member declarations of a struct body: split at `;` outside braces and parentheses."""
    statements, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
            if depth == 0 and ch == "}":  # a member function's body ends its declaration
                statements.append(body[start : i + 1])
                start = i + 1
        elif ch == ";" and depth == 0:
            statements.append(body[start:i])
            start = i + 1
    return statements
