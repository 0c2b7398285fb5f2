"""export_mlir on transformers models as users export them (skipped without torch and
transformers): the default SDPA attention, no hand-built mask, non-persistent buffers (Llama's
rotary frequencies, BERT's position ids). The exported model, compiled for and run on IREE's CPU,
gives what PyTorch gives; its attention ops take the kernels the masks transformers builds allow."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("iree.compiler")  # the model compiler: not in a runtime-only install

from iree_dispatch.models import compile_model  # noqa: E402
from iree_dispatch.models.torch_export import _diff, export_mlir  # noqa: E402

from ..support import default_exports  # noqa: E402
from ..support.environment import ROOT  # noqa: E402
from ..support.model_references import _compile_cpu, _run  # noqa: E402

FLASH = ROOT / "kernels" / "flash_attention.toml"


@pytest.fixture(scope="module")
def families():
    return default_exports.models(torch, transformers)


@pytest.mark.parametrize("family, padded", [("gpt2", None), ("gpt2", "right"), ("gpt2", "left"), ("llama", None), ("bert", None), ("bert", "right")])
def test_export_runs_as_pytorch(tmp_path, families, family, padded):
    """f32, parameters as inputs: IREE's CPU run of the export against PyTorch eager, on fresh
    random tokens. Left padding under GPT-2's causal mask: the first query sees no key."""
    model, output, _ = families[family]
    model = model.to(torch.float32)
    ids, padding = default_exports.inputs(torch)
    ids = torch.randint(0, default_exports.VOCAB, ids.shape)
    if padded == "left":
        padding = padding.flip(1)
    kwargs = {"attention_mask": padding} if padded else {}
    mlir = export_mlir(model, (ids,), tmp_path / "model.mlir", kwargs=kwargs, params_as_inputs=True, output=output)
    vmfb = _compile_cpu(mlir.read_text(), tmp_path / "model.vmfb")
    args = [ids.numpy(), *([padding.numpy()] if padded else []), *(p.detach().numpy() for p in model.parameters())]
    (got,) = _run(vmfb, "main", args)
    with torch.no_grad():
        expected = output(model(ids, **kwargs)).numpy()
    assert np.all(np.isfinite(got))
    if padded:  # the padded positions' outputs are whatever each implementation makes of them
        keep = padding.numpy().astype(bool)
        got, expected = got[keep], expected[keep]
    assert np.max(np.abs(got - expected)) <= 1e-4 * max(1.0, float(np.max(np.abs(expected))))


@pytest.mark.parametrize("family, padded, kind", [("gpt2", False, "sdpa_qkv_causal"), ("gpt2", True, "sdpa_qkv_mask"), ("llama", False, "sdpa_causal"),
                                                  ("bert", False, "sdpa"), ("bert", True, "sdpa_mask")])
def test_export_attention_kinds(tmp_path, families, family, padded, kind):
    """bf16: each layer's attention, with the mask transformers builds, as the kind that mask allows
    (GPT-2's on its qkv projection's layout, q, k and v sliced from one [B, S, 3E] tensor)."""
    model, output, _ = families[family]
    ids, padding = default_exports.inputs(torch)
    kwargs = {"attention_mask": padding} if padded else {}
    mlir = export_mlir(default_exports.typed(torch, model, "bf16"), (ids,), tmp_path / "model.mlir", kwargs=kwargs, params_as_inputs=True, output=output)
    report = compile_model(mlir, [FLASH], dry_run=True)
    sdpa = [d for d in report.decisions if d.candidate.kind == "sdpa"]
    assert len(sdpa) == default_exports.LAYERS and all(d.replaced and d.form.kind == kind for d in sdpa)


def test_keyword_arguments_given_as_none_are_left_out(tmp_path, families):
    """attention_mask=None, as users write it for an unpadded batch: the export takes the ids alone
    (no `!torch.none` argument, which IREE can't take), and the model compiler rewrites it."""
    model, output, _ = families["bert"]
    ids, _ = default_exports.inputs(torch)
    mlir = export_mlir(default_exports.typed(torch, model, "bf16"), (ids,), tmp_path / "model.mlir", kwargs={"attention_mask": None},
                       params_as_inputs=True, output=output)
    (signature,) = [line for line in mlir.read_text().splitlines() if "func.func @main(" in line]
    assert "!torch.none" not in signature.split("->")[0]
    report = compile_model(mlir, [FLASH], dry_run=True)
    assert [d.form.kind for d in report.decisions if d.candidate.kind == "sdpa"] == ["sdpa_bshd"] * default_exports.LAYERS  # unmasked, on the projections


class _WithBuffers(torch.nn.Module):
    """A persistent and a non-persistent buffer, both read by forward."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.register_buffer("shift", torch.randn(8), persistent=True)
        self.register_buffer("scale", torch.rand(8) + 0.5, persistent=False)

    def forward(self, x):
        return self.linear(x) * self.scale + self.shift


@pytest.mark.parametrize("params_as_inputs", [False, True])
def test_non_persistent_buffers(tmp_path, params_as_inputs):
    """Both buffers are constants of the export, the parameters constants or inputs as asked."""
    torch.manual_seed(0)
    module = _WithBuffers().eval()
    x = torch.randn(4, 8)
    mlir = export_mlir(module, (x,), tmp_path / "m.mlir", params_as_inputs=params_as_inputs)
    vmfb = _compile_cpu(mlir.read_text(), tmp_path / "m.vmfb")
    args = [x.numpy(), *((p.detach().numpy() for p in module.parameters()) if params_as_inputs else ())]
    (got,) = _run(vmfb, "main", args)
    with torch.no_grad():
        expected = module(x).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n, dim, ends, dtype", [(1, -1, False, torch.int64), (2, 0, False, torch.float32), (1, 1, True, torch.float32),
                                                 (1, -1, True, torch.bool)])
def test_diff_decomposition(n, dim, ends, dtype):
    """aten.diff, which IREE does not lower, as export_mlir decomposes it: what torch.diff gives."""
    x = (torch.randn(5, 6) > 0) if dtype == torch.bool else (torch.randn(5, 6) * 10).to(dtype)
    extra = {"prepend": x[:, :2] if dim in (1, -1) else x[:2], "append": x[:, :1] if dim in (1, -1) else x[:1]} if ends else {}
    assert torch.equal(_diff(x, n, dim, **extra), torch.diff(x, n, dim, **extra))
