"""`python -m iree_dispatch.models compile MODEL.mlir --kernels SPEC.toml -o MODEL.vmfb`: the
`iree-dispatch compile` command on its own (errors as one line, exit 1)."""

from __future__ import annotations

import argparse
import sys

from ..core.errors import DispatchError
from .cli import add_compile_command


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="iree-dispatch", description="Compile an imported model with kernels replacing its ops.")
    add_compile_command(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except (DispatchError, ValueError, OSError) as exc:
        print(f"iree-dispatch {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
