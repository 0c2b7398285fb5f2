"""Integer expressions over named workloads: grid sizes and output dimensions.

Syntax is a Python subset (parsed with `ast`, never evaluated by Python): integers, names
(a struct argument's integer field as a dotted name, `s.m`), `+ - * // %`, parentheses, `ceildiv(a, b)`, `min(a, b, ...)`, `max(a, b, ...)`.
Expressions are evaluated in Python (checks, inspect) and lowered to `arith` ops on `index`
(the export `count` region and the wrapper function), from the same tree.

A relation (a spec's `requires`) compares two expressions with `== != < <= > >=`; several
comparisons may be joined by `or` (`MB == 1 or MB == B`), and it holds when any of them does.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Union

from .errors import SpecError

Expr = Union["Num", "Sym", "BinOp", "Call"]

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
_FUNCS = {"ceildiv": 2, "min": None, "max": None}


@dataclass(frozen=True)
class Num:
    value: int

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class Sym:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class BinOp:
    op: str
    lhs: Expr
    rhs: Expr

    def __str__(self) -> str:
        return f"({self.lhs} {self.op} {self.rhs})"


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple[Expr, ...]

    def __str__(self) -> str:
        return f"{self.func}({', '.join(map(str, self.args))})"


def parse(text: str | int, what: str) -> Expr:
    """Parses `text`; `what` names the field in error messages (e.g. "kernel foo: grid[0]")."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise SpecError(f"{what}: expected an integer or an expression string, got {text!r}")
    if isinstance(text, int):
        return _in_range(Num(text), str(text), what)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError) as exc:  # ValueError: e.g. a NUL character
        raise SpecError(f"{what}: can't parse expression {text!r}: {getattr(exc, 'msg', exc)}") from None
    expr = _convert(tree.body, text, what)
    _check_constant_divisors(expr, text, what)
    return expr


# Sizes are `index` values, 64-bit signed in IREE: a constant beyond that can't be written.
_INDEX_MIN, _INDEX_MAX = -(2**63), 2**63 - 1


_COMPARISONS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
# Each comparison's arith.cmpi predicate (sizes are signed index values); contract.RELATIONS
# evaluates them by the same names.
PREDICATES = {"==": "eq", "!=": "ne", "<": "slt", "<=": "sle", ">": "sgt", ">=": "sge"}


@dataclass(frozen=True)
class Comparison:
    op: str  # a key of PREDICATES
    lhs: Expr
    rhs: Expr

    def __str__(self) -> str:
        return f"{self.lhs} {self.op} {self.rhs}"


@dataclass(frozen=True)
class Relation:
    """Comparisons joined by `or`: holds when any of them holds. `text` is the relation as
    written (what messages quote); str() is the same relation fully parenthesised."""

    any_of: tuple[Comparison, ...]
    text: str

    def __str__(self) -> str:
        return " or ".join(map(str, self.any_of))


def parse_relation(text: str, what: str) -> Relation:
    """Parses a relation (`Hq % Hkv == 0`, `MB == 1 or MB == B`); `what` names the field in
    error messages. Each side of a comparison is an expression as `parse` takes it."""
    if not isinstance(text, str):
        raise SpecError(f"{what}: expected a relation string such as \"n % 4 == 0\", got {text!r}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError) as exc:
        raise SpecError(f"{what}: can't parse relation {text!r}: {getattr(exc, 'msg', exc)}") from None
    body = tree.body
    terms = body.values if isinstance(body, ast.BoolOp) and isinstance(body.op, ast.Or) else [body]
    comparisons = []
    for term in terms:
        if not (isinstance(term, ast.Compare) and len(term.ops) == 1 and type(term.ops[0]) in _COMPARISONS):
            fragment = ast.get_source_segment(text.strip(), term) or type(term).__name__
            which = f"{text!r} is not a relation" if fragment == text.strip() else f"{fragment!r} in {text!r} is not a comparison"
            raise SpecError(
                f"{what}: {which}; a relation is two expressions compared with == != < <= > >=, or several of those joined by "
                "'or' (\"MB == 1 or MB == B\"); relations that must all hold are entries of their own"
            )
        comparison = Comparison(_COMPARISONS[type(term.ops[0])], _convert(term.left, text, what), _convert(term.comparators[0], text, what))
        for side in (comparison.lhs, comparison.rhs):
            _check_constant_divisors(side, text, what)
        comparisons.append(comparison)
    relation = Relation(tuple(comparisons), " ".join(text.split()))
    if not relation_symbols(relation):
        raise SpecError(f"{what}: {text!r} uses no size, so it is always true or always false; a relation compares sizes")
    return relation


def relation_symbols(relation: Relation) -> list[str]:
    """Names used by any of the comparisons, in first-appearance order, without repeats."""
    return list(dict.fromkeys(name for c in relation.any_of for side in (c.lhs, c.rhs) for name in symbols(side)))


def relation_divisors(relation: Relation) -> list[Expr]:
    """The divisors of every `//`, `%` and ceildiv in the relation's comparisons."""
    return [d for c in relation.any_of for side in (c.lhs, c.rhs) for d in divisors(side)]


_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def holds(relation: Relation, env: dict[str, int]) -> bool:
    """Whether the relation holds for these sizes (ZeroDivisionError where a divisor is 0)."""
    return any(_COMPARE[c.op](evaluate(c.lhs, env), evaluate(c.rhs, env)) for c in relation.any_of)


def _in_range(num: Num, text: str, what: str) -> Num:
    if not _INDEX_MIN <= num.value <= _INDEX_MAX:
        raise SpecError(f"{what}: integer {num.value} in {text!r} doesn't fit a 64-bit size (index)")
    return num


def _convert(node: ast.AST, text: str, what: str) -> Expr:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return _in_range(Num(node.value), text, what)
    if isinstance(node, ast.Name):
        return Sym(node.id)
    if isinstance(node, ast.Attribute) and _dotted(node):
        return Sym(_dotted(node))  # a struct argument's field, `s.m` (frontend/spec.py binds it)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return BinOp(_BINOPS[type(node.op)], _convert(node.left, text, what), _convert(node.right, text, what))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        raise SpecError(f"{what}: '/' in {text!r} is ambiguous for sizes; use '//' (floor) or ceildiv(a, b)")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
        arity = _FUNCS[node.func.id]
        if (arity is not None and len(node.args) != arity) or (arity is None and len(node.args) < 2):
            expected = f"{arity} arguments" if arity else "at least 2 arguments"
            raise SpecError(f"{what}: {node.func.id}() in {text!r} takes {expected}")
        return Call(node.func.id, tuple(_convert(arg, text, what) for arg in node.args))
    fragment = ast.get_source_segment(text.strip(), node) or type(node).__name__
    raise SpecError(
        f"{what}: unsupported term {fragment!r} in {text!r}; allowed are integers, names, "
        "+ - * // %, ceildiv(a, b), min(...), max(...)"
    )


def _dotted(node: ast.AST) -> str | None:
    """`s.m` or `s.inner.a` as that text; None for anything else (`f(x).m`)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := _dotted(node.value)):
        return f"{base}.{node.attr}"
    return None


def divisors(expr: Expr) -> list[Expr]:
    """The divisors of every `//`, `%` and ceildiv in `expr`."""
    found = []
    for node in walk(expr):
        if isinstance(node, BinOp) and node.op in ("//", "%"):
            found.append(node.rhs)
        elif isinstance(node, Call) and node.func == "ceildiv":
            found.append(node.args[1])
    return found


# Sizes a divisor is tried with: one that is zero at all of them (`n - n`, `n * 0`, `n % 1`) is
# zero for every size, and the expression can never be evaluated.
_PROBE_SIZES = (1, 7, 1024, 65537)


def _check_constant_divisors(expr: Expr, text: str, what: str) -> None:
    for divisor in divisors(expr):
        names = symbols(divisor)
        envs = [dict.fromkeys(names, size) for size in _PROBE_SIZES] if names else [{}]
        # Names given different sizes too: `m - n` is zero only when they are equal.
        envs += [{name: _PROBE_SIZES[(i + j) % len(_PROBE_SIZES)] for j, name in enumerate(names)} for i in range(len(_PROBE_SIZES))] if len(names) > 1 else []
        if all(_zero(divisor, env) for env in envs):
            raise SpecError(f"{what}: {text!r} divides by zero ({divisor} is 0 for every size)")


def _zero(expr: Expr, env: dict[str, int]) -> bool:
    try:
        return evaluate(expr, env) == 0
    except ZeroDivisionError:  # a divisor that itself divides by zero there
        return True


def walk(expr: Expr):
    yield expr
    if isinstance(expr, BinOp):
        yield from walk(expr.lhs)
        yield from walk(expr.rhs)
    elif isinstance(expr, Call):
        for arg in expr.args:
            yield from walk(arg)


def symbols(expr: Expr) -> list[str]:
    """Names used, in first-appearance order, without repeats."""
    seen: dict[str, None] = {}
    for node in walk(expr):
        if isinstance(node, Sym):
            seen.setdefault(node.name, None)
    return list(seen)


def evaluate(expr: Expr, env: dict[str, int]) -> int:
    if isinstance(expr, Num):
        return expr.value
    if isinstance(expr, Sym):
        return env[expr.name]
    if isinstance(expr, BinOp):
        a, b = evaluate(expr.lhs, env), evaluate(expr.rhs, env)
        if expr.op in ("//", "%") and b == 0:
            raise ZeroDivisionError(f"{expr} divides by zero")
        if expr.op == "+":
            return a + b
        if expr.op == "-":
            return a - b
        if expr.op == "*":
            return a * b
        if expr.op == "//":
            return a // b
        # remsi, as the generated code computes it: the remainder takes the dividend's sign
        return abs(a) % abs(b) * (1 if a >= 0 else -1)
    values = [evaluate(arg, env) for arg in expr.args]
    if expr.func == "ceildiv":
        if values[1] == 0:
            raise ZeroDivisionError(f"{expr} divides by zero")
        return -(-values[0] // values[1])
    return min(values) if expr.func == "min" else max(values)


_ARITH = {"+": "addi", "-": "subi", "*": "muli", "//": "floordivsi", "%": "remsi"}
_ARITH_CALL = {"ceildiv": "ceildivsi", "min": "minsi", "max": "maxsi"}


def lower_to_arith(expr: Expr, values: dict[str, str], fresh: Callable[[], str], lines: list[str]) -> str:
    """Appends `arith` ops computing `expr` on `index` to `lines`; returns the SSA name.

    `values` maps each symbol to an SSA value of type index; `fresh()` returns unused names.
    """
    if isinstance(expr, Num):
        name = fresh()
        lines.append(f"{name} = arith.constant {expr.value} : index")
        return name
    if isinstance(expr, Sym):
        return values[expr.name]
    if isinstance(expr, BinOp):
        a = lower_to_arith(expr.lhs, values, fresh, lines)
        b = lower_to_arith(expr.rhs, values, fresh, lines)
        name = fresh()
        lines.append(f"{name} = arith.{_ARITH[expr.op]} {a}, {b} : index")
        return name
    result = lower_to_arith(expr.args[0], values, fresh, lines)
    for arg in expr.args[1:]:
        b = lower_to_arith(arg, values, fresh, lines)
        name = fresh()
        lines.append(f"{name} = arith.{_ARITH_CALL[expr.func]} {result}, {b} : index")
        result = name
    return result


def lower_relation(relation: Relation, values: dict[str, str], fresh: Callable[[], str], lines: list[str]) -> str:
    """Appends `arith` ops computing whether `relation` holds to `lines` (`values` and `fresh`
    as for lower_to_arith); returns the SSA name of the i1."""
    result = None
    for c in relation.any_of:
        a = lower_to_arith(c.lhs, values, fresh, lines)
        b = lower_to_arith(c.rhs, values, fresh, lines)
        holds_here = fresh()
        lines.append(f"{holds_here} = arith.cmpi {PREDICATES[c.op]}, {a}, {b} : index")
        if result is not None:
            either = fresh()
            lines.append(f"{either} = arith.ori {result}, {holds_here} : i1")
            holds_here = either
        result = holds_here
    return result
