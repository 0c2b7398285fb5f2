"""CMake integration (cmake/IreeDispatch.cmake, CMakeLists.txt): builds, incremental rebuilds
through the depfile, find_package, and configure-time errors. CPU only; needs cmake ≥ 3.21,
ninja, nvcc and iree-base-compiler."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..support.environment import ROOT, needs_build_tools


def _cmake() -> str | None:
    cmake = shutil.which("cmake")
    if cmake is None:
        return None
    version = re.search(r"(\d+)\.(\d+)", subprocess.run([cmake, "--version"], capture_output=True, text=True).stdout)
    return cmake if version and (int(version[1]), int(version[2])) >= (3, 21) else None


CMAKE = _cmake()
# `pip install ninja` puts it beside this Python, which need not be on PATH.
NINJA = shutil.which("ninja") or shutil.which("ninja", path=str(Path(sys.executable).parent))

pytestmark = [
    needs_build_tools,
    pytest.mark.skipif(CMAKE is None or NINJA is None, reason="needs cmake >= 3.21 and ninja"),
]


def configure(source: Path, build: Path, *defines: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [CMAKE, "-S", str(source), "-B", str(build), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={NINJA}", f"-DIREE_DISPATCH_PYTHON={sys.executable}", *defines],
        capture_output=True,
        text=True,
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def ninja(build: Path, *args: str) -> str:
    proc = subprocess.run([NINJA, "-C", str(build), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def would_build(build: Path) -> set[str]:
    """Targets whose module `ninja` would rebuild now, from the custom commands' descriptions."""
    return set(re.findall(r"iree-dispatch: building \S+ \((\w+)\)", ninja(build, "-n")))


def test_samples_target_and_ctest(tmp_path):
    build = tmp_path / "build"
    configure(ROOT, build)
    ninja(build, "iree-dispatch-samples")
    for name in ("samples.vmfb", "samples.mlir", "mixed_invocation.vmfb", "mixed_invocation.mlir", "samples.objects/axpby.sm_90.ptx"):
        assert (build / name).is_file(), name
    target, *dependencies = (build / "mixed_invocation.vmfb.d").read_text().replace("\\\n", " ").split()
    assert target == f"{build / 'mixed_invocation.vmfb'}:"
    for dependency in ("kernels/samples.toml", "kernels/simple_mul.cu", "kernels/axpby.cu", "mlir/mixed_invocation.mlir"):
        assert str(ROOT / dependency) in dependencies
    assert any(d.endswith("/cuda_runtime.h") for d in dependencies)  # headers nvcc read, not only the sources
    assert would_build(build) == set()

    # The README's plain iree-compile line runs here; iree-run-module and pytest -m gpu skip
    # without a device. (pytest.cpu is this suite: not run again from inside it.)
    proc = subprocess.run([str(Path(CMAKE).with_name("ctest")), "--test-dir", str(build), "-E", "^pytest[.]cpu$"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"readme\.iree-compile \.+\s+Passed", proc.stdout), proc.stdout
    assert (build / "mixed_invocation.plain.vmfb").is_file()


COMMON_H = "#pragma once\n// Shared by a.cu and b.cu.\n__device__ inline float scaled(float v) { return 2.0f * v; }\n"
KERNEL_CU = """#include "common.h"
extern "C" __global__ void scale_{x}(const float* __restrict__ x, float* __restrict__ y, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = scaled(x[i]);
}}
"""
SPEC_TOML = """[module]
name = "mod_{x}"
archs = ["sm_80"]

[[kernel]]
name = "scale_{x}"
source = "{x}.cu"
block = [64]
grid = ["ceildiv(n, 64)"]
shape = ["n"]
"""
PROGRAM_MLIR = """module @prog {
  func.func private @mod_b.scale_b(tensor<?xf32>) -> tensor<?xf32>
  func.func @twice(%x: tensor<?xf32>) -> tensor<?xf32> {
    %y = func.call @mod_b.scale_b(%x) : (tensor<?xf32>) -> tensor<?xf32>
    %z = arith.addf %y, %y : tensor<?xf32>
    return %z : tensor<?xf32>
  }
}
"""


def consumer(tmp_path: Path, how_to_load: str) -> Path:
    """Another project: mod_a (a.cu), mod_b (b.cu), and prog linking mod_b's kernel into an MLIR
    program in mod_b's folder (sharing its objects); a.cu and b.cu include common.h. The space
    in the folder's name goes through every depfile (nvcc's, ours, CMake's)."""
    src = tmp_path / "consumer src"
    src.mkdir()
    (src / "common.h").write_text(COMMON_H)
    for x in "ab":
        (src / f"{x}.cu").write_text(KERNEL_CU.format(x=x))
        (src / f"{x}.toml").write_text(SPEC_TOML.format(x=x))
    (src / "prog.mlir").write_text(PROGRAM_MLIR)
    (src / "CMakeLists.txt").write_text(
        f"""cmake_minimum_required(VERSION 3.21)
project(consumer LANGUAGES NONE)
{how_to_load}
iree_dispatch_add_module(NAME mod_a SPEC a.toml OUTPUT_VMFB a_vmfb)
message(STATUS "a_vmfb=${{a_vmfb}}")
iree_dispatch_add_module(NAME mod_b SPEC b.toml SOURCES b.cu ARCHS 80 OUTPUT_DIR out_b)
iree_dispatch_add_module(NAME prog SPEC b.toml ARCHS 80 PROGRAM prog.mlir OUTPUT_DIR out_b)
"""
    )
    return src


def touch(path: Path) -> None:
    os.utime(path)


def test_incremental_rebuilds_via_include(tmp_path):
    src = consumer(tmp_path, f'include("{ROOT.as_posix()}/cmake/IreeDispatch.cmake")')
    build = tmp_path / "build"
    assert f"a_vmfb={build / 'mod_a.vmfb'}" in configure(src, build).stdout
    ninja(build)
    vmfbs = {"mod_a": build / "mod_a.vmfb", "mod_b": build / "out_b" / "mod_b.vmfb", "prog": build / "out_b" / "prog.vmfb"}
    assert all(v.is_file() for v in vmfbs.values()) and (build / "out_b" / "mod_b.objects" / "b.sm_80.ptx").is_file()
    assert would_build(build) == set()

    touch(src / "a.cu")
    assert would_build(build) == {"mod_a"}
    before = {name: v.stat().st_mtime_ns for name, v in vmfbs.items()}
    ninja(build)
    after = {name: v.stat().st_mtime_ns for name, v in vmfbs.items()}
    assert after["mod_a"] > before["mod_a"] and after["mod_b"] == before["mod_b"] and after["prog"] == before["prog"]

    touch(src / "prog.mlir")
    assert would_build(build) == {"prog"}
    touch(src / "b.cu")
    assert would_build(build) == {"mod_b", "prog"}
    touch(src / "common.h")  # known only from the depfiles
    assert would_build(build) == {"mod_a", "mod_b", "prog"}


def test_find_package(tmp_path):
    src = consumer(tmp_path, 'find_package(IreeDispatch 0.1 REQUIRED)\nmessage(STATUS "IreeDispatch ${IreeDispatch_VERSION}")')
    build = tmp_path / "build"
    out = configure(src, build, f"-DIreeDispatch_DIR={ROOT / 'cmake'}").stdout
    assert "IreeDispatch 0.1.0" in out
    assert would_build(build) == {"mod_a", "mod_b", "prog"}


def _python_without_package() -> str | None:
    for python in (shutil.which("python3", path="/usr/bin:/usr/local/bin"), "/usr/bin/python3"):
        if python and subprocess.run([python, "-c", "import iree_dispatch"], capture_output=True, cwd="/").returncode != 0:
            return python
    return None


@pytest.mark.parametrize(
    "define, message",
    [
        ("IREE_DISPATCH_PYTHON=<python without the package>", "can't import the iree_dispatch package"),
        ("IREE_DISPATCH_PYTHON=/nonexistent/python", "is not a Python executable"),
        ("IREE_DISPATCH_NVCC=/nonexistent/nvcc", "is not an nvcc executable"),
    ],
)
def test_configure_errors(tmp_path, define, message):
    if "<python without the package>" in define:
        python = _python_without_package()
        if python is None:
            pytest.skip("every Python found here has iree_dispatch")
        define = f"IREE_DISPATCH_PYTHON={python}"
    src = consumer(tmp_path, f'include("{ROOT.as_posix()}/cmake/IreeDispatch.cmake")')
    proc = configure(src, tmp_path / "build", f"-D{define}", check=False)
    assert proc.returncode != 0 and message in " ".join(proc.stderr.split()), proc.stderr


def test_find_package_reports_not_found(tmp_path):
    """Without REQUIRED, a missing prerequisite makes the package not found, with the reason."""
    src = consumer(tmp_path, "")
    (src / "CMakeLists.txt").write_text(
        'cmake_minimum_required(VERSION 3.21)\nproject(consumer LANGUAGES NONE)\nfind_package(IreeDispatch)\nmessage(STATUS "found=${IreeDispatch_FOUND}")\n'
    )
    proc = configure(src, tmp_path / "build", f"-DIreeDispatch_DIR={ROOT / 'cmake'}", "-DIREE_DISPATCH_NVCC=/nonexistent/nvcc")
    assert "found=0" in proc.stdout and "is not an nvcc executable" in " ".join(proc.stderr.split()), proc.stdout + proc.stderr


def _nvrtc_available() -> bool:
    from iree_dispatch.core.errors import ToolchainError
    from iree_dispatch.toolchains import select_toolchain

    try:
        select_toolchain("nvrtc")
    except ToolchainError:
        return False
    return True


@pytest.mark.skipif(not _nvrtc_available(), reason="needs NVRTC: pip install 'iree-dispatch[nvrtc]'")
def test_nvrtc_toolchain_and_embedded_objects(tmp_path):
    """IREE_DISPATCH_TOOLCHAIN=nvrtc builds without nvcc; EMBED_OBJECTS + OBJECTS ptx writes an
    .mlir that plain iree-compile compiles in an empty folder (no objects beside it)."""
    src = consumer(tmp_path, f'include("{ROOT.as_posix()}/cmake/IreeDispatch.cmake")')
    with (src / "CMakeLists.txt").open("a") as cmake_lists:
        cmake_lists.write("iree_dispatch_add_module(NAME hermetic SPEC a.toml ARCHS 90 OBJECTS ptx EMBED_OBJECTS OUTPUT_DIR hermetic)\n")
    build = tmp_path / "build"
    out = configure(src, build, "-DIREE_DISPATCH_TOOLCHAIN=nvrtc").stdout
    assert "iree_dispatch: CUDA compiler nvrtc" in out
    commands = ninja(build, "-t", "commands", "hermetic")
    assert "--toolchain nvrtc" in commands and "--embed-objects" in commands and "--objects ptx" in commands
    ninja(build, "hermetic")
    mlir = build / "hermetic" / "mod_a.mlir"
    assert 'data = dense<"0x' in mlir.read_text()
    alone = tmp_path / "empty"
    alone.mkdir()
    (alone / "mod_a.mlir").write_bytes(mlir.read_bytes())
    from iree_dispatch.backend.compile import compile_flags
    from iree_dispatch.core.archs import parse_arch

    find = "from iree.compiler.tools.binaries import find_tool; print(find_tool('iree-compile'))"
    iree_compile = subprocess.run([sys.executable, "-c", find], capture_output=True, text=True).stdout.strip()
    proc = subprocess.run([iree_compile, "mod_a.mlir", "-o", "mod_a.vmfb", *compile_flags(parse_arch("sm_80"), None)], cwd=alone, capture_output=True, text=True)
    assert proc.returncode == 0 and (alone / "mod_a.vmfb").stat().st_size > 0, proc.stderr
