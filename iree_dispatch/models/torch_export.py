"""Torch models → MLIR for `compile_model` (needs torch; IREE's FX importer comes with the compiler).

`export_mlir(module, args, path)`: torch.export, then IREE's FX importer, weights frozen into the
module as constants. Two ways keep the weights out of the MLIR and the .vmfb (a GPT-2 with
inlined weights is a 250-500 MB vmfb, without them a few MB):
- `params_as_inputs=True`: the module's parameters become the function's trailing arguments (in
  `parameter_names(module)` order); the caller passes them on every call.
- `params_as_globals=True`: each parameter becomes a module global read from an IREE parameter
  (scope `PARAMETER_SCOPE`, key its name in `parameter_names(module)`), loaded onto the device
  once, when the module is loaded (`parameter_module` makes the IREE module that provides them); a
  call takes the model's inputs only. Each argument costs IREE's call a few checks and a binding
  (BERT-base's 199 weights: a call of 5.25 ms as arguments, 4.91 as parameters, on an H100:
  docs/models.md).

Between export and import, what transformers models do by default is made importable and compilable
(docs/models.md, "Torch models"): every buffer, persistent or not, is given to the importer as a
constant (in both modes: buffers are computed from the configuration, not trained); the ops
transformers' mask builders emit that IREE does not legalize are decomposed (`decompositions()`)
and an `x & True` they start from is dropped; SDPA's bool masks become additive masks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def _diff(x, n: int = 1, dim: int = -1, prepend=None, append=None):
    """aten.diff as slices and a subtraction (a not-equal for bool), as torch.diff defines it."""
    import torch

    parts = [t for t in (prepend, x, append) if t is not None]
    x = torch.cat(parts, dim) if len(parts) > 1 else x
    for _ in range(n):
        later, earlier = x.narrow(dim, 1, x.shape[dim] - 1), x.narrow(dim, 0, x.shape[dim] - 1)
        x = torch.ne(later, earlier) if x.dtype == torch.bool else later - earlier
    return x


def _sdpa_additive_mask(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """torch's SDPA with a bool mask (transformers' own masks: True where a query sees a key) as
    SDPA with an additive mask in the query's type, which the kernels take: 0 where True, half the
    type's lowest value elsewhere. Not -inf, nor the lowest value (transformers' eager masks):
    IREE's attention scales the masked scores (by log2(e), computing exp as exp2), so either
    becomes -inf and a query that sees no key (left padding under a causal mask) gets NaN
    (measured: with the lowest value it does, with half of it not), which reaches every position
    of its sequence through the next layer's keys. With half the lowest value that query averages
    the values (torch gives zeros), at a position that is padding, and a hidden key still weighs
    exactly 0. Other calls are left as they are."""
    import torch

    if attn_mask is None or attn_mask.dtype != torch.bool:
        return NotImplemented
    additive = torch.where(attn_mask, torch.zeros((), dtype=query.dtype), torch.full((), torch.finfo(query.dtype).min / 2, dtype=query.dtype))
    return torch.ops.aten.scaled_dot_product_attention.default(query, key, value, additive, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)


def decompositions() -> dict:
    """The decompositions export_mlir runs before import: only the ops transformers' mask builders
    emit that IREE does not legalize. torch's default table is not run: it would decompose
    scaled_dot_product_attention too (which IREE imports as one attention op, and the sdpa kinds
    replace) and it breaks views of transposed tensors in GPT-2's attention."""
    import torch
    from torch._decomp import get_decompositions

    aten = torch.ops.aten
    return {
        # torch's packed-sequence check (transformers' find_packed_sequence_indices): no IREE lowering, no torch decomposition
        aten.diff.default: _diff,
        # transformers' sdpa_mask: a 0-d bool new_ones, which IREE's importer makes a literal it cannot legalize; aten.full lowers
        **get_decompositions([aten.new_ones, aten.new_zeros, aten.new_full]),
        # transformers' and_masks/or_masks: `&` and `|` of bool masks, which IREE lowers only as bitwise ops
        aten.__and__.Tensor: aten.bitwise_and.Tensor,
        aten.__or__.Tensor: aten.bitwise_or.Tensor,
        aten.scaled_dot_product_attention.default: _sdpa_additive_mask,
    }


def _drop_and_with_true(graph) -> None:
    """`x & True` → `x` where the result is `x`'s own shape and type: transformers' and_masks starts
    from a 0-d `new_ones(dtype=bool)`, which IREE's importer folds into a bool literal, and IREE
    legalizes no bool literal."""
    import torch

    aten = torch.ops.aten
    for node in list(graph.nodes):
        if node.target not in (aten.bitwise_and.Tensor, aten.logical_and.default):
            continue
        result = node.meta.get("val")
        for true, other in (node.args[:2], node.args[1::-1]):
            if _is_true_fill(true) and getattr(other, "meta", {}).get("val") is not None and result is not None \
                    and other.meta["val"].shape == result.shape and other.meta["val"].dtype == result.dtype == torch.bool:
                node.replace_all_uses_with(other)
                graph.erase_node(node)
                break
    graph.eliminate_dead_code()


def _is_true_fill(node) -> bool:
    import torch

    return getattr(node, "target", None) is torch.ops.aten.full.default and node.args[1] in (True, 1) and node.kwargs.get("dtype") == torch.bool


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
    params_as_globals: bool = False,
    output=None,
    func_name: str = "main",
) -> Path:
    """Exports `module(*args, **kwargs)` with torch.export and imports it with IREE's FX importer
    into `path` (torch dialect MLIR). `output`: a function applied to the module's output (e.g.
    `lambda o: o.logits`). Keyword arguments given as None are left out (the module's defaults).
    The exported program's decompositions, buffers and masks are prepared for IREE first (the
    module docstring). `params_as_inputs`, `params_as_globals`: where the weights go instead of
    constants (the module docstring); at most one."""
    if params_as_inputs and params_as_globals:
        raise ValueError("export_mlir: params_as_inputs and params_as_globals exclude each other")
    import torch
    from iree.compiler import ir
    from iree.compiler.extras.fx_importer import FxImporter

    # A keyword argument given as None (attention_mask=None) means the model's default; passed on,
    # torch.export would make it a `!torch.none` argument of the function, which IREE can't take.
    kwargs = {name: value for name, value in (kwargs or {}).items() if value is not None}
    if params_as_inputs or params_as_globals:
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
    prog = prog.run_decompositions(decompositions())
    _drop_and_with_true(prog.graph)
    # torch.export keeps a non-persistent buffer's value (Llama's rotary inv_freq, BERT's
    # position_ids) in `constants`, IREE's importer looks for every buffer in `state_dict`.
    prog.state_dict.update({name: prog.constants[name] for name in prog.graph_signature.non_persistent_buffers})
    importer = FxImporter(context=ir.Context())
    importer.import_frozen_program(prog, func_name=func_name)
    if params_as_globals:
        _arguments_to_globals(importer.module, func_name, parameter_names(module))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        importer.module.operation.print(file=f)
    return path


PARAMETER_SCOPE = "model"  # the IREE parameter scope of params_as_globals' weights


def _arguments_to_globals(module, func_name: str, names: Sequence[str]) -> None:
    """The last len(names) arguments of `func_name` become immutable globals, each initialized
    from the IREE parameter PARAMETER_SCOPE::name and read once at the function's entry."""
    from iree.compiler import ir

    with module.context, ir.Location.unknown():
        func = next(op for op in module.body.operations if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == func_name)
        block = func.regions[0].blocks[0]
        first = len(block.arguments) - len(names)
        function_type = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        first_op = block.operations[0]
        for index, name in enumerate(names):
            argument = block.arguments[first + index]
            vtensor = str(argument.type)  # !torch.vtensor<[d0,d1,...],dtype>
            shape, dtype = vtensor[len("!torch.vtensor<["):-1].rsplit("],", 1)
            element = "i" + dtype[2:] if dtype[:2] in ("si", "ui") else dtype  # builtin tensors' integers are signless
            tensor = ir.Type.parse(f"tensor<{'x'.join(shape.split(',')) + 'x' if shape else ''}{element}>")
            symbol = f"__parameter_{index}"
            ir.InsertionPoint(func).insert(ir.Operation.parse(f'util.global private @{symbol} = #stream.parameter.named<"{PARAMETER_SCOPE}"::"{name}"> : {tensor}'))
            with ir.InsertionPoint(first_op):
                loaded = ir.Operation.create("util.global.load", results=[tensor], attributes={"global": ir.FlatSymbolRefAttr.get(symbol),
                                                                                               "is_immutable": ir.UnitAttr.get()})
                value = ir.Operation.create("torch_c.from_builtin_tensor", results=[argument.type], operands=[loaded.result])
            argument.replace_all_uses_with(value.result)
        for index in reversed(range(first, len(block.arguments))):
            block.erase_argument(index)
        func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(list(function_type.inputs)[:first], list(function_type.results)))


def parameter_module(parameters: Iterable[tuple[str, Any]], instance: Any) -> Any:
    """The IREE module (iree.runtime.VmModule) that provides a params_as_globals export's weights:
    `parameters` as (name, tensor or array) pairs, e.g. the torch module's `named_parameters()`,
    copied to the host as they are now, under PARAMETER_SCOPE. Load it before the model's module
    (`iree.runtime.load_vm_modules(parameter_module(...), model, config=...)`), which copies them
    to the device once."""
    import iree.runtime as ireert

    index = ireert.ParameterIndex()
    for name, value in parameters:
        index.add_buffer(name, _host_bytes(value))
    return ireert.create_io_parameters_module(instance, index.create_provider(scope=PARAMETER_SCOPE))


def _host_bytes(value: Any) -> bytes:
    """A torch tensor's or an array's elements on the host, contiguous (bf16 as its 16-bit words)."""
    import numpy as np

    if hasattr(value, "detach"):  # a torch tensor (torch is imported only where a model is exported)
        import torch

        t = value.detach().contiguous().cpu()
        value = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()
    return np.ascontiguousarray(value).tobytes()
