"""The build cache: whole builds keyed by everything that can change their bytes.

A build's key covers the spec (kernels, archs, object policy, nvcc flags), every source's and
the program's bytes, every header the compiler read (nvcc reports them; for NVRTC they are
found from the #include lines), the output naming that ends up in the vmfb, and the toolchain
(nvcc or NVRTC: which one, where, its version) and the versions of iree-base-compiler and this
package. Headers are known only after a build, so the key has two levels: a manifest key
over what is known up front names the header list of the last build; the entry key adds
those headers' current bytes.

Entries are written to a temporary folder and renamed into place, so a killed build never
leaves a half entry (stale temporary folders are swept on a later store). Builds of the same
manifest key take a file lock (flock: released by the OS when a process dies, so a killed
build never blocks the next), so concurrent processes building the same kernels do the work
once and the others find it cached.

Compiled objects are kept the same way, one entry per object in `objects/` (the objects stage
of backend/pipeline.py): the PTX of a (source, arch) is keyed by the toolchain, the flags, the
source's bytes and path, and, at the second level, the bytes of every header it read; a cubin by
the toolchain, the arch and the PTX it was assembled from. A build that misses the build cache
(another program, another output name, an option) so compiles only what it has not compiled
before.

Nothing found in the cache is trusted: an entry's meta.json records the sha256 of every file
of the entry (and its own checksum and key), and every use checks them all. Any damage (a
missing, extra or changed file, unreadable JSON, a missing folder) is a miss: the build runs,
says once what was wrong, and the entry is replaced. The cache folder must be the user's own
and not writable by anyone else (like ccache and pip); it is created with mode 0o700 and
tagged with a CACHEDIR.TAG (core/store.py checks it, and keeps the small records the front end
stores there), and `clear` deletes only the cache's own files, and only where that tag is.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import os
import shutil
import stat
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from ..core.files import write_atomic
from ..core.store import FORMAT, MARKER, MARKER_SIGNATURE, SETTING, SUBDIRS, CacheError, Store, digest, file_digest, sealed, unseal

ENTRY_FILES = "files"  # an entry's artifacts, by relative path
ENTRY_META = "meta.json"
BUILDS, OBJECTS = "entries", "objects"  # the sections of entries: whole builds, compiled objects
RESERVED = frozenset({"format", "key", "files", "check"})  # meta.json's keys of the cache's own; the rest is the caller's meta
STALE_SECONDS = 3600  # temporary files older than this are left over by killed builds


class CacheWarning(UserWarning):
    """A damaged cache entry was found and is being rebuilt."""


@functools.cache
def package_digest() -> str:
    """A digest of this package's own files. It is part of every build key, so a build made by
    other code (an older or patched iree_dispatch with the same version number) is never
    served: the generated IR is only as right as the code that wrote it."""
    root = Path(__file__).resolve().parent.parent  # the package, not only this folder
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return digest(*(f"{p.relative_to(root)}\0{file_digest(p)}" for p in files))


class _Damaged(Exception):
    """What is wrong with an entry or manifest (the message)."""


def _entry_files(files: Path) -> dict[str, str]:
    """Every file under `files`, relative path → sha256. Anything but plain files and folders
    (a symlink, a device) is damage: an entry never holds one."""
    found: dict[str, str] = {}
    if not stat.S_ISDIR(os.lstat(files).st_mode):
        raise _Damaged(f"{ENTRY_FILES}/ is not a folder")
    stack = [files]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as it:
            for item in it:
                rel = Path(item.path).relative_to(files).as_posix()
                if item.is_dir(follow_symlinks=False):
                    stack.append(Path(item.path))
                elif item.is_file(follow_symlinks=False):
                    with open(item.path, "rb") as handle:
                        found[rel] = hashlib.file_digest(handle, "sha256").hexdigest() if hasattr(hashlib, "file_digest") else hashlib.sha256(handle.read()).hexdigest()
                else:
                    raise _Damaged(f"{ENTRY_FILES}/{rel} is not a plain file")
    return found


class Cache(Store):
    """The build cache: whole builds and compiled objects, kept in the cache folder."""

    def _tagged(self) -> bool:
        try:
            with open(self.root / MARKER, "rb") as handle:
                return handle.read(len(MARKER_SIGNATURE)) == MARKER_SIGNATURE.encode()
        except OSError:
            return False

    # --- builds ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        self._ready()
        path = self._subdir("locks") / f"{key}.lock"
        # Never follow a symlink, never truncate (a planted link must not damage its target),
        # never block on a FIFO; only a plain file is a lock.
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            what = "is a symlink" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
            raise CacheError(f"build cache lock {path}: {what}; remove it, or {SETTING}") from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CacheError(f"build cache lock {path}: is not a plain file; remove it, or {SETTING}")
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _manifest(self, manifest_key: str) -> list[str] | None:
        """The dependencies the last build of `manifest_key` read; None if none was recorded.
        Raises _Damaged if the manifest can't be read back intact."""
        path = self.root / "manifests" / f"{manifest_key}.json"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _Damaged(f"manifest {path} unreadable ({exc.strerror or exc})") from exc
        try:
            record = unseal(data)
            dependencies = record["dependencies"]
            if record.get("key") != manifest_key or not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
                raise ValueError("not this manifest's record")
        except (ValueError, KeyError) as exc:
            raise _Damaged(f"manifest {path} damaged ({exc})") from exc
        return dependencies

    def entry_key(self, manifest_key: str) -> str | None:
        """The entry key for the headers the last build of `manifest_key` read, or None (none
        recorded, or the record is damaged)."""
        try:
            dependencies = self._manifest(manifest_key)
        except _Damaged:
            return None
        return None if dependencies is None else self._entry_key(manifest_key, dependencies)

    @staticmethod
    def _entry_key(manifest_key: str, dependencies: list[str]) -> str:
        return digest(manifest_key, *(f"{d}\0{file_digest(Path(d))}" for d in dependencies))

    def find(self, manifest_key: str, warn: Callable[[str], None] | None = None, section: str = BUILDS) -> Path | None:
        """The verified entry of the last build of `manifest_key` if its headers are unchanged,
        else None. Damage is reported through `warn` (default: a CacheWarning) and is a miss.
        section: BUILDS (whole builds) or OBJECTS (compiled objects)."""
        try:
            dependencies = self._manifest(manifest_key)
        except _Damaged as exc:
            self._warn(warn, f"build cache: {exc}; rebuilding")
            return None
        return None if dependencies is None else self.lookup(self._entry_key(manifest_key, dependencies), warn, section)

    def lookup(self, entry_key: str | None, warn: Callable[[str], None] | None = None, section: str = BUILDS) -> Path | None:
        """The entry `entry_key`, after checking every file of it against the sha256 its meta
        recorded; None if there is none or it is damaged (then it is reported through `warn`,
        default a CacheWarning, and removed, so the rebuild replaces it)."""
        if entry_key is None:
            return None
        if section not in (BUILDS, OBJECTS):
            raise ValueError(f"Cache: unknown section {section!r}")
        entry = self.root / section / entry_key
        try:
            os.lstat(entry)
        except FileNotFoundError:
            return None
        except OSError:
            pass  # verify says what is wrong
        try:
            self.verify(entry)
        except _Damaged as exc:
            self._warn(warn, f"build cache entry {entry_key[:16]} ({entry}) is damaged: {exc}; rebuilding it")
            self._discard(entry)
            return None
        return entry

    def verify(self, entry: Path) -> dict:
        """The entry's meta, if every file is there, unchanged, and nothing else is; else raises
        _Damaged saying what is wrong."""
        try:
            if not stat.S_ISDIR(os.lstat(entry).st_mode):
                raise _Damaged("not a folder")
            meta_path = entry / ENTRY_META
            if not stat.S_ISREG(os.lstat(meta_path).st_mode):
                raise _Damaged(f"{ENTRY_META} is not a plain file")
            try:
                record = unseal(meta_path.read_bytes())
            except ValueError as exc:
                raise _Damaged(f"{ENTRY_META} unreadable ({exc})") from exc
            recorded = record.get("files")
            if record.get("key") != entry.name or not isinstance(recorded, dict):
                raise _Damaged(f"{ENTRY_META} belongs to another entry")
            names = set(os.listdir(entry))
            if names - {ENTRY_META, ENTRY_FILES}:
                raise _Damaged(f"unexpected {', '.join(sorted(names - {ENTRY_META, ENTRY_FILES}))}")
            found = _entry_files(entry / ENTRY_FILES)
        except FileNotFoundError as exc:
            raise _Damaged(f"{Path(exc.filename).relative_to(entry) if exc.filename and Path(exc.filename).is_relative_to(entry) else exc.filename} is missing") from exc
        except OSError as exc:
            raise _Damaged(f"unreadable ({exc.strerror or exc}: {exc.filename})") from exc
        missing = sorted(set(recorded) - set(found))
        extra = sorted(set(found) - set(recorded))
        changed = sorted(name for name in set(recorded) & set(found) if recorded[name] != found[name])
        problems = [
            *(f"{ENTRY_FILES}/{n} is missing" for n in missing),
            *(f"{ENTRY_FILES}/{n} is not part of it" for n in extra),
            *(f"{ENTRY_FILES}/{n} changed (sha256 {found[n][:12]}, recorded {str(recorded[n])[:12]})" for n in changed),
        ]
        if problems:
            raise _Damaged("; ".join(problems))
        return {k: v for k, v in record.items() if k not in RESERVED}

    def meta(self, entry: Path) -> dict:
        """The meta given to `store` for a (verified) entry."""
        return {k: v for k, v in unseal((entry / ENTRY_META).read_bytes()).items() if k not in RESERVED}

    @staticmethod
    def _warn(warn: Callable[[str], None] | None, message: str) -> None:
        if warn is not None:
            warn(message)
        else:
            warnings.warn(message, CacheWarning, stacklevel=3)

    def _discard(self, path: Path) -> None:
        """Removes `path` (an entry) at once: renamed aside, then deleted."""
        trash = path.parent / f".old-{path.name}-{os.getpid()}-{time.monotonic_ns()}"
        try:
            os.rename(path, trash)
        except OSError:
            return
        _remove(trash)

    def store(self, manifest_key: str, dependencies: list[Path], staged: dict[str, Path], meta: dict, section: str = BUILDS) -> None:
        """Records a finished build (or, section OBJECTS, a compiled object): its artifacts
        (relative name → file or folder) and meta. An existing entry of the same key is kept if
        it verifies, else replaced atomically."""
        if RESERVED & set(meta):
            raise ValueError(f"Cache.store: meta keys {', '.join(sorted(RESERVED & set(meta)))} are the cache's own")
        if section not in (BUILDS, OBJECTS):
            raise ValueError(f"Cache: unknown section {section!r}")
        self._ready()
        deps = [str(d) for d in dependencies]
        self._sweep()
        write_atomic(self._subdir("manifests") / f"{manifest_key}.json", sealed({"format": FORMAT, "key": manifest_key, "dependencies": deps}))
        entry_key = self._entry_key(manifest_key, deps)
        entries = self._subdir(section)
        final = entries / entry_key
        if os.path.lexists(final):
            try:
                self.verify(final)
                return
            except _Damaged:
                pass
        tmp = Path(tempfile.mkdtemp(prefix=".new-", dir=entries))
        try:
            for name, path in staged.items():
                target = tmp / ENTRY_FILES / name
                target.parent.mkdir(parents=True, exist_ok=True)
                (shutil.copytree if path.is_dir() else shutil.copyfile)(path, target)
            if not (tmp / ENTRY_FILES).exists():
                (tmp / ENTRY_FILES).mkdir()
            files = _entry_files(tmp / ENTRY_FILES)
            (tmp / ENTRY_META).write_bytes(sealed({**meta, "format": FORMAT, "key": entry_key, "files": files}))
            if os.path.lexists(final):  # damaged: moved aside, so the rename below puts the new one in its place
                self._discard(final)
            os.rename(tmp, final)
        except OSError as exc:
            if not os.path.lexists(final):
                raise CacheError(f"build cache {self.root}: can't store the build ({exc.strerror or exc}); {SETTING}") from exc
        finally:
            _remove(tmp)

    def _sweep(self) -> None:
        """Deletes temporary files and folders that killed builds left behind (older than an hour)."""
        cutoff = time.time() - STALE_SECONDS
        for folder, prefixes in ((self.root / BUILDS, (".new-", ".old-")), (self.root / OBJECTS, (".new-", ".old-")), (self.root / "manifests", (".",)),
                                 (self.root, (f".{MARKER}.",))):
            try:
                with os.scandir(folder) as it:
                    stale = [Path(i.path) for i in it if i.name.startswith(prefixes) and i.stat(follow_symlinks=False).st_mtime < cutoff]
            except OSError:
                continue
            for path in stale:
                _remove(path)

    # --- info and clear ----------------------------------------------------------------------

    def info(self) -> dict:
        """path; entries: whole builds; objects: compiled objects; bytes: all of it."""
        count = {s: len(list((self.root / s).glob("[!.]*"))) if (self.root / s).is_dir() else 0 for s in (BUILDS, OBJECTS)}
        size = sum(f.stat().st_size for f in self.root.rglob("*") if f.is_file()) if self.root.is_dir() else 0
        return {"path": str(self.root), "entries": count[BUILDS], "objects": count[OBJECTS], "bytes": size}

    def clear(self) -> list[Path]:
        """Deletes the cache's own folders (entries, manifests, locks), only in a folder that
        carries the cache's CACHEDIR.TAG; other files are left alone. The folder itself goes
        too if nothing else is in it. A missing folder is already clear. Returns what was left
        in place because it isn't the cache's."""
        root = self.root
        if not os.path.lexists(root):
            return []
        if not root.is_dir():
            raise CacheError(f"build cache {root}: is not a folder, so there is no cache to clear (IREE_DISPATCH_CACHE_DIR names the cache folder)")
        if not self._tagged():
            raise CacheError(
                f"refusing to clear {root}: it has no {MARKER} with the cache signature, so it may not be an iree_dispatch build cache; "
                f"check IREE_DISPATCH_CACHE_DIR, or delete its {', '.join(f'{s}/' for s in SUBDIRS)} yourself"
            )
        try:
            for name in os.listdir(root):
                if name in SUBDIRS or name.startswith(f".{MARKER}."):
                    _remove(root / name, strict=True)
            kept = sorted(root / name for name in os.listdir(root) if name != MARKER)
            if not kept:  # nothing but the cache's: the folder goes too
                os.unlink(root / MARKER)
                os.rmdir(root)
        except OSError as exc:
            raise CacheError(f"build cache {root}: can't clear it ({exc.strerror or exc}: {exc.filename})") from exc
        return kept


def _remove(path: Path, strict: bool = False) -> None:
    """Deletes a file or a folder tree without following symlinks (a link is removed, not its target)."""
    try:
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
        else:
            shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError:
        if strict:
            raise
