"""What every CUDA toolchain shares: the interface (`Toolchain`), the PTX it produces, and
finding the CUDA programs (nvcc, ptxas, fatbinary) in the toolkit or the NVIDIA wheels."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import warnings
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..core.archs import Arch
from ..core.errors import ToolchainError

# The CUDA release the pip routes pin (pyproject extras): its PTX ISA must not outrun the
# driver of the GPUs the modules run on (driver 580 = CUDA 13.0).
WHEEL_PINS = {
    "nvcc": "'nvidia-cuda-nvcc==13.0.*' 'nvidia-nvvm==13.0.*' 'nvidia-cuda-crt==13.0.*' 'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-cccl==13.0.*'",
    "nvrtc": "'nvidia-cuda-nvrtc==13.0.*' 'nvidia-nvjitlink==13.0.*' 'nvidia-cuda-runtime==13.0.*' 'cuda-bindings==13.0.*'",
}


@dataclass(frozen=True)
class PtxObject:
    source: Path
    arch: Arch
    path: Path  # the written .ptx file
    dependencies: tuple[Path, ...]  # the source and every header the compiler read for it, absolute

    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")


# The instantiation of a kernel template, the one way both toolchains are given it: a name that can
# end no line of C++ and leaves no string literal (signature.py refuses such template arguments).
_INSTANCE = re.compile(r'[^;{}"#\\\n\r]+')


def checked_instances(instances: tuple[str, ...]) -> tuple[str, ...]:
    """`instances` (qualified template-ids, `ns::reduce<float, 256, false>`), each checked to be
    one that a generated line of C++ can name and nothing more."""
    for instance in instances:
        if not _INSTANCE.fullmatch(instance):
            raise ToolchainError(f"can't instantiate {instance!r}: a kernel's template arguments are types and constants, with none of ; {{ }} \" # \\ or a line break")
    return instances


def object_filename(stem: str, arch: Arch) -> str:
    return f"{stem}.{arch.name}.ptx"


# ---- progress: which compiler runs, said once; warnings ----

Progress = Callable[[str], None]
_default_progress: Progress | None = None  # where lines go when a caller gave none: the command line's
_said: weakref.WeakKeyDictionary[Progress, set[str]] = weakref.WeakKeyDictionary()
_warned: set[str] = set()


def set_default_progress(progress: Progress | None) -> None:
    """Where toolchain lines go when the caller passed no progress callback (the command line
    sets its own: a cubin that Triton needs, a toolchain fallback are said there too)."""
    global _default_progress
    _default_progress = progress


def say(message: str, progress: Progress | None = None, once: bool = False) -> None:
    """`message` to `progress`, else to the default; `once`: only the first time for that sink."""
    sink = progress or _default_progress
    if sink is None:
        return
    if once:
        try:
            said = _said.setdefault(sink, set())
        except TypeError:  # not weakly referenceable: say it every time
            said = set()
        if message in said:
            return
        said.add(message)
    sink(message)


def warn_once(message: str) -> None:
    """A warning: to the command line's progress (`warning: ...`), else Python's warnings. Once
    per process."""
    if message in _warned:
        return
    _warned.add(message)
    if _default_progress is not None:
        _default_progress(f"warning: {message}")
    else:
        warnings.warn(message, RuntimeWarning, stacklevel=3)


class Toolchain(ABC):
    """A CUDA compiler: .cu → PTX per arch, PTX → cubin, cubins + PTX → fatbin."""

    name: str
    progress: Progress | None = None  # the build's progress (compile_all sets it): cubins and fatbins are said there too

    @abstractmethod
    def identity(self) -> str:
        """The compiler, its version and location: part of the build cache key."""

    def describe(self) -> str:
        """The compiler for people: name, version, where (`nvcc 13.0 (/usr/local/cuda/bin/nvcc)`)."""
        return self.name

    @abstractmethod
    def compile_ptx(self, source: Path, arch: Arch, out: Path, flags: tuple[str, ...] = (), instances: tuple[str, ...] = ()) -> PtxObject:
        """Writes the PTX of `source` for `arch` to `out`; raises ToolchainError with the log.
        instances: kernel template instantiations to compile besides what the source itself
        instantiates (`ns::reduce<float, 256, false>`), so the source needs no added line."""

    @abstractmethod
    def assemble_cubin(self, ptx: Path, arch: Arch, out: Path) -> Path:
        """PTX → cubin for exactly `arch` (no JIT at load time)."""

    @abstractmethod
    def tool(self, name: str) -> Path:
        """A CUDA toolkit program this toolchain uses (fatbinary), or ToolchainError."""

    def compile_all(self, jobs: list[tuple[Path, Arch, Path]], flags: tuple[str, ...] = (), progress: Callable[[str], None] | None = None,
                    instances: Mapping[Path, tuple[str, ...]] | None = None) -> list[PtxObject]:
        """Compiles all (source, arch, out) jobs in parallel; raises the first failure in job order.
        instances: per source, the kernel template instantiations to compile (compile_ptx).

        On the first failure, or an interrupt (Ctrl-C), jobs not yet started are cancelled: a
        failed or interrupted build returns at once instead of starting every queued compile.
        """

        if progress is not None:
            self.progress = progress
        if jobs:
            say(f"compiling with {self.describe()}", self.progress, once=True)

        def run(job: tuple[Path, Arch, Path]) -> PtxObject:
            source, arch, out = job
            say(f"{self.name} {source.name} -> {arch.name}", self.progress)
            return self.compile_ptx(source, arch, out, flags, (instances or {}).get(source, ()))

        pool = ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1)))
        try:
            futures = [pool.submit(run, job) for job in jobs]
            results = [f.result() for f in futures]
        except KeyboardInterrupt:
            # Don't wait for the running compiles either: Ctrl-C reaches them too (the terminal
            # signals the whole process group), and the command line stops the rest.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # the running ones write into the build's folder: let them finish
            raise
        pool.shutdown()
        return results

    def make_fatbin(self, cubins: dict[Arch, Path], ptx: tuple[Arch, Path], out: Path) -> Path:
        """fatbinary: every cubin plus one PTX, for the driver to choose from at load time."""
        images = [f"--image3=kind=elf,sm={a.name[3:]},file={path}" for a, path in cubins.items()]
        images.append(f"--image3=kind=ptx,sm={ptx[0].name[3:]},file={ptx[1]}")
        fatbinary = self.tool("fatbinary")
        say(f"assembling fatbins with {describe_program('fatbinary', fatbinary)}", self.progress, once=True)
        say(f"fatbinary {out.name} ({', '.join(a.name for a in cubins)} + {ptx[0].name} PTX)", self.progress)
        run_tool([str(fatbinary), f"--create={out}", *images], f"fatbinary {out.name}", out)
        return out


def nvidia_wheel_dirs() -> list[Path]:
    """The roots the NVIDIA CUDA wheels install into (site-packages/nvidia/cu13, ...): the
    `nvidia` namespace package's folders, CUDA 13's merged layout first."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    roots = [Path(p) for p in spec.submodule_search_locations]
    return [d for root in roots for d in sorted(root.iterdir(), key=lambda d: d.name != "cu13") if d.is_dir()]


def wheel_nvcc() -> Path | None:
    """nvcc of the `nvidia-cuda-nvcc` wheel in this Python's site-packages, or None. It runs
    only with cicc (`nvidia-nvvm`) and the CUDA headers (`nvidia-cuda-crt`, `nvidia-cuda-runtime`,
    and CCCL's, which cuda_fp16.h includes: `nvidia-cuda-cccl`) installed beside it, which its
    nvcc.profile finds by relative path; a missing one is named."""
    for root in nvidia_wheel_dirs():
        nvcc = root / "bin" / "nvcc"
        if not (nvcc.is_file() and os.access(nvcc, os.X_OK)):
            continue
        needed = {"nvidia-nvvm": root / "nvvm" / "bin" / "cicc", "nvidia-cuda-crt": root / "include" / "crt" / "host_config.h",
                  "nvidia-cuda-runtime": root / "include" / "cuda_runtime.h", "nvidia-cuda-cccl": root / "include" / "cccl" / "nv" / "target"}
        missing = [package for package, path in needed.items() if not path.exists()]
        if missing:
            raise ToolchainError(f"{nvcc} (the nvidia-cuda-nvcc wheel) needs {', '.join(missing)} too: pip install {WHEEL_PINS['nvcc']}")
        return nvcc
    return None


def find_nvcc() -> Path:
    """$NVCC, then PATH, then $CUDA_HOME/$CUDA_PATH, then /usr/local/cuda, then the nvcc wheel.
    A $NVCC that is not an nvcc is an error, never passed over for another compiler."""
    if os.environ.get("NVCC"):
        return checked_nvcc(os.environ["NVCC"], "$NVCC")
    candidates: list[str | None] = [shutil.which("nvcc")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "bin", "nvcc"))
    candidates.append("/usr/local/cuda/bin/nvcc")
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return Path(candidate)
    found = wheel_nvcc()
    if found is not None:
        return found
    raise ToolchainError(
        "nvcc not found: looked at $NVCC, PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin and the nvidia-cuda-nvcc wheel; "
        "install the CUDA toolkit, or pip install 'iree-dispatch[nvcc]', or set NVCC=/path/to/nvcc"
    )


def checked_nvcc(value: str, where: str) -> Path:
    """`value` (from `where`, such as $NVCC) as nvcc's path, if it is an executable file whose
    `--version` says it is nvcc; else a ToolchainError naming both."""
    path = Path(value)
    if not path.exists():
        problem = "does not exist"
    elif path.is_dir():
        problem = "is a folder; name the nvcc program in it (…/bin/nvcc)"
    elif not os.access(path, os.X_OK):
        problem = "is not executable"
    else:
        stat = path.stat()
        said = _version_output(str(path), stat.st_size, stat.st_mtime_ns).strip()
        if "Cuda compiler driver" in said:
            return path
        problem = f"is not nvcc: its --version says {said.splitlines()[0]!r}" if said else "is not nvcc: it says nothing for --version"
    raise ToolchainError(f"{where}={value!r} {problem}; set it to the CUDA toolkit's nvcc, or unset it to find one on PATH, in $CUDA_HOME or in the nvidia-cuda-nvcc wheel")


@functools.cache
def _version_output(program: str, size: int, mtime_ns: int) -> str:
    """`program --version`'s output: asked once per process for each version of the program."""
    try:
        return subprocess.run([program, "--version"], capture_output=True, text=True, check=False, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _version_line(program: str, size: int, mtime_ns: int) -> str:
    out = _version_output(program, size, mtime_ns)
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def program_version(program: Path) -> str:
    """The CUDA release of a CUDA program (`13.0` from `release 13.0, V13.0.88`), else its last
    `--version` line, else `?`."""
    try:
        stat = program.stat()
    except OSError:
        return "?"
    out = _version_output(str(program), stat.st_size, stat.st_mtime_ns)
    found = re.search(r"release (\d+\.\d+)", out) or re.search(r"\bV?(\d+\.\d+(?:\.\d+)*)\b", out)
    return found.group(1) if found else (out.strip().splitlines() or ["?"])[-1]


def describe_program(name: str, program: Path) -> str:
    """`ptxas 13.0 (/usr/local/cuda/bin/ptxas)`."""
    return f"{name} {program_version(program)} ({program})"


def program_identity(program: Path) -> str:
    """Path, size, mtime and `--version` of a program: changes whenever the program does."""
    stat = program.stat()
    return f"{program} {stat.st_size} {stat.st_mtime_ns} {_version_line(str(program), stat.st_size, stat.st_mtime_ns)}"


def find_cuda_tool(name: str, nvcc: Path | None = None) -> Path:
    """A CUDA toolkit program (ptxas, fatbinary): beside `nvcc`, else on PATH, else beside any nvcc found."""
    candidates = [nvcc.parent / name if nvcc else None, shutil.which(name)]
    if nvcc is None:
        with_nvcc = None
        try:
            with_nvcc = find_nvcc()
        except ToolchainError:
            pass
        candidates.append(with_nvcc.parent / name if with_nvcc else None)
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return Path(candidate)
    where = f"beside {nvcc} or on PATH" if nvcc else "on PATH or beside an nvcc"
    raise ToolchainError(f"{name} not found {where}; it comes with the CUDA toolkit, or pip install {WHEEL_PINS['nvcc']}")


# ---- the host compiler nvcc needs ----

_CCBIN_OPTIONS = ("-ccbin", "--compiler-bindir")


def _ccbin_option(flags: list[str]) -> str | None:
    """The last -ccbin / --compiler-bindir value in `flags` (nvcc takes the last one)."""
    found = None
    for i, flag in enumerate(flags):
        name, eq, value = flag.partition("=")
        if name in _CCBIN_OPTIONS:
            found = value if eq else (flags[i + 1] if i + 1 < len(flags) else None)
    return found


def host_compiler_setting() -> tuple[str, str]:
    """(where it is set, value) of the host compiler nvcc runs, as nvcc decides: -ccbin in
    $NVCC_APPEND_FLAGS, then in $NVCC_PREPEND_FLAGS, then $NVCC_CCBIN, else `gcc` on PATH.
    (A -ccbin among a module's nvcc_flags is not seen here.)"""
    for var in ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"):
        try:
            value = _ccbin_option(shlex.split(os.environ.get(var, "")))
        except ValueError:
            value = None
        if value:
            return f"-ccbin in ${var}", value
    if os.environ.get("NVCC_CCBIN"):
        return "$NVCC_CCBIN", os.environ["NVCC_CCBIN"]
    return "nvcc's default", "gcc"


def host_compiler_problem() -> str | None:
    """Why nvcc can't run its host compiler here, or None. Cheap: a PATH lookup, and once per
    process per compiler a preprocess of an empty C++ file (about 10 ms; it needs the C++ front
    end, cc1plus, which a C-only gcc lacks)."""
    where, value = host_compiler_setting()
    path = Path(value)
    if os.sep in value:
        path = path / "gcc" if path.is_dir() else path
        found = str(path) if path.is_file() and os.access(path, os.X_OK) else None
        missing = f"{path} ({where}) is not an executable file"
    else:
        found = shutil.which(value)
        missing = f"{value} ({where}) is not on PATH"
    if found is None:
        return f"no host C++ compiler: {missing}"
    stat = os.stat(found)
    return _host_compiler_fails(found, stat.st_size, stat.st_mtime_ns, where)


@functools.cache
def _host_compiler_fails(compiler: str, size: int, mtime_ns: int, where: str) -> str | None:
    try:
        proc = subprocess.run([compiler, "-x", "c++", "-E", "-", "-o", os.devnull], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the host C++ compiler {compiler} ({where}) can't run: {exc}"
    if proc.returncode != 0:
        lines = (proc.stderr + proc.stdout).strip().splitlines()
        return f"the host C++ compiler {compiler} ({where}) can't compile C++: {lines[0] if lines else f'exit {proc.returncode}'}"
    return None


def run_tool(cmd: list[str], what: str, out: Path) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        out.unlink(missing_ok=True)
        raise ToolchainError(f"{what} failed (exit {proc.returncode}):\n{(proc.stderr + proc.stdout).strip()}\ncommand: {' '.join(cmd)}")

