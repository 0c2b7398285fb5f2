"""C++ names of compiled kernels: demangling, and reading a demangled function back into its
qualified name, template arguments and parameter types.

A C++ kernel's PTX entry (and a cubin's symbol) is its mangled name, which spells the exact
parameter types after every typedef, `using` and macro. The demangler prints them in one
canonical form (`__nv_bfloat16 const*`, `long`, `unsigned long long`), which is what the
signature reader compares with.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from ..core.errors import AbiError


@dataclass(frozen=True)
class DemangledFunction:
    name: str  # qualified, without template arguments: "ns::scale"
    template_args: str | None  # "float, 4" for ns::scale<float, 4>; None when not a template
    params: tuple[str, ...]  # canonical parameter types: ("__nv_bfloat16*", "int")


def is_mangled(name: str) -> bool:
    return name.startswith("_Z")


@functools.cache
def _demangler() -> str:
    nvcc_dir = os.path.dirname(shutil.which("nvcc") or "")
    candidates = (os.path.join(nvcc_dir, "cu++filt") if nvcc_dir else None, shutil.which("cu++filt"), shutil.which("c++filt"))
    tool = next((t for t in candidates if t and os.path.isfile(t)), None)
    if tool is None:
        raise AbiError("C++ kernel names need cu++filt or c++filt (binutils) to be resolved; install one, or declare the kernel extern \"C\"")
    return tool


def demangle(names: list[str]) -> dict[str, str]:
    """Mangled name → demangled, with cu++filt (CUDA toolkit) or c++filt (binutils)."""
    if not names:
        return {}
    out = subprocess.run([_demangler()], input="\n".join(names), capture_output=True, text=True, check=True).stdout.splitlines()
    return dict(zip(names, out))


def split_top_level(text: str) -> list[str]:
    """`text` split at commas outside any brackets, each part stripped."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def parse_demangled(text: str) -> DemangledFunction | None:
    """`void ns::scale<float>(float*, int)` → DemangledFunction("ns::scale", "float", ("float*", "int")).
    None for what is not a function (a variable, an unreadable name)."""
    text = text.strip()
    if not text.endswith(")"):
        return None
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            break
    else:
        return None
    head, params = text[:i].rstrip(), text[i + 1 : -1]
    # A template function's demangled form starts with its return type: drop what precedes
    # the last space outside template brackets.
    depth, name_start = 0, 0
    for j, ch in enumerate(head):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == " " and depth == 0:
            name_start = j + 1
    name = head[name_start:]
    template_args = None
    if name.endswith(">"):
        depth = 0
        for j in range(len(name) - 1, -1, -1):
            depth += {">": 1, "<": -1}.get(name[j], 0)
            if depth == 0:
                break
        name, template_args = name[:j], name[j + 1 : -1]
    param_list = () if params.strip() in ("", "void") else tuple(split_top_level(params))
    return DemangledFunction(name, template_args, param_list)


def same_type_text(a: str, b: str) -> bool:
    """Whether two spellings of a type or template argument list match, spaces aside."""
    return "".join(a.split()) == "".join(b.split())


# An integer constant as C++ writes it: sign, decimal/hex/binary/octal digits (with ' separators),
# suffixes (256u, 5ul).
_INTEGER = re.compile(r"([+-]?)(0[xX][0-9a-fA-F']+|0[bB][01']+|[0-9][0-9']*)[uUlLzZ]*")


def template_argument(text: str) -> str:
    """One template argument in a form two spellings of it share: types without spaces, and a
    constant as its decimal value, whichever way it is written or demangled (`256`, `256u`,
    `0x100` → `256`; `false`, `(bool)0` → `0`; `'a'`, `(char)97` → `97`)."""
    text = "".join(text.split())
    if cast := re.fullmatch(r"\([a-z_]+\)([+-]?[\w']+)", text):  # the demangler's `(bool)0`, `(char)97`, spaces removed
        text = cast[1]
    if text in ("true", "false"):
        return str(int(text == "true"))
    if char := re.fullmatch(r"'(.)'", text):
        return str(ord(char[1]))
    if number := _INTEGER.fullmatch(text):
        digits = number[2].replace("'", "")
        value = int(digits, 8) if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit() else int(digits, 0)
        return str(-value if number[1] == "-" else value)
    return text


def same_template_arguments(demangled: str, wanted: list[str]) -> bool:
    """Whether a demangled template argument list (`float, 256u, false`) is `wanted`
    (`["float", "256", "false"]`), argument by argument (template_argument)."""
    found = split_top_level(demangled)
    return len(found) == len(wanted) and all(template_argument(a) == template_argument(b) for a, b in zip(found, wanted))
