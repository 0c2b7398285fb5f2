"""Stage 3: check each compiled PTX `.entry` against its KernelSpec.

The entry's parameter list is what the GPU will actually read; IREE never checks it (a
mismatch runs and returns wrong data). We do, right after nvcc, with a located error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import AbiError
from .spec import KernelSpec

_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(([^)]*)\)", re.S)
_SIZES = {".u64": 8, ".s64": 8, ".b64": 8, ".f64": 8, ".u32": 4, ".s32": 4, ".b32": 4, ".f32": 4,
          ".u16": 2, ".s16": 2, ".b16": 2, ".f16": 2, ".u8": 1, ".s8": 1, ".b8": 1}


@dataclass(frozen=True)
class PtxParam:
    ptx_type: str
    name: str
    nbytes: int


def ptx_entries(ptx: str) -> dict[str, list[PtxParam]]:
    """Every `.entry` in a PTX module with its parameter list."""
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
        entries[match[1]] = params
    return entries


def check_entry(spec: KernelSpec, ptx: str, arch_name: str) -> None:
    """nvcc's entry must have the signature's parameters, each of its C type's size."""
    found = _entry(spec, ptx, arch_name)
    where = f"{spec.signature.where}: kernel {spec.name} ({arch_name} PTX)"
    expected = spec.signature.params
    if len(found) != len(expected):
        raise AbiError(f"{where}: signature has {len(expected)} parameters but the PTX entry has {len(found)}")
    sizes = {s.name: s.stype for s in spec.scalars}
    for i, (param, ptx_param) in enumerate(zip(expected, found)):
        want, what = (8, "a 64-bit pointer") if param.pointer else (sizes[param.name].nbytes, f"{sizes[param.name].nbytes} bytes ({param.ctype})")
        if ptx_param.nbytes != want:
            raise AbiError(f"{where}: parameter {i} {param.name!r}: expected {what}, PTX has {ptx_param.ptx_type} ({ptx_param.nbytes} bytes)")


def check_adapted(spec: KernelSpec, ptx: str, arch_name: str) -> None:
    """After ptx_adapt: the entry takes exactly what IREE passes, bindings then 32-bit slots."""
    found = _entry(spec, ptx, arch_name)
    expected = [8] * len(spec.tensors) + [4] * sum(s.stype.slots for s in spec.scalars)
    if [p.nbytes for p in found] != expected:
        raise AbiError(
            f"{spec.signature.where}: kernel {spec.name} ({arch_name} PTX): adapted entry takes {[p.nbytes for p in found]} bytes "
            f"per parameter, IREE will pass {expected} (a bug in iree_dispatch, please report it)"
        )


def _entry(spec: KernelSpec, ptx: str, arch_name: str) -> list[PtxParam]:
    entries = ptx_entries(ptx)
    if spec.name not in entries:
        found = ", ".join(sorted(entries)) or "none"
        where = f"{spec.signature.where}: kernel {spec.name} ({arch_name} PTX)"
        raise AbiError(f"{where}: no PTX entry named {spec.name!r} (entries: {found}); is the kernel extern \"C\" and __global__?")
    return entries[spec.name]
