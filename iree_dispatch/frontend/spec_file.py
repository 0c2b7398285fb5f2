"""The TOML spec file: `load_spec(path)` → ModuleSpec, each `[[kernel]]` declared through
KernelSpec.declare (a `.cu` or prebuilt objects) or the Triton front end (a `.py` source)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from ..core.archs import DEFAULT_ARCHS, parse_archs
from ..core.errors import SpecError
from ..core.files import check_input_file
from .prebuilt import SUFFIXES, is_object_source
from .spec import KernelSpec, ModuleSpec
from .triton import load_triton_kernel

_MODULE_KEYS = {"name", "archs", "nvcc_flags", "objects"}
_TRITON_KEYS = {"constexprs", "num_warps", "num_stages", "aligned"}  # for a .py source: a @triton.jit function
# `replaces`: what the kernel can replace in a model; read and checked by iree_dispatch.models (docs/models.md), not needed to build.
_MODEL_KEYS = {"replaces"}
_KERNEL_KEYS = {"name", "source", "block", "grid", "shape", "shapes", "scalars", "inplace", "readonly", "outputs", "zero", "shared_memory",
                "function", "signature", "parallel", "requires", *_TRITON_KEYS, *_MODEL_KEYS}


def load_spec(path: str | Path) -> ModuleSpec:
    """Reads a TOML spec file; relative `source` paths are relative to the spec file."""
    path = Path(path)
    try:
        check_input_file("spec", path)
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError(f"can't read spec {path}: {exc.strerror}") from None
    try:
        # Editors on some systems start UTF-8 files with a byte-order mark, which TOML doesn't allow.
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError(f"{path}:{line}: spec is not valid UTF-8 (byte 0x{raw[exc.start]:02x}); save it as UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: invalid TOML: {exc}") from None
    unknown = set(data) - {"module", "kernel"}
    if unknown:
        raise SpecError(f"{path}: unknown top-level keys {sorted(unknown)}; expected [module] and [[kernel]] tables")
    module = data.get("module", {})
    _check_keys(module, _MODULE_KEYS, f"{path}: [module]")
    kernels_raw = data.get("kernel", [])
    if not isinstance(kernels_raw, list) or not kernels_raw:
        raise SpecError(f"{path}: no [[kernel]] tables; declare at least one kernel")
    try:
        archs = parse_archs(module.get("archs", DEFAULT_ARCHS))
    except SpecError as exc:
        raise SpecError(f"{path}: [module] archs: {exc}") from None
    flags = module.get("nvcc_flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise SpecError(f"{path}: [module] nvcc_flags must be a list of strings")
    kernels = []
    for i, k in enumerate(kernels_raw, start=1):
        label = f"{path}: [[kernel]] #{i}" + (f" ({k['name']})" if isinstance(k.get("name"), str) else "")
        _check_keys(k, _KERNEL_KEYS, label)
        for required in ("name", "source"):
            if required not in k:
                raise SpecError(f"{label}: missing {required!r}")
        source = k["source"]
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            source = [path.parent / s for s in source]  # prebuilt objects, one variant each
            if not is_object_source(source):
                raise SpecError(
                    f"{label}: source is a list, which is for prebuilt object files ({', '.join(SUFFIXES)}), one variant each; "
                    f"a .cu (or Triton .py) source is one file name: source = \"{Path(k['source'][0]).name}\""
                )
        elif isinstance(source, str):
            source = path.parent / source
        else:
            raise SpecError(f"{label}: source must be a file name, or a list of object files, got {source!r}")
        options = {
            "grid": k.get("grid"),
            "shape": k.get("shape"),
            "shapes": k.get("shapes"),
            "scalars": k.get("scalars"),
            "inplace": k.get("inplace", ()),
            "readonly": k.get("readonly", ()),
            "outputs": k.get("outputs", ()),
            "zero": k.get("zero", ()),
            "function": k.get("function"),
            "requires": k.get("requires", ()),
        }
        if isinstance(source, Path) and source.suffix == ".py":
            derived = sorted({"block", "shared_memory"} & set(k))
            if derived:
                raise SpecError(f"{label}: {derived} of a Triton kernel come from its compilation (block = 32 * num_warps); drop them")
            triton = {key: k[key] for key in _TRITON_KEYS if key in k}
            kernels.append(load_triton_kernel(source, k["name"], k.get("signature"), archs=[a.name for a in archs], **triton, **options))
            if "parallel" in k:
                kernels[-1] = kernels[-1].with_parallel(k["parallel"])
            continue
        misplaced = sorted(_TRITON_KEYS & set(k))
        if misplaced:
            raise SpecError(f"{label}: {misplaced} are for Triton kernels (source = \"file.py\"), not {Path(str(source if isinstance(source, Path) else source[0])).name}")
        shared = k.get("shared_memory", 0)
        kernels.append(
            KernelSpec.declare(source, k["name"], signature=k.get("signature"), block=k.get("block"), shared_memory=shared, nvcc_flags=flags, arch=archs[0], **options)
        )
        if "parallel" in k:
            kernels[-1] = kernels[-1].with_parallel(k["parallel"])
        # A per-arch table may name only archs the module builds: anything else is a typo (sm_90 for sm_90a).
        extra = [a.name for a, _ in kernels[-1].shared_memory_by_arch if a not in archs]
        if extra:
            raise SpecError(f"{label}: shared_memory gives a size for {extra[0]}, which the module doesn't build (archs: {', '.join(a.name for a in archs)})")
    try:
        return ModuleSpec(module.get("name", path.stem), tuple(kernels), tuple(archs), tuple(flags), module.get("objects", "cubin"))
    except SpecError as exc:  # module-level rules (kernel names, flags, shared memory): name the spec
        raise SpecError(f"{path}: {exc}") from None


def _check_keys(table, allowed: set[str], label: str) -> None:
    if not isinstance(table, dict):
        raise SpecError(f"{label}: expected a table")
    unknown = set(table) - allowed
    if unknown:
        raise SpecError(f"{label}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
