"""A toolchain for a test, or a skip saying what to install (toolchains/test_toolchains.py,
break_it/test_break_shell.py)."""

from __future__ import annotations

import pytest

from iree_dispatch.core.errors import ToolchainError

from .artifacts.toolchains import make_toolchain


def toolchain_or_skip(name: str):
    """The toolchain `name` ("nvcc": what find_nvcc finds; "nvcc_wheel"; "nvrtc"), or a skip
    saying what to install."""
    from iree_dispatch.toolchains import select_toolchain

    try:
        return select_toolchain("nvcc") if name == "nvcc" else make_toolchain(name)
    except ToolchainError as exc:
        pytest.skip(f"{name} not installed: {exc}")
