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
from iree_dispatch.models.torch_export import PARAMETER_SCOPE, _diff, export_mlir  # noqa: E402

from ..support import default_exports  # noqa: E402
from ..support.environment import ROOT  # noqa: E402
from ..support.model_references import _compile_cpu, _run, _run_with_parameters  # noqa: E402

FLASH = ROOT / "kernels" / "flash_attention.toml"


@pytest.fixture(scope="module")
def families():
    return default_exports.models(torch, transformers)


@pytest.mark.parametrize("weights", ["inputs", "globals"])
@pytest.mark.parametrize("family, padded", [("gpt2", None), ("gpt2", "right"), ("gpt2", "left"), ("llama", None), ("bert", None), ("bert", "right")])
def test_export_runs_as_pytorch(tmp_path, families, family, padded, weights):
    """f32, parameters as inputs or as globals read from IREE parameters: IREE's CPU run of the
    export against PyTorch eager, on fresh random tokens. Left padding under GPT-2's causal mask:
    the first query sees no key."""
    model, output, _ = families[family]
    model = model.to(torch.float32)
    ids, padding = default_exports.inputs(torch)
    ids = torch.randint(0, default_exports.VOCAB, ids.shape)
    if padded == "left":
        padding = padding.flip(1)
    kwargs = {"attention_mask": padding} if padded else {}
    mlir = export_mlir(model, (ids,), tmp_path / "model.mlir", kwargs=kwargs, params_as_inputs=weights == "inputs", params_as_globals=weights == "globals",
                       output=output)
    vmfb = _compile_cpu(mlir.read_text(), tmp_path / "model.vmfb")
    inputs = [ids.numpy(), *([padding.numpy()] if padded else [])]
    if weights == "inputs":
        (got,) = _run(vmfb, "main", [*inputs, *(p.detach().numpy() for p in model.parameters())])
    else:
        (got,) = _run_with_parameters(vmfb, "main", inputs, model.named_parameters())
    with torch.no_grad():
        expected = output(model(ids, **kwargs)).numpy()
    assert np.all(np.isfinite(got))
    if padded:  # the padded positions' outputs are whatever each implementation makes of them
        keep = padding.numpy().astype(bool)
        got, expected = got[keep], expected[keep]
    assert np.max(np.abs(got - expected)) <= 1e-4 * max(1.0, float(np.max(np.abs(expected))))


@pytest.mark.parametrize("family, padded, kind", [("gpt2", False, "sdpa_qkv_causal"), ("gpt2", True, "sdpa_qkv_mask"), ("llama", False, "sdpa_causal"),
                                                  ("bert", False, "sdpa_bshd"), ("bert", True, "sdpa_bshd_mask")])
def test_export_attention_kinds(tmp_path, families, family, padded, kind):
    """bf16: each layer's attention, with the mask transformers builds, as the kind that mask allows
    (GPT-2's on its qkv projection's layout, q, k and v sliced from one [B, S, 3E] tensor; BERT's
    on its three projections' [B, S, H, D] layout)."""
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


def test_params_as_globals_take_the_inputs_alone(tmp_path, families):
    """bf16 BERT with its weights as globals: the function takes the ids and the mask only, each
    parameter is one global read from the IREE parameter named after it, and the model compiler
    takes the same kernels as from the export with the weights as inputs."""
    model, output, _ = families["bert"]
    model = default_exports.typed(torch, model, "bf16")
    ids, padding = default_exports.inputs(torch)
    kwargs = {"attention_mask": padding}
    as_globals = export_mlir(model, (ids,), tmp_path / "globals.mlir", kwargs=kwargs, params_as_globals=True, output=output)
    as_inputs = export_mlir(model, (ids,), tmp_path / "inputs.mlir", kwargs=kwargs, params_as_inputs=True, output=output)
    text = as_globals.read_text()
    (signature,) = [line for line in text.splitlines() if "func.func @main(" in line]
    assert signature.split("->")[0].count("!torch.vtensor") == 2
    declared = [line.split('"')[3] for line in text.splitlines() if line.lstrip().startswith("util.global private @__parameter_")]
    assert declared == [name for name, _ in model.named_parameters()]
    assert all(f'#stream.parameter.named<"{PARAMETER_SCOPE}"::' in line for line in text.splitlines() if "util.global private @__parameter_" in line)
    kernels = ROOT / "kernels"
    assert compile_model(as_globals, [kernels], dry_run=True, allow_wider_accumulation=True).kernel_counts() == \
        compile_model(as_inputs, [kernels], dry_run=True, allow_wider_accumulation=True).kernel_counts()


def test_params_as_inputs_and_as_globals_exclude_each_other(tmp_path):
    with pytest.raises(ValueError, match="exclude each other"):
        export_mlir(torch.nn.Linear(2, 2), (torch.randn(1, 2),), tmp_path / "m.mlir", params_as_inputs=True, params_as_globals=True)


class _WithBuffers(torch.nn.Module):
    """A persistent and a non-persistent buffer, both read by forward."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.register_buffer("shift", torch.randn(8), persistent=True)
        self.register_buffer("scale", torch.rand(8) + 0.5, persistent=False)

    def forward(self, x):
        return self.linear(x) * self.scale + self.shift


@pytest.mark.parametrize("weights", ["constants", "inputs", "globals"])
def test_non_persistent_buffers(tmp_path, weights):
    """Both buffers are constants of the export, the parameters constants, inputs or globals as asked."""
    torch.manual_seed(0)
    module = _WithBuffers().eval()
    x = torch.randn(4, 8)
    mlir = export_mlir(module, (x,), tmp_path / "m.mlir", params_as_inputs=weights == "inputs", params_as_globals=weights == "globals")
    vmfb = _compile_cpu(mlir.read_text(), tmp_path / "m.vmfb")
    if weights == "globals":
        (got,) = _run_with_parameters(vmfb, "main", [x.numpy()], module.named_parameters())
    else:
        (got,) = _run(vmfb, "main", [x.numpy(), *((p.detach().numpy() for p in module.parameters()) if weights == "inputs" else ())])
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
