"""Stage 1: read a kernel's C signature out of a `.cu` file.

A deliberately small declaration parser (not a C++ front end): it finds `__global__` functions,
their parameter lists and `extern "C"`-ness, with line numbers for error messages. What it
can't map safely to the IREE ABI it refuses with the file and line.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import SignatureError
from ..core.files import check_input_file
from .cxx_names import split_top_level

_QUALIFIERS = {"__restrict__", "__restrict", "restrict", "volatile", "struct", "__grid_constant__"}
_IDENT = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class Param:
    name: str
    ctype: str  # base C type with qualifiers removed, e.g. "float", "unsigned int"
    pointer: bool
    const: bool  # for pointers: the pointee is const (ReadOnly binding)
    line: int
    written: str | None = None  # the type as the source spells it, when ctype was resolved from an alias (type_probe.py)


@dataclass(frozen=True)
class TemplateParam:
    """One parameter of a kernel template: `class T`, `unsigned int blockSize`, `int N = 4`."""

    name: str
    value_type: str | None  # a non-type parameter's type ("unsigned int", "bool"); None for a type parameter
    default: str | None  # the default argument as written, if any

    @property
    def is_type(self) -> bool:
        return self.value_type is None

    def __str__(self) -> str:
        declared = f"class {self.name}" if self.is_type else f"{self.value_type} {self.name}"
        return f"{declared} = {self.default}" if self.default is not None else declared


@dataclass(frozen=True)
class KernelSignature:
    name: str
    params: tuple[Param, ...]
    source: Path
    line: int
    extern_c: bool
    template: bool
    launch_bounds: str | None
    template_params: tuple[TemplateParam, ...] = ()
    declared: bool = False  # given in the spec (parse_signature), not read from the source
    namespace: str = ""  # enclosing namespaces, "a::b"; "" at global scope
    variadic: bool = False  # a template with a parameter pack (`typename... Ts`)
    # The parameter types as the compiler spells them (type_probe.py), when they were resolved.
    canonical_params: tuple[str, ...] | None = None

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"

    @property
    def qualified_name(self) -> str:
        """The name C++ code refers to the kernel by: `ns::scale<float>`."""
        return f"{self.namespace}::{self.name}" if self.namespace else self.name

    @property
    def entry_name(self) -> str:
        """The PTX entry of an extern "C" kernel: its bare name (no namespace, no mangling)."""
        return self.name.partition("<")[0]


def read_source(path: Path) -> str:
    check_input_file("kernel source", Path(path))
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SignatureError(f"can't read kernel source {path}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SignatureError(f"{path}:{line}: source is not valid UTF-8 (byte 0x{data[exc.start]:02x}); save it as UTF-8") from None


def _blank_comments(text: str) -> str:
    """Replaces comments with spaces, keeping every newline so offsets map to the same lines."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _matching(text: str, open_at: int) -> int:
    """Index of the bracket closing the one at `open_at`."""
    pairs = {"(": ")", "<": ">", "[": "]", "{": "}"}
    depth, close = 0, pairs[text[open_at]]
    for i in range(open_at, len(text)):
        if text[i] == text[open_at]:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _extern_c_ranges(code: str) -> list[tuple[int, int]]:
    ranges = []
    for match in re.finditer(r'extern\s+"C"\s*\{', code):
        end = _matching(code, match.end() - 1)
        ranges.append((match.end(), end if end >= 0 else len(code)))
    return ranges


def _namespace_ranges(code: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of every named namespace body; anonymous ones add no qualifier."""
    ranges = []
    for match in re.finditer(r"\bnamespace\s+([A-Za-z_][\w:]*)?\s*\{", code):
        end = _matching(code, match.end() - 1)
        if match[1]:
            ranges.append((match.end(), end if end >= 0 else len(code), match[1].strip(":")))
    return ranges


def _namespace_at(ranges: list[tuple[int, int, str]], offset: int) -> str:
    return "::".join(name for start, end, name in ranges if start <= offset < end)


def _blank_directives(code: str) -> str:
    """Blanks preprocessor lines (with their `\\` continuations), keeping every newline: a
    `__global__` inside a `#define` is a macro's body, not a kernel of the file."""
    lines = code.split("\n")
    continued = False
    for i, line in enumerate(lines):
        if continued or line.lstrip().startswith("#"):
            continued = line.rstrip().endswith("\\")
            lines[i] = " " * len(line)
    return "\n".join(lines)


def code_of(text: str) -> str:
    """Source text with comments and preprocessor lines blanked (every newline kept): the
    declarations a reader of this module looks at."""
    return _blank_directives(_blank_comments(text))


def parse_kernels(text: str, source: Path) -> list[KernelSignature]:
    code = code_of(text)
    line_of = lambda offset: code.count("\n", 0, offset) + 1  # noqa: E731
    extern_blocks = _extern_c_ranges(code)
    namespaces = _namespace_ranges(code)
    kernels = []
    for match in re.finditer(r"\b__global__\b", code):
        # The declaration starts after the previous statement/block boundary.
        start = max(code.rfind(ch, 0, match.start()) for ch in ";{}") + 1
        prefix = code[start : match.start()]
        after = code[match.end() :]
        launch_bounds = None
        paren = after.find("(")
        head = after[: max(paren, 0)]
        lb = re.search(r"__launch_bounds__\s*\(", after)
        if lb and lb.end() - 1 == paren:
            lb_close = _matching(after, paren)
            launch_bounds = after[lb.end() : lb_close].strip()
            paren = after.find("(", lb_close + 1)
            head = after[: lb.start()] + " " + after[lb_close + 1 : max(paren, 0)]
        if paren < 0:
            continue
        names = _IDENT.findall(head)
        if not names or head.rstrip().endswith(">"):
            continue  # an explicit instantiation (`template __global__ void k<float>(...)`)
        name = names[-1]
        open_at = match.end() + paren
        close_at = _matching(code, open_at)
        if close_at < 0:
            raise SignatureError(f"{source}:{line_of(open_at)}: unbalanced parentheses in the parameter list of kernel {name}")
        if code[close_at + 1 :].lstrip().startswith(";"):
            continue  # a declaration; the definition carries the parameter names
        extern_c = bool(re.search(r'extern\s+"C"', prefix)) or any(a <= match.start() < b for a, b in extern_blocks)
        params = _parse_params(code, open_at + 1, close_at, name, source, line_of)
        template = re.search(r"\btemplate\s*<(.*)>", prefix, re.S)
        kernels.append(
            KernelSignature(
                name=name,
                params=params,
                source=source,
                line=line_of(match.start()),
                extern_c=extern_c,
                template=template is not None,
                launch_bounds=launch_bounds,
                template_params=_template_params(template[1]) if template else (),
                variadic=bool(template and "..." in template[1]),
                namespace=_namespace_at(namespaces, match.start()),
            )
        )
    return kernels


def _template_params(text: str) -> tuple[TemplateParam, ...]:
    """The parameters of a `template <...>` list: `class T`, `typename T = float`, `unsigned int
    blockSize`, `bool nIsPow2 = false`. A pack (`typename... Ts`) is kept by name; the kernel is
    refused as variadic when it is named."""
    params = []
    for a, b in _split_top_level(text, 0, len(text)):
        declaration, eq, default = text[a:b].partition("=")
        tokens = declaration.replace("...", " ").split()
        if not tokens:
            continue
        name = tokens[-1] if len(tokens) > 1 and _IDENT.fullmatch(tokens[-1]) else ""
        kind = tokens[: -1 if name else None]
        value_type = None if kind[:1] in (["typename"], ["class"]) else " ".join(kind)
        params.append(TemplateParam(name, value_type, " ".join(default.split()) if eq else None))
    return tuple(params)


def _split_top_level(text: str, begin: int, end: int) -> list[tuple[int, int]]:
    spans, depth, start = [], 0, begin
    for i in range(begin, end):
        ch = text[i]
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        elif ch == "," and depth == 0:
            spans.append((start, i))
            start = i + 1
    spans.append((start, end))
    return spans


def _parse_params(code, begin, end, kernel, source, line_of) -> tuple[Param, ...]:
    if not code[begin:end].strip() or code[begin:end].strip() == "void":
        return ()
    params = []
    for a, b in _split_top_level(code, begin, end):
        raw = code[a:b].strip()
        offset = a + (len(code[a:b]) - len(code[a:b].lstrip()))
        where = f"{source}:{line_of(offset)}: kernel {kernel}"
        if raw == "...":
            raise SignatureError(f"{where}: variadic kernels can't be dispatched (no fixed parameter list); list the parameters explicitly")
        if "=" in raw:
            raw = raw.split("=", 1)[0].strip()
        if "[" in raw or "(" in raw or "&" in raw:
            raise SignatureError(f"{where}: parameter {raw!r} is not a plain pointer or scalar; pass arrays as T* and use no references")
        if "<" in raw:
            raise SignatureError(f"{where}: parameter {raw!r} has a template type; only plain C types map to IREE bindings")
        spaced = raw.replace("*", " * ")
        tokens = [t for t in spaced.split() if t not in _QUALIFIERS]
        if len(tokens) < 2 or not _IDENT.fullmatch(tokens[-1]):
            raise SignatureError(f"{where}: can't read parameter {raw!r}; give every parameter a type and a name")
        name, type_tokens = tokens[-1], tokens[:-1]
        stars = type_tokens.count("*")
        if stars > 1:
            raise SignatureError(f"{where}: parameter {name!r} is a pointer to pointer; IREE bindings are flat buffers, pass T*")
        if stars == 1:
            star = type_tokens.index("*")
            pointee, after_star = type_tokens[:star], type_tokens[star + 1 :]
            if any(t != "const" for t in after_star):
                raise SignatureError(f"{where}: can't read parameter {raw!r}")
            const = "const" in pointee
            base = " ".join(t for t in pointee if t != "const")
        else:
            const = "const" in type_tokens
            base = " ".join(t for t in type_tokens if t != "const")
        if not base:
            raise SignatureError(f"{where}: parameter {name!r} has no type")
        params.append(Param(name=name, ctype=base, pointer=stars == 1, const=const, line=line_of(offset)))
    return tuple(params)


def find_kernel(source: Path, name: str) -> KernelSignature:
    """The `__global__` function `name` in `source`, or an error listing what is there.

    `name` may select a template instantiation, e.g. "scale<float>" or "reduce<float, 256,
    false>" (trailing arguments with defaults may be left out; a plain name selects the
    instantiation of all defaults): the template's type parameters are then replaced by the
    given types in the parameter list. The build instantiates it (toolchains/base.py).
    It may be qualified by its namespaces, "ns::kernel"; a plain name finds a kernel in any
    namespace.
    """
    text = read_source(source)
    if not text.strip():
        raise SignatureError(f"{source}: file is empty; kernel {name!r} must be defined there")
    base, _, args_text = name.partition("<")
    namespace, _, leaf = base.strip().removeprefix("::").rpartition("::")
    kernels = parse_kernels(text, Path(source))
    matches = [k for k in kernels if k.name == leaf and (not namespace or k.namespace == namespace)]
    if not matches:
        found = ", ".join(sorted({k.qualified_name for k in kernels})) or "none"
        raise SignatureError(
            f"{source}: no __global__ kernel named {base.strip()!r} (kernels found: {found}); if a macro defines it, "
            f"declare it in the spec: signature = \"void {base.strip()}(...)\" (its C declaration)"
        )
    if len(matches) > 1:
        candidates = "; ".join(f"line {k.line}: {k.qualified_name}({', '.join(_describe(p) for p in k.params)})" for k in matches)
        raise SignatureError(
            f"{source}: kernel {base.strip()!r} is declared {len(matches)} times ({candidates}); overloads can't be told apart "
            "by name: rename one, or give each an extern \"C\" wrapper"
        )
    kernel = matches[0]
    if kernel.variadic:
        raise SignatureError(
            f"{kernel.where}: kernel {kernel.qualified_name} is a variadic template; its parameters have no fixed list to map to "
            "bindings: call an instantiation from an extern \"C\" kernel with named parameters, and declare that one"
        )
    if not kernel.template:
        if args_text:
            raise SignatureError(f"{kernel.where}: kernel {kernel.name} is not a template, but {name!r} names template arguments")
        return kernel
    return _instantiated(kernel, name, args_text)


# Characters a template argument never needs, which could end the line of C++ that instantiates
# it in the build's generated translation unit (toolchains/base.py checks it again).
_NOT_IN_ARGUMENTS = re.compile(r'[;{}"#\\\n\r]')


def _instantiated(kernel: KernelSignature, name: str, args_text: str) -> KernelSignature:
    """The instantiation `name` (`reduce<float, 256, false>`, `k<float>` with a default, or a
    plain `k` whose parameters all have defaults) of template `kernel`: named with every argument
    (defaults filled in, as the compiler's mangled name spells it) and its type parameters
    replaced by the given types in the parameter list."""
    params_text = ", ".join(str(t) for t in kernel.template_params)
    if not args_text and any(t.default is None for t in kernel.template_params):
        example = ", ".join("float" if t.is_type else "false" if t.value_type == "bool" else "256" for t in kernel.template_params if t.default is None)
        raise SignatureError(
            f"{kernel.where}: kernel {kernel.name} is a template; name an instantiation, e.g. {kernel.name}<{example}> "
            f"(template <{params_text}>); iree_dispatch instantiates it"
        )
    if args_text and not args_text.rstrip().endswith(">"):
        raise SignatureError(f"{kernel.where}: {name!r} has no closing '>'; name an instantiation as {kernel.name}<...>")
    if bad := _NOT_IN_ARGUMENTS.search(args_text):
        raise SignatureError(f"{kernel.where}: {name!r} has {bad[0]!r}, which no template argument needs; give types and constants, e.g. {kernel.name}<float, 256>")
    args = split_top_level(args_text.rstrip().removesuffix(">"))
    missing = [t for t in kernel.template_params[len(args) :] if t.default is None]
    if len(args) > len(kernel.template_params) or missing:
        lacking = f"; {missing[0].name} has no default" if missing and len(args) < len(kernel.template_params) else ""
        raise SignatureError(
            f"{kernel.where}: {name!r} gives {len(args)} template argument(s); {kernel.name} has {len(kernel.template_params)} "
            f"(template <{params_text}>){lacking}"
        )
    args += [t.default for t in kernel.template_params[len(args) :]]
    substitution = {t.name: arg for t, arg in zip(kernel.template_params, args) if t.is_type}
    constants = {t.name for t in kernel.template_params if not t.is_type}
    params = []
    for p in kernel.params:
        if depends := next((word for word in _IDENT.findall(p.ctype) if word in constants), None):
            raise SignatureError(
                f"{kernel.source}:{p.line}: kernel {kernel.name}: parameter {p.name!r} has a type that depends on the non-type "
                f"template parameter {depends!r} ({p.ctype}); only type parameters may appear in parameter types"
            )
        params.append(Param(p.name, substitution.get(p.ctype, p.ctype), p.pointer, p.const, p.line))
    return dataclasses.replace(kernel, name=f"{kernel.name}<{', '.join(args)}>", params=tuple(params), extern_c=False)


def parse_signature(text: str, origin: Path, name: str) -> KernelSignature:
    """A kernel's C signature given as text, e.g. `void k(const float* x, int n)`, for objects
    that carry no source (prebuilt PTX/cubin/fatbin, Triton). `origin` names the object in
    messages. The name is taken as the object's entry name (extern "C", no mangling)."""
    if not isinstance(text, str) or not text.strip():
        raise SignatureError(f"{origin}: kernel {name}: signature must be a C declaration such as \"void {name}(const float* x, int n)\"")
    kernels = parse_kernels(f'extern "C" __global__ {text.strip().removesuffix(";")} {{}}', Path(origin))
    if len(kernels) != 1 or kernels[0].template:
        raise SignatureError(f"{origin}: kernel {name}: can't read signature {text!r}; write it as \"void {name}(const float* x, int n)\"")
    if kernels[0].name != name:
        raise SignatureError(f"{origin}: kernel {name}: signature {text!r} declares {kernels[0].name!r}; the names must match")
    return dataclasses.replace(kernels[0], declared=True)


def signature_text(signature: KernelSignature, written: bool = False) -> str:
    """The C declaration `parse_signature` reads back; `written`: types as the source spells
    them (aliases unresolved), else as resolved."""
    return f"void {signature.entry_name}({', '.join(_describe(p, written) for p in signature.params)})"


def _describe(p: Param, written: bool = False) -> str:
    ctype = p.written if written and p.written else p.ctype
    return f"{'const ' if p.const else ''}{ctype}{'*' if p.pointer else ''} {p.name}"
