"""The build cache: whole builds keyed by everything that can change their bytes.

A build's key covers the spec (kernels, archs, object policy, nvcc flags), every source's and
the program's bytes, every header the compiler read (nvcc reports them; for NVRTC they are
found from the #include lines), the output naming that ends up in the vmfb, and the toolchain
(nvcc or NVRTC: which one, where, its version) and the versions of iree-base-compiler and this
package. Headers are known only after a build, so the key has two levels: a manifest key
over what is known up front names the header list of the last build; the entry key adds
those headers' current bytes.

Entries are written to a temporary folder and renamed into place, so a killed build never
leaves a half entry. Builds of the same manifest key take a file lock (flock: released by the
OS when a process dies, so a killed build never blocks the next), so concurrent processes
building the same kernels do the work once and the others find it cached.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

ENTRY_FILES = "files"  # an entry's artifacts, by relative path
ENTRY_META = "meta.json"


def cache_dir() -> Path:
    """$IREE_DISPATCH_CACHE_DIR, else $XDG_CACHE_HOME/iree_dispatch, else ~/.cache/iree_dispatch."""
    if os.environ.get("IREE_DISPATCH_CACHE_DIR"):
        return Path(os.environ["IREE_DISPATCH_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "iree_dispatch"


def digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "missing"


@functools.cache
def package_digest() -> str:
    """A digest of this package's own files. It is part of every build key, so a build made by
    other code (an older or patched iree_dispatch with the same version number) is never
    served: the generated IR is only as right as the code that wrote it."""
    root = Path(__file__).resolve().parent.parent  # the package, not only this folder
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return digest(*(f"{p.relative_to(root)}\0{file_digest(p)}" for p in files))


class Cache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root or cache_dir())

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / f"{key}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def entry_key(self, manifest_key: str) -> str | None:
        """The entry key for the headers the last build of `manifest_key` read, or None."""
        try:
            dependencies = json.loads((self.root / "manifests" / f"{manifest_key}.json").read_text())["dependencies"]
        except (OSError, ValueError, KeyError):
            return None
        return digest(manifest_key, *(f"{d}\0{file_digest(Path(d))}" for d in dependencies))

    def lookup(self, entry_key: str | None) -> Path | None:
        if entry_key is None:
            return None
        entry = self.root / "entries" / entry_key
        return entry if (entry / ENTRY_META).is_file() else None

    def store(self, manifest_key: str, dependencies: list[Path], staged: dict[str, Path], meta: dict) -> None:
        """Records a finished build: its artifacts (relative name → file or folder) and meta."""
        manifest = {"dependencies": [str(d) for d in dependencies]}
        self._write_atomic(self.root / "manifests" / f"{manifest_key}.json", json.dumps(manifest).encode())
        entry_key = self.entry_key(manifest_key)
        final = self.root / "entries" / entry_key
        if final.exists():
            return
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".new-", dir=final.parent))
        try:
            for name, path in staged.items():
                target = tmp / ENTRY_FILES / name
                target.parent.mkdir(parents=True, exist_ok=True)
                (shutil.copytree if path.is_dir() else shutil.copyfile)(path, target)
            (tmp / ENTRY_META).write_text(json.dumps(meta, sort_keys=True))
            os.rename(tmp, final)
        except OSError:
            if not final.exists():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _write_atomic(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)

    def info(self) -> dict:
        entries = list((self.root / "entries").glob("[!.]*")) if (self.root / "entries").is_dir() else []
        size = sum(f.stat().st_size for f in self.root.rglob("*") if f.is_file()) if self.root.is_dir() else 0
        return {"path": str(self.root), "entries": len(entries), "bytes": size}

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
