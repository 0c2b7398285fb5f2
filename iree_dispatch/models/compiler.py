"""compile_model: an imported model → a .vmfb whose replaceable ops run our kernels.

1. The model (torch dialect from torch.export + IREE's FX importer, or linalg on tensors) is
   brought to IREE's input level by iree-compile itself (`--compile-to=input`): torch ops become
   linalg named ops and generics, the same whatever importer or torch version wrote them.
2. patterns.py finds the candidates there, select.py picks a kernel for each (or says why none),
   rewrite.py replaces them by calls to the kernels' generated functions.
3. The rewritten module is a program (docs/programs.md): backend/pipeline.build links the
   kernels' executables in and compiles it for CUDA.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import CompileError, DispatchError
from .capability import KernelSet, load_kernels
from .patterns import find_candidates
from .select import Decision, decide

Progress = Callable[[str], None]
# The target IREE generates the model's own ops for: IREE 3.13 has no CUDA codegen target for
# sm_90; its sm_80 PTX is JIT-compiled forward on newer GPUs.
INPUT_FLAGS = ["--iree-hal-target-device=cuda", "--iree-input-demote-f64-to-f32=false"]


@dataclass
class ModelReport:
    model: Path
    kernels: KernelSet
    decisions: list[Decision]
    output: Path | None = None
    program: Path | None = None

    @property
    def replaced(self) -> list[Decision]:
        return [d for d in self.decisions if d.replaced]

    @property
    def left(self) -> list[Decision]:
        return [d for d in self.decisions if not d.replaced]

    def counts(self) -> dict[str, dict[str, int]]:
        """Per op kind: candidates found, replaced, left to IREE."""
        out: dict[str, dict[str, int]] = {}
        for d in self.decisions:
            c = out.setdefault(d.candidate.kind, {"found": 0, "replaced": 0, "left": 0})
            c["found"] += 1
            c["replaced" if d.replaced else "left"] += 1
        return dict(sorted(out.items()))

    def kernel_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(d.capability.label for d in self.replaced).items()))

    def text(self) -> str:
        modules = ", ".join(f"{m.name} ({len(m.kernels)} kernels)" for m in self.kernels.modules)
        declared = len(self.kernels.capabilities)
        lines = [f"model {self.model.name}: {len(self.decisions)} candidate ops; kernels: {modules}, {declared} declare replacements"]
        lines.append(f"replaced: {len(self.replaced)}")
        for d in self.replaced:
            form = d.form
            how = f" (as {form.kind})" if form.kind != d.candidate.kind else ""
            lines.append(f"  #{d.candidate.order} {d.candidate.kind} {d.candidate.description}{_loc(d)} -> {d.capability.label}{how}")
            lines += [f"      note: {n}" for n in d.notes]
        lines.append(f"left to IREE: {len(self.left)}")
        for d in self.left:
            lines.append(f"  #{d.candidate.order} {d.candidate.kind} {d.candidate.description}{_loc(d)}")
            lines += [f"      {category}: {text}" for category, text in d.reasons]
        lines.append("counts:")
        for kind, c in self.counts().items():
            lines.append(f"  {kind}: {c['found']} found, {c['replaced']} replaced, {c['left']} left to IREE")
        for label, n in self.kernel_counts().items():
            lines.append(f"  {label}: {n} calls")
        if self.output is not None:
            lines.append(f"wrote {self.output}")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict:
        def entry(d: Decision) -> dict:
            e = {"index": d.candidate.order, "kind": d.candidate.kind, "op": d.candidate.description, "location": d.candidate.location}
            if d.replaced:
                e.update(kernel=d.capability.label, form=d.form.kind, notes=d.notes)
            else:
                e["reasons"] = [{"category": c, "reason": r} for c, r in d.reasons]
            return e

        return {
            "model": str(self.model),
            "modules": [m.name for m in self.kernels.modules],
            "replaced": [entry(d) for d in self.replaced],
            "left": [entry(d) for d in self.left],
            "counts": self.counts(),
            "kernels": self.kernel_counts(),
            "output": None if self.output is None else str(self.output),
        }


def _loc(d: Decision) -> str:
    return f" at {d.candidate.location}" if d.candidate.location else ""


def compile_model(
    model: str | Path,
    kernels: Sequence[str | Path],
    output: str | Path | None = None,
    *,
    dry_run: bool = False,
    allow_wider_accumulation: bool = False,
    program: str | Path | None = None,
    emit_mlir: str | Path | None = None,
    progress: Progress | None = None,
    cache: bool = True,
) -> ModelReport:
    """Compiles the imported model `model` (.mlir) for CUDA into `output`, with every op one of
    the `kernels` specs' kernels declares it can replace (`replaces`) replaced by a call to it.

    dry_run: find, select and report only (no output; needs no output path).
    allow_wider_accumulation: accept a kernel that accumulates in a wider type than the model
    (f32 for a bf16 LayerNorm; f32 throughout for a bf16 matmul + bias + GELU the model rounds
    between steps), narrowing its result to the model's type.
    program: where to write the rewritten model (default: `<output>.program.mlir`).
    emit_mlir: also write the linked IR (model + kernels) there.
    """
    say = progress or (lambda _msg: None)
    model = Path(model)
    _check_model(model)
    kernel_set = load_kernels(list(kernels))
    if not dry_run and output is None:
        raise DispatchError("an output path (-o MODEL.vmfb) is needed unless --dry-run")
    report, text = _rewrite(model, kernel_set, allow_wider_accumulation, not dry_run, say)
    if dry_run:
        return report
    output = Path(output)
    decisions = report.decisions
    program_path = Path(program) if program else output.with_name(output.stem + ".program.mlir")
    program_path.parent.mkdir(parents=True, exist_ok=True)
    program_path.write_text(text, encoding="utf-8")
    used = {d.capability.module.name for d in decisions if d.replaced}
    modules = [m for m in kernel_set.modules if m.name in used]
    if modules:
        from ..backend.pipeline import build

        build(modules, output, program=program_path, emit_mlir=emit_mlir, progress=say, cache=cache)
    else:
        say("no op replaced: compiling the model with IREE alone")
        _compile_alone(program_path, output, kernel_set, emit_mlir)
    report.output, report.program = output, program_path
    return report


def rewrite_model(model: str | Path, kernels: Sequence[str | Path], *, allow_wider_accumulation: bool = False) -> tuple[ModelReport, str]:
    """The report and the rewritten model (a program calling `@<module>.<function>`, declared
    but not defined), without building anything."""
    model = Path(model)
    _check_model(model)
    return _rewrite(model, load_kernels(list(kernels)), allow_wider_accumulation, True, lambda _msg: None)


def _rewrite(model: Path, kernel_set: KernelSet, allow_wider: bool, rewrite_it: bool, say: Progress) -> tuple[ModelReport, str | None]:
    from iree.compiler import ir

    with tempfile.TemporaryDirectory(prefix=".iree-dispatch-model.") as tmp:
        say(f"iree-compile --compile-to=input {model.name}")
        input_ir = Path(tmp) / "input.mlir"
        to_input_level(model, input_ir)
        with ir.Context():
            try:
                module = ir.Module.parse(input_ir.read_text(encoding="utf-8"))
            except ir.MLIRError as exc:
                raise CompileError(f"{model}: the input-level IR does not parse: {exc}") from None
            decisions = decide(find_candidates(module), kernel_set, allow_wider_accumulation=allow_wider)
            report = ModelReport(model, kernel_set, decisions)
            if not rewrite_it:
                return report, None
            from . import rewrite

            rewrite.declare(module, decisions)
            replaced: dict = {}
            for d in decisions:
                if d.replaced:
                    rewrite.apply(d, replaced)
            if not module.operation.verify():
                raise CompileError(f"{model}: the rewritten model does not verify (a bug in iree_dispatch, please report it)")
            return report, module.operation.get_asm(enable_debug_info=False)


def _check_model(model: Path) -> None:
    """A regular file (models with inlined weights are large: no size limit, unlike specs)."""
    try:
        st = os.stat(model)
    except OSError as exc:
        raise DispatchError(f"can't read model {model}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise DispatchError(f"model {model} is not a regular file; give the .mlir file of an imported model")


def to_input_level(model: Path, out: Path) -> None:
    from iree.compiler.tools.binaries import find_tool

    cmd = [find_tool("iree-compile"), *INPUT_FLAGS, "--compile-to=input", "--mlir-print-debuginfo", str(model), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        log = "\n".join((proc.stderr + proc.stdout).strip().splitlines()[:30])
        raise CompileError(f"{model}: iree-compile could not bring the model to IREE's input level:\n{log}")


def _compile_alone(program: Path, output: Path, kernel_set: KernelSet, emit_mlir) -> None:
    import shutil

    from ..backend.compile import compile_vmfb
    from ..backend.pipeline import codegen_arch

    output.parent.mkdir(parents=True, exist_ok=True)
    compile_vmfb(program.absolute(), output.absolute(), codegen_arch(kernel_set.modules))
    if emit_mlir:
        shutil.copyfile(program, emit_mlir)


def report_json(report: ModelReport) -> str:
    return json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n"
