"""Writes the op test models of tests/models/ (needs torch and transformers; CI reads the files):

    python -m tests.support.op_exports tests/models

Each ops_<name>_<dtype>.torch.mlir is one small torch module written the way Llama, BERT and GPT-2
write the op (torch.export + IREE's FX importer, iree_dispatch.models.torch_export.export_mlir,
weights from a seed frozen in as constants but where said):

- rmsnorm: transformers' LlamaRMSNorm (x.to(f32), x.pow(2).mean(-1), rsqrt(var + eps), the
  rounding back to x's type, then weight *), over [2, 8, 64] rows;
- swiglu: Llama's MLP, down(silu(gate(x)) * up(x)), and the same with gate and up as the two
  halves of one fused [2n] projection (chunk);
- gelu_erf: a BERT-style Linear followed by torch's exact (erf) GELU;
- rope: Llama's rotary embedding of q and k (rotate_half: slices, neg, concat; times cos and sin),
  then a residual add.
"""

from __future__ import annotations

import sys
from pathlib import Path

B, S, D, N = 2, 8, 32, 32  # batch, tokens, hidden size, MLP size
HEADS = 2


def _modules(torch, transformers):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

    nn = torch.nn

    class Swiglu(nn.Module):  # Llama's MLP (LlamaMLP), and the fused-projection form
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(D, N, bias=False)
            self.up_proj = nn.Linear(D, N, bias=False)
            self.gate_up = nn.Linear(D, 2 * N, bias=False)
            self.down_proj = nn.Linear(N, D, bias=False)

        def forward(self, x):
            separate = self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))
            gate, up = self.gate_up(x).chunk(2, dim=-1)
            return separate, nn.functional.silu(gate) * up

    class GeluErf(nn.Module):  # BERT's intermediate layer: Linear, then GELU (erf, torch's default)
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(D, N)
            self.act = nn.GELU()

        def forward(self, x):
            return self.act(self.dense(x))

    class Rope(nn.Module):  # Llama's rotary embedding of q and k, then a residual add
        def forward(self, q, k, cos, sin, residual, out):
            q_rot, k_rot = apply_rotary_pos_emb(q, k, cos, sin)
            return q_rot, k_rot, residual + out

    return LlamaRMSNorm(D, eps=1e-6), Swiglu(), GeluErf(), Rope()


def export_ops(out: Path) -> None:
    import torch
    import transformers

    from iree_dispatch.models.torch_export import export_mlir

    versions = f"transformers {transformers.__version__}, torch {torch.__version__}"
    for dtype_name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        torch.manual_seed(0)
        rms, swiglu, gelu, rope = (m.eval().to(dtype) for m in _modules(torch, transformers))
        with torch.no_grad():
            rms.weight.copy_(torch.randn(D, dtype=dtype))  # not ones: the weight's multiply must be seen

        def randn(*shape):
            return torch.randn(*shape, dtype=dtype)

        cases = {
            "rmsnorm": (rms, (randn(B, S, D),), f"LlamaRMSNorm({D}, eps=1e-6) over [{B}, {S}, {D}], its weight an input"),
            "swiglu": (swiglu, (randn(B, S, D),), f"LlamaMLP-style down(silu(gate(x)) * up(x)), D = {D}, N = {N}, and silu(gate) * up of one [{2 * N}] projection"),
            "gelu_erf": (gelu, (randn(B, S, D),), f"Linear({D}, {N}) then GELU (erf) over [{B}, {S}, {D}]"),
            "rope": (rope, (randn(B, HEADS, S, D), randn(B, HEADS, S, D), randn(B, S, D), randn(B, S, D), randn(B, S, D), randn(B, S, D)),
                     f"apply_rotary_pos_emb of q, k [{B}, {HEADS}, {S}, {D}] with cos, sin [{B}, {S}, {D}], and a residual add"),
        }
        for name, (module, args, what) in cases.items():
            # The norm's weight as an input: IREE's CPU backend (the rewrite's CPU check) miscompiles a bf16 weight constant.
            path = export_mlir(module, args, out / f"ops_{name}_{dtype_name}.torch.mlir", params_as_inputs=name == "rmsnorm")
            path.write_text(f"// {what}, {dtype_name} ({versions}).\n// Made by: python -m tests.support.op_exports tests/models (torch.export + IREE's FX importer). Test model.\n"
                            + path.read_text(encoding="utf-8"), encoding="utf-8")


if __name__ == "__main__":
    export_ops(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/models"))
