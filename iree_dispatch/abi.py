"""Stage 3: find each kernel's compiled PTX `.entry` and check it against its KernelSpec.

The entry's parameter list is what the GPU will actually read; IREE never checks it (a
mismatch runs and returns wrong data). We do, right after nvcc, with a located error. C++
kernels (templates, overloads, no `extern "C"`) have mangled entry names, found here by
demangling.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from .errors import AbiError
from .spec import KernelSpec

_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(([^)]*)\)([^{]*)\{", re.S)
_SIZES = {".u64": 8, ".s64": 8, ".b64": 8, ".f64": 8, ".u32": 4, ".s32": 4, ".b32": 4, ".f32": 4,
          ".u16": 2, ".s16": 2, ".b16": 2, ".f16": 2, ".u8": 1, ".s8": 1, ".b8": 1}


@dataclass(frozen=True)
class PtxParam:
    ptx_type: str
    name: str
    nbytes: int


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
            params.append(PtxParam(ptx_type, name, _SIZES.get(ptx_type, 0) * int(count.rstrip("]") or 1)))
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
    if spec.signature.extern_c:
        if spec.name not in entries:
            found = ", ".join(sorted(entries)) or "none"
            raise AbiError(f"{_where(spec, arch_name)}: no PTX entry named {spec.name!r} (entries: {found}); is it compiled (not #if'd out)?")
        return spec.name
    demangled = demangle(sorted(entries))
    wanted = re.compile(rf"(?:^|\s){re.escape(spec.name)}\(")
    matches = [name for name, pretty in demangled.items() if wanted.search(pretty)]
    if len(matches) == 1:
        return matches[0]
    listing = "; ".join(f"{demangled[n]} [{n}]" for n in (matches or sorted(demangled))) or "none"
    if matches:
        raise AbiError(f"{_where(spec, arch_name)}: {spec.name!r} matches {len(matches)} PTX entries ({listing}); rename one or use extern \"C\"")
    hint = f"; instantiate it explicitly: template __global__ void {spec.name}(...);" if spec.signature.template else ""
    raise AbiError(f"{_where(spec, arch_name)}: no PTX entry for {spec.name!r} (entries: {listing}){hint}")


def demangle(names: list[str]) -> dict[str, str]:
    """Mangled name → demangled, with cu++filt (CUDA toolkit) or c++filt (binutils)."""
    nvcc_dir = os.path.dirname(shutil.which("nvcc") or "")
    tool = next((t for t in (os.path.join(nvcc_dir, "cu++filt"), shutil.which("cu++filt"), shutil.which("c++filt")) if t and os.path.isfile(t)), None)
    if tool is None:
        raise AbiError("C++ kernel names need cu++filt or c++filt (binutils) to be resolved; install one, or declare the kernel extern \"C\"")
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True).stdout.splitlines()
    return dict(zip(names, out))


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


def check_machine_code(kernels: list[KernelSpec], obj) -> None:
    """A prebuilt cubin or fatbin (prebuilt.PrebuiltObject) can't be adapted, so each kernel's
    entry must already take exactly what IREE passes: 8-byte pointers, then 4-byte scalars; and
    its thread-count limits must allow the block. Checked on every image that can be read
    (machine code from .nv.info, uncompressed PTX)."""
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
            if spec.name not in found:
                raise AbiError(f"{where}: {what} has no kernel named {spec.name!r} (kernels: {', '.join(sorted(found)) or 'none'})")
            params, max_threads, required = found[spec.name]
            if params != expected:
                raise AbiError(
                    f"{where}: {what} takes parameters of {list(params)} bytes, but the signature "
                    f"({len(spec.tensors)} pointer(s), then {len(spec.scalars)} scalar(s)) makes IREE pass {list(expected)}"
                )
            if max_threads is not None and threads > max_threads[0] * max_threads[1] * max_threads[2]:
                raise AbiError(f"{where}: block {list(spec.block)} has {threads} threads, but {what} allows at most {list(max_threads)} (__launch_bounds__)")
            if required is not None and tuple(required) + (1,) * (3 - len(required)) != spec.block:
                raise AbiError(f"{where}: block {list(spec.block)} differs from the block size {what} requires, {list(required)}")
