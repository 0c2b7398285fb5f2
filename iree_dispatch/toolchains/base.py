"""What every CUDA toolchain shares: the interface (`Toolchain`), the PTX it produces, and
finding the CUDA programs (nvcc, ptxas, fatbinary) in the toolkit or the NVIDIA wheels."""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable
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


def object_filename(stem: str, arch: Arch) -> str:
    return f"{stem}.{arch.name}.ptx"


class Toolchain(ABC):
    """A CUDA compiler: .cu → PTX per arch, PTX → cubin, cubins + PTX → fatbin."""

    name: str

    @abstractmethod
    def identity(self) -> str:
        """The compiler, its version and location: part of the build cache key."""

    @abstractmethod
    def compile_ptx(self, source: Path, arch: Arch, out: Path, flags: tuple[str, ...] = ()) -> PtxObject:
        """Writes the PTX of `source` for `arch` to `out`; raises ToolchainError with the log."""

    @abstractmethod
    def assemble_cubin(self, ptx: Path, arch: Arch, out: Path) -> Path:
        """PTX → cubin for exactly `arch` (no JIT at load time)."""

    @abstractmethod
    def tool(self, name: str) -> Path:
        """A CUDA toolkit program this toolchain uses (fatbinary), or ToolchainError."""

    def compile_all(self, jobs: list[tuple[Path, Arch, Path]], flags: tuple[str, ...] = (), progress: Callable[[str], None] | None = None) -> list[PtxObject]:
        """Compiles all (source, arch, out) jobs in parallel; raises the first failure in job order.

        On the first failure, or an interrupt (Ctrl-C), jobs not yet started are cancelled: a
        failed or interrupted build returns at once instead of starting every queued compile.
        """

        def run(job: tuple[Path, Arch, Path]) -> PtxObject:
            source, arch, out = job
            if progress:
                progress(f"{self.name} {source.name} -> {arch.name}")
            return self.compile_ptx(source, arch, out, flags)

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
        run_tool([str(self.tool("fatbinary")), f"--create={out}", *images], f"fatbinary {out.name}", out)
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
    """$NVCC, then PATH, then $CUDA_HOME/$CUDA_PATH, then /usr/local/cuda, then the nvcc wheel."""
    candidates: list[str | None] = [os.environ.get("NVCC"), shutil.which("nvcc")]
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


@functools.cache
def _version_line(program: str, size: int, mtime_ns: int) -> str:
    out = subprocess.run([program, "--version"], capture_output=True, text=True, check=False).stdout
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


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


def run_tool(cmd: list[str], what: str, out: Path) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        out.unlink(missing_ok=True)
        raise ToolchainError(f"{what} failed (exit {proc.returncode}):\n{(proc.stderr + proc.stdout).strip()}\ncommand: {' '.join(cmd)}")

