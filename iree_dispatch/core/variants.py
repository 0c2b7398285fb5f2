"""Which objects a module carries per kernel source, and on which GPUs each one may run.

IREE's runtime takes the first variant of an executable whose condition holds, so the list is
ordered by preference and every condition states exactly the GPUs its object can run on:

- PTX for sm_XY is JIT-compiled by the driver for any GPU of compute capability ≥ X.Y;
- a cubin for sm_XY runs only on its own major family with minor ≥ Y (sm_80 → 8.0, 8.6, 8.9);
- "a"-suffixed archs (sm_90a) run only on that exact capability, in either form;
- a fatbin holds cubins for every arch plus the newest arch's PTX; the driver picks from it.

Policies (the `objects` setting):
- "ptx": PTX per arch, newest first (forward-compatible, JIT on first load);
- "cubin": a cubin per arch (no JIT), then the newest arch's PTX for GPUs newer than all of them;
- "fatbin": one fatbin variant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .archs import Arch
from .errors import SpecError

POLICIES = ("ptx", "cubin", "fatbin")
Kind = Literal["ptx", "cubin", "fatbin"]
# A compute-capability rule: (major, minor, how) with how one of
#   "at_least": (cc major, minor) >= (major, minor); "family": same major, minor >= minor;
#   "exact": equal.
Rule = tuple[int, int, str]


def _ptx_rule(arch: Arch) -> Rule:
    if arch.forward_compatible:
        return (arch.major, arch.minor, "at_least")
    return (arch.major, arch.minor, "family" if arch.suffix == "f" else "exact")


def _cubin_rule(arch: Arch) -> Rule:
    return (arch.major, arch.minor, "exact" if arch.suffix == "a" else "family")


def rule_holds(rule: Rule, major: int, minor: int) -> bool:
    want_major, want_minor, how = rule
    if how == "at_least":
        return (major, minor) >= (want_major, want_minor)
    if how == "family":
        return major == want_major and minor >= want_minor
    return (major, minor) == (want_major, want_minor)


@dataclass(frozen=True)
class Variant:
    name: str  # variant symbol in the executable
    kind: Kind
    archs: tuple[Arch, ...]  # one, or for a fatbin all of them (newest first)
    rules: tuple[Rule, ...]  # the variant may run where any rule holds

    @property
    def target_arch(self) -> Arch:
        """The arch named in the variant's target attribute (the newest it carries)."""
        return self.archs[0]

    def runs_on(self, major: int, minor: int) -> bool:
        return any(rule_holds(rule, major, minor) for rule in self.rules)

    def object_filename(self, stem: str) -> str:
        return f"{stem}.fatbin" if self.kind == "fatbin" else f"{stem}.{self.archs[0].name}.{self.kind}"


def plan_variants(archs: tuple[Arch, ...], policy: str) -> tuple[Variant, ...]:
    """Variants in preference order for `archs` (newest first) under `policy`."""
    if policy == "ptx":
        return tuple(Variant(a.name, "ptx", (a,), (_ptx_rule(a),)) for a in archs)
    if policy == "cubin":
        cubins = tuple(Variant(f"{a.name}_cubin", "cubin", (a,), (_cubin_rule(a),)) for a in archs)
        newest = archs[0]
        return cubins + (Variant(newest.name, "ptx", (newest,), (_ptx_rule(newest),)),)
    if policy == "fatbin":
        rules = tuple(_cubin_rule(a) for a in archs) + (_ptx_rule(archs[0]),)
        return (Variant("fatbin", "fatbin", archs, rules),)
    raise SpecError(f"unknown objects policy {policy!r}; choose one of {', '.join(POLICIES)}")


def object_variant(kind: Kind, images: tuple[tuple[str, Arch], ...]) -> Variant:
    """The variant carrying one prebuilt object (prebuilt.py) whose images are (kind, arch)
    pairs: a cubin image runs on its family, a PTX image JITs forward; any may run."""
    rules = tuple(_cubin_rule(a) if k == "cubin" else _ptx_rule(a) for k, a in images)
    archs = tuple(sorted({a for _, a in images}, key=lambda a: (a.major, a.minor, a.suffix != ""), reverse=True))
    name = {"fatbin": "fatbin", "cubin": f"{archs[0].name}_cubin", "ptx": archs[0].name}[kind]
    return Variant(name, kind, archs, rules)
