"""Fixtures of the back end's tests."""

from __future__ import annotations

import pytest

from ..support.build_cache import KERNEL


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A kernel including a header, a private cache, and an nvcc that logs each run."""
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "scale.h").write_text("#define SCALE 2.0f\n")
    (tmp_path / "k.cu").write_text(KERNEL)
    log = tmp_path / "nvcc.log"
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    from iree_dispatch.toolchains import find_nvcc

    real = find_nvcc()
    # `nvcc --version` (the toolchain's identity in the cache key) is not a compile: not counted.
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" != --version ]; then echo run >> "{log}"; if [ -n "$NVCC_DELAY" ]; then sleep "$NVCC_DELAY"; fi; fi\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    for tool in ("ptxas", "fatbinary"):  # found beside nvcc
        (wrapper.parent / tool).symlink_to(real.parent / tool)
    monkeypatch.setenv("NVCC", str(wrapper))
    return tmp_path
