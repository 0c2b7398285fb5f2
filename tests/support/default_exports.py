"""Writes the default-attention test models of tests/models/ (needs torch and transformers; CI reads the files):

    python -m tests.support.default_exports tests/models

Tiny transformers models exported as users export them: transformers' default attention (SDPA),
no hand-built mask, `export_mlir(..., params_as_inputs=True)` (no weights in the files; the
buffers, Llama's rotary frequencies and BERT's position ids, are constants). Each family's masks
are the ones transformers builds inside the model:

- gpt2_default_bf16.torch.mlir: GPT-2, 2 layers, 4 heads of 64, vocabulary 1000, token ids only
  (the causal mask, with transformers' packed-sequence check); gpt2_default_padded_bf16: the same
  with a [B, S] padding `attention_mask` input (causal and padding: a general mask);
  gpt2_default_f32logits_bf16: token ids only, the bf16 logits converted to f32 as users compare
  them (`logits.float()`: the LM head's rounding to bf16 followed by a widening to f32);
- llama_default_bf16.torch.mlir: Llama, 2 layers, 4 query heads over 2 key/value heads of 64,
  SwiGLU, RMSNorm, rotary embeddings, token ids only (the causal mask);
- bert_default_{bf16,f32}.torch.mlir: BERT, 2 layers, 4 heads of 64, token ids only (no mask:
  every token sees every token); bert_default_padded_{bf16,f32}: with a [B, S] padding
  `attention_mask` input.

Batch 2 x 16 tokens; the padding mask given at export hides the last 4 tokens of the second
sequence (its values are an input of the exported function).
"""

from __future__ import annotations

import sys
from pathlib import Path

BATCH, SEQ, VOCAB = 2, 16, 1000
LAYERS, HEADS, HEAD_DIM = 2, 4, 64
HIDDEN = HEADS * HEAD_DIM


def models(torch, transformers) -> dict:
    """Each family's model in f32 (eval mode, seeded), its output, and the dtypes it is exported in."""
    torch.manual_seed(0)
    common = {"vocab_size": VOCAB, "attn_implementation": "sdpa", "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=LAYERS, n_head=HEADS, n_embd=HIDDEN, n_positions=64, use_cache=False, **common))
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS // 2, head_dim=HEAD_DIM, hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN, max_position_embeddings=64, use_cache=False, **common))
    bert = transformers.BertModel(transformers.BertConfig(
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, max_position_embeddings=64, **common),
        add_pooling_layer=False)
    logits, hidden = (lambda o: o.logits), (lambda o: o.last_hidden_state)
    return {"gpt2": (gpt2.eval(), logits, ("bf16",)), "llama": (llama.eval(), logits, ("bf16",)), "bert": (bert.eval(), hidden, ("bf16", "f32"))}


def typed(torch, model, dtype: str):
    """`model` in `dtype` as `from_pretrained(..., dtype=...)` leaves it: parameters in `dtype`, the
    non-persistent float buffers (Llama's rotary frequencies, computed in f32 by transformers) in
    f32. (`.to(dtype)` alone narrows them too, which IREE's CPU backend does not compile: a bf16
    constant read as f32.)"""
    model = model.to({"bf16": torch.bfloat16, "f32": torch.float32}[dtype])
    for module in model.modules():
        for name, buffer in module.named_buffers(recurse=False):
            if name in module._non_persistent_buffers_set and buffer.is_floating_point():
                setattr(module, name, buffer.float())
    return model


def inputs(torch) -> tuple:
    """Token ids [B, S] and a padding mask [B, S] (1: a token, 0: padding) as users pass them."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator)
    padding = torch.ones(BATCH, SEQ, dtype=torch.long)
    padding[1, -4:] = 0
    return ids, padding


def export_defaults(out: Path) -> list[Path]:
    import torch
    import transformers

    from iree_dispatch.models.torch_export import export_mlir

    versions = f"transformers {transformers.__version__}, torch {torch.__version__}"
    ids, padding = inputs(torch)
    written = []
    for family, (model, output, dtypes) in models(torch, transformers).items():
        for dtype in dtypes:
            model = typed(torch, model, dtype)
            variants = {"": ({}, output)} if family == "llama" else {"": ({}, output), "_padded": ({"attention_mask": padding}, output)}
            if family == "gpt2":
                variants["_f32logits"] = ({}, lambda o, logits=output: logits(o).float())
            for suffix, (kwargs, out_of) in variants.items():
                path = export_mlir(model, (ids,), out / f"{family}_default{suffix}_{dtype}.torch.mlir", kwargs=kwargs, params_as_inputs=True, output=out_of)
                what = "token ids and a [2, 16] padding attention_mask" if kwargs else "token ids only"
                if out_of is not output:
                    what += ", the logits converted to f32 (logits.float())"
                path.write_text(f"// {type(model).__name__} ({versions}), {dtype}, {LAYERS} layers, {HEADS} heads of {HEAD_DIM}, SDPA attention, {what};\n"
                                "// parameters as inputs. Made by: python -m tests.support.default_exports tests/models\n"
                                + path.read_text(encoding="utf-8"), encoding="utf-8")
                written.append(path)
    return written


if __name__ == "__main__":
    for p in export_defaults(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/models")):
        print(f"{p}: {p.stat().st_size} bytes")
