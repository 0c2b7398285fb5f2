"""The programs over two GPUs (mlir/pipeline_mlp.mlir, mlir/tensor_parallel_mlp.mlir: f32 GEMM
and bias+GELU kernels of kernels/gemm_f32.toml and kernels/library.toml), and the library alone
(bias_gelu_f32 declares its split over GPUs: DataParallel by declaration), for
tests/runtime/test_gpu_multi_device.py, tests/backend/test_multi_device.py and
benchmarks/multi_device.py."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SPECS = (ROOT / "kernels" / "gemm_f32.toml", ROOT / "kernels" / "library.toml")
PROGRAMS = {"pipeline_mlp": ROOT / "mlir" / "pipeline_mlp.mlir", "tensor_parallel_mlp": ROOT / "mlir" / "tensor_parallel_mlp.mlir"}
DEVICE_NAMES = ("gpu0", "gpu1")
# The programs' devices, in the order runtime.load(devices=[...]) takes their GPUs.
DEVICE_FLAGS = tuple(f"--iree-hal-target-device={name}=cuda[{i}]" for i, name in enumerate(DEVICE_NAMES))


def build_all(out: Path) -> dict[str, Path]:
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec_file import load_spec

    specs = [load_spec(s) for s in SPECS]
    built = {}
    for name, program in PROGRAMS.items():
        vmfb = out / f"{name}.vmfb"
        build(specs, vmfb, program=program, emit_mlir=vmfb.with_suffix(".mlir"), iree_compile_flags=DEVICE_FLAGS)
        built[name] = vmfb
    built["library"] = out / "library.vmfb"
    build(specs[1], built["library"])
    return built
