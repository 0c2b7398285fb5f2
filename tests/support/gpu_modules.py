"""How a GPU test finds the modules it loads: built in the test session where the compiler is
installed, else prebuilt on a machine that has it (`python -m tests.support.artifacts
build/gpu-tests`) and carried here."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from .environment import ROOT, have_compiler

BUILD_COMMAND = "python -m tests.support.artifacts build/gpu-tests"


def prebuilt_dir(subdir: str = "") -> Path:
    """Where `python -m tests.support.artifacts` put the GPU tests' modules, for a GPU machine
    with no compiler: $IREE_DISPATCH_PREBUILT (default build/gpu-tests), then `subdir`."""
    return Path(os.environ.get("IREE_DISPATCH_PREBUILT", ROOT / "build" / "gpu-tests")) / subdir


def module_paths(tmp_path_factory, subdir: str, layout: Mapping[str, str], build_all: Callable[[Path], dict[str, Path]],
                 keep: Callable[[str, Path], bool] = lambda name, path: True) -> dict[str, Path]:
    """name → module path for a GPU test: built into a fresh folder where the compiler is
    installed, else layout's paths under prebuilt_dir(subdir) that `keep` keeps; a missing
    one fails the test and names the command that builds them."""
    if have_compiler():
        return build_all(tmp_path_factory.mktemp(subdir))
    prebuilt = prebuilt_dir(subdir)
    paths = {name: prebuilt / rel for name, rel in layout.items() if keep(name, prebuilt / rel)}
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        pytest.fail(f"no compiler here and prebuilt modules missing: {missing}; run {BUILD_COMMAND}")
    return paths


def loaded_modules(tmp_path_factory, subdir: str, layout: Mapping[str, str], build_all: Callable[[Path], dict[str, Path]]) -> dict:
    """module_paths' vmfbs, loaded on the GPU: name → iree_dispatch.runtime.Module."""
    from iree_dispatch import runtime

    paths = module_paths(tmp_path_factory, subdir, layout, build_all)
    return {name: runtime.load(path) for name, path in paths.items() if path.suffix == ".vmfb"}


def misaligned_residual_inputs(weight_as_stored: bool) -> tuple:
    """(torch, a, b, bias, residual) on the GPU for a 512 x 768 x 64 Linear with a residual 2 bytes
    past a 16-byte aligned address (a view into a longer tensor, as torch hands them over): a
    [M, K] bf16; b [K, N] with an f32 bias, or with weight_as_stored the weight [N, K] and its bf16
    bias; residual [M, N] bf16. Skips where torch has no CUDA device."""
    import pytest

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    m, n, k = 512, 768, 64
    g = torch.Generator(device="cuda").manual_seed(11)
    a = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    b = torch.randn(*((n, k) if weight_as_stored else (k, n)), device="cuda", generator=g).bfloat16()
    bias = torch.randn(n, device="cuda", generator=g)
    residual = (4 * torch.randn(m * n + 1, device="cuda", generator=g)).bfloat16()[1:].view(m, n)
    assert residual.data_ptr() % 16
    return torch, a, b, bias.bfloat16() if weight_as_stored else bias, residual
