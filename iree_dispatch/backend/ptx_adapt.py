"""Stage 2b: adapt each kernel's PTX entry to IREE's push-constant ABI.

IREE passes every buffer first, then every scalar as one 32-bit push constant, each in its
own kernel-parameter slot. A kernel compiled from unchanged CUDA may put scalars before or
between pointers, and declares 1-, 2- and 8-byte parameters too. Rather than ask users to
change their kernels, the compiled entry is rewritten so the two sides agree:

- the parameter list is reordered: pointers first, then scalars, each group in source order;
- a 64-bit parameter P becomes two 32-bit parameters P__lo, P__hi, and each load of P becomes
  two 32-bit loads packed back into the register the kernel's code reads;
- a 1- or 2-byte parameter becomes a 4-byte one; the kernel's narrow load reads its low bytes,
  where the generated wrapper puts the value (little-endian);
- a struct or vector passed by value (`.param .align A .b8 S[N]`) becomes one 4-byte parameter
  per word of its bytes, S__w0, S__w1, ..., and each load of a field (`ld.param.f32 %f, [S+8]`,
  `ld.param.v2.u32 {%r1, %r2}, [S]`) a load of the word (or words) holding it.

The rewrite touches only the parameter list and `ld.param` of 64-bit scalar and struct parameters,
and refuses (with the kernel and parameter named) any use of one it doesn't understand.
"""

from __future__ import annotations

import re

from ..core.errors import AbiError
from ..frontend.spec import KernelSpec

_LD_WIDE = r"ld\.param\.(?:u64|s64|b64|f64)\s+(%[\w$]+)\s*,\s*\[{name}(?:\+0)?\]\s*;"


def _entry_spans(ptx: str, name: str) -> tuple[int, int, int, int]:
    """(params_start, params_end, body_start, body_end) of `.entry name`."""
    match = re.search(rf"\.entry\s+{re.escape(name)}\s*\(", ptx)
    if not match:
        raise AbiError(f"no PTX entry named {name!r}")
    params_start = match.end()
    params_end = ptx.index(")", params_start)
    body_start = ptx.index("{", params_end)
    depth = 0
    for i in range(body_start, len(ptx)):
        depth += {"{": 1, "}": -1}.get(ptx[i], 0)
        if depth == 0:
            return params_start, params_end, body_start, i + 1
    raise AbiError(f"PTX entry {name!r} has an unterminated body")


def adapt_entry(ptx: str, spec: KernelSpec, entry: str, where: str) -> str:
    """`ptx` with `spec`'s entry (named `entry`) rewritten so each scalar uses whole 32-bit slots."""
    params_start, params_end, body_start, body_end = _entry_spans(ptx, entry)
    decls = [d.strip() for d in ptx[params_start:params_end].split(",") if d.strip()]
    if len(decls) != len(spec.signature.params):
        raise AbiError(f"{where}: signature has {len(spec.signature.params)} parameters but the PTX entry has {len(decls)}")
    sizes = {s.name: s.stype.nbytes for s in spec.scalars}
    structs = {s.name for s in spec.scalars if s.stype.kind == "struct"}
    body = ptx[body_start:body_end]
    pointers, scalars = [], []
    for decl, param in zip(decls, spec.signature.params):
        name = decl.split()[-1].partition("[")[0]
        size = sizes.get(param.name)
        # The code names its parameters, never their positions: reordering the list is safe.
        new_decls = pointers if param.pointer else scalars
        if param.name in structs and size > 4:
            words = -(-size // 4)
            new_decls += [f".param .align 4 .b8 {name}__w{i}[4]" for i in range(words)]
            body = re.sub(_LD_FIELD.format(base=re.escape(name)), _field_load(name, words, param.name, where), body)
            body = _addressed_loads(body, name, words, param.name, where)
            if re.search(rf"\b{re.escape(name)}\b(?!__w)", body):
                raise AbiError(
                    f"{where}: the kernel uses {param.ctype} parameter {param.name!r} other than by loading its fields (it takes "
                    "its address?), which iree_dispatch can't pass as 32-bit push constants; pass it in a 1-element tensor instead"
                )
        elif size is None or size == 4:
            new_decls.append(decl)
        elif size < 4:
            new_decls.append(f".param .align 4 .b8 {name}[4]")
        else:
            new_decls += [f".param .u32 {name}__lo", f".param .u32 {name}__hi"]
            body, count = re.subn(_LD_WIDE.format(name=re.escape(name)), _split_load(name), body)
            if re.search(rf"\b{re.escape(name)}\b(?!__)", body):
                raise AbiError(
                    f"{where}: the kernel uses 64-bit parameter {param.name!r} in a way iree_dispatch can't split into two "
                    "32-bit push constants (only plain loads are rewritten); pass it in a 1-element tensor instead"
                )
    params = "\n\t" + ",\n\t".join(pointers + scalars) + "\n"
    return ptx[:params_start] + params + ptx[params_end:body_start] + body + ptx[body_end:]


def _split_load(name: str):
    def replace(match: re.Match) -> str:
        target = match[1]
        return (
            "{ .reg .b32 %iree_dispatch_lo, %iree_dispatch_hi; "
            f"ld.param.u32 %iree_dispatch_lo, [{name}__lo]; ld.param.u32 %iree_dispatch_hi, [{name}__hi]; "
            f"mov.b64 {target}, {{%iree_dispatch_lo, %iree_dispatch_hi}}; }}"
        )

    return replace


# A load of a struct parameter's field(s): `ld.param[.v2|.v4].<type><bits> dst(s), [S(+offset)]`.
# `base` is the parameter's name, or a register holding its address plus a constant.
# The offset needs its "+": without it `[k_param_1` would match the start of `[k_param_10]`.
_LD_FIELD = r"ld\.param(?:\.v([24]))?\.([a-z])(8|16|32|64)\s+(\{{[^}}]*\}}|%[\w$]+)\s*,\s*\[{base}(?:\+(-?\d+))?\]\s*;"


def _addressed_loads(body: str, name: str, words: int, param: str, where: str) -> str:
    """`body` with the loads through the address of struct parameter `name` rewritten as field
    loads, as nvcc writes a `__grid_constant__` one's: `mov.b64 %rd4, S; add.s64 %rd1, %rd4, 4;
    ld.param.f64 %fd1, [%rd1+4];`. Each register holding the address plus a constant must be
    set once and used only by such adds and loads; then its mov and adds go."""
    offsets: dict[str, int] = {}
    defining = []
    for match in re.finditer(rf"^\s*mov\.[bu]64\s+(%[\w$]+)\s*,\s*{re.escape(name)}\s*;[^\n]*\n", body, re.M):
        offsets[match[1]] = 0
        defining.append(match[0])
    grew = True
    while grew:
        grew = False
        for match in re.finditer(r"^\s*add\.[su]64\s+(%[\w$]+)\s*,\s*(%[\w$]+)\s*,\s*(-?\d+)\s*;[^\n]*\n", body, re.M):
            if match[2] in offsets and match[1] not in offsets:
                offsets[match[1]] = offsets[match[2]] + int(match[3])
                defining.append(match[0])
                grew = True
    for register, offset in offsets.items():
        if len(re.findall(rf"^\s*[\w.]+\s+{re.escape(register)}\s*,", body, re.M)) != 1:
            return body  # set more than once: left as is, and refused by the caller
        body = re.sub(_LD_FIELD.format(base=re.escape(register)), _field_load(name, words, param, where, offset), body)
    rest = body
    for line in defining:
        rest = rest.replace(line, "", 1)
    if any(re.search(rf"{re.escape(register)}(?![\w$])", rest) for register in offsets):
        return body  # the address is used otherwise: refused by the caller
    return rest


def _field_load(name: str, words: int, param: str, where: str, base: int = 0):
    """The loads of the words of struct parameter `name` that stand for one field load at
    `base` plus the load's offset."""

    def replace(match: re.Match) -> str:
        kind, bits, offset = match[2], int(match[3]), base + int(match[5] or 0)
        targets = [t.strip() for t in match[4].strip("{}").split(",")]
        loads = []
        for i, target in enumerate(targets):
            at = offset + i * bits // 8
            if target == "_":  # a lane the kernel doesn't read
                continue
            if at < 0 or at % min(bits // 8, 4) or at + bits // 8 > 4 * words:
                raise AbiError(f"{where}: the kernel loads {bits} bits at byte {at} of parameter {param!r}, which iree_dispatch can't map onto its 32-bit words")
            word, byte = divmod(at, 4)
            if bits == 64:
                loads.append(
                    "{ .reg .b32 %iree_dispatch_lo, %iree_dispatch_hi; "
                    f"ld.param.u32 %iree_dispatch_lo, [{name}__w{word}]; ld.param.u32 %iree_dispatch_hi, [{name}__w{word + 1}]; "
                    f"mov.b64 {target}, {{%iree_dispatch_lo, %iree_dispatch_hi}}; }}"
                )
            else:
                loads.append(f"ld.param.{kind}{bits} {target}, [{name}__w{word}{f'+{byte}' if byte else ''}];")
        return " ".join(loads)

    return replace


def pointers_first(spec: KernelSpec) -> bool:
    """True when every pointer parameter comes before every scalar, as IREE passes them."""
    kinds = [p.pointer for p in spec.signature.params]
    return kinds == sorted(kinds, reverse=True)


def adapt_module(ptx: str, kernels: list[KernelSpec], entries: dict[str, str], arch_name: str) -> str:
    """Adapts every kernel of one PTX module; kernels with only 32-bit scalars are unchanged.
    `entries` maps each kernel's name to its PTX entry name."""
    for spec in kernels:
        if any(s.stype.nbytes != 4 for s in spec.scalars) or not pointers_first(spec):  # a struct of 4 bytes is one word as it is
            ptx = adapt_entry(ptx, spec, entries[spec.name], f"{spec.signature.where}: kernel {spec.name} ({arch_name} PTX)")
    return ptx
