"""Files a build reads (specs, kernel sources, programs) are checked before they are read."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import SpecError

MAX_INPUT_BYTES = 64 << 20  # a spec, source or program past this is refused before it is read


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
