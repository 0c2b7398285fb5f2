"""The GPU tests' module lookup (tests/support/gpu_modules.py, module_paths), on the CPU: built where the compiler is
installed, read from $IREE_DISPATCH_PREBUILT where it isn't, and a clear failure when a
prebuilt module is missing."""

from __future__ import annotations

import pytest

from .support import gpu_modules

LAYOUT = {"plain": "m.vmfb", "nested": "in_place/m.vmfb", "optional": "extra/o.vmfb"}


def test_builds_where_the_compiler_is(monkeypatch, tmp_path_factory):
    monkeypatch.setattr(gpu_modules, "have_compiler", lambda: True)
    built = {}

    def build_all(out):
        built["into"] = out
        return {"plain": out / "m.vmfb"}

    paths = gpu_modules.module_paths(tmp_path_factory, "lib", LAYOUT, build_all)
    assert paths == {"plain": built["into"] / "m.vmfb"} and built["into"].name.startswith("lib")


def test_reads_prebuilt_modules_without_a_compiler(monkeypatch, tmp_path, tmp_path_factory):
    monkeypatch.setattr(gpu_modules, "have_compiler", lambda: False)
    monkeypatch.setenv("IREE_DISPATCH_PREBUILT", str(tmp_path))
    for rel in ("m.vmfb", "in_place/m.vmfb"):
        (tmp_path / "lib" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "lib" / rel).write_bytes(b"vmfb")

    def never(out):
        raise AssertionError("nothing is built without a compiler")

    # `keep` drops what may be absent (here: the module not built where its tool was missing).
    paths = gpu_modules.module_paths(tmp_path_factory, "lib", LAYOUT, never, keep=lambda name, path: path.exists() or name != "optional")
    assert paths == {"plain": tmp_path / "lib" / "m.vmfb", "nested": tmp_path / "lib" / "in_place" / "m.vmfb"}

    with pytest.raises(pytest.fail.Exception, match=r"prebuilt modules missing: .*extra/o\.vmfb.*python -m tests\.support\.artifacts"):
        gpu_modules.module_paths(tmp_path_factory, "lib", LAYOUT, never)
