"""Sources named as real repositories name them build unchanged: a header-style `.cuh`, a leading
digit, dashes, dots and spaces (each name reaches nvcc, object files and MLIR symbols)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ..support.environment import needs_build_tools

ROOT = Path(__file__).resolve().parents[2]
SPEC = """[module]
name = "m"
archs = ["sm_80"]

[[kernel]]
name = "simple_mul"
source = "{source}"
block = [64]
grid = ["ceildiv(n, 64)"]
shape = ["n"]
"""


@needs_build_tools
@pytest.mark.parametrize("source", ["1_naive.cuh", "-lead.cu", "my kernel.v2.cu", "k.cpp", "_k.cu"])
def test_a_source_of_any_name_builds(tmp_path, source, capsys):
    from iree_dispatch.cli import main
    from iree_dispatch.runtime import read_descriptions

    shutil.copyfile(ROOT / "kernels" / "simple_mul.cu", tmp_path / source)
    (tmp_path / "k.toml").write_text(SPEC.format(source=source))
    assert main(["build", str(tmp_path / "k.toml"), "-o", str(tmp_path / "out" / "m.vmfb")]) == 0, capsys.readouterr().err
    assert set(read_descriptions(tmp_path / "out" / "m.vmfb")[1]) == {"simple_mul"}
