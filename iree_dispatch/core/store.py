"""The build cache's folder and its small records: what both the front end (the type probe
keeps its answers here) and the build cache (backend/cache.py, which adds builds and objects)
need, so neither imports the other.

The folder must be the user's own and not writable by anyone else (like ccache and pip); it is
created with mode 0o700 and tagged with a CACHEDIR.TAG. A record is sealed JSON: it carries a
checksum of its own content, so an edited or garbled one reads as a miss, never as an answer.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from pathlib import Path

from .errors import DispatchError
from .files import write_atomic
from .paths import cache_dir

FORMAT = 2  # of entries, manifests and records; older ones read as damaged, never as hits
MARKER = "CACHEDIR.TAG"
MARKER_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"  # https://bford.info/cachedir/
MARKER_TEXT = (
    f"{MARKER_SIGNATURE}\n# This file is a cache directory tag created by iree_dispatch (its build cache).\n"
    "# For information about cache directory tags, see:\n#\thttps://bford.info/cachedir/\n"
)
SUBDIRS = ("entries", "objects", "manifests", "locks", "records")  # everything the cache writes lives in these (and MARKER)
SETTING = "set IREE_DISPATCH_CACHE_DIR to a folder of your own, or build without the cache (iree-dispatch build --no-cache, or build(..., cache=False))"


class CacheError(DispatchError):
    """The build cache folder can't be used safely (owner, mode, not a folder, not writable)."""


def digest(*parts: str | bytes) -> str:
    """sha256 over `parts`, each length-prefixed, so ("ab", "c") and ("a", "bc") differ."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def file_digest(path: Path) -> str:
    """sha256 of the file's bytes, or "missing" when it can't be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "missing"


def sealed(record: dict) -> bytes:
    """`record` as JSON with a checksum of its own content, so any change to it is seen."""
    body = {k: v for k, v in record.items() if k != "check"}
    return json.dumps({**body, "check": digest(json.dumps(body, sort_keys=True))}, sort_keys=True).encode()


def unseal(data: bytes) -> dict:
    """The record written by sealed; ValueError if it isn't one, intact."""
    record = json.loads(data)
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ValueError("not a record of this cache format")
    body = {k: v for k, v in record.items() if k != "check"}
    if record.get("check") != digest(json.dumps(body, sort_keys=True)):
        raise ValueError("checksum mismatch (edited or garbled)")
    return body


class Store:
    """The cache folder (IREE_DISPATCH_CACHE_DIR, else the user's cache folder), checked before
    first use, and the small records kept in it."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root or cache_dir())
        self._checked = False

    def _ready(self) -> None:
        """Creates the cache folder (mode 0o700, tagged) if it is missing, and refuses one that
        isn't safe to use: not a folder, another user's, writable by group or others, or not
        writable. Raises CacheError naming the path and the setting to change."""
        if self._checked:
            return
        root = self.root
        try:
            if not root.exists():
                root.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._tag()
        except FileExistsError as exc:
            raise CacheError(f"build cache {root}: is not a folder; {SETTING}") from exc
        except OSError as exc:
            raise CacheError(f"build cache {root}: can't be created ({exc.strerror or exc}); {SETTING}") from exc
        try:
            st = os.stat(root)
        except OSError as exc:
            raise CacheError(f"build cache {root}: can't be read ({exc.strerror or exc}); {SETTING}") from exc
        if not stat.S_ISDIR(st.st_mode):
            raise CacheError(f"build cache {root}: is not a folder; {SETTING}")
        if st.st_uid != os.geteuid():
            raise CacheError(
                f"build cache {root}: owned by another user (uid {st.st_uid}, you are uid {os.geteuid()}); a cache someone else can write could serve you "
                f"their builds, so it is not used; {SETTING}"
            )
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            who = " and ".join(w for w, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit)
            raise CacheError(
                f"build cache {root}: writable by {who} "
                f"(mode {stat.S_IMODE(st.st_mode):o}); another user could plant builds in it, so it is not used; make it yours alone (chmod go-w {root}), or {SETTING}"
            )
        if not os.access(root, os.W_OK | os.X_OK):
            raise CacheError(f"build cache {root}: not writable; {SETTING}")
        if not (root / MARKER).exists() and self._only_cache_files():
            with contextlib.suppress(OSError):
                self._tag()  # a cache from before the tag: tag it, so `clear` knows it
        self._checked = True

    def _tag(self) -> None:
        write_atomic(self.root / MARKER, MARKER_TEXT.encode())

    def _only_cache_files(self) -> bool:
        try:
            return all(name in SUBDIRS or name == MARKER or name.startswith(f".{MARKER}.") for name in os.listdir(self.root))
        except OSError:
            return False

    def _subdir(self, name: str) -> Path:
        folder = self.root / name
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise CacheError(f"build cache {self.root}: can't create {name}/ ({exc.strerror or exc}); {SETTING}") from exc
        return folder

    # --- small records (what a front-end stage learned, e.g. type_probe.py's answers) ----------

    def record(self, kind: str, key: str) -> dict | None:
        """The record of `kind` stored under `key`, or None when there is none intact (an edited
        or garbled one is a miss, like a damaged entry)."""
        self._ready()
        try:
            return unseal((self.root / "records" / kind / f"{key}.json").read_bytes())
        except (OSError, ValueError):
            return None

    def save_record(self, kind: str, key: str, record: dict) -> None:
        """Stores `record` (JSON-able) under `key`, atomically."""
        self._ready()
        folder = self._subdir("records") / kind
        folder.mkdir(mode=0o700, exist_ok=True)
        write_atomic(folder / f"{key}.json", sealed({**record, "format": FORMAT}))
