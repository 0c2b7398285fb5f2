"""The op kinds a kernel can replace, one module per family, and the registry that gathers them.

A family module (matmul.py, softmax.py, ...) defines its kinds (`OpKind`: what a `replaces` table
of that op must declare, and the selection's rules for it), its matchers (`Matcher`: the
candidates found at ops of given names) and its fusions (`Fusion`: forms found around another
family's candidates), and exports them as one `FAMILY`. Adding an op kind is a module with its
FAMILY and a line in `FAMILIES` below; spec loading (capability.py), candidate finding and the
selection (select.py) read everything else from the registry. A family may also recognize ops no
kind covers (`Recognizer`: elementwise.py's RoPE and residual adds), so that the report accounts
for them.

Matchers are tried in registry order at each op, the first candidate wins (the decomposed softmax
before the norms, whose generics it could otherwise root).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import reduce

from iree.compiler import ir

from ..ir_match import walk
from . import attention, elementwise, matmul, norm, sdpa, softmax, swiglu
from .base import Candidate, Family, Form, Fusion, Matcher, Operand, OpKind, Reason, Recognizer, Splat, Unkinded

__all__ = ["REGISTRY", "Candidate", "Family", "Form", "Fusion", "Matcher", "OpKind", "Operand", "Reason", "Recognizer", "Registry", "Splat", "Unkinded",
           "find_candidates", "find_unkinded"]


@dataclass(frozen=True)
class Registry:
    """Op kinds, matchers, fusions and recognizers, in the order they were registered."""

    kinds: tuple[OpKind, ...] = ()
    matchers: tuple[Matcher, ...] = ()
    fusions: tuple[Fusion, ...] = ()
    recognizers: tuple[Recognizer, ...] = ()

    def register(self, family: Family) -> Registry:
        """This registry with `family` added after what it has; a kind name given twice is an error."""
        clash = sorted({k.name for k in family.kinds} & set(self.names))
        if clash:
            raise ValueError(f"op kind {', '.join(clash)} is registered already")
        return Registry(self.kinds + family.kinds, self.matchers + family.matchers, self.fusions + family.fusions, self.recognizers + family.recognizers)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.kinds)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __iter__(self) -> Iterator[OpKind]:
        return iter(self.kinds)

    def kind(self, name: str) -> OpKind:
        for k in self.kinds:
            if k.name == name:
                return k
        raise KeyError(name)

    def find_candidates(self, module: ir.Module) -> list[Candidate]:
        """Every candidate of the module, numbered in the order of their root ops."""
        found: list[Candidate] = []
        for op in walk(module.operation):
            cand = self._match(op)
            if cand is not None:
                found.append(replace(cand, order=len(found) + 1))
        return found

    def find_unkinded(self, module: ir.Module, candidates: list[Candidate]) -> list[Unkinded]:
        """The ops of the module that no kind covers but a recognizer accounts for, in the order of
        their root ops; ops at which `candidates` (find_candidates') were found are not tried."""
        roots = {c.root for c in candidates}
        found: list[Unkinded] = []
        for op in walk(module.operation):
            if not self.recognizers or (op.results and op.results[0] in roots):
                continue
            for recognizer in self.recognizers:
                if op.name in recognizer.roots and (what := recognizer.recognize(op)) is not None:
                    found.append(what)
                    break
        return found

    def _match(self, op: ir.Operation) -> Candidate | None:
        for matcher in self.matchers:
            if op.name not in matcher.roots:
                continue
            cand = matcher.match(op)
            if cand is None:
                continue
            if cand.refusal is not None:
                return cand
            fused = [f for fusion in self.fusions if fusion.extends == cand.kind for f in fusion.forms(op)]
            if fused:  # before the plain op, the candidate's last form
                cand = replace(cand, forms=(*cand.forms[:-1], *fused, cand.forms[-1]))
            return cand
        return None


FAMILIES = (matmul.FAMILY, softmax.FAMILY, norm.FAMILY, attention.FAMILY, sdpa.FAMILY, swiglu.FAMILY, elementwise.FAMILY)
REGISTRY = reduce(Registry.register, FAMILIES, Registry())


def find_candidates(module: ir.Module, registry: Registry = REGISTRY) -> list[Candidate]:
    """The ops of `module` (at IREE's input level) that kernels of the registry's kinds may replace."""
    return registry.find_candidates(module)


def find_unkinded(module: ir.Module, candidates: list[Candidate], registry: Registry = REGISTRY) -> list[Unkinded]:
    """The ops of `module` no kind of the registry covers that its recognizers account for (RoPE, residual adds)."""
    return registry.find_unkinded(module, candidates)
