"""The nvcc toolchain: the CUDA toolkit's nvcc, or the one the `nvidia-cuda-nvcc` wheel
installs into site-packages (`pip install iree-dispatch[nvcc]`), found automatically."""

from __future__ import annotations

from pathlib import Path

from ..core.archs import Arch
from ..core.errors import ToolchainError
from .base import PtxObject, Toolchain, checked_instances, describe_program, find_cuda_tool, host_compiler_problem, program_identity, run_tool, say
from .nvcc_command import run_nvcc

# Fixed flags: optimized device code, C++17. `-ptx` keeps the output forward-compatible text;
# `-x cu` compiles the source as CUDA whatever its name ends in (`kernels.cuh`, `k.cpp`).
BASE_FLAGS = ("-ptx", "-O3", "-std=c++17", "-x", "cu")


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

    def compile_ptx(self, source: Path, arch: Arch, out: Path, flags: tuple[str, ...] = (), instances: tuple[str, ...] = ()) -> PtxObject:
        # nvcc lists the headers it reads while compiling (-MD), so build systems can rebuild on a
        # header change. run_nvcc is the only way nvcc is run: it keeps paths and flag values
        # away from the shell nvcc hands its sub-steps to.
        run = run_nvcc(self.nvcc, source, out, (*BASE_FLAGS, f"-arch={arch.name}"), flags, checked_instances(instances))
        if run.returncode != 0:
            out.unlink(missing_ok=True)  # a PTX an earlier compile left is not this source's
            hint = ""
            if "host compiler" in run.log and (problem := host_compiler_problem()):
                hint = f"\n{problem}: install g++ (or set NVCC_CCBIN to a C++ compiler), or build with --toolchain nvrtc"
            raise ToolchainError(f"nvcc failed on {source} for {arch.name} (exit {run.returncode}):\n{run.log}{hint}\ncommand: {run.command}")
        return PtxObject(source, arch, out, run.dependencies)

    def assemble_cubin(self, ptx: Path, arch: Arch, out: Path) -> Path:
        ptxas = self.tool("ptxas")
        say(f"assembling cubins with {describe_program('ptxas', ptxas)}", self.progress, once=True)
        say(f"ptxas {ptx.name} -> {arch.name} cubin", self.progress)
        run_tool([str(ptxas), f"-arch={arch.name}", "-O3", str(ptx), "-o", str(out)], f"ptxas of {ptx.name} for {arch.name}", out)
        return out

