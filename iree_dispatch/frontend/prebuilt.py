"""Prebuilt objects as kernel sources: user-supplied `.ptx`, `.cubin` and `.fatbin` files.

Such a kernel has no `.cu` source, so its C signature is given in the spec (pointer vs integer
can't be told from machine code). What the files themselves say is read here, with no CUDA
tool (the toolkits shipped with pip have no cuobjdump):

- the architecture each object runs on: PTX from its `.target` line; a cubin from its ELF
  header (`e_flags`) plus the `-arch` of the `.note.nv.tkinfo` note, the one place an
  arch-specific `sm_90a` cubin differs from `sm_90`; a fatbin from its images' headers;
- the parameter sizes of each kernel in machine code, from the `EIATTR_KPARAM_INFO`
  attributes of the cubin's `.nv.info.<kernel>` sections (what `cuobjdump -elf` prints as
  "Ordinal, Offset, Size"), and its thread-count limits (`EIATTR_MAX_THREADS`, `EIATTR_REQNTID`,
  from `__launch_bounds__` / `.maxntid` / `.reqntid`), so a cubin is checked like PTX is.

Images inside a fatbin may be compressed (nvcc compresses PTX by default); those are not
read, and their parameters are not checked (the uncompressed ones are).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..core.archs import Arch, parse_arch
from ..core.errors import SpecError
from ..core.variants import Variant, object_variant

Kind = Literal["ptx", "cubin", "fatbin"]
SUFFIXES: dict[str, Kind] = {".ptx": "ptx", ".cubin": "cubin", ".fatbin": "fatbin"}

_ELF_MAGIC = b"\x7fELF"
_FATBIN_MAGIC = 0xBA55ED50
_FATBIN_ELF, _FATBIN_PTX = 2, 1
_FATBIN_COMPRESSED = 0x2000 | 0x8000  # LZ4 (older toolkits) or zstd (CUDA 13) payloads
_EIATTR_KPARAM_INFO = 0x17
_EIATTR_MAX_THREADS = 0x05  # __launch_bounds__ (PTX .maxntid): x, y, z
_EIATTR_REQNTID = 0x10  # PTX .reqntid: x, y, z
_EIFMT_SVAL = 0x04  # attribute with a u16 size and a payload; the others are 4 bytes in all
_PREFERENCE = {"cubin": 0, "fatbin": 1, "ptx": 2}  # machine code first: no JIT at load


@dataclass(frozen=True)
class Image:
    """One piece of code in an object: a cubin's machine code for `arch`, or PTX for `arch`."""

    kind: Literal["cubin", "ptx"]
    arch: Arch
    data: bytes | None  # None: compressed inside a fatbin, not read


@dataclass(frozen=True)
class CubinKernel:
    """What a cubin says about one kernel: parameter sizes and thread-count limits (or None)."""

    params: tuple[int, ...]
    max_threads: tuple[int, ...] | None
    required_threads: tuple[int, ...] | None


@dataclass(frozen=True)
class PrebuiltObject:
    path: Path
    kind: Kind
    images: tuple[Image, ...]

    @property
    def variant(self) -> Variant:
        """The executable variant that carries this object, with the GPUs it may run on."""
        return object_variant(self.kind, tuple((i.kind, i.arch) for i in self.images))

    def kernel_params(self) -> list[tuple[str, dict[str, CubinKernel]]]:
        """(what, {kernel: its parameters and limits}) for each readable machine-code image."""
        return [(f"{self.path.name} ({i.arch.name} cubin)", cubin_kernels(i.data, self.path)) for i in self.images if i.kind == "cubin" and i.data is not None]

    def ptx_texts(self) -> list[tuple[Arch, str]]:
        return [(i.arch, i.data.decode("utf-8")) for i in self.images if i.kind == "ptx" and i.data is not None]


def is_object_source(source) -> bool:
    """True for an object file path (by suffix) or a list of them: a prebuilt kernel."""
    if isinstance(source, (list, tuple)):
        return bool(source) and all(is_object_source(s) for s in source)
    return isinstance(source, (str, Path)) and Path(source).suffix in SUFFIXES


def read_objects(sources: str | Path | Sequence[str | Path], where: str) -> tuple[PrebuiltObject, ...]:
    """Reads each object file, orders them by preference (cubins newest first, fatbins, PTX
    newest first: IREE runs the first variant whose condition holds) and refuses two objects
    that would make the same variant."""
    paths = [Path(s) for s in (sources if isinstance(sources, (list, tuple)) else [sources])]
    objects = sorted((read_object(p) for p in paths), key=lambda o: (_PREFERENCE[o.kind], [-a.major * 10 - a.minor for a in o.variant.archs]))
    seen: dict[str, Path] = {}
    for o in objects:
        name = o.variant.name
        if name in seen:
            raise SpecError(f"{where}: objects {seen[name]} and {o.path} both are {o.kind} for {o.variant.target_arch.name}; give one object per arch and kind")
        seen[name] = o.path
    return tuple(objects)


def read_object(path: Path) -> PrebuiltObject:
    kind = SUFFIXES.get(path.suffix)
    if kind is None:
        raise SpecError(f"{path}: unknown object kind {path.suffix!r}; prebuilt objects are {', '.join(SUFFIXES)} files")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SpecError(f"can't read object {path}: {exc.strerror}") from None
    if kind == "ptx":
        return PrebuiltObject(path, kind, (Image("ptx", ptx_arch(data, path), data),))
    if kind == "cubin":
        return PrebuiltObject(path, kind, (Image("cubin", cubin_arch(data, path), data),))
    return PrebuiltObject(path, kind, fatbin_images(data, path))


def ptx_arch(data: bytes, path: Path) -> Arch:
    match = re.search(rb"^\s*\.target\s+(sm_\w+)", data, re.M)
    if not match:
        raise SpecError(f"{path}: no `.target sm_XY` line; is this a PTX file?")
    return parse_arch(match[1].decode())


def _sections(data: bytes, path: Path) -> dict[str, bytes]:
    """An ELF64 file's sections by name."""
    if data[:4] != _ELF_MAGIC or len(data) < 64 or data[4] != 2:
        raise SpecError(f"{path}: not a 64-bit ELF file, so not a cubin")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    sections = {}
    for name, _type, _flags, _addr, offset, size in headers:
        end = data.index(b"\0", names_at + name)
        sections[data[names_at + name : end].decode()] = data[offset : offset + size]
    return sections


def cubin_arch(data: bytes, path: Path) -> Arch:
    sections = _sections(data, path)
    (flags,) = struct.unpack_from("<I", data, 0x30)
    # CUDA ELF ABI version 8 (CUDA 13) keeps the SM number in bits 8-15, older ones in 0-7.
    sm = (flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF
    # e_flags are the same for sm_90 and sm_90a; ptxas records the exact -arch in this note.
    suffix = re.search(rb"-arch sm_%d([af])\b" % sm, sections.get(".note.nv.tkinfo", b""))
    try:
        return parse_arch(f"sm_{sm}{suffix[1].decode() if suffix else ''}")
    except SpecError:
        raise SpecError(f"{path}: the ELF header names no CUDA architecture (e_flags 0x{flags:x}); is this a cubin?") from None


def cubin_kernels(data: bytes, path: Path) -> dict[str, CubinKernel]:
    """Each kernel of a cubin with its parameter sizes in bytes (in parameter order) and limits."""
    kernels = {}
    for name, section in _sections(data, path).items():
        if not name.startswith(".nv.info."):
            continue
        sizes: dict[int, int] = {}
        threads: dict[int, tuple[int, ...]] = {}
        i = 0
        while i + 4 <= len(section):
            fmt, attr = section[i], section[i + 1]
            if fmt != _EIFMT_SVAL:
                i += 4
                continue
            (size,) = struct.unpack_from("<H", section, i + 2)
            if attr == _EIATTR_KPARAM_INFO:
                _index, ordinal, _offset, packed = struct.unpack_from("<IHHI", section, i + 4)
                sizes[ordinal] = (packed >> 18) & 0x3FFF
            elif attr in (_EIATTR_MAX_THREADS, _EIATTR_REQNTID) and size == 12:
                threads[attr] = struct.unpack_from("<III", section, i + 4)
            i += 4 + size
        params = tuple(sizes[k] for k in sorted(sizes))
        kernels[name.removeprefix(".nv.info.")] = CubinKernel(params, threads.get(_EIATTR_MAX_THREADS), threads.get(_EIATTR_REQNTID))
    return kernels


def fatbin_images(data: bytes, path: Path) -> tuple[Image, ...]:
    if len(data) < 16 or struct.unpack_from("<I", data, 0)[0] != _FATBIN_MAGIC:
        raise SpecError(f"{path}: not a fatbin (no fatbin magic 0x{_FATBIN_MAGIC:x}); is it the output of nvcc -fatbin or fatbinary?")
    _magic, _version, header_size, total = struct.unpack_from("<IHHQ", data, 0)
    images = []
    offset, end = header_size, min(len(data), header_size + total)
    while offset + 64 <= end:
        kind, _unknown, entry_size, size = struct.unpack_from("<HHIQ", data, offset)
        (sm,) = struct.unpack_from("<I", data, offset + 28)
        (flags,) = struct.unpack_from("<Q", data, offset + 40)
        payload = data[offset + entry_size : offset + entry_size + size]
        if kind in (_FATBIN_ELF, _FATBIN_PTX):
            readable = not flags & _FATBIN_COMPRESSED
            if kind == _FATBIN_ELF:
                arch = cubin_arch(payload, path) if readable else parse_arch(f"sm_{sm}")
                images.append(Image("cubin", arch, payload if readable else None))
            else:
                images.append(Image("ptx", parse_arch(f"sm_{sm}"), payload.rstrip(b"\0") if readable else None))
        offset += entry_size + size
    if not images:
        raise SpecError(f"{path}: the fatbin holds no cubin or PTX image")
    return tuple(images)
