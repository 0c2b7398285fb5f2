"""A CUDA kernel source compiled for the host, its few CUDA features emulated by a shim header
(a thread per CUDA thread), with a driver that runs it and checks every element."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest


def build_host_emulation(folder: Path, source: Path, shim: str, driver: str, driver_args: Sequence[str]) -> Path:
    """`source` and a driver (`driver_args`: how the driver file is compiled, e.g. its language and
    includes) built into one host executable in `folder`; skipped without a C++20 host compiler
    or one without std::barrier, failed where the source itself doesn't compile."""
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("needs a host C++20 compiler (g++ or clang++)")
    shim_h, driver_cpp, exe = folder / "shim.h", folder / "driver.cpp", folder / f"{source.stem}_host"
    shim_h.write_text(shim)
    driver_cpp.write_text(driver)
    args = [arg.format(shim=shim_h) for arg in driver_args]
    proc = subprocess.run([cxx, "-O2", "-std=c++20", "-fno-strict-aliasing", "-pthread", "-include", str(shim_h), "-x", "c++", str(source),
                           *args, str(driver_cpp), "-o", str(exe)], capture_output=True, text=True)
    if proc.returncode != 0:
        # An older host compiler without C++20's std::barrier can't run the emulation; any other
        # failure is the source's.
        (folder / "probe.cpp").write_text("#include <barrier>\nint main() { std::barrier<> b(1); b.arrive_and_wait(); }\n")
        probe = subprocess.run([cxx, "-std=c++20", "-pthread", str(folder / "probe.cpp"), "-o", str(folder / "probe")], capture_output=True, text=True)
        if probe.returncode != 0:
            pytest.skip(f"{cxx} has no C++20 std::barrier")
        pytest.fail(f"the kernel source does not compile for the host emulation:\n{proc.stderr[-4000:]}")
    return exe
