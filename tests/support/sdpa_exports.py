"""Writes the SDPA test models of tests/models/ (needs torch and transformers; CI reads the files):

    python -m tests.support.sdpa_exports tests/models

sdpa_bf16.torch.mlir: torch's scaled_dot_product_attention in small modules, one function each
(torch.export + IREE's FX importer, as iree_dispatch.models.torch_export); sdpa_f32.torch.mlir:
two of them in f32; sdpa_bshd_bf16.torch.mlir: SDPA on q, k and v viewed as heads of [B, S, E]
tensors and transposed, the result transposed back, as BERT's self-attention holds them; gpt2_sdpa_bf16.torch.mlir and llama_sdpa_bf16.torch.mlir: a one-layer
transformers GPT-2 and a Llama with grouped-query attention, SDPA attention, an explicit
[B, 1, S, S] additive causal mask and the parameters as inputs (export_mlir's recipe)."""

from __future__ import annotations

import sys
from pathlib import Path

B, H, S, D = 1, 4, 16, 64


def _modules(torch):
    sdpa = torch.nn.functional.scaled_dot_product_attention

    class Plain(torch.nn.Module):
        def forward(self, q, k, v):
            return sdpa(q, k, v)

    class Causal(torch.nn.Module):
        def forward(self, q, k, v):
            return sdpa(q, k, v, is_causal=True)

    class Masked(torch.nn.Module):
        def forward(self, q, k, v, mask):
            return sdpa(q, k, v, attn_mask=mask)

    class Scaled(torch.nn.Module):
        def forward(self, q, k, v):
            return sdpa(q, k, v, scale=0.3)

    class GroupedQuery(torch.nn.Module):  # k and v of H / 2 heads, each repeated twice (repeat_interleave)
        def forward(self, q, k, v):
            return sdpa(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), is_causal=True)

    class Transposed(torch.nn.Module):  # q, k, v and the result as [B, S, H, D]
        def forward(self, q, k, v):
            return sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)

    return Plain, Causal, Masked, Scaled, GroupedQuery, Transposed


def _bshd_modules(torch):
    """SDPA on [B, S, E] tensors (separate projections' results) viewed as [B, S, H, D] heads and
    transposed to [B, H, S, D], the result transposed back to [B, S, E], as BERT's self-attention;
    `kv_heads` < `heads`: k and v repeated to the query heads after the transpose (transformers'
    repeat_kv); `keep`: what else the module returns (the transposed q, or the result as [B, H, S, D])."""
    sdpa = torch.nn.functional.scaled_dot_product_attention

    class Projected(torch.nn.Module):
        def __init__(self, heads: int, kv_heads: int, causal: bool = False, keep: str = ""):
            super().__init__()
            self.heads, self.kv_heads, self.causal, self.keep = heads, kv_heads, causal, keep

        def forward(self, xq, xk, xv, mask=None):
            b, sq, _ = xq.shape
            sk, group = xk.shape[1], self.heads // self.kv_heads
            q = xq.view(b, sq, self.heads, D).transpose(1, 2)
            k = xk.view(b, sk, self.kv_heads, D).transpose(1, 2)
            v = xv.view(b, sk, self.kv_heads, D).transpose(1, 2)
            if group > 1:
                k = k[:, :, None].expand(b, self.kv_heads, group, sk, D).reshape(b, self.heads, sk, D)
                v = v[:, :, None].expand(b, self.kv_heads, group, sk, D).reshape(b, self.heads, sk, D)
            o = sdpa(q, k, v, attn_mask=mask, is_causal=self.causal)
            out = o.transpose(1, 2).reshape(b, sq, self.heads * D)
            return {"": out, "q": (out, q), "context": (out, o)}[self.keep]

    return Projected


def _write(importer, path: Path, header: str) -> None:
    path.write_text(f"// {header}\n// Made by: python -m tests.support.sdpa_exports tests/models (torch.export + IREE's FX importer). Test model.\n"
                    + str(importer.module), encoding="utf-8")


def export_sdpa(out: Path) -> None:
    import torch
    from iree.compiler import ir
    from iree.compiler.extras.fx_importer import FxImporter

    Plain, Causal, Masked, Scaled, GroupedQuery, Transposed = _modules(torch)
    torch.manual_seed(0)

    def qkv(dtype, heads_kv=H, d=D):
        return torch.randn(B, H, S, d, dtype=dtype), torch.randn(B, heads_kv, S, d, dtype=dtype), torch.randn(B, heads_kv, S, d, dtype=dtype)

    bf16 = torch.bfloat16
    functions = {
        "plain": (Plain(), qkv(bf16)),
        "causal": (Causal(), qkv(bf16)),
        "masked": (Masked(), (*qkv(bf16), torch.randn(B, 1, S, S, dtype=bf16))),  # broadcast over the heads
        "masked_full": (Masked(), (*qkv(bf16), torch.randn(B, H, S, S, dtype=bf16))),
        "scaled": (Scaled(), qkv(bf16)),
        "gqa": (GroupedQuery(), qkv(bf16, H // 2)),
        "transposed": (Transposed(), tuple(t.transpose(1, 2).contiguous() for t in qkv(bf16))),
        "head_dim_32": (Causal(), qkv(bf16, d=32)),
        "head_dim_128": (Plain(), qkv(bf16, d=128)),
        "f16": (Causal(), qkv(torch.float16)),
    }
    importer = FxImporter(context=ir.Context())
    for name, (module, args) in functions.items():
        importer.import_frozen_program(torch.export.export(module, tuple(args)), func_name=name)
    _write(importer, out / "sdpa_bf16.torch.mlir", f"torch {torch.__version__}: scaled_dot_product_attention, B = {B}, H = {H}, S = {S}, D = {D} unless named")
    importer = FxImporter(context=ir.Context())
    for name, module in (("plain", Plain()), ("causal", Causal())):
        importer.import_frozen_program(torch.export.export(module, qkv(torch.float32)), func_name=name)
    _write(importer, out / "sdpa_f32.torch.mlir", f"torch {torch.__version__}: scaled_dot_product_attention in f32, B = {B}, H = {H}, S = {S}, D = {D}")
    export_sdpa_bshd(out)
    _export_transformers(out)


def export_sdpa_bshd(out: Path) -> None:
    import torch
    from iree.compiler import ir
    from iree.compiler.extras.fx_importer import FxImporter

    Projected = _bshd_modules(torch)
    torch.manual_seed(0)
    bf16, b = torch.bfloat16, 2

    def x(s, heads):
        return torch.randn(b, s, heads * D, dtype=bf16)

    same = x(S, H)
    functions = {
        "plain": (Projected(H, H), (x(S, H), x(S, H), x(S, H))),
        "gqa_causal": (Projected(H, H // 2, causal=True), (x(S, H), x(S, H // 2), x(S, H // 2))),
        "padding_mask": (Projected(H, H), (x(S, H), x(S, H), x(S, H), torch.randn(b, 1, 1, S, dtype=bf16))),
        "cross": (Projected(H, H), (x(S, H), x(2 * S, H), x(2 * S, H))),  # Sq != Sk
        "same_tensor": (Projected(H, H), (same, same, same)),
        "q_used": (Projected(H, H, keep="q"), (x(S, H), x(S, H), x(S, H))),
        "context_used": (Projected(H, H, keep="context"), (x(S, H), x(S, H), x(S, H))),
    }
    importer = FxImporter(context=ir.Context())
    for name, (module, args) in functions.items():
        importer.import_frozen_program(torch.export.export(module, tuple(args)), func_name=name)
    _write(importer, out / "sdpa_bshd_bf16.torch.mlir",
           f"torch {torch.__version__}: scaled_dot_product_attention on [B, S, H * D] tensors viewed as heads and transposed, B = {b}, H = {H}, S = {S}, D = {D} unless named")


def _export_transformers(out: Path) -> None:
    import torch
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    from iree_dispatch.models.torch_export import export_mlir

    from .default_exports import typed

    dtype, batch, seq = torch.bfloat16, 1, 16
    torch.manual_seed(0)
    ids = torch.randint(0, 64, (batch, seq))
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    mask = torch.zeros(batch, 1, seq, seq, dtype=dtype).masked_fill(~causal, torch.finfo(dtype).min)
    versions = f"transformers {transformers.__version__}, torch {torch.__version__}"
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=128, n_head=2, vocab_size=64, n_positions=32, use_cache=False, attn_implementation="sdpa",
                                      bos_token_id=0, eos_token_id=0)).eval().to(dtype)
    path = export_mlir(gpt2, (ids,), out / "gpt2_sdpa_bf16.torch.mlir", kwargs={"attention_mask": mask}, params_as_inputs=True, output=lambda o: o.logits)
    path.write_text(f"// GPT2LMHeadModel ({versions}) with 1 layer, bf16, n_embd 128, 2 heads of 64, vocabulary 64, SDPA attention, an explicit\n"
                    "// [1, 1, 16, 16] additive causal mask, parameters as inputs, 1 x 16 tokens. Made by: python -m tests.support.sdpa_exports tests/models\n"
                    + path.read_text(encoding="utf-8"), encoding="utf-8")
    llama = LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, hidden_size=256, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                                         head_dim=64, vocab_size=64, max_position_embeddings=32, use_cache=False, attn_implementation="sdpa",
                                         bos_token_id=0, eos_token_id=0, pad_token_id=0)).eval()
    llama = typed(torch, llama, "bf16")  # the rotary frequencies in f32, as transformers keeps them
    path = export_mlir(llama, (ids,), out / "llama_sdpa_bf16.torch.mlir", kwargs={"attention_mask": mask}, params_as_inputs=True, output=lambda o: o.logits)
    path.write_text(f"// LlamaForCausalLM ({versions}) with 1 layer, bf16, hidden 256, 4 query heads and 2 key/value heads of 64, vocabulary 64,\n"
                    "// SDPA attention, an explicit [1, 1, 16, 16] additive causal mask, parameters as inputs, 1 x 16 tokens.\n"
                    "// Made by: python -m tests.support.sdpa_exports tests/models\n" + path.read_text(encoding="utf-8"), encoding="utf-8")


if __name__ == "__main__":
    export_sdpa(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/models"))
