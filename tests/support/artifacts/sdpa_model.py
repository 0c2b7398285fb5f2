"""The SDPA model the GPU test runs (tests/models/test_gpu_sdpa.py): tests/models/sdpa_bf16.torch.mlir
with its attention ops replaced by kernels/flash_attention.toml's kernels, built on a CPU machine:
    python -m tests.support.artifacts --only sdpa_model build/gpu-tests
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "tests" / "models" / "sdpa_bf16.torch.mlir"
SPEC = ROOT / "kernels" / "flash_attention.toml"
LAYOUT = {"sdpa": "sdpa.vmfb"}


def build_all(out: Path) -> dict[str, Path]:
    from iree_dispatch.models import compile_model

    out.mkdir(parents=True, exist_ok=True)
    compile_model(MODEL, [SPEC], out / LAYOUT["sdpa"])
    return {name: out / rel for name, rel in LAYOUT.items()}
