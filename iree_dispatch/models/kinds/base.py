"""What an op kind module defines (OpKind, Matcher, Fusion, Recognizer, gathered in a Family) and
what its matchers find (Candidate, Form, Operand) or its recognizers account for (Unkinded): typed
and frozen from the matcher to the rewrite."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from iree.compiler import ir

from ..ir_match import Shape

Reason = tuple[str, str]  # (category, text): why a kernel, or every kernel, does not fit
# From a kernel's input shapes (each dim as text, e.g. ("M", "K")): the output shape it must
# declare, and pairs of dims that must be the same for the kernel to compute the kind.
DeclaredShapes = Callable[[list[tuple[str, ...]]], tuple[tuple[str, ...], list[tuple[str, str]]]]


@dataclass(frozen=True)
class OpKind:
    """One op kind: what a kernel's `replaces.op` names, and the kind of a form that kernels of
    it can replace; the rules the spec loader (capability.py) and the selection (select.py) apply."""

    name: str
    input_ranks: tuple[int, ...]  # ranks of the kernel's input tensors, in parameter order
    output_rank: int
    declared_shapes: DeclaredShapes
    epsilon: bool = False  # the kernel takes the model's epsilon as its one float scalar (or has it built in: replaces.eps)
    takes_scale: bool = False  # the kernel takes the model's softmax scale (Form.scale or Form.scalar) as its one float scalar
    accumulate: str | None = None  # what the kernel computes in unless `accumulate` says: None is its output's type
    pads: bool = False  # `pad` allowed: zeros along a padded size add nothing to the other results (matmuls)
    accumulates: bool = False  # a numerics refusal says "accumulates in" (a matmul's sum), else "computes in"
    # With --allow-wider-accumulation, a kernel that writes its accumulation type may have its
    # result narrowed to the model's (a rounding the model does once anyway).
    narrows: bool = False
    # Several of the model's ops as one: when a plainer form of the candidate is taken, the report
    # notes why this one was not.
    fused: bool = False
    # Named in a `kernel` refusal when no kernel declares it. False for a fusion found around
    # another kind's op: that no kernel declares it is no news.
    named_when_undeclared: bool = True
    # A kernel writing a narrower type than the result the model keeps in its compute type is told
    # so: the form takes the model's rounding in only where that is the result's only use.
    explains_kept_result: bool = False
    # (kind, note): noted when a form of this kind is taken although the candidate also has a form
    # of `kind`, which no kernel declares (what of the model's ops stays IREE's).
    left_when_undeclared: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Splat:
    """An operand the model lacks, passed to the kernel as a constant tensor (a norm's missing
    weight as ones, its missing bias as zeros)."""

    value: float


@dataclass(frozen=True)
class Operand:
    value: ir.Value | Splat
    shape: Shape  # as the kernel sees it (after any collapse)
    dtype: str


def operand(value: ir.Value, info: tuple[Shape, str]) -> Operand:
    """`value` as an operand of its own shape and type (`info`: ir_match.tensor_info(value))."""
    return Operand(value, info[0], info[1])


@dataclass(frozen=True)
class Form:
    """One way a kernel of `op_kind` computes the candidate's result."""

    op_kind: OpKind
    operands: tuple[Operand, ...]
    result: ir.Value  # whose uses the kernel's result replaces
    result_shape: Shape  # as the kernel writes it
    result_dtype: str
    compute: str  # the model's accumulation / arithmetic type
    anchor: ir.Operation  # before which the replacement is inserted
    eps: float | None = None
    notes: tuple[str, ...] = ()
    # Where each dim of the model's result comes from: (operand index, dim of that operand's value)
    result_dims: tuple[tuple[int, int], ...] = ()
    # Operands the kernel may take in a wider float type (a bf16 bias as f32: exact, widened by the rewrite)
    widen: tuple[int, ...] = ()
    # For the numerics refusal: what the model computes in `compute`, when it is more than one step
    steps: str = ""
    # The type the model adds its epsilon in, where that is not `compute` (Llama's RMSNorm in bf16: in f32)
    eps_type: str | None = None
    # attention: the factor the model scales the scores by (in its type)
    scale: float | None = None
    # The model's scalar the kernel takes as its float argument where it is no constant (an SDPA
    # scale computed or passed in): the rewrite converts it to the argument's type
    scalar: ir.Value | None = None
    # Roots of other candidates this form computes too (attention: the scores batch matmul, the softmax)
    covers: tuple[ir.Value, ...] = ()
    # When the model's ops around the form's core don't have the form's structure (attention_qkv:
    # q, k, v not sliced from one projection): every kernel of its kind is refused so
    refusal: Reason | None = None

    @property
    def kind(self) -> str:
        """The op kind's name: what a kernel's `replaces.op` says."""
        return self.op_kind.name


@dataclass(frozen=True)
class Candidate:
    """An op (or a small DAG of ops with one meaning) of the model that kernels may replace."""

    kind: str  # what the model computes: matmul, batch_matmul, softmax, layernorm, rmsnorm
    description: str  # shapes and dtypes, for the report
    location: str
    root: ir.Value  # the value the candidate was found at (its root op's first result)
    forms: tuple[Form, ...] = ()  # best first
    refusal: Reason | None = None  # that no kernel can overcome
    order: int = 0  # its number in the report, given when all are found


@dataclass(frozen=True)
class Unkinded:
    """Ops of the model that no op kind covers, recognized so that the report accounts for them
    (a RoPE chain, a residual add): left to IREE, with the reason."""

    what: str  # "rope", "residual add"
    description: str  # shapes and dtypes, for the report
    location: str
    reason: str
    root: ir.Value  # the value it was recognized at (its last op's first result)


@dataclass(frozen=True)
class Matcher:
    """Finds candidates at ops named one of `roots`: `match` returns one or None."""

    roots: frozenset[str]
    match: Callable[[ir.Operation], Candidate | None]


@dataclass(frozen=True)
class Fusion:
    """Forms of another matcher's candidates of kind `extends`: a chain of the model's ops around
    the candidate's root, computed as one (the eager attention chain around its context batch
    matmul). They are tried after the candidate's own fused forms and before its plain op (its
    last form); a candidate refused as a whole gets none."""

    extends: str
    forms: Callable[[ir.Operation], list[Form]]


@dataclass(frozen=True)
class Recognizer:
    """Finds ops no kind covers at ops named one of `roots`, where no matcher found a candidate:
    `recognize` returns one or None."""

    roots: frozenset[str]
    recognize: Callable[[ir.Operation], Unkinded | None]


@dataclass(frozen=True)
class Family:
    """An op kind module's contribution to the registry (kinds/__init__.py)."""

    kinds: tuple[OpKind, ...]
    matchers: tuple[Matcher, ...] = ()
    fusions: tuple[Fusion, ...] = ()
    recognizers: tuple[Recognizer, ...] = ()
