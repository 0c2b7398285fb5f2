"""The one place that writes function bodies in IREE's input IR (iree-base-compiler 3.13):
types, string literals, fresh SSA names, constants, run-time checks and the scalar-argument
checks every generated function makes. The kernels' functions (emit.py) and programs
(program.py) are both written with it, so an IREE version bump is an edit here (and, for the
executables, in emit.py's templates).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.dtypes import ScalarType


def mlir_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def tensor_type(dtype: str, dims: Sequence[int | None]) -> str:
    """`tensor<4x?xf32>`: an int is a static dim, None a dynamic one."""
    return f"tensor<{'x'.join(str(d) if isinstance(d, int) else '?' for d in dims)}x{dtype}>"


def result_types(types: Sequence[str]) -> str:
    """A function's result types: one bare, several in parentheses."""
    return types[0] if len(types) == 1 else f"({', '.join(types)})"


class FunctionBuilder:
    """Lines of one function body: fresh SSA names, each constant once, and checks that fail
    the call (before any launch) with a message starting with `label` (if any). checked=False
    leaves the checks out (the caller has checked the same relations itself)."""

    def __init__(self, label: str, *, checked: bool = True, prefix: str = "%t"):
        self.label = label
        self.checked = checked
        self.prefix = prefix
        self.lines: list[str] = []
        self._counter = 0
        self._constants: dict[tuple[int, str], str] = {}

    def fresh(self) -> str:
        name = f"{self.prefix}.{self._counter}"
        self._counter += 1
        return name

    def op(self, text: str) -> str:
        """Appends `%new = <text>` and returns %new."""
        name = self.fresh()
        self.lines.append(f"{name} = {text}")
        return name

    def constant(self, value: int, type_: str = "index") -> str:
        if (value, type_) not in self._constants:
            name = f"{self.prefix}.c{'m' if value < 0 else ''}{abs(value)}{'' if type_ == 'index' else '_' + type_}"
            self.lines.append(f"{name} = arith.constant {value} : {type_}")
            self._constants[(value, type_)] = name
        return self._constants[(value, type_)]

    def check(self, predicate: str, lhs: str, rhs: str, message: str, type_: str = "index") -> None:
        """Fails the call unless `lhs <predicate> rhs` (an arith.cmpi predicate)."""
        if not self.checked:
            return
        ok = self.op(f"arith.cmpi {predicate}, {lhs}, {rhs} : {type_}")
        self.lines.append(f"cf.assert {ok}, {mlir_string(f'{self.label}: {message}' if self.label else message)}")

    def check_scalar_argument(self, value: str, name: str, stype: ScalarType) -> None:
        """The checks of a scalar argument that arrives wider than its C type: narrow integers
        within their range, half/bf16 as 16 bits (a caller such as iree-run-module may pass
        anything)."""
        if stype.integer and stype.nbytes < 4:
            lo, hi = stype.int_range()
            self.check("sge", value, self.constant(lo, "i32"), f"{name} is below the range of {stype.ctype} ({lo})", "i32")
            self.check("sle", value, self.constant(hi, "i32"), f"{name} exceeds the range of {stype.ctype} ({hi})", "i32")
        if stype.kind in ("half", "bf16"):
            self.check("ule", value, self.constant(0xFFFF, "i32"), f"{name} must be the 16 bits of a {stype.ctype}", "i32")

    def to_index(self, value: str, stype: ScalarType) -> str:
        """An integer scalar argument as an index (for sizes)."""
        cast = "index_cast" if stype.kind == "int" else "index_castui"
        return self.op(f"arith.{cast} {value} : {stype.func_arg} to index")

    def split64(self, value: str) -> list[str]:
        """An i64 as two i32 push constants, low word first (ptx_adapt.py reassembles them)."""
        low = self.op(f"arith.trunci {value} : i64 to i32")
        shifted = self.op(f"arith.shrui {value}, {self.constant(32, 'i64')} : i64")
        return [low, self.op(f"arith.trunci {shifted} : i64 to i32")]
