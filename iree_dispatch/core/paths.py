"""Where iree_dispatch keeps what it builds between runs."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$IREE_DISPATCH_CACHE_DIR, else $XDG_CACHE_HOME/iree_dispatch, else ~/.cache/iree_dispatch."""
    if os.environ.get("IREE_DISPATCH_CACHE_DIR"):
        return Path(os.environ["IREE_DISPATCH_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "iree_dispatch"
