"""The nvcc toolchain: the CUDA toolkit's nvcc, or the one the `nvidia-cuda-nvcc` wheel
installs into site-packages (`pip install iree-dispatch[nvcc]`), found automatically."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from ..core.archs import Arch
from ..core.errors import ToolchainError
from .base import PtxObject, Toolchain, describe_program, find_cuda_tool, host_compiler_problem, program_identity, run_tool, say

# Fixed flags: optimized device code, C++17. `-ptx` keeps the output forward-compatible text.
BASE_FLAGS = ("-ptx", "-O3", "-std=c++17")


class NvccToolchain(Toolchain):
    name = "nvcc"

    def __init__(self, nvcc: Path):
        self.nvcc = Path(nvcc)

    def identity(self) -> str:
        return f"nvcc {program_identity(self.nvcc)}"

    def describe(self) -> str:
        return describe_program("nvcc", self.nvcc)

    def tool(self, name: str) -> Path:
        return find_cuda_tool(name, self.nvcc)

    def compile_ptx(self, source: Path, arch: Arch, out: Path, flags: tuple[str, ...] = ()) -> PtxObject:
        # nvcc lists the headers it reads while compiling (-MD), so build systems can rebuild on a
        # header change; the list is read back and the file removed: it is not an object.
        deps = out.with_name(f"{out.name}.d")
        cmd = [str(self.nvcc), *BASE_FLAGS, f"-arch={arch.name}", *flags, "-MD", "-MF", str(deps), "-MT", "ptx", str(source), "-o", str(out)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise ToolchainError(f"can't run {self.nvcc}: {exc.strerror}") from None
        if proc.returncode != 0:
            log = (proc.stderr + proc.stdout).strip()
            out.unlink(missing_ok=True)
            deps.unlink(missing_ok=True)
            hint = ""
            if "host compiler" in log and (problem := host_compiler_problem()):
                hint = f"\n{problem}: install g++ (or set NVCC_CCBIN to a C++ compiler), or build with --toolchain nvrtc"
            raise ToolchainError(f"nvcc failed on {source} for {arch.name} (exit {proc.returncode}):\n{log}{hint}\ncommand: {' '.join(cmd)}")
        rule = deps.read_text(encoding="utf-8")
        deps.unlink()
        return PtxObject(source, arch, out, make_prerequisites(rule))

    def assemble_cubin(self, ptx: Path, arch: Arch, out: Path) -> Path:
        ptxas = self.tool("ptxas")
        say(f"assembling cubins with {describe_program('ptxas', ptxas)}", self.progress, once=True)
        say(f"ptxas {ptx.name} -> {arch.name} cubin", self.progress)
        run_tool([str(ptxas), f"-arch={arch.name}", "-O3", str(ptx), "-o", str(out)], f"ptxas of {ptx.name} for {arch.name}", out)
        return out


def make_prerequisites(rule: str) -> tuple[Path, ...]:
    """The prerequisites of the one Make rule nvcc -MD writes (`ptx : a.cu \\`, one path a line).

    nvcc escapes only spaces in paths; relative paths are relative to nvcc's working directory,
    which is ours.
    """
    _target, _, prerequisites = rule.replace("\\\n", " ").partition(":")
    return tuple(Path(word.replace("\\ ", " ")).absolute() for word in re.split(r"(?<!\\)\s+", prerequisites.strip()) if word)

