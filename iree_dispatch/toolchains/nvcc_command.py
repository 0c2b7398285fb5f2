"""The one way nvcc is run. nvcc hands its sub-steps (the host preprocessor, cicc, ptxas) to a
shell, inside double quotes at best: a `$(...)`, a backtick, a `$VAR` or a `"` in any path or
flag it is given would run as a command or change the file compiled. So nvcc only ever sees
paths and flags made of characters no shell treats specially:

- a private folder per compile (under the temporary folder, which must have a safe name itself)
  holds safely named symlinks to the user's folders: the source is compiled through a link to
  its folder, so `#include "x.h"` and `"../y.h"` resolve as they would beside the real file (a
  source whose own name is unsafe is compiled through a one-line wrapper .cu that includes it by
  the linked path: the name is then in a file nvcc reads, never on a command line);
- -I, -isystem and -include values that are unsafe go through such links too;
- the PTX and the dependency list (-o, -MF) are written into the private folder and moved into
  place; the headers nvcc lists are mapped back to the user's paths, as is everything nvcc prints;
- -D definitions whose text is unsafe become `#define` lines of a generated header that nvcc
  force-includes (-include), so the text never reaches a command line;
- any other flag with an unsafe character is refused (ToolchainError naming the flag, the
  character and what to do instead), as are unsafe $NVCC_CCBIN / $NVCC_PREPEND_FLAGS /
  $NVCC_APPEND_FLAGS values (nvcc reads those itself) and an nvcc installed under an unsafe path;
- nvcc's own temporary files go into the private folder ($TMPDIR), whose name is safe;
- kernel template instantiations the build needs are compiled through such a wrapper too: it
  includes the source by the linked path and takes each instantiation's address in host code,
  which makes nvcc compile it (as a launch from host code would), so the source needs no
  `template __global__ ...` line, and one it has already does no harm.

Paths and flags that are safe already are passed unchanged, so ordinary builds see exactly the
command line they always had (and `__FILE__` is the path as given). Each argument is checked once
more just before nvcc runs: nothing unsafe can slip past by a path not thought of here.
"""

from __future__ import annotations

import errno
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ToolchainError
from ..core.files import atomic_output

# Characters a path may have on nvcc's command line, and a flag (which also needs `=`, `,`, `:`
# as in -Xptxas=-v,-O3 or --diag-suppress=177; `@` and `%` are inert in sh too).
_SAFE_PATH = re.compile(r"[A-Za-z0-9_./+-]+")
_SAFE_FLAG = re.compile(r"[A-Za-z0-9_./+=,:@%-]+")
# Inside nvcc's double quotes only these are live: what nvcc's own location must not contain.
_LIVE_IN_QUOTES = ("$", "`", '"', "\\", "\n")

_INSTEAD = "put it in a header the source includes, or build with --toolchain nvrtc (in-process, no shell)"

# nvcc options whose value is a path or a definition, by every spelling → the short spelling.
_VALUE_OPTIONS = {
    "-I": "-I", "--include-path": "-I", "-isystem": "-isystem", "--system-include": "-isystem",
    "-include": "-include", "--pre-include": "-include",
    "-D": "-D", "--define-macro": "-D", "-U": "-U", "--undefine-macro": "-U",
}
_ATTACHED = ("-I", "-D", "-U")  # short spellings whose value may follow without a space
# A macro as -D names it: an identifier, or a function-like macro's identifier(parameters).
_MACRO_NAME = re.compile(r"[A-Za-z_]\w*(\([\w\s,.]*\))?")


@dataclass(frozen=True)
class NvccRun:
    """One nvcc compile, as the user should see it: paths are the user's, never the private ones."""

    returncode: int
    log: str  # nvcc's stderr and stdout
    command: str  # the command line, shell-quoted, private links shown as the paths they stand for
    dependencies: tuple[Path, ...]  # the source and every header read, absolute (empty on failure)


def run_nvcc(nvcc: Path, source: Path, out: Path, options: Sequence[str], flags: Sequence[str], instances: Sequence[str] = ()) -> NvccRun:
    """Compiles `source` with `nvcc` into `out` (written only on success), listing the headers it
    read. options: iree_dispatch's own (-ptx, -arch=...), safe by construction; flags: the
    user's (a module's nvcc_flags), rewritten or refused as the module docstring says;
    instances: kernel template instantiations to compile too (toolchains/base.py checked_instances)."""
    _check_environment(nvcc)
    with _PrivateFolder() as private:
        deps = private.path / "deps.d"
        produced = private.path / "out"
        cmd = [str(nvcc), *options, *private.flags(flags), "-MD", "-MF", str(deps), "-MT", "ptx", private.source(source, instances), "-o", str(produced)]
        for arg in cmd[1:]:
            if not _SAFE_FLAG.fullmatch(arg):  # cannot happen by construction: a last guard, never a shell
                raise ToolchainError(f"refusing to hand {arg!r} to nvcc: it would reach a shell")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, "TMPDIR": str(private.path)})
        except OSError as exc:
            raise ToolchainError(f"can't run {nvcc}: {exc.strerror}") from None
        command = private.to_user(shlex.join(cmd))
        log = private.to_user((proc.stderr + proc.stdout).strip())
        if proc.returncode != 0:
            return NvccRun(proc.returncode, log, command, ())
        dependencies = private.dependencies(make_prerequisites(deps.read_text(encoding="utf-8")))
        _move_into_place(produced, out)
        return NvccRun(0, log, command, dependencies)


def make_prerequisites(rule: str) -> tuple[Path, ...]:
    """The prerequisites of the one Make rule nvcc -MD writes (`ptx : a.cu \\`, one path a line).

    nvcc escapes only spaces in paths; relative paths are relative to nvcc's working directory,
    which is ours.
    """
    _target, _, prerequisites = rule.replace("\\\n", " ").partition(":")
    return tuple(Path(word.replace("\\ ", " ")).absolute() for word in re.split(r"(?<!\\)\s+", prerequisites.strip()) if word)


def _safe(path: str) -> bool:
    """Whether nvcc may be given `path` as it is (one starting with `-` would read as an option)."""
    return bool(_SAFE_PATH.fullmatch(path)) and not path.startswith("-")


def _unsafe_character(text: str, safe: re.Pattern[str]) -> str | None:
    return next((c for c in text if not safe.fullmatch(c)), None)


def _check_environment(nvcc: Path) -> None:
    """What nvcc puts into its shell commands besides its arguments: its own location and the
    environment variables it reads."""
    for where in (str(nvcc), str(nvcc.resolve().parent)):
        if bad := next((c for c in where if c in _LIVE_IN_QUOTES), None):
            raise ToolchainError(f"nvcc at {where} can't be used: nvcc puts its own location into shell commands and {bad!r} "
                                 "would be run there; install it at a path without it, or build with --toolchain nvrtc")
    ccbin = os.environ.get("NVCC_CCBIN", "")
    if ccbin and (bad := _unsafe_character(ccbin, _SAFE_PATH)):
        raise ToolchainError(f"$NVCC_CCBIN={ccbin!r} has {bad!r}, which nvcc would hand to a shell; "
                             "point it at the compiler through a path without it (a symlink), or build with --toolchain nvrtc")
    for var in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"):
        for word in os.environ.get(var, "").split(" "):
            if word and (bad := _unsafe_character(word, _SAFE_FLAG)):
                raise ToolchainError(f"${var} has {word!r}, whose {bad!r} nvcc would hand to a shell; {_INSTEAD}")


def _split_list(value: str, parentheses: bool) -> list[str]:
    """An option's value split where nvcc splits it: at commas, except inside double quotes (and,
    for definitions, inside a function-like macro's parentheses, which nvcc would split wrongly)."""
    parts, current, quoted, depth = [], "", False, 0
    for c in value:
        if c == '"':
            quoted = not quoted
        elif parentheses and not quoted and c in "()":
            depth += 1 if c == "(" else -1
        if c == "," and not quoted and depth <= 0:
            parts.append(current)
            current = ""
        else:
            current += c
    return [*parts, current]


def _options(flags: Sequence[str]) -> Iterator[tuple[str | None, str, list[str]]]:
    """(short option or None, value, the words as given) for each flag: -I/-isystem/-include/-D/-U
    in any spelling (`-Ifoo`, `-I foo`, `--include-path=foo`, `--include-path foo`), else the word."""
    i = 0
    while i < len(flags):
        flag = flags[i]
        name, eq, value = flag.partition("=")
        if flag in _VALUE_OPTIONS and i + 1 < len(flags):
            yield _VALUE_OPTIONS[flag], flags[i + 1], [flag, flags[i + 1]]
            i += 2
            continue
        if eq and name in _VALUE_OPTIONS and name not in _ATTACHED:  # --include-path=foo, -isystem=foo
            yield _VALUE_OPTIONS[name], value, [flag]
        elif flag[:2] in _ATTACHED and len(flag) > 2:
            yield flag[:2], flag[2:], [flag]
        else:
            yield None, flag, [flag]
        i += 1


class _PrivateFolder:
    """The folder one compile runs in, its links, and the way back from private paths to the user's."""

    def __init__(self) -> None:
        root = tempfile.gettempdir()
        if not (_safe(root) and _safe(os.path.realpath(root))):
            root = "/tmp"  # $TMPDIR has an unsafe name; nvcc needs its temporary files under a safe one
        if not (_safe(root) and _safe(os.path.realpath(root)) and os.path.isdir(root)):
            raise ToolchainError(f"the temporary folder {tempfile.gettempdir()!r} has characters nvcc would hand to a shell, and there is no /tmp: "
                                 "set TMPDIR to a folder whose path has only letters, digits and _ . / + -")
        self.path = Path(tempfile.mkdtemp(prefix="iree_dispatch_nvcc.", dir=root))
        self._links: dict[str, str] = {}  # private path → the user's path it stands for
        self._defines: list[str] = []  # lines of the forced-include header
        self._made = 0  # links and wrappers made, for their names

    def __enter__(self) -> _PrivateFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)  # removes the links, never what they point to

    def _new(self, stem: str) -> Path:
        self._made += 1
        return self.path / f"{stem}{self._made}"

    def _link(self, target: Path) -> Path:
        link = self._new("d")
        target = target.absolute()
        link.symlink_to(target, target_is_directory=True)
        self._links[str(link)] = str(target)
        return link

    def folder(self, folder: str) -> str:
        """`folder`, or a safely named link to it."""
        return folder if _safe(folder) else str(self._link(Path(folder)))

    def source(self, source: Path, instances: Sequence[str] = ()) -> str:
        """`source`, if both its path and the path it resolves to are safe (nvcc hands the
        resolved one to cicc: a link to an unsafe place is no way around) and nothing is to be
        instantiated, else a wrapper (which instantiates `instances`)."""
        if not instances and _safe(str(source)) and _safe(os.path.realpath(source)):
            return str(source)
        return self._wrapper(source, ".cu", "source", _instantiations(instances))

    def forced_include(self, path: Path) -> str:
        """The file of an -include: `path`, else through a link to its folder, else a wrapper."""
        if _safe(str(path)):
            return str(path)
        return str(self._link(path.parent) / path.name) if _safe(path.name) else self._wrapper(path, ".h", "-include")

    def _wrapper(self, path: Path, suffix: str, what: str, after: str = "") -> str:
        """A safely named file whose first line includes `path` through a link to its folder: the
        path is then only in a file nvcc's preprocessor reads, and the file's own `#include "x.h"`
        and `"../y.h"` resolve from the linked folder as they would beside it. `after`: lines
        that follow the #include."""
        if bad := next((c for c in path.name if c in '"\n\r'), None):
            raise ToolchainError(f"{what} {path}: nvcc can't be given a file whose name has {bad!r}; rename it, or build with --toolchain nvrtc")
        wrapper = self._new("w").with_suffix(suffix)
        wrapper.write_text(f'#include "{self._link(path.parent) / path.name}"\n{after}', encoding="utf-8")
        self._links[str(wrapper)] = str(path.absolute())
        return str(wrapper)

    def flags(self, flags: Sequence[str]) -> list[str]:
        """The user's flags as nvcc may see them: unsafe paths through links, unsafe definitions
        into a forced-include header (then every -D and -U goes there, keeping their order), the
        rest unchanged; an unsafe flag of another kind is refused."""
        parsed = list(_options(flags))
        move_definitions = any(option in ("-D", "-U") and not all(_SAFE_FLAG.fullmatch(w) for w in words) for option, _, words in parsed)
        result: list[str] = []
        for option, value, words in parsed:
            if option in ("-D", "-U") and move_definitions:
                for definition in _split_list(value, parentheses=True):
                    self._define(option, definition, " ".join(words))
            elif option in ("-I", "-isystem", "-include") and not all(_SAFE_FLAG.fullmatch(w) for w in words):
                for path in _split_list(value, parentheses=False):
                    result += [option, self.folder(path) if option != "-include" else self.forced_include(Path(path))]
            elif bad := next((_unsafe_character(w, _SAFE_FLAG) for w in words if not _SAFE_FLAG.fullmatch(w)), None):
                raise ToolchainError(f"nvcc flag {' '.join(words)!r} has {bad!r}, which nvcc would hand to a shell; {_INSTEAD}")
            else:
                result += words
        if self._defines:
            header = self.path / "definitions.h"
            header.write_text("".join(self._defines), encoding="utf-8")
            self._links[str(header)] = "<the -D flags>"
            result = ["-include", str(header), *result]  # first: the command line's -D come before any -include too
        return result

    def _define(self, option: str, definition: str, flag: str) -> None:
        name, eq, value = definition.partition("=")
        if not _MACRO_NAME.fullmatch(name):
            bad = _unsafe_character(name, _SAFE_FLAG)
            shell = f" and has {bad!r}, which nvcc would hand to a shell" if bad else ""
            raise ToolchainError(f"nvcc flag {flag!r}: {name!r} is no macro name{shell}; {_INSTEAD}")
        if option == "-U":
            self._defines.append(f"#undef {name}\n")
            return
        if bad := next((c for c in value if c in "\n\r"), None) or (value.endswith("\\") and "\\"):
            raise ToolchainError(f"nvcc flag {flag!r}: a definition can't have {bad!r} (a line break); {_INSTEAD}")
        self._defines.append(f"#define {name} {value if eq else '1'}\n")

    def to_user(self, text: str) -> str:
        """`text` with every private path replaced by the user's path it stands for."""
        for private in sorted(self._links, key=len, reverse=True):  # d12 before d1
            text = text.replace(private, self._links[private])
        return text.replace(str(self.path), "<nvcc's private folder>")

    def dependencies(self, read: tuple[Path, ...]) -> tuple[Path, ...]:
        """The files nvcc read, as the user's paths; the generated header and wrappers left out
        (the file a wrapper includes is read through a folder link, so it is listed)."""
        found = []
        for path in read:
            if not path.is_relative_to(self.path):
                found.append(path)
                continue
            first, *rest = path.relative_to(self.path).parts
            if first.startswith("d") and str(self.path / first) in self._links:
                found.append(Path(self._links[str(self.path / first)], *rest))
        return tuple(dict.fromkeys(found))


def _instantiations(instances: Sequence[str]) -> str:
    """Lines that make nvcc compile each kernel template instantiation: its address taken in host
    code. Each is preceded by a #line naming it, so a compiler message about it says which
    instantiation it is (`instantiation of kernel k<float, 2.5>(1): error: ...`)."""
    return "".join(
        f'#line 1 "instantiation of kernel {instance}"\n[[maybe_unused]] static void* const iree_dispatch_instance_{i} = (void*)&{instance};\n'
        for i, instance in enumerate(instances)
    )


def _move_into_place(produced: Path, out: Path) -> None:
    """`produced` renamed to `out`; across file systems, copied beside `out` and renamed, so `out`
    is never seen half written."""
    try:
        os.replace(produced, out)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        with atomic_output(out) as temporary:
            shutil.copyfile(produced, temporary)
