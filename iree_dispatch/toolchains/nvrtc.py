"""The NVRTC toolchain: .cu → PTX in-process with NVRTC (`nvidia-cuda-nvrtc` through
`cuda-bindings`), PTX → cubin with nvJitLink (`nvidia-nvjitlink`, else ptxas if found), so a
machine with no CUDA toolkit builds kernels after `pip install iree-dispatch[nvrtc]`.

What nvcc gives a source implicitly and NVRTC does not, supplied so that one source compiles
the same under both (the samples' PTX is identical, see tests/test_toolchains.py):
- C/C++ standard headers: NVRTC ships none. `nvrtc_include/` (in this package) has small
  <cstdint>/<stdint.h>, <cstddef>/<stddef.h>, <climits>/<limits.h>, <cfloat>/<float.h> with the
  types of the LP64 ABI nvcc's host compiler uses (int64_t is `long`, so C++ kernels mangle the
  same). CCCL's NVRTC <cuda/std/cstdint> makes int64_t `long long`, hence not used.
- CUDA headers (cuda_fp16.h, cuda_bf16.h, mma.h, ...): from the `nvidia-cuda-runtime` wheel,
  else $CUDA_HOME/include or /usr/local/cuda/include.
- <math.h> macros nvcc's implicit host includes define (INFINITY, NAN, HUGE_VAL[F]; not
  constant expressions under NVRTC) and GCC's __is_same(A, B): a pre-included header.
- `-default-device`: NVRTC refuses unannotated functions, including the lambdas a kernel
  defines, which nvcc makes __device__ from where they are defined.
NVRTC writes no dependency list (nvcc -MD); `included_files` finds every file a source can
include by following its #include lines the way NVRTC searches (a superset: conditionals are
not evaluated), so the build cache sees every header's bytes.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from collections.abc import Callable
from pathlib import Path

from ..core.archs import Arch
from ..core.errors import ToolchainError
from .base import WHEEL_PINS, PtxObject, Toolchain, checked_instances, describe_program, find_cuda_tool, nvidia_wheel_dirs, program_identity, run_tool, say

SHIM_DIR = Path(__file__).resolve().parent / "nvrtc_include"
PRELUDE = SHIM_DIR / "iree_dispatch_nvrtc_prelude.h"
BASE_OPTIONS = ("-std=c++17", "-default-device")
# nvcc flags that let device code use constexpr functions and lambdas not marked __device__:
# NVRTC knows them not, and with -default-device such functions are __device__ already.
IMPLIED_NVCC_FLAGS = frozenset({"--expt-relaxed-constexpr", "-expt-relaxed-constexpr", "--extended-lambda", "-extended-lambda",
                                "--expt-extended-lambda", "-expt-extended-lambda"})

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include(_next)?[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>|(\S.*))?', re.M)


def _import_bindings():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise ToolchainError(f"NVRTC needs cuda-bindings ({exc}): pip install 'iree-dispatch[nvrtc]', i.e. {WHEEL_PINS['nvrtc']}") from None
    return nvrtc


def _require_bindings() -> None:
    """The check of _import_bindings without the import (which takes ~50 ms)."""
    if not _importable("cuda.bindings.nvrtc"):
        raise ToolchainError(f"NVRTC needs cuda-bindings (no module cuda.bindings.nvrtc): pip install 'iree-dispatch[nvrtc]', i.e. {WHEEL_PINS['nvrtc']}")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or the module blocked
        return False


def _check(result, what: str) -> None:
    if int(result) != 0:
        raise ToolchainError(f"{what} failed: {result!r}")


def cuda_include_dir() -> Path | None:
    """The CUDA headers NVRTC compiles against (cuda_fp16.h, ...): the nvidia-cuda-runtime
    wheel's (same release as NVRTC), else the toolkit's."""
    candidates = [d / "include" for d in nvidia_wheel_dirs()]
    candidates += [Path(os.environ[v]) / "include" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    candidates.append(Path("/usr/local/cuda/include"))
    return next((d for d in candidates if (d / "cuda_fp16.h").is_file()), None)


def flag_values(flags: tuple[str, ...], short: str, long: str) -> list[str]:
    """The values of an NVRTC option in `flags`, in order: `-Xv`, `-X v`, `--long=v`, `--long v`."""
    values, it = [], iter(flags)
    for flag in it:
        if flag in (short, long):
            values.append(next(it, ""))
        elif flag.startswith(f"{long}="):
            values.append(flag[len(long) + 1:])
        elif len(short) == 2 and flag.startswith(short):
            values.append(flag[2:])
    return values


def include_dirs_of(flags: tuple[str, ...]) -> list[Path]:
    """The -I folders in `flags` (-Idir, -I dir, --include-path=dir, --include-path dir), absolute."""
    return [Path(d).absolute() for d in flag_values(flags, "-I", "--include-path")]


def included_files(source: Path, search: list[Path], pre_included: tuple[str, ...] = ()) -> tuple[Path, ...]:
    """`source` and every file its #include lines reach, recursively, absolute, resolved as NVRTC
    does: "name" in the including file's folder, then the `search` folders; <name> in `search`.
    Every #include line counts, whatever #if surrounds it, so the result is a superset of what
    the compiler reads. A name found nowhere is one of NVRTC's built-in headers (or an error the
    compile reports). An #include of a macro can't be followed and is refused; #include_next
    counts the file of every folder. `pre_included`: names given with -include, looked up as
    paths, then in `search`."""
    found: dict[Path, None] = {}
    pending = [Path(source).absolute()]
    for name in pre_included:
        hits = [p for p in (Path(name), *(f / name for f in search)) if p.is_file()]
        pending += [Path(os.path.normpath(hits[0].absolute()))] if hits else []
    while pending:
        path = pending.pop()
        if path in found:
            continue
        found[path] = None
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in _INCLUDE.finditer(text):
            following, quoted, angled, other = match.groups()
            if other is not None or (quoted is None and angled is None):
                line = text.count("\n", 0, match.start()) + 1
                raise ToolchainError(f"{path}:{line}: #include of a macro: the NVRTC toolchain can't track which file it names; write the name, or use --toolchain nvcc")
            name = quoted or angled
            folders = ([path.parent] if quoted else []) + search
            hits = [f / name for f in folders if (f / name).is_file()]
            # #include_next takes a later folder's file than the includer's: count every one
            pending += [Path(os.path.normpath(hit)) for hit in (hits if following else hits[:1])]
    return tuple(found)


class NvrtcToolchain(Toolchain):
    name = "nvrtc"

    def __init__(self) -> None:
        # NVRTC is loaded on the first compile, not here: importing the bindings and the library
        # takes ~70 ms, which a build served from the cache (identity() only) need not pay.
        _require_bindings()
        self.cuda_include = cuda_include_dir()
        self._loaded: tuple[object, tuple[int, int]] | None = None
        self._assembler_found: tuple[str, str, Callable[[Path, Arch, Path], None]] | None = None

    def _load(self) -> tuple[object, tuple[int, int]]:
        """(the cuda.bindings nvrtc module, NVRTC's (major, minor)), loaded once."""
        if self._loaded is None:
            nvrtc = _import_bindings()
            try:
                result, major, minor = nvrtc.nvrtcVersion()
            except Exception as exc:  # the bindings raise their own types when libnvrtc can't be loaded
                raise ToolchainError(f"can't load libnvrtc ({exc}): pip install {WHEEL_PINS['nvrtc']}") from None
            _check(result, "nvrtcVersion")
            self._loaded = (nvrtc, (major, minor))
        return self._loaded

    @property
    def _nvrtc(self):
        return self._load()[0]

    @property
    def version(self) -> tuple[int, int]:
        return self._load()[1]

    def identity(self) -> str:
        # The pip route is identified by its wheels' versions and library files without loading
        # them; NVRTC from elsewhere (a toolkit) by the loaded library.
        wheels = _wheel_identity("nvidia-cuda-nvrtc", "libnvrtc.so*")
        nvrtc = f"nvrtc {wheels}" if wheels else f"nvrtc {self.version} {_library_identity('nvrtc')}"
        jitlink = _wheel_identity("nvidia-nvjitlink", "libnvJitLink.so*") if _importable("cuda.bindings.nvjitlink") else None
        assembler = f"nvJitLink {jitlink}" if jitlink else self._assembler()[0]
        return f"{nvrtc} headers {self.cuda_include}; cubins: {assembler}"

    def describe(self) -> str:
        major, minor = self.version
        return f"NVRTC {major}.{minor} ({_library_location('nvrtc')})"

    def tool(self, name: str) -> Path:
        try:
            return find_cuda_tool(name)
        except ToolchainError as exc:
            raise ToolchainError(f"{exc}. NVRTC has no {name} of its own: use objects \"cubin\" or \"ptx\" with it, or install the tool") from None

    def search_path(self, flags: tuple[str, ...]) -> list[Path]:
        """Where <name> includes are looked for, in NVRTC's order: the user's -I, the shims, CUDA."""
        return [*include_dirs_of(flags), SHIM_DIR, *([self.cuda_include] if self.cuda_include else [])]

    def options(self, arch: Arch, flags: tuple[str, ...]) -> list[str]:
        extra = [f"-I{d}" for d in (SHIM_DIR, self.cuda_include) if d]
        passed = [f for f in flags if f not in IMPLIED_NVCC_FLAGS]
        return [f"-arch={arch.name}", *BASE_OPTIONS, *passed, *extra, f"--pre-include={PRELUDE}"]

    def compile_ptx(self, source: Path, arch: Arch, out: Path, flags: tuple[str, ...] = (), instances: tuple[str, ...] = ()) -> PtxObject:
        nvrtc = self._nvrtc
        pre_included = tuple(flag_values(flags, "-include", "--pre-include"))
        dependencies = (*included_files(source, self.search_path(flags), pre_included), PRELUDE)
        options = self.options(arch, flags)
        result, program = nvrtc.nvrtcCreateProgram(Path(source).read_bytes(), str(source).encode(), 0, [], [])
        _check(result, f"nvrtcCreateProgram({source})")
        try:
            # NVRTC's way to instantiate a kernel template the source doesn't: a name expression
            # (its address), which the compile instantiates; its errors name the expression.
            for instance in checked_instances(instances):
                _check(nvrtc.nvrtcAddNameExpression(program, f"&{instance}".encode())[0], f"nvrtcAddNameExpression(&{instance})")
            result, = nvrtc.nvrtcCompileProgram(program, len(options), [o.encode() for o in options])
            if int(result) != 0:
                log = _program_log(nvrtc, program)
                hint = ""
                if "cannot open source file" in log:
                    hint = (f"\nNVRTC looks for <headers> in -I folders, {SHIM_DIR} (C/C++ basics) and "
                            f"{self.cuda_include or 'no CUDA include folder (pip install nvidia-cuda-runtime==13.0.*)'}")
                raise ToolchainError(f"NVRTC failed on {source} for {arch.name} ({result.name}):\n{log}{hint}\noptions: {' '.join(options)}")
            result, size = nvrtc.nvrtcGetPTXSize(program)
            _check(result, "nvrtcGetPTXSize")
            ptx = b" " * size
            _check(nvrtc.nvrtcGetPTX(program, ptx)[0], "nvrtcGetPTX")
        finally:
            nvrtc.nvrtcDestroyProgram(program)
        out.write_text(normalize_ptx(ptx.rstrip(b"\0").decode()), encoding="utf-8")
        return PtxObject(source, arch, out, dependencies)

    def assemble_cubin(self, ptx: Path, arch: Arch, out: Path) -> Path:
        _, description, assemble = self._assembler()
        if description:
            say(f"assembling cubins with {description}", self.progress, once=True)
            say(f"{description.split()[0]} {ptx.name} -> {arch.name} cubin", self.progress)
        assemble(ptx, arch, out)
        return out

    def _assembler(self) -> tuple[str, str, Callable[[Path, Arch, Path], None]]:
        """(identity, description, function) of what turns PTX into cubins: nvJitLink, else ptxas."""
        if self._assembler_found is None:
            self._assembler_found = _find_assembler()
        return self._assembler_found


def _find_assembler() -> tuple[str, Callable[[Path, Arch, Path], None]]:
    """nvJitLink (the NVRTC extra has it), else ptxas, else a function that says what to install."""
    try:
        from cuda.bindings import nvjitlink

        version = nvjitlink.version()
        return f"nvJitLink {version} {_library_identity('nvJitLink')}", f"nvJitLink {'.'.join(map(str, version))} ({_library_location('nvJitLink')})", _nvjitlink_cubin
    except Exception:  # not installed, or its library can't be loaded: try ptxas
        pass
    try:
        ptxas = find_cuda_tool("ptxas")
    except ToolchainError:
        return "none", "", _no_assembler

    def run_ptxas(ptx: Path, arch: Arch, out: Path) -> None:
        run_tool([str(ptxas), f"-arch={arch.name}", "-O3", str(ptx), "-o", str(out)], f"ptxas of {ptx.name} for {arch.name}", out)

    return f"ptxas {program_identity(ptxas)}", describe_program("ptxas", ptxas), run_ptxas


def normalize_ptx(ptx: str) -> str:
    """NVRTC marks C++ template kernels `.weak` (for linking several programs); a module here is
    never linked, so that is `.visible`, which is what nvcc writes."""
    return re.sub(r"^(\s*)\.weak(\s+\.entry\b)", r"\1.visible\2", ptx, flags=re.M)


def _program_log(nvrtc, program) -> str:
    result, size = nvrtc.nvrtcGetProgramLogSize(program)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(program, log)
    return log.rstrip(b"\0").decode(errors="replace").strip()


def _wheel_identity(package: str, library_glob: str) -> str | None:
    """`package`'s version, cuda-bindings' version, and the size and mtime of the package's
    library files in the NVIDIA wheel folders; None if the wheel is not installed."""
    try:
        versions = f"{package} {importlib.metadata.version(package)} cuda-bindings {importlib.metadata.version('cuda-bindings')}"
    except importlib.metadata.PackageNotFoundError:
        return None
    files = sorted(p for d in nvidia_wheel_dirs() for p in (d / "lib").glob(library_glob))
    return " ".join([versions, *(f"{p} {p.stat().st_size} {p.stat().st_mtime_ns}" for p in files)])


def _library_location(name: str) -> str:
    """`libnvrtc.so.13 from /.../nvidia/cu13/lib`: the shared library loaded, for people."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        path = Path(load_nvidia_dynamic_lib(name).abs_path)
        return f"{path.name} from {path.parent}"
    except Exception:  # pathfinder absent or the library found another way
        return f"lib{name}"


def _library_identity(name: str) -> str:
    """The loaded shared library's path, size and mtime, and the wheel's version."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        path = Path(load_nvidia_dynamic_lib(name).abs_path)
        stat = path.stat()
        located = f"{path} {stat.st_size} {stat.st_mtime_ns}"
    except Exception:  # pathfinder absent or the library found another way: the version says enough
        located = "?"
    package = {"nvrtc": "nvidia-cuda-nvrtc", "nvJitLink": "nvidia-nvjitlink"}[name]
    try:
        version = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        version = "no wheel"
    return f"{located} {package} {version}"


def _nvjitlink_cubin(ptx: Path, arch: Arch, out: Path) -> None:
    from cuda.bindings import nvjitlink

    options = [f"-arch={arch.name}", "-O3"]
    handle = nvjitlink.create(len(options), options)
    try:
        data = ptx.read_bytes()
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), ptx.name)
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            size = nvjitlink.get_error_log_size(handle)
            log = bytearray(size)
            nvjitlink.get_error_log(handle, log)
            raise ToolchainError(f"nvJitLink of {ptx.name} for {arch.name} failed ({exc}):\n{log.rstrip(bytes(1)).decode(errors='replace')}") from None
        size = nvjitlink.get_linked_cubin_size(handle)
        cubin = bytearray(size)
        nvjitlink.get_linked_cubin(handle, cubin)
    finally:
        nvjitlink.destroy(handle)
    out.write_bytes(bytes(cubin))


def _no_assembler(ptx: Path, arch: Arch, out: Path) -> None:
    raise ToolchainError(
        f"can't make a cubin of {ptx.name} for {arch.name}: NVRTC needs nvJitLink (pip install 'nvidia-nvjitlink==13.0.*', "
        "part of iree-dispatch[nvrtc]) or ptxas (CUDA toolkit); or build with objects = \"ptx\""
    )
