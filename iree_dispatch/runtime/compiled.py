"""The compiled launch path (`_launch.c`): a kernel launch in one Python call instead of a
handful of ctypes calls. It is built with the machine's C compiler and Python's headers the
first time a device is opened, kept in the cache (`cache_dir()/launch`, one file per source,
Python and compiler), and loaded from there afterwards. Where it can't be built (no compiler,
no headers) or `IREE_DISPATCH_COMPILED_LAUNCH=off`, launches go through ctypes as before:
the same launches, a few microseconds slower; `compiled_launch_status()` says which and why.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from functools import cache
from pathlib import Path
from types import ModuleType

from ..core.files import atomic_output
from ..core.paths import cache_dir

COMPILED_LAUNCH_ENV = "IREE_DISPATCH_COMPILED_LAUNCH"  # "off": launch through ctypes only
SOURCE = Path(__file__).with_name("_launch.c")
_MODULE_NAME = "iree_dispatch.runtime._launch"  # the loader calls PyInit__launch


@cache
def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get(COMPILED_LAUNCH_ENV, "").strip().lower() in ("off", "0", "false", "no"):
        return None, f"ctypes ({COMPILED_LAUNCH_ENV}=off)"
    headers = Path(sysconfig.get_paths()["include"])
    if not (headers / "Python.h").is_file():
        return None, f"ctypes (no Python.h in {headers}: install Python's development headers)"
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        return None, "ctypes (no C compiler: cc, gcc or $CC)"
    source = SOURCE.read_bytes()
    key = hashlib.sha256(b"\0".join([source, sys.version.encode(), compiler.encode()])).hexdigest()[:16]
    target = cache_dir() / "launch" / f"_launch_{key}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    if target.is_file():
        try:
            return _import(target), f"compiled ({target})"
        except ImportError as exc:  # a damaged cached file (truncated, overwritten): built again
            try:
                target.unlink()
            except OSError as unlink_error:
                return None, f"ctypes (loading {target} failed: {exc}; it can't be removed: {unlink_error})"
    failure = _build(compiler, headers, target)
    if failure is not None:
        return None, failure
    try:
        return _import(target), f"compiled ({target})"
    except ImportError as exc:
        return None, f"ctypes (loading {target} failed: {exc})"


def _import(target: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(compiler: str, headers: Path, target: Path) -> str | None:
    """Compiles _launch.c into `target`; None, or the reason it failed."""
    try:
        # Built under a temporary name and renamed: a process never loads a half-written file.
        with atomic_output(target) as built:
            subprocess.run([compiler, "-O2", "-shared", "-fPIC", f"-I{headers}", str(SOURCE), "-o", str(built)],
                           capture_output=True, text=True, timeout=120, check=True)
    except subprocess.CalledProcessError as exc:
        return f"ctypes ({compiler} failed on {SOURCE.name}: {(exc.stderr or exc.stdout).strip()[:300]})"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"ctypes (building {SOURCE.name} failed: {exc})"
    return None


def compiled_launch() -> ModuleType | None:
    """The compiled launch module, built and loaded on first use; None where launches go through ctypes."""
    return _load()[0]


def compiled_launch_status() -> str:
    """How kernels are launched in this process: "compiled (PATH)" or "ctypes (WHY)"."""
    return _load()[1]
