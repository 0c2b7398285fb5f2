"""Modules for the object-policy GPU tests (tests/backend/test_gpu_objects.py), built on a CPU machine:
    python -m tests.support.artifacts --only objects build/gpu-tests
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROBE_CU = ROOT / "tests" / "kernels" / "probe.cu"

# name → (policy, archs); probes report __CUDA_ARCH__ of the object that ran.
PROBES = {
    "probe_ptx_sm100_first": ("ptx", ["sm_100", "sm_90", "sm_80"]),
    "probe_cubin": ("cubin", ["sm_90", "sm_80"]),
    "probe_cubin_sm80": ("cubin", ["sm_80"]),
    "probe_fatbin": ("fatbin", ["sm_90", "sm_80"]),
    "probe_fatbin_sm80": ("fatbin", ["sm_80"]),
}
SAMPLES = {"samples_cubin": "cubin", "samples_fatbin": "fatbin"}


def layout() -> dict[str, str]:
    return {name: f"{name}/m.vmfb" for name in (*PROBES, *SAMPLES)}


def build_all(out: Path) -> dict[str, Path]:
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.core.archs import parse_archs
    from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec
    from iree_dispatch.frontend.spec_file import load_spec

    paths = {name: out / rel for name, rel in layout().items()}
    probe = KernelSpec.declare(PROBE_CU, "cuda_arch", block=1, grid=1, shapes={"out": [1]})
    for name, (policy, archs) in PROBES.items():
        build(ModuleSpec("probe", (probe,), tuple(parse_archs(archs)), objects=policy), paths[name])
    samples = load_spec(ROOT / "kernels" / "samples.toml")
    for name, policy in SAMPLES.items():
        build(samples.with_objects(policy), paths[name])
    return paths
