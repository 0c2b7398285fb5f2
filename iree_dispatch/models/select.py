"""Chooses a kernel for each candidate (kinds/), or says why none fits.

Nothing here names an op kind: what differs between kinds (the word for a numerics refusal,
whether a result may be narrowed, which refusals are noted) is read from the form's OpKind."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core import expr as ex
from .capability import Capability, KernelSet, widens_exactly, wider
from .ir_match import round_to, shape_text
from .kinds import Candidate, Form, OpKind, Reason, Splat


@dataclass
class Decision:
    candidate: Candidate
    form: Form | None = None
    capability: Capability | None = None
    reasons: list[Reason] = field(default_factory=list)  # when left to IREE
    notes: list[str] = field(default_factory=list)
    narrow_to: str | None = None  # truncate the kernel's wider result to the model's type
    widen: dict[int, str] = field(default_factory=dict)  # operand index → the kernel's wider type (arith.extf, exact)
    pad: dict[str, tuple[int, int]] = field(default_factory=dict)  # shape symbol → (model's size, padded size)

    @property
    def replaced(self) -> bool:
        return self.capability is not None


def decide(candidates: list[Candidate], kernels: KernelSet, *, allow_wider_accumulation: bool = False) -> list[Decision]:
    decisions = [_decide(c, kernels, allow_wider_accumulation) for c in candidates]
    # A fused form that takes in other candidates' ops (attention: the scores batch matmul and the
    # softmax) replaces them too: they are no longer decisions of their own.
    covered = {}
    for d in decisions:
        if d.replaced and d.form.covers:
            inner = [c for c in candidates if c.root in d.form.covers]
            covered.update({id(c): d for c in inner})
            d.notes.append("with " + " and ".join(f"#{c.order} {c.kind}" for c in inner) + ": one kernel call for the whole chain")
    return [d for d in decisions if id(d.candidate) not in covered]


def _decide(cand: Candidate, kernels: KernelSet, allow_wider: bool) -> Decision:
    d = Decision(cand)
    if cand.refusal is not None:
        d.reasons.append(cand.refusal)
        return d
    tried_kinds: list[OpKind] = []
    # Each reason's op kind and what a note says of it, were a form of another kind taken.
    not_as: list[tuple[OpKind, str]] = []
    for form in cand.forms:
        caps = kernels.for_op(form.kind)
        if form.op_kind not in tried_kinds:
            tried_kinds.append(form.op_kind)
        if form.refusal is not None:  # the model's ops lack the form's structure: no kernel of its kind can take it
            # Said once, whatever the number of kernels of its kind: it names the kernel when there
            # is one, else the kind (whose note then says it once).
            label = caps[0].label if len(caps) == 1 else form.op_kind.name
            reason = (form.refusal[0], f"{label}: {form.refusal[1]}")
            if caps and reason not in d.reasons:
                d.reasons.append(reason)
                not_as.append((form.op_kind, reason[1] if len(caps) == 1 else form.refusal[1]))
            continue
        for cap in caps:
            why, narrow, notes, extra = _fits(form, cap, allow_wider)
            if why is None:
                d.form, d.capability, d.narrow_to = form, cap, narrow
                d.widen, d.pad = extra.get("widen", {}), extra.get("pad", {})
                d.notes = [*form.notes, *notes]
                for other, note in form.op_kind.left_when_undeclared:
                    if any(f.kind == other for f in cand.forms) and not kernels.for_op(other):
                        d.notes.append(note)
                d.notes += [f"not as {kind.name}: {text}" for kind, text in not_as if kind.fused and kind != form.op_kind]
                return d
            reason = (why[0], f"{cap.label}: {why[1]}")
            if reason not in d.reasons:
                d.reasons.append(reason)
                not_as.append((form.op_kind, reason[1]))
    tried_kinds = [k for k in tried_kinds if k.named_when_undeclared or kernels.for_op(k.name)]
    missing = [k.name for k in tried_kinds if not kernels.for_op(k.name)]
    if missing and len(missing) == len(tried_kinds):
        d.reasons.insert(0, ("kernel", f"no kernel declares {' or '.join(repr(k) for k in missing)}"))
    return d


def _fits(form: Form, cap: Capability, allow_wider: bool):
    """(None, narrow_to, notes, extra) when `cap` can replace `form`, else ((category, reason), None, [], {});
    extra: {"widen": {operand: type}, "pad": {symbol: (size, padded)}} where the rewrite must do that."""
    why, narrow, notes, extra = _fits_types(form, cap, allow_wider)
    if why is not None:
        return why, None, [], {}
    fits = _fits_shapes(form, cap, narrow, notes, extra)
    if fits[0] is None and form.scale is not None and not form.op_kind.takes_scale:  # attention: the kernel scales the scores by 1/sqrt(D), its head dim
        d = form.operands[0].shape[-1]
        want = None if d is None else 1.0 / d**0.5
        if want is None or round_to(want, form.compute) != form.scale:
            kernel = "1/sqrt(D), D dynamic" if want is None else f"1/sqrt({d}) = {want:g}"
            return ("numerics", f"scales the scores by {kernel}, the model by {form.scale:g}"), None, [], {}
    return fits


def _fits_types(form: Form, cap: Capability, allow_wider: bool):
    got = tuple(o.dtype for o in form.operands)
    widen = {i: want for i, (have, want) in enumerate(zip(got, cap.input_dtypes)) if i in form.widen and widens_exactly(have, want)}
    if tuple(widen.get(i, t) for i, t in enumerate(got)) != cap.input_dtypes:
        return ("dtype", f"takes {', '.join(cap.input_dtypes)}, the model has {', '.join(got)}"), None, [], {}
    notes = [f"its {cap.kernel.inputs[i].name} is {got[i]} in the model, widened to {t} for the kernel (exact)" for i, t in widen.items()]
    narrow = None
    if cap.accumulate != form.compute:
        steps = f"; the model {form.steps}" if form.steps else ""
        if wider(cap.accumulate, form.compute) and allow_wider:
            if form.steps:
                notes.append(f"computes in {cap.accumulate} and rounds once, where the model {form.steps} (--allow-wider-accumulation)")
            else:
                notes.append(f"computes in {cap.accumulate} where the model computes in {form.compute} (--allow-wider-accumulation)")
        else:
            hint = " (--allow-wider-accumulation accepts a wider one)" if wider(cap.accumulate, form.compute) else ""
            verb = "accumulates" if form.op_kind.accumulates else "computes"
            return ("numerics", f"{verb} in {cap.accumulate}, the model in {form.compute}{steps}{hint}"), None, [], {}
    if cap.output_dtype != form.result_dtype:
        if allow_wider and form.op_kind.narrows and cap.output_dtype == cap.accumulate and form.result_dtype == form.compute and notes:
            narrow = form.result_dtype
        else:
            why = f"writes {cap.output_dtype}, the model's result is {form.result_dtype}"
            if form.op_kind.explains_kept_result and form.result_dtype == form.compute and wider(form.compute, cap.output_dtype):
                why += f" (the model keeps it: its only use is not one rounding to {cap.output_dtype})"
            return ("dtype", why), None, [], {}
    if form.eps is not None and cap.eps is not None:
        eps_type = form.eps_type or form.compute
        model_eps = round_to(form.eps, eps_type)
        if abs(round_to(cap.eps, eps_type) - model_eps) > 1e-12 * max(1.0, abs(model_eps)):
            return ("numerics", f"its epsilon is {cap.eps:g}, the model's {form.eps:g}"), None, [], {}
    return None, narrow, notes, {"widen": widen} if widen else {}


def _fits_shapes(form: Form, cap: Capability, narrow, notes, extra):
    def no(category, text):
        return (category, text), None, [], {}

    shapes = [o.shape for o in form.operands]
    bound = cap.symbols(shapes)  # a dynamic dim binds None: the kernel's function checks it when called
    for t, shape in zip(cap.kernel.inputs, shapes):
        for dim, size in zip(t.shape, shape):
            if not hasattr(dim, "name") and getattr(dim, "value", size) != size:
                return no("shape", f"{t.name} dim must be {dim.value}, the model's is {shape_text([size])}")
    pad = {}
    for sym, k in cap.divisible:
        if bound[sym] is None:
            return no("shape", f"needs {sym} % {k} == 0, the model's {sym} is dynamic")
        if bound[sym] % k:
            if sym in cap.pad and None not in (d for s in (*shapes, form.result_shape) for d in s):
                pad[sym] = (bound[sym], -(-bound[sym] // k) * k)
                continue
            return no("shape", f"needs {sym} % {k} == 0, the model's {sym} = {bound[sym]}" + (" (padding needs static sizes)" if sym in cap.pad else ""))
    for sym, k in cap.maximum:
        if bound[sym] is None:
            return no("shape", f"needs {sym} <= {k}, the model's {sym} is dynamic")
        if bound[sym] > k:
            return no("shape", f"needs {sym} <= {k}, the model's {sym} = {bound[sym]}")
    for t, shape in zip(cap.kernel.inputs, shapes):  # a symbol used twice must agree (K of lhs and rhs)
        for dim, size in zip(t.shape, shape):
            if hasattr(dim, "name") and None not in (size, bound[dim.name]) and bound[dim.name] != size:
                return no("shape", f"{t.name}: {dim.name} = {size} here but {bound[dim.name]} elsewhere")
    if any(isinstance(o.value, Splat) and None in o.shape for o in form.operands):
        return no("shape", "a weight or bias the model lacks would need a dynamic size")
    sizes = {**bound, **{sym: padded for sym, (_, padded) in pad.items()}}  # as the kernel will see them
    for relation in cap.kernel.requires:
        names = ex.relation_symbols(relation)
        if any(sizes.get(name) is None for name in names):
            continue  # a dynamic size (or an argument): the kernel's function checks the relation when called
        try:
            broken = not ex.holds(relation, {name: sizes[name] for name in names})
        except ZeroDivisionError:
            broken = True
        if broken:
            return no("shape", f"requires {relation.text}, the model's {', '.join(f'{name} = {sizes[name]}' for name in names)}")
    if pad:
        notes = [*notes, *(f"{s} = {n} padded to {p} with zeros (sliced off the result: the same values)" for s, (n, p) in pad.items())]
        extra = {**extra, "pad": pad}
    return None, narrow, notes, extra
