"""What the break-it tests (break_it/) share: a copy of the samples project to break, and a
snapshot of a folder to show that a refused command left it as it was."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .environment import MIXED_PROGRAM, ROOT


def project(root: Path) -> Path:
    """A copy of the samples (spec, sources) and the mixed program under root/proj."""
    proj = root / "proj"
    (proj / "kernels").mkdir(parents=True)
    for name in ("samples.toml", "simple_mul.cu", "axpby.cu"):
        shutil.copyfile(ROOT / "kernels" / name, proj / "kernels" / name)
    shutil.copyfile(MIXED_PROGRAM, proj / "program.mlir")
    return proj


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under root (folders as None, files by bytes; links by target)."""
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = f"-> {os.readlink(path)}".encode()
        elif path.is_dir():
            found[rel] = None
        elif path.is_file():
            found[rel] = path.read_bytes() if path.stat().st_size < (1 << 20) else f"{path.stat().st_size} bytes".encode()
        else:
            found[rel] = b"special"
    return found
