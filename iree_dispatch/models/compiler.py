"""compile_model: an imported model → a .vmfb whose replaceable ops run our kernels.

1. The model (torch dialect from torch.export + IREE's FX importer, or linalg on tensors) is
   brought to IREE's input level by iree-compile itself (`--compile-to=input`): torch ops become
   linalg named ops and generics, the same whatever importer or torch version wrote them.
2. projections.py computes a self-attention's q, k and v Linears as one (kept only where a kernel
   then reads them in place), the op kinds (kinds/) find the candidates, select.py picks a kernel for each (or says why none),
   rewrite.py replaces them by calls to the kernels' generated functions, transients.py routes the
   results through one transient storage for the module's life.
3. The rewritten module is a program (docs/programs.md): backend/pipeline.build links the
   kernels' executables in and compiles it for CUDA.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import CompileError, DispatchError
from ..core.files import Staging, check_input_file, check_model_file, check_outputs, quoted_includes, spec_declares
from .capability import KernelSet, load_kernels, spec_files
from .kinds import Unkinded, find_candidates, find_unkinded
from .projections import MergedProjections, Merging, merge_qkv_projections
from .select import Decision, decide
from .transients import route_transients, static_shapes

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
    # Ops no kind covers (RoPE, residual adds), recognized so the report accounts for them
    unkinded: list[Unkinded] = field(default_factory=list)
    # The calls' transients in one storage the module keeps (transients.py); None: not rewritten (dry run)
    transient_storage: bool | None = None
    # What became of attentions whose q, k and v are three Linears of one input (projections.py); None: the model has none
    projections: str | None = None

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
        if self.unkinded:
            lines.append(f"left to IREE, no kernel kind: {len(self.unkinded)}")
            lines += [f"  {u.what} {u.description}{f' at {u.location}' if u.location else ''}: {u.reason}" for u in self.unkinded]
        lines.append("counts:")
        for kind, c in self.counts().items():
            lines.append(f"  {kind}: {c['found']} found, {c['replaced']} replaced, {c['left']} left to IREE")
        for label, n in self.kernel_counts().items():
            lines.append(f"  {label}: {n} calls")
        if self.projections is not None:
            lines.append(f"projections: {self.projections}")
        if self.transient_storage is not None:
            lines.append("transients: " + ("one storage, allocated when the module loads" if self.transient_storage else
                                           "allocated by IREE at each call (--per-call-transients, or a tensor of dynamic shape)"))
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
            "no_kind": [{"what": u.what, "op": u.description, "location": u.location, "reason": u.reason} for u in self.unkinded],
            "counts": self.counts(),
            "kernels": self.kernel_counts(),
            "projections": self.projections,
            "transient_storage": self.transient_storage,
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
    per_call_transients: bool = False,
    program: str | Path | None = None,
    emit_mlir: str | Path | None = None,
    report_json: str | Path | None = None,
    progress: Progress | None = None,
    cache: bool = True,
) -> ModelReport:
    """Compiles the imported model `model` (.mlir) for CUDA into `output`, with every op one of
    the `kernels` specs' kernels declares it can replace (`replaces`) replaced by a call to it.
    A folder among `kernels` stands for every spec in it that declares replacements (the
    repository's kernels/ is the kernel library; capability.spec_files).

    dry_run: find, select and report only (no output; needs no output path).
    allow_wider_accumulation: accept a kernel that accumulates in a wider type than the model
    (f32 for a bf16 LayerNorm; f32 throughout for a bf16 matmul + bias + GELU the model rounds
    between steps), narrowing its result to the model's type.
    per_call_transients: leave the calls' intermediate values to IREE's allocation at each call
    instead of one storage the module keeps (transients.py): less memory held between calls,
    slower calls.
    program: also write the rewritten model there (default: not kept).
    emit_mlir: also write the linked IR (model + kernels) there, with the objects it refers to in
    `<module>.objects/` beside it.
    report_json: also write the report as JSON there (with dry_run too).
    Nothing else is written: the intermediates stay in a private folder beside `output`, removed
    at the end (also on a failure or Ctrl-C).

    Every output is checked against every input (the model, the specs, their sources, headers
    and prebuilt objects) and every other output before anything is compiled, all are made in
    a private folder, and they are moved into place only once everything succeeded.
    """
    from ..backend.pipeline import build_inputs, objects_dirname

    say = progress or (lambda _msg: None)
    model = Path(model)
    spec_paths = spec_files(kernels)
    check_model_file(model)
    for path in spec_paths:
        check_input_file("kernel spec", path)
    if not dry_run and output is None:
        raise DispatchError("an output path (-o MODEL.vmfb) is needed unless --dry-run")
    outputs = _outputs(None if dry_run else Path(output), program, emit_mlir, report_json)
    # Before a spec is loaded (its type probe compiles): no output may be an input named so far.
    declared = [src for path in spec_paths for src in spec_declares(path)[1]]
    inputs = [("model", model), *(("kernel spec", p) for p in spec_paths), *(("kernel source", s) for s in declared)]
    check_outputs(outputs, [*inputs, *(("included header", h) for h in quoted_includes(declared))])
    kernel_set = load_kernels(spec_paths)
    inputs += build_inputs(kernel_set.modules, None)
    check_outputs(outputs, inputs)
    report, text = _rewrite(model, kernel_set, allow_wider_accumulation, not dry_run, say, keep_transients=not per_call_transients)
    if dry_run:
        if report_json is not None:
            with Staging(Path(report_json)) as staging:
                _stage_report(staging, report, Path(report_json))
                staging.commit()
        return report
    output = Path(output)
    program_path = Path(program) if program else None
    used = {d.capability.module.name for d in report.decisions if d.replaced}
    modules = [m for m in kernel_set.modules if m.name in used]
    # The objects only where the linked IR that refers to them is kept.
    objects = [(f"module {m.name}'s objects folder", Path(emit_mlir).parent / objects_dirname(m.name), "folder") for m in modules] if emit_mlir else []
    check_outputs([*outputs, *objects], inputs)
    report.output, report.program = output, program_path
    with Staging(output) as staging:
        # One subfolder per output: two outputs may have one name in different folders.
        # The program is named as it would be kept beside the vmfb when it is not kept, so
        # that the build cache knows it by one name (build's program_as).
        known_as = program_path or output.with_name(output.stem + ".program.mlir")
        staged_vmfb, staged_program = _staged(staging, "vmfb", output), _staged(staging, "program", known_as)
        staged_mlir = _staged(staging, "mlir", Path(emit_mlir)) if emit_mlir else None
        staged_program.write_text(text, encoding="utf-8")
        if modules:
            from ..backend.pipeline import build

            try:
                result = build(modules, staged_vmfb, program=staged_program, emit_mlir=staged_mlir, progress=say, cache=cache, program_as=known_as.absolute(),
                               keep_objects=emit_mlir is not None)
            except DispatchError as exc:
                # The program was never written where the user asked: name it, not the private folder.
                kept = f" ({program_path.name})" if program_path else ""
                raise type(exc)(str(exc).replace(str(staged_program), f"the rewritten {model.name}{kept}")) from None
            # The headers the sources include (through -I too) are known only now.
            check_outputs([*outputs, *objects], [("file the build read", d) for d in result.dependencies])
            for (_, final, _), staged in zip(objects, result.objects_dirs):
                staging.place(staged, final)
        else:
            say("no op replaced: compiling the model with IREE alone")
            _compile_alone(staged_program, staged_vmfb, kernel_set, staged_mlir)
        if program_path is not None:
            staging.place(staged_program, program_path)
        if staged_mlir is not None:
            staging.place(staged_mlir, Path(emit_mlir))
        staging.place(staged_vmfb, output)
        if report_json is not None:
            _stage_report(staging, report, Path(report_json))
        staging.commit()
    return report


def _outputs(output: Path | None, program, emit_mlir, report_json) -> list[tuple[str, Path, str]]:
    """What compile_model writes, as core/files.check_outputs takes them: the vmfb and what was
    asked for besides (nothing but the report with dry_run)."""
    found = []
    if output is not None:
        found += [("output (-o)", output, "file")]
        found += [("program (--program)", Path(program), "file")] if program else []
        found += [("emit_mlir (--emit-mlir)", Path(emit_mlir), "file")] if emit_mlir else []
    return found + ([("report_json (--report-json)", Path(report_json), "file")] if report_json is not None else [])


def _staged(staging: Staging, kind: str, final: Path) -> Path:
    folder = staging.folder / kind
    folder.mkdir()
    return folder / final.name


def _stage_report(staging: Staging, report: ModelReport, final: Path) -> None:
    staged = _staged(staging, "report", final)
    staged.write_text(report_json(report), encoding="utf-8")
    staging.place(staged, final)


def rewrite_model(model: str | Path, kernels: Sequence[str | Path], *, allow_wider_accumulation: bool = False) -> tuple[ModelReport, str]:
    """The report and the rewritten model (a program calling `@<module>.<function>`, declared
    but not defined), without building anything. Its transients stay IREE's to allocate at each
    call (report.transient_storage None): the storage a compiled model keeps is sized and
    allocated by compile_model's build, and this program may be compiled otherwise."""
    model = Path(model)
    check_model_file(model)
    return _rewrite(model, load_kernels(list(kernels)), allow_wider_accumulation, True, lambda _msg: None, keep_transients=None)


def _rewrite(
    model: Path, kernel_set: KernelSet, allow_wider: bool, rewrite_it: bool, say: Progress, keep_transients: bool | None = True
) -> tuple[ModelReport, str | None]:
    """keep_transients: route the results through the transient storage (transients.py) where
    the model allows it; False: not, and the report says so; None: not, and the report is silent."""
    from iree.compiler import ir

    with tempfile.TemporaryDirectory(prefix=".iree-dispatch-model.") as tmp:
        say(f"iree-compile --compile-to=input {model.name}")
        input_ir = Path(tmp) / "input.mlir"
        to_input_level(model, input_ir)
        with ir.Context():
            text = input_ir.read_text(encoding="utf-8")
            try:
                module = ir.Module.parse(text)
            except ir.MLIRError as exc:
                raise CompileError(f"{model}: the input-level IR does not parse: {_mlir_error(exc)}") from None
            # Asked before the rewrite's casts to dynamic kernel types, and only where it routes.
            static = bool(rewrite_it and keep_transients) and static_shapes(module)
            merging = merge_qkv_projections(module)
            candidates = find_candidates(module)
            decisions = decide(candidates, kernel_set, allow_wider_accumulation=allow_wider)
            unread = [m for m in merging.merged if not _read_in_place(m, decisions)]
            if unread:  # the attention would read copies of the slices: the model as it was is better
                module = ir.Module.parse(text)
                candidates = find_candidates(module)
                decisions = decide(candidates, kernel_set, allow_wider_accumulation=allow_wider)
            projections = _projections_line(merging, len(unread))
            # An op no kind covers that a replaced form computes (a residual add fused into its Linear) is not left.
            computed = {d.form.result for d in decisions if d.replaced}
            unkinded = [u for u in find_unkinded(module, candidates) if u.root not in computed]
            report = ModelReport(model, kernel_set, decisions, unkinded=unkinded, projections=projections)
            if not rewrite_it:
                return report, None
            from . import rewrite

            _check_no_clash(model, module, decisions)
            try:
                rewrite.declare(module, decisions)
                replaced: dict = {}
                for d in decisions:
                    if d.replaced:
                        rewrite.apply(d, replaced)
                if keep_transients is not None:
                    report.transient_storage = keep_transients and static and route_transients(module)
                module.operation.verify()
            except ir.MLIRError as exc:
                raise CompileError(f"{model}: the rewritten model does not verify: {_mlir_error(exc)} (a bug in iree_dispatch, please report it)") from None
            return report, module.operation.get_asm(enable_debug_info=False)


def _projections_line(merging: Merging, unread: int) -> str | None:
    """The report's account of the attentions whose q, k and v are three projections."""
    parts = []
    if merging.merged and not unread:
        parts.append(f"q, k and v of {len(merging.merged)} attentions computed by one Linear each, over the weights and biases concatenated once, at load")
    elif merging.merged:
        parts.append(f"q, k and v of {len(merging.merged)} attentions are three Linears of one input, left as three: no kernel given reads them "
                     f"from one [B, S, 3E] projection (an sdpa_qkv kernel) at {unread} of them")
    for reason, n in Counter(merging.left).items():
        parts.append(f"q, k and v of {n} attentions left as three projections: {reason}")
    return "; ".join(parts) or None


def _read_in_place(merged: MergedProjections, decisions: list[Decision]) -> bool:
    """The merged projection's attention is replaced by a kernel that reads q, k and v from its
    [B, S, 3E] result as it lies (an sdpa_qkv form)."""
    return any(d.replaced and d.form.operands[0].value == merged.qkv and d.form.kind.startswith("sdpa_qkv") for d in decisions)


def _check_no_clash(model: Path, module, decisions: list[Decision]) -> None:
    """The rewrite declares `@<module>.<function>` for each kernel it calls: a model that
    already has a symbol of that name would end as an MLIR redefinition error."""
    symbols = {str(op.attributes["sym_name"]).strip('"') for op in module.body.operations if "sym_name" in op.attributes}
    for d in decisions:
        if d.replaced and d.capability.label in symbols:
            raise CompileError(
                f"{model}: the model already defines @{d.capability.label}, the name of the kernel function that replaces "
                f"#{d.candidate.order} {d.candidate.kind}; rename it in the model, or leave spec {d.capability.module.name} out of --kernels"
            )


def _mlir_error(exc: Exception) -> str:
    """The first error of an MLIRError, on one line."""
    diagnostics = getattr(exc, "error_diagnostics", None)
    if diagnostics:
        first = diagnostics[0]
        return f"{first.location}: {first.message}".replace("\n", " ")
    return " ".join(str(exc).split())


def to_input_level(model: Path, out: Path) -> None:
    from iree.compiler.tools.binaries import find_tool

    cmd = [find_tool("iree-compile"), *INPUT_FLAGS, "--compile-to=input", "--mlir-print-debuginfo", str(model), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, check=False)
    if proc.returncode != 0:
        # iree-compile quotes the offending line, which may hold any bytes.
        lines = (proc.stderr + proc.stdout).decode("utf-8", "replace").strip().splitlines()
        first = next((line.strip() for line in lines if "error:" in line), lines[0].strip() if lines else f"exit {proc.returncode}")
        raise CompileError(f"{model}: iree-compile could not bring the model to IREE's input level: {first}")


def _compile_alone(program: Path, output: Path, kernel_set: KernelSet, emit_mlir: Path | None) -> None:
    from ..backend.compile import compile_vmfb
    from ..backend.pipeline import codegen_arch

    compile_vmfb(program.absolute(), output.absolute(), codegen_arch(kernel_set.modules))
    if emit_mlir is not None:
        shutil.copyfile(program, emit_mlir)


def report_json(report: ModelReport) -> str:
    return json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n"
