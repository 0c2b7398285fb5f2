"""CUDA architecture names: parsing, ordering, and the compute-capability rule of each variant.

Dependency-free: the run-time half uses it to explain "no variant can run on this GPU".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import SpecError

DEFAULT_ARCHS = ("sm_80", "sm_90")

_ARCH_RE = re.compile(r"^(?:sm_?)?(\d+)(\d)([af]?)$")


@dataclass(frozen=True, order=True)
class Arch:
    major: int
    minor: int
    suffix: str = ""  # "a": arch-specific features, runs on this exact arch only

    @property
    def name(self) -> str:
        return f"sm_{self.major}{self.minor}{self.suffix}"

    @property
    def forward_compatible(self) -> bool:
        """Plain PTX JITs forward onto any newer GPU; sm_XXa/f PTX only on its own arch."""
        return self.suffix == ""

    def runs_on(self, major: int, minor: int) -> bool:
        if self.forward_compatible:
            return (major, minor) >= (self.major, self.minor)
        if self.suffix == "f":  # family-specific: same major, minor at least ours
            return major == self.major and minor >= self.minor
        return (major, minor) == (self.major, self.minor)

    @property
    def max_shared_memory(self) -> int:
        """Bytes of shared memory one block may opt in to (CUDA C++ Programming Guide tables)."""
        cc = (self.major, self.minor)
        if self.major >= 12 or cc in ((8, 6), (8, 9)):
            return 101376  # 99 KB
        if self.major in (9, 10, 11):
            return 232448  # 227 KB
        if cc in ((8, 0), (8, 7)):
            return 166912  # 163 KB
        if cc == (7, 5):
            return 65536
        if self.major == 7:
            return 98304
        return 49152

    def __str__(self) -> str:
        return self.name


def parse_arch(text: str | int) -> Arch:
    """Accepts "sm_90", "sm90", "90", 90, "sm_90a"."""
    match = _ARCH_RE.match(str(text).strip().lower())
    if not match:
        raise SpecError(
            f"malformed CUDA architecture {text!r}: expected sm_XY (e.g. sm_80, sm_90, sm_90a) "
            "or a compute capability number such as 90"
        )
    major, minor, suffix = int(match[1]), int(match[2]), match[3]
    if major < 5:
        raise SpecError(f"CUDA architecture {text!r} is older than sm_50, which nvcc no longer targets")
    return Arch(major, minor, suffix)


def parse_archs(items) -> list[Arch]:
    """Parses a list (or comma-separated string), removes duplicates, orders newest first.

    Newest first matters: the runtime takes the first variant whose condition holds, so the
    newest arch the GPU can run must come before older, forward-JIT fallbacks. Arch-specific
    ("a") variants sort before the plain variant of the same number.
    """
    if isinstance(items, str):
        items = [part for part in items.split(",") if part.strip()]
    archs = sorted({parse_arch(item) for item in items}, key=lambda a: (a.major, a.minor, a.suffix != ""), reverse=True)
    if not archs:
        raise SpecError("no CUDA architecture given: list at least one, e.g. sm_80")
    return archs
