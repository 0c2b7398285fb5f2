"""Torch models → MLIR for `compile_model` (needs torch; IREE's FX importer comes with the compiler).

`export_mlir(module, args, path)`: torch.export, then IREE's FX importer, weights frozen into the
module as constants. `export_mlir(..., params_as_inputs=True)`: the module's parameters become
the function's trailing arguments instead (in `parameter_names(module)` order), so the MLIR and
the .vmfb hold no weights: a GPT-2 with inlined weights is a 250-500 MB vmfb, without them a few
MB; the caller passes the weights at run time (`benchmarks/model.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def parameter_names(module) -> list[str]:
    """The module's parameters, each once (tied weights under their first name)."""
    return [name for name, _ in module.named_parameters()]


class _WithParameters:
    """A torch.nn.Module whose forward takes (*args, *parameters)."""

    @staticmethod
    def make(module, n_args: int, kwarg_names: Sequence[str] = (), output=None):
        import torch

        names = parameter_names(module)

        class WithParameters(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = module

            def forward(self, *flat):
                args = flat[:n_args]
                kwargs = dict(zip(kwarg_names, flat[n_args : n_args + len(kwarg_names)]))
                params = dict(zip(names, flat[n_args + len(kwarg_names) :]))
                out = torch.func.functional_call(self.inner, params, args, kwargs)
                return output(out) if output is not None else out

        return WithParameters()


def export_mlir(
    module,
    args: Sequence,
    path: str | Path,
    *,
    kwargs: dict | None = None,
    params_as_inputs: bool = False,
    output=None,
    func_name: str = "main",
) -> Path:
    """Exports `module(*args, **kwargs)` with torch.export and imports it with IREE's FX importer
    into `path` (torch dialect MLIR). `output`: a function applied to the module's output (e.g.
    `lambda o: o.logits`)."""
    import torch
    from iree.compiler import ir
    from iree.compiler.extras.fx_importer import FxImporter

    kwargs = dict(kwargs or {})
    if params_as_inputs:
        wrapped = _WithParameters.make(module, len(args), list(kwargs), output)
        flat = (*args, *kwargs.values(), *(p.detach() for _, p in module.named_parameters()))
        prog = torch.export.export(wrapped, flat)
    else:
        if output is not None:
            inner = module

            class Output(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.inner = inner

                def forward(self, *a, **k):
                    return output(self.inner(*a, **k))

            module = Output()
        prog = torch.export.export(module, tuple(args), kwargs)
    importer = FxImporter(context=ir.Context())
    importer.import_frozen_program(prog, func_name=func_name)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        importer.module.operation.print(file=f)
    return path
