"""Stage 3: find each kernel's compiled PTX `.entry` and check it against its KernelSpec.

The entry's parameter list is what the GPU will actually read; IREE never checks it (a
mismatch runs and returns wrong data). We do, right after nvcc, with a located error. C++
kernels (templates, overloads, no `extern "C"`) have mangled entry names, found here by
demangling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.errors import AbiError
from ..frontend.cxx_names import demangle, is_mangled, parse_demangled, same_template_arguments, same_type_text, split_top_level
from ..frontend.spec import KernelSpec

_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(([^)]*)\)([^{]*)\{", re.S)
_SIZES = {".u64": 8, ".s64": 8, ".b64": 8, ".f64": 8, ".u32": 4, ".s32": 4, ".b32": 4, ".f32": 4,
          ".u16": 2, ".s16": 2, ".b16": 2, ".f16": 2, ".u8": 1, ".s8": 1, ".b8": 1}


@dataclass(frozen=True)
class PtxParam:
    ptx_type: str
    name: str
    nbytes: int
    align: int = 0  # `.align N`, given for byte arrays (structs and vectors by value)


@dataclass(frozen=True)
class PtxEntry:
    name: str
    params: tuple[PtxParam, ...]
    max_threads: tuple[int, ...] | None  # .maxntid (from __launch_bounds__)
    required_threads: tuple[int, ...] | None  # .reqntid


def ptx_entries(ptx: str) -> dict[str, PtxEntry]:
    """Every `.entry` in a PTX module with its parameter list and thread-count directives."""
    entries = {}
    for match in _ENTRY.finditer(ptx):
        params = []
        for decl in filter(None, (d.strip() for d in match[2].split(","))):
            # e.g. ".param .u32 k_param_3", ".param .u64 .ptr .align 1 k_param_0",
            # ".param .align 8 .b8 k_param_4[16]"
            tokens = decl.split()
            ptx_type = next((t for t in tokens if t in _SIZES), "?")
            name, _, count = tokens[-1].partition("[")
            align = int(tokens[tokens.index(".align") + 1]) if ".align" in tokens[:-1] else 0
            params.append(PtxParam(ptx_type, name, _SIZES.get(ptx_type, 0) * int(count.rstrip("]") or 1), align))
        entries[match[1]] = PtxEntry(match[1], tuple(params), _directive(match[3], "maxntid"), _directive(match[3], "reqntid"))
    return entries


def _directive(text: str, name: str) -> tuple[int, ...] | None:
    match = re.search(rf"\.{name}\s+([\d,\s]+)", text)
    return tuple(int(v) for v in match[1].replace(",", " ").split()) if match else None


def _where(spec: KernelSpec, arch_name: str) -> str:
    return f"{spec.signature.where}: kernel {spec.name} ({arch_name} PTX)"


def resolve_entry(spec: KernelSpec, ptx: str, arch_name: str) -> str:
    """The PTX entry name of `spec`: its own name if extern "C", else the matching mangled name."""
    entries = ptx_entries(ptx)
    signature = spec.signature
    if signature.extern_c and signature.entry_name in entries:
        return signature.entry_name
    if signature.extern_c and not signature.declared:
        found = ", ".join(sorted(entries)) or "none"
        raise AbiError(f"{_where(spec, arch_name)}: no PTX entry named {signature.entry_name!r} (entries: {found}); is it compiled (not #if'd out)?")
    # A C++ kernel, or a declared one (prebuilt PTX) that turns out to be C++: its mangled entry.
    return match_mangled(spec, sorted(entries), _where(spec, arch_name))


def match_mangled(spec: KernelSpec, names: list[str], where: str, what: str = "PTX entry") -> str:
    """The one of `names` (PTX entries or cubin symbols) that is `spec`'s C++ kernel.

    Matched by qualified name (`ns::scale`; a plain name also finds the kernel in a namespace),
    then by template arguments (constants compared by value: `256` is the demangler's `256u`,
    `false` its `(bool)0`), then by parameter types as the compiler spells them.
    """
    signature = spec.signature
    base, _, args = signature.qualified_name.partition("<")
    demangled = demangle([n for n in names if is_mangled(n)])
    functions = {n: f for n, text in demangled.items() if (f := parse_demangled(text))}
    named = [n for n, f in functions.items() if f.name == base or f.name.endswith(f"::{base}")]
    candidates = [n for n in named if functions[n].name == base] or named
    if args and len(candidates) > 1:
        given = split_top_level(args.removesuffix(">"))
        same_args = [n for n in candidates if functions[n].template_args is not None and same_template_arguments(functions[n].template_args, given)]
        candidates = same_args or candidates
    if signature.canonical_params is not None and len(candidates) > 1:
        wanted = signature.canonical_params
        same_types = [n for n in candidates if len(functions[n].params) == len(wanted) and all(map(same_type_text, functions[n].params, wanted))]
        candidates = same_types or candidates
    if len(candidates) == 1:
        return candidates[0]
    listing = "; ".join(f"{demangled.get(n, n)} [{n}]" for n in (candidates or names)) or "none"
    if candidates:
        raise AbiError(f"{where}: {spec.name!r} matches {len(candidates)} {what} names ({listing}); rename one or use extern \"C\"")
    hint = f"; is it compiled (not #if'd out)? Prebuilt objects must hold the instantiation {signature.qualified_name}" if signature.template else ""
    raise AbiError(f"{where}: no {what} for {spec.name!r} (entries: {listing}){hint}")


def check_entry(spec: KernelSpec, entry: str, ptx: str, arch_name: str) -> None:
    """nvcc's entry must have the signature's parameters, each of its C type's size, and
    allow the declared block size (`__launch_bounds__` becomes .maxntid, checked here)."""
    found = ptx_entries(ptx)[entry]
    where = _where(spec, arch_name)
    expected = spec.signature.params
    if len(found.params) != len(expected):
        raise AbiError(f"{where}: signature has {len(expected)} parameters but the PTX entry has {len(found.params)}")
    sizes = {s.name: s.stype for s in spec.scalars}
    for i, (param, ptx_param) in enumerate(zip(expected, found.params)):
        want, what = (8, "a 64-bit pointer") if param.pointer else (sizes[param.name].nbytes, f"{sizes[param.name].nbytes} bytes ({param.ctype})")
        if ptx_param.nbytes != want:
            raise AbiError(f"{where}: parameter {i} {param.name!r}: expected {what}, PTX has {ptx_param.ptx_type} ({ptx_param.nbytes} bytes)")
        stype = sizes.get(param.name)
        if stype is not None and stype.kind == "struct" and ptx_param.align != stype.align:
            raise AbiError(
                f"{where}: parameter {i} {param.name!r}: the compiler laid {param.ctype} out aligned to {stype.align} bytes, "
                f"but the PTX entry aligns it to {ptx_param.align or 'its type'}; were the types read with other flags than the build's?"
            )
    threads = spec.block[0] * spec.block[1] * spec.block[2]
    if found.max_threads is not None:
        limit = 1
        for v in found.max_threads:
            limit *= v
        if threads > limit:
            raise AbiError(f"{where}: block {list(spec.block)} has {threads} threads, but the kernel's __launch_bounds__ allows at most {limit}")
    if found.required_threads is not None and tuple(found.required_threads) + (1,) * (3 - len(found.required_threads)) != spec.block:
        raise AbiError(f"{where}: block {list(spec.block)} differs from the block size the kernel requires, {list(found.required_threads)}")


def check_adapted(spec: KernelSpec, entry: str, ptx: str, arch_name: str) -> None:
    """After ptx_adapt: the entry takes exactly what IREE passes, bindings then 32-bit slots."""
    found = [p.nbytes for p in ptx_entries(ptx)[entry].params]
    expected = [8] * len(spec.tensors) + [4] * sum(s.stype.slots for s in spec.scalars)
    if found != expected:
        raise AbiError(
            f"{_where(spec, arch_name)}: adapted entry takes {found} bytes per parameter, IREE will pass {expected} "
            "(a bug in iree_dispatch, please report it)"
        )


def check_machine_code(kernels: list[KernelSpec], obj) -> dict[str, str]:
    """A prebuilt cubin or fatbin (prebuilt.PrebuiltObject) can't be adapted, so each kernel's
    entry must already take exactly what IREE passes: 8-byte pointers, then 4-byte scalars; and
    its thread-count limits must allow the block. Checked on every image that can be read
    (machine code from .nv.info, uncompressed PTX). Returns kernel name → entry name (a C++
    kernel declared by its plain name is found by its mangled one)."""
    entries = {}
    for spec in kernels:
        expected = tuple([8] * len(spec.tensors) + [4] * len(spec.scalars))
        where = f"{obj.path}: kernel {spec.name}"
        images = [(what, {n: (k.params, k.max_threads, k.required_threads) for n, k in found.items()}) for what, found in obj.kernel_params()]
        images += [
            (f"{obj.path.name} ({arch.name} PTX)", {n: (tuple(p.nbytes for p in e.params), e.max_threads, e.required_threads) for n, e in ptx_entries(text).items()})
            for arch, text in obj.ptx_texts()
        ]
        threads = spec.block[0] * spec.block[1] * spec.block[2]
        for what, found in images:
            entry = spec.signature.entry_name
            if entry not in found:
                if not any(is_mangled(n) for n in found):
                    raise AbiError(f"{where}: {what} has no kernel named {entry!r} (kernels: {', '.join(sorted(found)) or 'none'})")
                entry = match_mangled(spec, sorted(found), f"{where}: {what}", "kernel")
            if entries.setdefault(spec.name, entry) != entry:
                raise AbiError(f"{where}: {what} names it {entry}, another image {entries[spec.name]}")
            params, max_threads, required = found[entry]
            if params != expected:
                raise AbiError(
                    f"{where}: {what} takes parameters of {list(params)} bytes, but the signature "
                    f"({len(spec.tensors)} pointer(s), then {len(spec.scalars)} scalar(s)) makes IREE pass {list(expected)}"
                )
            if max_threads is not None and threads > max_threads[0] * max_threads[1] * max_threads[2]:
                raise AbiError(f"{where}: block {list(spec.block)} has {threads} threads, but {what} allows at most {list(max_threads)} (__launch_bounds__)")
            if required is not None and tuple(required) + (1,) * (3 - len(required)) != spec.block:
                raise AbiError(f"{where}: block {list(spec.block)} differs from the block size {what} requires, {list(required)}")
    return entries
