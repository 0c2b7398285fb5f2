"""MLIR programs compiled for IREE's CPU device, for runtime tests that need no GPU."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .environment import have_compiler

CPU_FLAGS = ("--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=generic")


def compile_for_cpu(folder: Path, program: str, *flags: str, devices: tuple[str, ...] = ("--iree-hal-target-device=local",)) -> Path:
    """`program` compiled into folder/p.vmfb for IREE's CPU device(s) (`devices`: the target-device
    flags), with `flags` added; the test is skipped where iree-base-compiler is missing."""
    if not have_compiler():
        pytest.skip("needs iree-base-compiler")
    from iree.compiler.tools.binaries import find_tool

    (folder / "p.mlir").write_text(program)
    subprocess.run([find_tool("iree-compile"), *devices, *CPU_FLAGS, *flags, "p.mlir", "-o", "p.vmfb"], cwd=folder, check=True, capture_output=True)
    return folder / "p.vmfb"
