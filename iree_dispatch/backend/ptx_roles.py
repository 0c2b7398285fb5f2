"""Stage 3: how a kernel uses each pointer parameter, read from its PTX.

A non-const pointer in C says nothing about whether the kernel reads it: public CUDA code
often passes inputs as `float*`. Binding such a pointer to a fresh (uninitialised) output would
silently feed the kernel garbage, so the build reads the compiled code instead: every register
holding an address derived from a parameter is traced (through `cvta`, integer arithmetic,
`selp`, moves, loops, spills to local memory and calls of the module's device functions), and
every memory access through one is classified:

- loads (`ld`, `ldu`, `ldmatrix`), the source of a copy (`cp.*`): the parameter is read;
- stores (`st`, `stmatrix`), the destination of a copy, `discard`: it is written;
- atomics and reductions (`atom`, `red`, `cp.reduce`, `multimem`): read and written;
- TMA tensor maps: `tensormap.replace` of a map's global address keeps no trace of where the
  map's data goes (the address escapes); `tensormap.cp_fenceproxy` writes a map into memory. A
  map read through a parameter (`[map, {coords}]` of `cp.async.bulk.tensor`, `fence.proxy.
  tensormap`, tensor-map prefetches) is a read of that parameter's memory, unless the kernel
  writes tensor maps into it itself: then it reads back its own maps, not the caller's data.

Where the trace loses the address (stored to global or shared memory, passed to an indirect or
external function, used by an instruction this module doesn't know), the parameter's use is
unknown, with the reason: the build then takes the safe role (in place), never a fresh output.

The analysis is flow-insensitive (a register holds the union of everything it is ever
assigned) and context-insensitive for device functions (a function's parameter holds the union
over its call sites): it can only over-approximate, so "never read" is a proof.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.errors import AbiError
from ..frontend.spec import KernelSpec

_LOCAL = "local"  # label: an address in the thread's local memory (the stack: %SP, __local_depot)
_ADDRESS_OF = "address of "  # label prefix: the address of an entry parameter (`mov.u64 %rd1, k_param_0`)
# External functions that only read what their arguments point to and keep no pointer.
_READ_ONLY_EXTERNALS = {"vprintf", "__assertfail"}

_FUNCTION = re.compile(r"\.(entry|func)\s+(?:\(([^)]*)\)\s*)?([\w$]+)\s*\(([^)]*)\)")
_REGISTER = re.compile(r"%[\w$.]+")
_ADDRESS = re.compile(r"\[([^\]]*)\]")
_LABEL = re.compile(r"^\s*[\w$]+\s*:(?!:)")
_CALL = re.compile(r"call(?:\.\w+)*\s+(?:\(([^)]*)\)\s*,\s*)?([%\w$.]+)\s*(?:,\s*\(([^)]*)\))?", re.S)


@dataclass(frozen=True)
class PointerUse:
    """What the kernel does through one parameter. `read_at`/`written_at`: the PTX line of the
    first such access (0: none); `unknown`: why the trace lost the address ("" if it didn't)."""

    read_at: int = 0
    written_at: int = 0
    unknown: str = ""

    @property
    def read(self) -> bool:
        return self.read_at > 0

    @property
    def written(self) -> bool:
        return self.written_at > 0


@dataclass(frozen=True)
class _Instruction:
    line: int
    opcode: str  # with its modifiers: "ld.global.nc.f32"
    operands: tuple[str, ...]
    text: str  # the whole statement, for calls


@dataclass
class _Function:
    name: str
    params: tuple[str, ...]  # parameter symbols in order
    returns: tuple[str, ...]  # return-value symbols
    body: list[_Instruction] | None  # None: declared here, defined elsewhere


def pointer_uses(ptx: str, entry: str) -> dict[int, PointerUse]:
    """For entry `entry` of the PTX module `ptx`: parameter index → its use, for every
    parameter the kernel accesses memory through or whose address escapes."""
    functions = _functions(ptx)
    if entry not in functions or functions[entry].body is None:
        raise ValueError(f"PTX has no entry {entry}")
    return _Trace(functions, functions[entry]).run()


@dataclass(frozen=True)
class PtxEvidence:
    """One compiled PTX of a kernel: the arch it is for and what it does with each parameter."""

    arch: str
    uses: dict[int, PointerUse]


def decide_roles(kernel: KernelSpec, evidence: Sequence[PtxEvidence]) -> tuple[KernelSpec, list[str]]:
    """`kernel` with every undeclared non-const pointer's role read from its PTX (all archs
    together: a parameter read by any arch's code is read), and the lines the build says about
    it. Raises AbiError where the PTX contradicts a declared role: a fresh output (declared, or
    `const` data) the kernel reads, or an input it writes."""
    where = f"{kernel.signature.where}: kernel {kernel.name}"
    index = {p.name: i for i, p in enumerate(kernel.signature.params)}
    said: list[str] = []
    roles: dict[str, str] = {}
    untouched: list[str] = []
    for tensor in kernel.tensors:
        uses = [(e.arch, e.uses[index[tensor.name]]) for e in evidence if index[tensor.name] in e.uses]
        read = next(((arch, u.read_at) for arch, u in uses if u.read), None)
        written = next(((arch, u.written_at) for arch, u in uses if u.written), None)
        unknown = next((u.unknown.replace("PTX line", f"{arch} PTX line") for arch, u in uses if u.unknown), "")
        if tensor.name not in kernel.inferred:
            _check_declared(kernel, tensor.name, tensor.role, tensor.param.const, read, written, where)
            continue
        if not evidence:
            roles[tensor.name] = "inplace"
            said.append(f"{where}: no PTX to read how it uses {tensor.name!r} (machine code only), so it is in place (passed in and returned); "
                        f"declare readonly = [\"{tensor.name}\"] or outputs = [\"{tensor.name}\"] if it is only read or only written")
        elif unknown:
            roles[tensor.name] = "inplace"
            said.append(f"{where}: can't tell whether it reads {tensor.name!r}: {unknown}; so it is in place (passed in and returned); "
                        f"declare readonly = [\"{tensor.name}\"] or outputs = [\"{tensor.name}\"] if it is only read or only written")
        elif read or written:
            roles[tensor.name] = "inplace" if read and written else "output" if written else "input"
        else:
            # Never accessed: nothing says it is an input, and the kernel can't misread it.
            roles[tensor.name] = "output"
            untouched.append(tensor.name)
    if not roles:
        return kernel, said
    decided = kernel.with_roles(roles)  # type: ignore[arg-type]  # the three role names
    names = {"input": "input", "output": "output", "inplace": "in place"}
    described = [f"{t.name} {names[t.role]}{' (never accessed)' if t.name in untouched else ''}" for t in decided.tensors if t.name in roles]
    said.insert(0, f"kernel {kernel.name}: pointer roles read from its PTX: {', '.join(described)}")
    return decided, said


def _check_declared(kernel: KernelSpec, name: str, role: str, const: bool, read, written, where: str) -> None:
    # A zero-filled output may be read: it holds zeros when the kernel starts (atomicAdd into it).
    if role == "output" and read and name not in kernel.zero:
        raise AbiError(
            f"{where}: outputs declares {name!r} a fresh output, whose memory is uninitialised, but the kernel reads it ({read[0]} PTX line "
            f"{read[1]}); declare it inplace = [\"{name}\"] (the caller passes it in), zero = [\"{name}\"] (a fresh output zero-filled before the "
            "kernel runs, as atomicAdd into it needs) or drop it from outputs (the build then reads its role from the PTX)"
        )
    if role == "input" and written:
        declared = f"{name!r} points to const data" if const else f"readonly declares {name!r} read-only"
        fix = "make the parameter non-const (the build then reads its role from the PTX)" if const else f"declare it inplace = [\"{name}\"] instead of readonly"
        raise AbiError(
            f"{where}: {declared}, but the kernel writes it ({written[0]} PTX line {written[1]}): the caller's array would change; {fix}"
        )


# ---- parsing: functions and their instructions ----


def _strip_comments_and_strings(ptx: str) -> str:
    """Comments and string contents blanked, newlines kept (line numbers stay right)."""
    ptx = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m[0]), ptx, flags=re.S)
    ptx = re.sub(r"//[^\n]*", "", ptx)
    # Debug directives end at the line's end, not at a `;`: blank them so they don't swallow
    # the instruction after them.
    ptx = re.sub(r"^[ \t]*\.(?:loc|file)\b[^\n]*", "", ptx, flags=re.M)
    return re.sub(r'"[^"\n]*"', '""', ptx)


def _matching_brace(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def _symbols(declarations: str | None) -> tuple[str, ...]:
    """The names in a parameter list: `.param .b64 f_param_0, .param .align 8 .b8 f_param_1[16]`."""
    if not declarations:
        return ()
    return tuple(d.split()[-1].partition("[")[0] for d in declarations.split(",") if d.strip())


@functools.lru_cache(maxsize=4)  # a module's entries are analysed one after another
def _functions(ptx: str) -> dict[str, _Function]:
    text = _strip_comments_and_strings(ptx)
    functions: dict[str, _Function] = {}
    for match in _FUNCTION.finditer(text):
        rest = match.end()
        while rest < len(text) and text[rest] not in "{;":
            rest += 1  # performance directives (.maxntid ...) sit between the list and the body
        body = None
        if rest < len(text) and text[rest] == "{":
            end = _matching_brace(text, rest)
            body = _instructions(text[rest + 1 : end], text.count("\n", 0, rest + 1) + 1)
        name = match[3]
        if body is not None or name not in functions:
            functions[name] = _Function(name, _symbols(match[4]), _symbols(match[2]), body)
    return functions


def _split_operands(text: str) -> tuple[str, ...]:
    operands, depth, current = [], 0, []
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            operands.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        operands.append("".join(current).strip())
    return tuple(operands)


def _instructions(body: str, first_line: int) -> list[_Instruction]:
    instructions = []
    line = first_line  # the line `body` starts on
    for statement in body.split(";"):
        start = line
        line += statement.count("\n")
        text = statement
        while True:  # block braces of call sequences and labels (`$L__BB0_2:`) before the instruction
            stripped = text.lstrip(" \t\n{}")
            start += text[: len(text) - len(stripped)].count("\n")
            label = _LABEL.match(stripped)
            if label is None:
                text = stripped.rstrip()
                break
            start += stripped[: label.end()].count("\n")
            text = stripped[label.end() :]
        if text.startswith("@"):  # a guard predicate: the instruction may run, which is what counts
            text = text.split(None, 1)[1] if len(text.split(None, 1)) > 1 else ""
        if not text or text.startswith("."):
            continue  # declarations (.reg, .local, .param, .pragma) and call prototypes
        opcode, _, rest = text.replace("\n", " ").replace("\t", " ").partition(" ")
        instructions.append(_Instruction(start, opcode, _split_operands(rest), text))
    return instructions


# ---- the trace ----


def _base(opcode: str) -> str:
    return opcode.partition(".")[0]


def _symbol(operand: str) -> str:
    """The symbol an address operand names: `[param0+8]` → `param0`."""
    inside = _ADDRESS.search(operand)
    return (inside[1] if inside else operand).split("+")[0].strip()


def _held_at(address: set) -> set[int]:
    """The entry parameters whose value a load through `address` reads (it is their address)."""
    return {int(label[len(_ADDRESS_OF) :]) for label in address if isinstance(label, str) and label.startswith(_ADDRESS_OF)}


def _small_mask(operand: str) -> bool:
    """An immediate in [0, 65535]: what `and` with it keeps of an address is no address."""
    try:
        return 0 <= int(operand, 0) <= 0xFFFF
    except ValueError:
        return False


class _Trace:
    """The labels each register may hold (entry parameter indexes, `local`, `address of i`),
    iterated to a fixpoint over the entry and every device function it may call."""

    def __init__(self, functions: dict[str, _Function], entry: _Function):
        self.functions = functions
        self.entry = entry
        self.registers: dict[tuple[str, str], set] = {}  # (function, register) → labels
        self.arguments: dict[tuple[str, int], set] = {}  # (function, parameter index) → labels
        self.returned: dict[str, set] = {}  # function → labels of its return value
        self.local_memory: set = set()  # labels of every value stored to local memory
        self.reads: dict[int, int] = {}
        self.writes: dict[int, int] = {}
        self.unknown: dict[int, str] = {}
        self.map_reads: dict[int, int] = {}  # tensor maps read from a parameter's memory
        self.map_writes: set[int] = set()  # parameters the kernel writes tensor maps into
        self.changed = False

    def run(self) -> dict[int, PointerUse]:
        for i in range(len(self.entry.params)):
            self.arguments[(self.entry.name, i)] = {i}
        # Only the code this entry may run: a module's other entries (a kernel library has
        # dozens) hold none of its parameters, and walking them too made the trace of each
        # entry cost as much as all of them.
        reachable = self._reachable()
        while True:
            self.changed = False
            for function in reachable:
                self._walk(function)
            if not self.changed:
                break
        for i, line in self.map_reads.items():
            if i not in self.map_writes:
                self._read({i}, line)
        indexes = set(self.reads) | set(self.writes) | set(self.unknown)
        return {i: PointerUse(self.reads.get(i, 0), self.writes.get(i, 0), self.unknown.get(i, "")) for i in sorted(indexes)}

    def _reachable(self) -> list[_Function]:
        """The entry and every function with a body in this module that it may call, directly
        or through its callees (an indirect call's target is unknown: the trace loses what it
        is passed)."""
        found = {self.entry.name: self.entry}
        pending = [self.entry]
        while pending:
            for ins in pending.pop().body or ():
                if _base(ins.opcode) != "call" or (match := _CALL.match(ins.text)) is None:
                    continue
                callee = self.functions.get(match[2])
                if callee is not None and callee.body is not None and callee.name not in found:
                    found[callee.name] = callee
                    pending.append(callee)
        return list(found.values())

    # -- labels --

    def _add(self, into: set, labels: set) -> None:
        if not labels <= into:
            into |= labels
            self.changed = True

    def _labels(self, function: _Function, operand: str) -> set:
        """Everything an operand (a register, a vector of them, an address, a symbol) may hold."""
        labels: set = set()
        for reg in _REGISTER.findall(operand):
            if reg in ("%SP", "%SPL"):
                labels.add(_LOCAL)
            labels |= self.registers.get((function.name, reg), set())
        for word in re.findall(r"[A-Za-z_$][\w$]*", re.sub(r"%[\w$.]+", " ", operand)):
            if word.startswith("__local_depot"):
                labels.add(_LOCAL)
            elif word in self.entry.params and function is self.entry:
                labels.add(_ADDRESS_OF + str(self.entry.params.index(word)))
        return labels

    def _set(self, function: _Function, operand: str, labels: set) -> None:
        for reg in _REGISTER.findall(operand):
            self._add(self.registers.setdefault((function.name, reg), set()), labels)

    @staticmethod
    def _parameters(labels: set) -> set[int]:
        return {label for label in labels if isinstance(label, int)}

    # -- effects --

    def _read(self, labels: set, line: int) -> None:
        for i in self._parameters(labels):
            if i not in self.reads or line < self.reads[i]:
                self.reads[i] = line

    def _write(self, labels: set, line: int) -> None:
        for i in self._parameters(labels):
            if i not in self.writes or line < self.writes[i]:
                self.writes[i] = line

    def _lose(self, labels: set, why: str) -> None:
        if _LOCAL in labels:
            labels = labels | self.local_memory  # what sits on the stack goes where the stack's address goes
        for i in self._parameters(labels):
            self.unknown.setdefault(i, why)

    # -- instructions --

    def _walk(self, function: _Function) -> None:
        slots: dict[str, set] = {}  # call argument slots (`st.param [param0]`), as the code fills them
        last_callee: str | None = None
        for ins in function.body or ():
            base, ops = _base(ins.opcode), ins.operands
            space = ins.opcode.split(".")[1] if "." in ins.opcode else ""
            if base in ("ld", "ldu") and space == "param" and len(ops) >= 2:
                self._load_param(function, ins, last_callee)
            elif base in ("ld", "ldu", "ldmatrix") and len(ops) >= 2:
                address = self._labels(function, ops[1])
                self._read(address, ins.line)
                loaded: set = set()
                if _LOCAL in address or space == "local":
                    loaded |= self.local_memory
                self._set(function, ops[0], loaded | _held_at(address))
            elif base in ("st", "stmatrix") and space == "param" and len(ops) >= 2:
                slot, value = _symbol(ops[0]), self._labels(function, ops[1])
                if slot in function.returns:
                    self._add(self.returned.setdefault(function.name, set()), value)
                else:
                    slots[slot] = value
            elif base in ("st", "stmatrix") and len(ops) >= 2:
                address, value = self._labels(function, ops[0]), self._labels(function, ops[-1])
                self._write(address, ins.line)
                if space == "local" or _LOCAL in address:
                    self._add(self.local_memory, value)
                if not (space == "local" or (address and address <= {_LOCAL})):
                    self._lose(value, f"its address is stored to memory (PTX line {ins.line})")
            elif base in ("atom", "red", "multimem") and ops:
                at = next((i for i, o in enumerate(ops) if o.startswith("[")), None)
                if at is None:
                    self._other(function, ins)
                    continue
                address = self._labels(function, ops[at])
                self._read(address, ins.line)
                self._write(address, ins.line)
                stored = set().union(*(self._labels(function, o) for o in ops[at + 1 :]))
                self._lose(stored, f"its address is stored to memory by {ins.opcode} (PTX line {ins.line})")
            elif base == "tensormap" or ".tensor" in ins.opcode or (base == "fence" and "tensormap" in ins.opcode):
                self._tensor_map(function, ins)
            elif base == "cp" and len(ops) >= 2 and ops[0].startswith("[") and ops[1].startswith("["):
                destination, source = self._labels(function, ops[0]), self._labels(function, ops[1])
                self._write(destination, ins.line)
                if ".reduce" in ins.opcode:
                    self._read(destination, ins.line)
                self._read(source, ins.line)
            elif base == "discard" and ops:
                self._write(self._labels(function, ops[0]), ins.line)
            elif base == "call":
                last_callee = self._call(function, ins, slots)
            elif base in ("prefetch", "prefetchu", "applypriority", "bra", "ret", "exit"):
                continue  # no effect on memory contents
            else:
                self._other(function, ins)

    def _tensor_map(self, function: _Function, ins: _Instruction) -> None:
        """TMA tensor maps: built (`tensormap.replace`), published (`tensormap.cp_fenceproxy`),
        used by bulk tensor copies and fences (see the module doc)."""
        ops = ins.operands
        if ins.opcode.startswith("tensormap.replace"):
            self._write(self._labels(function, ops[0]), ins.line)
            self._lose(set().union(*(self._labels(function, o) for o in ops[1:])), f"it is put in a tensor map (PTX line {ins.line})")
        elif ins.opcode.startswith("tensormap.cp_fenceproxy"):
            destination = self._labels(function, ops[0])
            self._write(destination, ins.line)
            self.map_writes |= self._parameters(destination)
        for operand in ops:
            if not operand.startswith("["):
                continue
            labels = self._parameters(self._labels(function, operand))
            if "{" in operand or ins.opcode.startswith("fence") or ".prefetch" in ins.opcode or ins.opcode.startswith("prefetch"):
                for i in labels:  # a map operand: the descriptor is read
                    self.map_reads.setdefault(i, ins.line)
            elif not ins.opcode.startswith("tensormap.") and labels:
                # The data side of a bulk tensor copy is shared memory; a parameter here is unexpected.
                self._lose(labels, f"{ins.opcode} accesses it (PTX line {ins.line})")

    def _load_param(self, function: _Function, ins: _Instruction, last_callee: str | None) -> None:
        symbol = _symbol(ins.operands[1])
        if symbol in function.params:
            labels = self.arguments.get((function.name, function.params.index(symbol)), set())
        elif last_callee is not None and symbol.startswith("retval"):
            labels = self.returned.get(last_callee, set())
        else:
            labels = _held_at(self._labels(function, ins.operands[1]))  # a parameter's address held in a register
        self._set(function, ins.operands[0], labels)

    def _call(self, function: _Function, ins: _Instruction, slots: dict[str, set]) -> str | None:
        match = _CALL.match(ins.text)
        if match is None:
            self._lose(set().union(*slots.values()) if slots else set(), f"a call the analysis can't read (PTX line {ins.line})")
            return None
        callee, arguments = match[2], [a.strip() for a in (match[3] or "").split(",") if a.strip()]
        passed = [slots.get(a, set()) for a in arguments]
        target = self.functions.get(callee)
        if callee.startswith("%"):
            self._lose(set().union(*passed), f"it is passed to an indirect call (PTX line {ins.line})")
        elif target is None or target.body is None:
            if callee not in _READ_ONLY_EXTERNALS:
                self._lose(set().union(*passed), f"it is passed to {callee}, defined outside this module (PTX line {ins.line})")
        else:
            for i, labels in enumerate(passed):
                self._add(self.arguments.setdefault((callee, i), set()), labels)
            return callee
        return None

    def _other(self, function: _Function, ins: _Instruction) -> None:
        """Any other instruction: its result (the first operand, when it is a register) holds
        everything its operands hold; an address operand derived from a parameter is an access
        this analysis doesn't classify."""
        ops = ins.operands
        if not ops:
            return
        for operand in ops:
            if operand.startswith("["):
                self._lose(self._labels(function, operand), f"{ins.opcode} accesses it (PTX line {ins.line})")
        if ops[0].startswith("%") or ops[0].startswith("{"):
            sources = ops[1:]
            if _base(ins.opcode) == "selp":
                sources = sources[:-1]  # the predicate picks a value; it is not part of one
            elif _base(ins.opcode) == "and" and any(_small_mask(o) for o in sources):
                return  # low bits of an address (its alignment) are no address
            self._set(function, ops[0], set().union(*(self._labels(function, o) for o in sources)) if sources else set())
