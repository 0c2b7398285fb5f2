"""Where IREE decides which buffer each kernel output gets: at flow level, every result a
dispatch ties to an operand must be a value of its own. Two results tied to one value share
one buffer, and the kernel's outputs silently overwrite each other.

`check_build_outputs` wraps the build's iree-compile step: every module built while it is
active is also compiled to flow level and checked (tests/conftest.py turns it on for the whole
test session, so every kernel any test builds is checked).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

# `%r:2 = flow.dispatch @a::@b::@k[%w](%x, %y) : (...) -> (%x{%n}, %y{%n})`: the results after
# the last `->`; a tied result names its operand's value, an untied one is a type.
_DISPATCH = re.compile(r"=\s*flow\.dispatch\b.*->\s*\(?(.*?)\)?\s*$")
_TIED = re.compile(r"(%[\w.$#-]+)(?:\{[^}]*\})?")


def shared_results(flow_ir: str) -> list[str]:
    """Each flow.dispatch line whose tied results name one value more than once."""
    found = []
    for line in flow_ir.splitlines():
        match = _DISPATCH.search(line)
        if not match:
            continue
        tied = [m[1] for m in (_TIED.fullmatch(part.strip()) for part in _split(match[1])) if m]
        if len(tied) != len(set(tied)):
            found.append(line.strip())
    return found


def _split(results: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(results):
        depth += {"{": 1, "<": 1, "}": -1, ">": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(results[start:i])
            start = i + 1
    return [*parts, results[start:]]


def flow_ir(mlir: Path, flags: list[str]) -> str:
    """`mlir` compiled to flow level (run in its folder, where its objects are)."""
    tool = Path(sys.executable).with_name("iree-compile")
    proc = subprocess.run([str(tool), *flags, "--compile-to=flow", mlir.name], cwd=mlir.parent, capture_output=True, text=True, check=True)
    return proc.stdout


def check_build_outputs(monkeypatch) -> None:
    """From now on, every build also checks its flow-level dispatches (see the module doc)."""
    from iree_dispatch.backend import pipeline
    from iree_dispatch.backend.compile import compile_flags

    compile_vmfb = pipeline.compile_vmfb

    def compile_and_check(mlir: Path, out: Path, codegen_arch, **options):
        compile_vmfb(mlir, out, codegen_arch, **options)
        shared = shared_results(flow_ir(mlir, compile_flags(codegen_arch, Path("."), **options)))
        assert not shared, f"{mlir.name}: dispatch results share one buffer at flow level:\n" + "\n".join(shared)

    monkeypatch.setattr(pipeline, "compile_vmfb", compile_and_check)
