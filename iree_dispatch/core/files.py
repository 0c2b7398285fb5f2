"""The files a command reads and writes: the one place that checks them and writes outputs.

Every command that writes (`build`, `compile`, the depfile, `samples` through `build`) goes
through here, in this order:

1. check_input_file on each input before it is read: a regular file of sane size.
2. check_outputs on every output against every input and every other output, before anything
   is written or compiled: an output that is an input (also through a symlink, a hard link or
   `..`), or holds one, or is another output, is refused in one line naming both paths.
3. Staging: everything is made in a private folder beside the first output, and commit() moves
   each output into place only when the whole command succeeded, each by one rename, so a
   failed command leaves nothing behind and a reader never sees half a file.

Temporaries carry their owner in their name (`.NAME.PID@HOST.XXXXXXXX`), so one left by a
killed command is swept by the next command writing beside it (sweep_stale_temps).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import socket
import stat
import tempfile
import time
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

from .errors import DispatchError, OutputError, SpecError

MAX_INPUT_BYTES = 64 << 20  # a spec, source or program past this is refused before it is read
STALE_TEMP_SECONDS = 3600  # a temporary beside an output whose owner can't be told alive is removed after this

Output = tuple[str, Path, str]  # (what, path, "file" or "folder")
Input = tuple[str, Path]  # (what, path)


# ---- inputs ----

def check_input_file(what: str, path: Path) -> None:
    """A spec, source or program must be a regular file of sane size: /dev/zero or a FIFO as a
    kernel source would hang or exhaust memory. A missing one is left to the loader to name."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SpecError(f"can't read {what} {path}: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise SpecError(f"{what} {path} is a folder; give a file")
    if not stat.S_ISREG(st.st_mode):
        raise SpecError(f"{what} {path} is not a regular file (a device, pipe or socket); give a file")
    if st.st_size > MAX_INPUT_BYTES:
        raise SpecError(f"{what} {path} is {st.st_size / 2**20:.0f} MiB, over the {MAX_INPUT_BYTES >> 20} MiB an input may have; is it the right file?")


def check_given_file(what: str, path: Path, takes: str) -> None:
    """A file a command was given by name: it must exist and be a file (`takes`, e.g. "run takes
    a built module (.vmfb) file", ends the message), then pass check_input_file."""
    if path.is_dir():
        raise SpecError(f"{path} is a folder; {takes}")
    if not path.exists():
        raise SpecError(f"{path}: no such file; {takes}")
    check_input_file(what, path)


# What a file that is not text most likely is, by its first bytes.
_BINARY_KINDS = ((b"\x7fELF", "an executable or library (ELF)"), (b"\x89PNG", "an image (PNG)"), (b"PK\x03\x04", "a zip archive"))
_SNIFF_BYTES = 1 << 16


def binary_kind(path: Path, *, utf8: bool = True) -> str | None:
    """None if `path` starts as text, else what it looks like ("a compiled module (.vmfb)", "a
    binary file (a NUL byte at offset 54)"). utf8: text must be UTF-8 too (else a spec's loader
    says where it is not). Reads at most 64 KiB."""
    with open(path, "rb") as handle:
        head = handle.read(_SNIFF_BYTES)
    if head.startswith(b"PK\x03\x04") and b"IREE" in head[:256]:  # a vmfb: a zip holding a FlatBuffer whose identifier is IREE
        return "a compiled module (.vmfb)"
    for magic, kind in _BINARY_KINDS:
        if head.startswith(magic):
            return kind
    nul = head.find(b"\0")
    if nul >= 0:
        return f"a binary file (a NUL byte at offset {nul})"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if utf8 and exc.start < len(head) - 3:  # not merely a character cut at the end of what was read
            return f"a binary file (byte 0x{head[exc.start]:02x} at offset {exc.start} is not UTF-8)"
    return None


def check_text_file(what: str, path: Path, expected: str) -> None:
    """check_input_file, and refused with what it looks like if it is a binary file (a vmfb, an
    executable): `expected` says what to give instead. Text that is not UTF-8 is left to the loader."""
    check_input_file(what, path)
    try:
        kind = binary_kind(path, utf8=False)
    except OSError:
        return  # the loader names what is wrong
    if kind is not None:
        raise SpecError(f"{what} {path} is {kind}, not {expected}")


def check_model_file(model: Path) -> None:
    """A regular file of MLIR text or bytecode (models with inlined weights are large: no size
    limit, unlike specs); a compiled module, an executable or other binary file is named as such."""
    try:
        st = os.stat(model)
    except OSError as exc:
        raise DispatchError(f"can't read model {model}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise DispatchError(f"model {model} is not a regular file; give the .mlir file of an imported model")
    with open(model, "rb") as handle:
        bytecode = handle.read(4) == b"ML\xefR"  # MLIR bytecode, which iree-compile reads too
    kind = None if bytecode else binary_kind(model)
    if kind is not None:
        raise DispatchError(f"model {model} is {kind}, not MLIR; give the .mlir file of an imported model (torch dialect or linalg on tensors)")


def spec_declares(spec_path: Path) -> tuple[str, list[Path]]:
    """The module name and source files a spec declares, read before the spec is loaded (which
    may compile: a type probe), so outputs are checked against them first. Errors in the spec
    are left to its loader, which names them precisely."""
    try:
        data = tomllib.loads(Path(spec_path).read_text(encoding="utf-8").removeprefix("\ufeff"))
    except (OSError, ValueError):
        return Path(spec_path).stem, []
    module = data.get("module") if isinstance(data.get("module"), dict) else {}
    name = module.get("name") if isinstance(module.get("name"), str) else Path(spec_path).stem
    sources = []
    for kernel in data.get("kernel", []) if isinstance(data.get("kernel"), list) else []:
        source = kernel.get("source") if isinstance(kernel, dict) else None
        for item in [source] if isinstance(source, str) else source if isinstance(source, list) else []:
            if isinstance(item, str):
                sources.append(Path(spec_path).parent / item)
    return name, sources


_QUOTED_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.MULTILINE)


def quoted_includes(sources: Iterable[Path]) -> list[Path]:
    """The headers `sources` include as `#include "h"` found beside the file that includes them,
    and theirs in turn: the headers known before any compiler runs (those found through -I
    folders are known once it has, from its dependency list)."""
    found: dict[Path, None] = {}
    pending = [Path(s) for s in sources]
    seen: set[Path] = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            if not path.is_file() or path.stat().st_size > MAX_INPUT_BYTES:
                continue
            text = path.read_bytes()
        except OSError:
            continue
        for match in _QUOTED_INCLUDE.finditer(text):
            header = path.parent / os.fsdecode(match.group(1))
            if header.is_file():
                found.setdefault(header)
                pending.append(header)
    return list(found)


# ---- outputs: checked before anything is written ----

def check_outputs(outputs: Iterable[Output], inputs: Iterable[Input]) -> None:
    """Raises OutputError unless every output can be written and none would replace an input or
    another output: its folder exists (or can be made) and is writable, a file output is not a
    folder, a folder output is not a file, no output is an input or holds one, no two outputs
    are one path. Compares resolved paths (symlinks, `..`) and files (hard links)."""
    outputs = [(what, Path(path).absolute(), kind) for what, path, kind in outputs]
    inputs = [(what, Path(path).absolute()) for what, path in inputs]
    for what, path, kind in outputs:
        _check_writable(what, path, kind)
    for what, path, kind in outputs:
        for in_what, in_path in inputs:
            if _same(path, in_path) or (kind == "folder" and _inside(in_path, path)):
                holds = "is" if _same(path, in_path) else "holds"
                raise OutputError(f"{what} {path} {holds} the {in_what} {in_path}: the command would overwrite its own input; choose another output path")
    for i, (what, path, kind) in enumerate(outputs):
        for other_what, other, other_kind in outputs[i + 1 :]:
            if _same(path, other):
                raise OutputError(f"{what} and {other_what} are both {path}: one would overwrite the other; give them different paths")
            for (a_what, a, _), (b_what, b, b_kind) in (((what, path, kind), (other_what, other, other_kind)), ((other_what, other, other_kind), (what, path, kind))):
                if b_kind == "folder" and _inside(a, b):
                    raise OutputError(f"{a_what} {a} is inside {b_what} {b}, which the command replaces whole; write it elsewhere")


def _check_writable(what: str, path: Path, kind: str) -> None:
    if path.is_dir() and kind == "file":
        raise OutputError(f"{what} {path} is a folder; name a file (in it, or elsewhere) instead")
    if path.exists() and not path.is_dir() and not path.is_file():
        raise OutputError(f"{what} {path} is not a regular file (a device, pipe or socket); name a file to write instead")
    if path.exists() and not path.is_dir() and kind == "folder":
        raise OutputError(f"{what} {path} exists and is not a folder; the build puts objects there: remove it or choose another output path")
    folder = path.parent
    while not folder.exists():
        if folder.is_symlink():
            raise OutputError(f"can't write {what} {path}: {folder} is a broken symbolic link")
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"can't write {what} {path}: {folder} is a file, not a folder; choose another output path")
    if not os.access(folder, os.W_OK | os.X_OK):
        reason = "read-only file system" if _read_only_fs(folder) else "permission denied"
        raise OutputError(f"can't write {what} {path}: folder {folder} is not writable ({reason}); choose another output path")


def _read_only_fs(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _same(a: Path, b: Path) -> bool:
    """Whether `a` and `b` are one file: one resolved path (symlinks, `..`), or one inode (hard links)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _inside(path: Path, folder: Path) -> bool:
    """Whether `path` is `folder` or lies under it, after resolving symlinks."""
    real, home = os.path.realpath(path), os.path.realpath(folder)
    return real == home or real.startswith(home.rstrip(os.sep) + os.sep)


# ---- writing: staged in private temporaries, moved into place at the end ----

class Staging:
    """A private folder beside `anchor` (the command's main output) where a command makes its
    outputs; `place` names where each goes, commit() moves them there once everything succeeded.
    Leaving the `with` block without commit() (an error, Ctrl-C) removes the folder and every
    folder it made, so nothing is left behind.

        with Staging(output) as staging:
            (staging.folder / "m.vmfb").write_bytes(...)
            staging.place(staging.folder / "m.vmfb", output)
            staging.commit()
    """

    def __init__(self, anchor: Path):
        anchor = Path(anchor).absolute()
        self._made = make_folders(anchor.parent)  # removed again unless committed
        sweep_stale_temps(anchor.parent, anchor.name)
        self.folder = Path(tempfile.mkdtemp(prefix=temp_prefix(anchor.name), dir=anchor.parent))
        self._temps = [self.folder]  # and copies made beside outputs on another file system
        self._moves: list[tuple[Path, Path]] = []
        self._committed = False

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None) -> None:
        for folder in self._temps:
            shutil.rmtree(folder, ignore_errors=True)
        for folder in () if self._committed else reversed(self._made):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if still empty

    def place(self, staged: Path, final: Path) -> None:
        """Moves `staged` (a file or folder in self.folder) to `final` at commit(), in the order placed."""
        self._moves.append((staged, Path(final).absolute()))

    def commit(self) -> None:
        """Moves every placed output into place: a file by one rename, a folder replacing the one there."""
        for staged, final in self._moves:
            self._made += make_folders(final.parent)
            moved = _same_device(staged, final, self._temps)
            if staged.is_dir():
                replace_folder(moved, final)
            else:
                os.replace(moved, final)
        self._committed = True


def write_atomic(path: Path, data: bytes) -> None:
    """Writes `data` to `path` through a uniquely named file beside it, renamed into place: a
    reader never sees half of it, and concurrent writers never share a temporary."""
    path = _beside(path)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path.name), dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[Path]:
    """Where a tool (a compiler, a copy) writes `path` so that it appears whole: a file of that
    name in a uniquely named private folder beside `path`, renamed to `path` when the block ends
    without an error; the folder goes either way. The tool creates the file itself, so it gets
    the mode the tool gives it (a shared library stays executable).

        with atomic_output(cubin) as partial:
            run_ptxas(ptx, "-o", partial)
    """
    path = _beside(path)
    folder = Path(tempfile.mkdtemp(prefix=temp_prefix(path.name), dir=path.parent))
    try:
        yield folder / path.name
        os.replace(folder / path.name, path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _beside(path: Path) -> Path:
    """`path`, absolute, with its folder made and swept of temporaries killed writers left beside it."""
    path = Path(path).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_temps(path.parent, path.name)
    return path


def make_folders(folder: Path) -> list[Path]:
    """mkdir -p `folder`; returns the folders it made, outermost first."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
    return missing[::-1]


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def temp_prefix(name: str) -> str:
    """`.NAME.PID@HOST.`: a temporary beside output NAME, which tells whether its owner lives."""
    return f".{name}.{os.getpid()}@{_host_tag()}."


def sweep_stale_temps(folder: Path, name: str) -> list[Path]:
    """Removes temporaries a killed command left beside output `name` in `folder`: those whose
    process (on this host) is gone, and any older than an hour. Returns what it removed."""
    # .NAME.PID@HOST.XXXXXXXX (tempfile's random part), or as older versions named them:
    # .NAME.XXXXXXXX (a build's folder) and .NAME.tmp (a depfile's).
    pattern = re.compile(rf"^\.{re.escape(name)}\.(?:(\d+)@([0-9a-f]{{8}})\.[a-z0-9_]{{8}}|[a-z0-9_]{{8}}|tmp)$")
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    host, now = _host_tag(), time.time()
    for entry in entries:
        match = pattern.match(entry.name)
        if not match:
            continue
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        pid, tag = match.group(1), match.group(2)
        dead = pid is not None and tag == host and not _alive(int(pid))
        if not (dead or age > STALE_TEMP_SECONDS):
            continue
        path = Path(entry.path)
        if pid is None and not _looks_like_build_folder(path, name):
            continue  # an old-style name (no owner in it): only what a build leaves in one
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
        removed.append(path)
    return removed


def _looks_like_build_folder(path: Path, name: str) -> bool:
    if path.name == f".{name}.tmp":
        return path.is_file()
    try:
        return path.is_dir() and all(re.fullmatch(r"module\.vmfb|.*\.objects|.*\.mlir|stale-.*", item) for item in os.listdir(path))
    except OSError:
        return False


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def _same_device(staged: Path, final: Path, temps: list[Path]) -> Path:
    """`staged`, or a copy of it beside `final` when `final` is on another file system (where a
    rename can't reach): the copy is made under a temporary name, so it too appears at once."""
    try:
        if os.stat(staged).st_dev == os.stat(final.parent).st_dev:
            return staged
    except OSError:
        return staged
    sweep_stale_temps(final.parent, final.name)
    beside = Path(tempfile.mkdtemp(prefix=temp_prefix(final.name), dir=final.parent))
    temps.append(beside)
    try:
        target = beside / final.name
        (shutil.copytree if staged.is_dir() else shutil.copy2)(staged, target)
    except OSError as exc:
        raise OutputError(f"can't copy {final.name} to {final.parent} (another file system): {exc.strerror or exc}") from None
    return target


def replace_folder(staged: Path, final: Path) -> None:
    """Moves folder `staged` to `final`, replacing what is there. Concurrent commands may do the
    same at the same time: a folder in the way is renamed aside (into the private folder that
    holds `staged`, under a unique name) and the move retried; the last one to move wins, and
    every one of them succeeds."""
    for attempt in range(1000):
        try:
            os.replace(staged, final)  # succeeds when `final` is missing or an empty folder
            break
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EBUSY):
                raise
        with contextlib.suppress(FileNotFoundError):  # another command moved it first
            os.replace(final, staged.parent / f"stale-{final.name}-{attempt}")
    else:
        raise OutputError(f"can't move objects folder {final} into place: other processes keep replacing it; retry the build")
