"""Stage 1b: the exact C types of a kernel's parameters, asked of the compiler.

Real kernels spell types through aliases: `typedef`, `using`, and aliases the preprocessor
picks with `-D` flags (`#if defined(ENABLE_BF16) typedef __nv_bfloat16 floatX; ...`). The
signature reader sees only text, so when a parameter's type is a name it doesn't know, the
compiler is asked: a probe translation unit includes the source unchanged and declares one
kernel whose parameter's type is built from the kernel's function type. The probe's mangled PTX
name spells every parameter type after all aliases and macros, in the demangler's canonical
form, with the module's own flags honoured. Answers are kept per process, and in the build
cache as records that hold the digests of every file the probe read (the source and its
headers), so a warm build asks the compiler again only when one of them changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import tempfile
from pathlib import Path

from ..core.archs import Arch
from ..core.dtypes import POINTEE_TYPES, SCALAR_TYPES, VECTOR_TYPES
from ..core.errors import SignatureError, ToolchainError
from ..core.store import CacheError, Store, digest, file_digest
from ..toolchains import select_toolchain
from .cxx_names import demangle, parse_demangled
from .signature import KernelSignature, Param, parse_kernels, read_source

_PROBE = "iree_dispatch_type_probe"
_HOLDER = "iree_dispatch_type_holder"


def needs_probe(signature: KernelSignature) -> bool:
    """Whether any parameter type is a name the type tables don't know (an alias, most likely)."""
    return any(p.ctype not in (POINTEE_TYPES if p.pointer else SCALAR_TYPES) and p.ctype not in VECTOR_TYPES for p in signature.params)


def resolve_types(signature: KernelSignature, flags: tuple[str, ...], arch: Arch, toolchain=None) -> KernelSignature:
    """`signature` with every parameter type as the compiler sees it (canonical spelling).

    flags: the module's nvcc flags (their -D/-I decide what aliases mean). toolchain: a
    toolchain.Toolchain or its name; None picks one as a build does. One probe compile answers
    for every kernel of the source that needs one, so a module of many such kernels pays once.
    """
    tc = select_toolchain(toolchain)
    source = signature.source.absolute()
    key = digest(str(source), file_digest(source), *flags, arch.name, tc.identity())
    if key not in _PROBED:
        _PROBED[key] = _persisted(key)
    known = _PROBED[key]
    name = signature.qualified_name
    if name not in known:
        where = f"{signature.where}: kernel {name}"
        others = [k.qualified_name for k in parse_kernels(read_source(source), source) if not k.template and needs_probe(k)]
        batch = list(dict.fromkeys([name, *(o for o in others if o not in known)]))
        try:
            answers, read = _probe(source, batch, tuple(flags), arch, tc, where)
        except SignatureError:
            if len(batch) == 1:
                raise
            answers, read = _probe(source, [name], tuple(flags), arch, tc, where)  # another kernel can't be probed: this one alone
        known.update(answers)
        _persist(key, known, read)
    return _resolve(signature, known[name])


_RECORDS = "type_probe"


def _persisted(key: str) -> dict[str, tuple[str, ...]]:
    """The answers a build cache record holds for `key`, if every file the probe read is
    unchanged; else none. A cache that can't be used (see core/store.py) holds none."""
    try:
        record = Store().record(_RECORDS, key)
    except CacheError:
        return {}
    if not record or any(file_digest(Path(path)) != sha for path, sha in record.get("read", {}).items()):
        return {}
    return {name: tuple(types) for name, types in record.get("answers", {}).items()}


def _persist(key: str, answers: dict[str, tuple[str, ...]], read: dict[str, str]) -> None:
    with contextlib.suppress(CacheError, OSError):  # the record only saves time
        Store().save_record(_RECORDS, key, {"answers": {n: list(t) for n, t in answers.items()}, "read": read})


# digest of (source, its bytes, flags, arch, toolchain identity) → kernel → canonical parameter types
_PROBED: dict[str, dict[str, tuple[str, ...]]] = {}


def _probe(source: Path, expressions: list[str], flags: tuple[str, ...], arch: Arch, tc, where: str) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """The compiler's parameter types for each of `expressions`, and the digest of every file it
    read (the source and its headers)."""
    # The probe includes the source as-is (its own #includes resolve from its folder) and
    # adds, per kernel, one kernel taking a pointer to a template instance over the kernel's
    # function type: the only way that type reaches a mangled name is spelled out in full.
    probes = "".join(f"__global__ void {_PROBE}_{i}({_HOLDER}<decltype(&{e})>*) {{}}\n" for i, e in enumerate(expressions))
    ptx, read = compile_probe(source, f"template <class F> struct {_HOLDER};\n{probes}", flags, arch, tc, where)
    entries = re.findall(rf"\.entry\s+(_Z\w*{_PROBE}_\w*)\s*\(", ptx)
    found = {}
    for text in demangle(entries).values():
        demangled = parse_demangled(text)
        index = re.fullmatch(rf"{_PROBE}_(\d+)", demangled.name) if demangled else None
        match = re.fullmatch(rf"{_HOLDER}<(?:void )?\(\*\)\((.*)\)>\*", demangled.params[0]) if index and demangled.params else None
        inner = parse_demangled(f"f({match[1]})") if match else None
        if inner is None:  # the compiler spelled it in a way this reader doesn't know
            raise SignatureError(f"{where}: can't read the parameter types from the compiler's probe ({text})")
        found[expressions[int(index[1])]] = inner.params
    if set(found) != set(expressions):
        raise SignatureError(f"{where}: the compiler's probe has no answer for {sorted(set(expressions) - set(found))} (entries: {entries})")
    return found, read


_ALIAS_FAILED = "a parameter type is no C type iree_dispatch knows, and compiling the source to resolve it as an alias failed"


def compile_probe(source: Path, probes: str, flags: tuple[str, ...], arch: Arch, tc, where: str, failed: str = _ALIAS_FAILED) -> tuple[str, dict[str, str]]:
    """The PTX of a probe translation unit: `source` included unchanged, then `probes`; and the
    digest of every file the compile read (the source and its headers). failed: what a failed
    compile means, for its message."""
    with tempfile.TemporaryDirectory(prefix="iree_dispatch_probe.") as tmp:
        probe = Path(tmp) / "probe.cu"
        included, linked = source, Path(tmp) / "source"
        if any(c in str(source) for c in '"\n\r'):
            # No #include can spell these: the source is reached through a link to its folder
            # (its own #includes resolve from there as before), which read is mapped back from.
            if any(c in source.name for c in '"\n\r'):
                raise SignatureError(f"{where}: the type probe can't #include a file whose name has a quote or a line break; rename {source.name!r}")
            linked.symlink_to(source.parent, target_is_directory=True)
            included = linked / source.name
        probe.write_text(f'#include "{included}"\n{probes}', encoding="utf-8")
        try:
            compiled = tc.compile_ptx(probe, arch, Path(tmp) / "probe.ptx", flags)
            ptx = compiled.text()
            read = {str(source.parent / d.relative_to(linked) if d.is_relative_to(linked) else d): file_digest(d)
                    for d in compiled.dependencies if d != probe.absolute()}
        except ToolchainError as exc:
            log = str(exc).replace(str(probe), f"{source.name} (with a type probe appended)").split("\ncommand: ")[0]
            raise SignatureError(
                f"{where}: {failed} (flags: {' '.join(flags) or 'none'}; the -D flags that select a type go in "
                f"[module] nvcc_flags, or KernelSpec.declare(..., nvcc_flags=...)):\n{log}"
            ) from None
    return ptx, read


def _resolve(signature: KernelSignature, types: tuple[str, ...]) -> KernelSignature:
    where = f"{signature.where}: kernel {signature.qualified_name}"
    if len(types) != len(signature.params):
        raise SignatureError(f"{where}: the compiler sees {len(types)} parameters ({', '.join(types)}), the source {len(signature.params)}")
    params = []
    for p, spelled in zip(signature.params, types):
        pointer, const, base = canonical_type(spelled)
        if pointer is None:
            raise SignatureError(f"{where}: parameter {p.name!r} has type {spelled!r} (written {p.ctype!r}); IREE bindings are flat buffers, pass T*")
        params.append(Param(p.name, base, pointer, const, p.line, written=p.written or p.ctype))
    return dataclasses.replace(signature, params=tuple(params), canonical_params=types)


def canonical_type(spelled: str) -> tuple[bool | None, bool, str]:
    """(pointer, const pointee, base type) of a demangled type such as `__nv_bfloat16 const*`;
    pointer is None for what is neither a scalar nor a plain pointer (`float**`)."""
    stars = spelled.count("*")
    if stars > 1 or (stars == 1 and not spelled.rstrip().endswith("*")):
        return None, False, spelled
    tokens = spelled.replace("*", " ").split()
    const = "const" in tokens
    base = " ".join(t for t in tokens if t not in ("const", "volatile", "__restrict__", "restrict"))
    return stars == 1, const and stars == 1, base
