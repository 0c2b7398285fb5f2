"""Stage 2: compile `.cu` sources to PTX, one file per (source, arch), with nvcc."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .archs import Arch
from .errors import ToolchainError

# Fixed flags: optimized device code, C++17. `-ptx` keeps the output forward-compatible text.
BASE_FLAGS = ("-ptx", "-O3", "-std=c++17")


def find_nvcc() -> Path:
    """$NVCC, then PATH, then $CUDA_HOME/$CUDA_PATH, then /usr/local/cuda."""
    candidates: list[str | None] = [os.environ.get("NVCC"), shutil.which("nvcc")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "bin", "nvcc"))
    candidates.append("/usr/local/cuda/bin/nvcc")
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise ToolchainError(
        "nvcc not found: looked at $NVCC, PATH, $CUDA_HOME/bin, $CUDA_PATH/bin and /usr/local/cuda/bin; "
        "install the CUDA toolkit or set NVCC=/path/to/nvcc"
    )


def nvcc_version(nvcc: Path) -> str:
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=False).stdout
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


@dataclass(frozen=True)
class PtxObject:
    source: Path
    arch: Arch
    path: Path  # the written .ptx file
    dependencies: tuple[Path, ...]  # the source and every header nvcc read for it, absolute

    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")


def object_filename(stem: str, arch: Arch) -> str:
    return f"{stem}.{arch.name}.ptx"


def compile_ptx(source: Path, arch: Arch, out: Path, flags: tuple[str, ...] = (), nvcc: Path | None = None) -> PtxObject:
    nvcc = nvcc or find_nvcc()
    # nvcc lists the headers it reads while compiling (-MD), so build systems can rebuild on a
    # header change; the list is read back and the file removed: it is not an object.
    deps = out.with_name(f"{out.name}.d")
    cmd = [str(nvcc), *BASE_FLAGS, f"-arch={arch.name}", *flags, "-MD", "-MF", str(deps), "-MT", "ptx", str(source), "-o", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ToolchainError(f"can't run {nvcc}: {exc.strerror}") from None
    if proc.returncode != 0:
        log = (proc.stderr + proc.stdout).strip()
        out.unlink(missing_ok=True)
        deps.unlink(missing_ok=True)
        raise ToolchainError(f"nvcc failed on {source} for {arch.name} (exit {proc.returncode}):\n{log}\ncommand: {' '.join(cmd)}")
    rule = deps.read_text(encoding="utf-8")
    deps.unlink()
    return PtxObject(source, arch, out, make_prerequisites(rule))


def make_prerequisites(rule: str) -> tuple[Path, ...]:
    """The prerequisites of the one Make rule nvcc -MD writes (`ptx : a.cu \\`, one path a line).

    nvcc escapes only spaces in paths; relative paths are relative to nvcc's working directory,
    which is ours.
    """
    _target, _, prerequisites = rule.replace("\\\n", " ").partition(":")
    return tuple(Path(word.replace("\\ ", " ")).absolute() for word in re.split(r"(?<!\\)\s+", prerequisites.strip()) if word)


def compile_all(jobs: list[tuple[Path, Arch, Path]], flags: tuple[str, ...] = (), progress=None) -> list[PtxObject]:
    """Compiles all (source, arch, out) jobs in parallel; raises the first failure in job order."""
    nvcc = find_nvcc()

    def run(job):
        source, arch, out = job
        if progress:
            progress(f"nvcc {source.name} -> {arch.name}")
        return compile_ptx(source, arch, out, flags, nvcc)

    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        futures = [pool.submit(run, job) for job in jobs]
        return [f.result() for f in futures]


def _cuda_tool(name: str, nvcc: Path | None = None) -> Path:
    """A CUDA toolkit program (ptxas, fatbinary): beside nvcc, else on PATH."""
    nvcc = nvcc or find_nvcc()
    for candidate in (nvcc.parent / name, shutil.which(name)):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise ToolchainError(f"{name} not found beside {nvcc} or on PATH; it comes with the CUDA toolkit")


def _run(cmd: list[str], what: str, out: Path) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        out.unlink(missing_ok=True)
        raise ToolchainError(f"{what} failed (exit {proc.returncode}):\n{(proc.stderr + proc.stdout).strip()}\ncommand: {' '.join(cmd)}")


def assemble_cubin(ptx: Path, arch: Arch, out: Path) -> Path:
    """ptxas: PTX → cubin for exactly `arch` (no JIT at load time)."""
    _run([str(_cuda_tool("ptxas")), f"-arch={arch.name}", "-O3", str(ptx), "-o", str(out)], f"ptxas of {ptx.name} for {arch.name}", out)
    return out


def make_fatbin(cubins: dict[Arch, Path], ptx: tuple[Arch, Path], out: Path) -> Path:
    """fatbinary: every cubin plus one PTX, for the driver to choose from at load time."""
    images = [f"--image3=kind=elf,sm={a.name[3:]},file={path}" for a, path in cubins.items()]
    images.append(f"--image3=kind=ptx,sm={ptx[0].name[3:]},file={ptx[1]}")
    _run([str(_cuda_tool("fatbinary")), f"--create={out}", *images], f"fatbinary {out.name}", out)
    return out
