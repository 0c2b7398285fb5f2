"""The compiled launch path (`_launch.c`): a kernel launch in one Python call instead of a
handful of ctypes calls. Where it comes from, in order (`launch_path()` says which, and why):

1. "compiled extension (installed)": built when the package was installed (setup.py, an
   optional extension: an install without a C compiler still succeeds). Used when it was built
   from this `_launch.c` (its SOURCE_DIGEST matches), so an editable install whose source moved
   on is never run stale.
2. "compiled at first use": otherwise, built with the machine's C compiler and Python's headers
   the first time a device is opened, kept in the cache (`cache_dir()/launch`, one file per
   source, Python and compiler) and loaded from there afterwards. It warns once: the build
   takes about a second, once per machine.
3. "ctypes fallback": where neither is there (no compiler, no headers), or
   `IREE_DISPATCH_COMPILED_LAUNCH=off`, launches go through ctypes: the same launches, a few
   microseconds slower per call. It warns once, unless asked for by that variable.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from ..core.files import atomic_output
from ..core.paths import cache_dir

COMPILED_LAUNCH_ENV = "IREE_DISPATCH_COMPILED_LAUNCH"  # "off": launch through ctypes only
SOURCE = Path(__file__).with_name("_launch.c")
_MODULE_NAME = "iree_dispatch.runtime._launch"  # the loader calls PyInit__launch
INSTALLED, FIRST_USE, CTYPES = "compiled extension (installed)", "compiled at first use", "ctypes fallback"


def source_digest(source: bytes) -> str:
    """What a compiled `_launch.c` says it was built from (its SOURCE_DIGEST); setup.py computes
    the same for the extension it builds at install."""
    return hashlib.sha256(source).hexdigest()[:16]


@dataclass(frozen=True)
class LaunchPath:
    """How kernels are launched in this process. kind: INSTALLED, FIRST_USE or CTYPES; module:
    the compiled launch module (None for ctypes); detail: its file, or why ctypes."""

    kind: str
    module: ModuleType | None
    detail: str

    def describe(self) -> str:
        return f"{self.kind} ({self.detail})"


@dataclass(frozen=True)
class CallsSetup:
    """What one kernel's prepared calls (`_launch.c`'s `Calls`) are made of; the C code reads
    each attribute once, when the Calls is made.

    function: the CUfunction as the launcher takes it (a ctypes c_void_p); block and
    shared_memory: the plan's; own_stream, context, ordinal: the device's launch stream, primary
    context and CUDA ordinal; device: what our arrays' launch entries name (dlpack.remember);
    foreign: the device's set of streams to wait for before a launch, waited for by
    before_call(on_stream); ahead: the device's outputs made ahead ([None, None] at first);
    launch_safely: the launcher's launch, for a launch that failed; fail(rc, what): raises the
    driver's error; inputs: the kernel's array arguments; scalar_kinds: b"f" or b"i" per scalar
    argument; float_slots: each float scalar's push constant word; bindings and results: where
    each binding's and result's array comes from (input i: i, fresh output j: -1 - j).
    """

    function: Any
    block: tuple[int, int, int]
    shared_memory: int
    own_stream: int
    context: int
    ordinal: int
    device: Any
    foreign: set[int]
    ahead: list
    before_call: Callable[[int | None], None]
    launch_safely: Callable[..., None]
    fail: Callable[[int, str], None]
    inputs: int
    scalar_kinds: bytes
    float_slots: tuple[int, ...]
    bindings: tuple[int, ...]
    results: tuple[int, ...]


@cache
def launch_path() -> LaunchPath:
    """The launch path of this process, found (and where needed built) on first use."""
    if os.environ.get(COMPILED_LAUNCH_ENV, "").strip().lower() in ("off", "0", "false", "no"):
        return LaunchPath(CTYPES, None, f"{COMPILED_LAUNCH_ENV}=off")
    module, detail = _installed()
    if module is not None:
        return LaunchPath(INSTALLED, module, detail)
    not_installed = detail
    module, detail = compile_at_first_use()
    if module is not None:
        warnings.warn(f"iree_dispatch: the launch extension was not built at install ({not_installed}); it was compiled at first use into {detail}, "
                      "which took about a second and is done once per machine (reinstall iree-dispatch with a C compiler and Python's headers "
                      "to build it at install)", RuntimeWarning, stacklevel=2)
        return LaunchPath(FIRST_USE, module, detail)
    warnings.warn(f"iree_dispatch: no compiled launch extension ({not_installed}; {detail}): kernels launch through ctypes, a few microseconds slower "
                  f"per call (set {COMPILED_LAUNCH_ENV}=off to choose this path without this warning)", RuntimeWarning, stacklevel=2)
    return LaunchPath(CTYPES, None, detail)


def _installed() -> tuple[ModuleType | None, str]:
    """The extension built at install, if it was built from this `_launch.c`; else None and why not."""
    try:
        module = importlib.import_module(_MODULE_NAME)
    except ImportError as exc:
        return None, "not built at install" if isinstance(exc, ModuleNotFoundError) else f"the installed one does not load: {exc}"
    if getattr(module, "SOURCE_DIGEST", None) != source_digest(SOURCE.read_bytes()):
        return None, f"the installed {Path(module.__file__).name} was built from another {SOURCE.name}"
    return module, module.__file__


def compile_at_first_use() -> tuple[ModuleType | None, str]:
    """`_launch.c` compiled into the cache (or loaded from there): the module and its file, or
    None and why not."""
    headers = Path(sysconfig.get_paths()["include"])
    if not (headers / "Python.h").is_file():
        return None, f"no Python.h in {headers}: install Python's development headers"
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        return None, "no C compiler: cc, gcc or $CC"
    source = SOURCE.read_bytes()
    key = hashlib.sha256(b"\0".join([source, sys.version.encode(), compiler.encode()])).hexdigest()[:16]
    target = cache_dir() / "launch" / f"_launch_{key}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    if target.is_file():
        try:
            return _import(target), str(target)
        except ImportError as exc:  # a damaged cached file (truncated, overwritten): built again
            try:
                target.unlink()
            except OSError as unlink_error:
                return None, f"loading {target} failed: {exc}; it can't be removed: {unlink_error}"
    failure = _build(compiler, headers, target, source_digest(source))
    if failure is not None:
        return None, failure
    try:
        return _import(target), str(target)
    except ImportError as exc:
        return None, f"loading {target} failed: {exc}"


def _import(target: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(compiler: str, headers: Path, target: Path, digest: str) -> str | None:
    """Compiles _launch.c into `target`; None, or the reason it failed."""
    try:
        # Built under a temporary name and renamed: a process never loads a half-written file.
        with atomic_output(target) as built:
            subprocess.run([compiler, "-O2", "-shared", "-fPIC", f"-I{headers}", f'-DLAUNCH_SOURCE_DIGEST="{digest}"', str(SOURCE), "-o", str(built)],
                           capture_output=True, text=True, timeout=120, check=True)
    except subprocess.CalledProcessError as exc:
        return f"{compiler} failed on {SOURCE.name}: {(exc.stderr or exc.stdout).strip()[:300]}"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"building {SOURCE.name} failed: {exc}"
    return None


def compiled_launch() -> ModuleType | None:
    """The compiled launch module (installed, or built and loaded on first use); None where launches go through ctypes."""
    return launch_path().module


def compiled_launch_status() -> str:
    """How kernels are launched in this process: "compiled extension (installed) (PATH)",
    "compiled at first use (PATH)" or "ctypes fallback (WHY)"."""
    return launch_path().describe()
