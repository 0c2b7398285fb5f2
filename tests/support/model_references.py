"""What the models' tests (models/) share: a reference body in plain linalg for each kernel's
function, so a rewritten model compiles and runs on IREE's CPU (with_reference_kernels), that
compile and run with random arguments, and the dispatches IREE forms at flow level."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np

from iree_dispatch.models.rewrite import kernel_function_type


def _elem(t: str) -> str:
    return t.rsplit("x", 1)[1].rstrip(">")


def _convert(value: str, type_: str, src: str, dst: str, rank: int, name: str) -> tuple[list[str], str]:
    if src == dst:
        return [], value
    op = "arith.extf" if src in ("bf16", "f16") and dst == "f32" else "arith.truncf"
    dims = "x".join(["?"] * rank)
    return [f"%{name} = {op} {value} : tensor<{dims}x{src}> to tensor<{dims}x{dst}>"], f"%{name}"


def _norm_prologue(ins: list[str], eps, params: list[str]) -> tuple[list[str], str, list[str], str, str]:
    """A normalization's reference body up to its reductions: the row count and length, the input
    and its per-column parameters converted to f32, the epsilon (an argument after the parameters,
    or the kernel's constant), a zero-filled [m] and an empty [m, n] tensor, and the row-reduction
    generic's attributes. Returns (lines, x, parameter names, epsilon, reduction attributes)."""
    src = _elem(ins[0])
    lines = [f"%m = tensor.dim %a0, %c0 : {ins[0]}", f"%n = tensor.dim %a0, %c1 : {ins[0]}"]
    conv, x = _convert("%a0", ins[0], src, "f32", 2, "x32")
    lines += conv
    names = []
    for i, name in enumerate(params, start=1):
        conv, value = _convert(f"%a{i}", ins[i], src, "f32", 1, name)
        lines += conv
        names.append(value)
    eps_value = f"%a{len(params) + 1}" if eps is None else "%epsc"
    if eps is not None:
        lines.append(f"%epsc = arith.constant {eps!r} : f32")
    lines += [
        "%nf0 = arith.index_cast %n : index to i64",
        "%nf = arith.sitofp %nf0 : i64 to f32",
        "%z = arith.constant 0.0 : f32",
        "%er = tensor.empty(%m) : tensor<?xf32>",
        "%fr = linalg.fill ins(%z : f32) outs(%er : tensor<?xf32>) -> tensor<?xf32>",
        "%ex = tensor.empty(%m, %n) : tensor<?x?xf32>",
    ]
    red = '{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}'
    return lines, x, names, eps_value, red


# %t4 = 1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)), or 1 + erf(v / sqrt(2)): GELU = 0.5 v %t4.
_GELU_TANH = ("%c044 = arith.constant 0.044715 : f32\n%c079 = arith.constant 0.7978845608028654 : f32\n"
              "%v2 = arith.mulf %v, %v : f32\n%v3 = arith.mulf %v2, %v : f32\n%t0 = arith.mulf %v3, %c044 : f32\n%t1 = arith.addf %v, %t0 : f32\n"
              "%t2 = arith.mulf %t1, %c079 : f32\n%t3 = math.tanh %t2 : f32\n%t4 = arith.addf %t3, %cone : f32\n")
_GELU_ERF = "%crs2 = arith.constant 0.70710678118654752 : f32\n%t2 = arith.mulf %v, %crs2 : f32\n%t3 = math.erf %t2 : f32\n%t4 = arith.addf %t3, %cone : f32\n"


def reference_function(symbol: str, op: str, kernel, eps: float | None) -> str:
    ins, outs = kernel_function_type(kernel)
    out = outs[0]
    lines: list[str] = []
    c = "%c0 = arith.constant 0 : index\n%c1 = arith.constant 1 : index\n%c2 = arith.constant 2 : index"
    lines += c.splitlines()
    # The bias forms reading b [N, K] as stored: b transposed here, then the [K, N] form's body on it.
    as_stored = op.startswith("matmul_nt+bias")
    if as_stored:
        op = op.replace("matmul_nt", "matmul", 1)
        bt = f"tensor<?x?x{_elem(ins[1])}>"
        lines += [f"%tn = tensor.dim %a1, %c0 : {ins[1]}", f"%tk = tensor.dim %a1, %c1 : {ins[1]}", f"%tb = tensor.empty(%tk, %tn) : {bt}",
                  f"%a1t = linalg.transpose ins(%a1 : {ins[1]}) outs(%tb : {bt}) permutation = [1, 0]"]
    prologue = len(lines)
    args = [f"%a{i}: {t}" for i, t in enumerate(ins)]
    acc = _elem(out)
    if op in ("matmul+bias", "matmul+bias+residual") and acc != "f32":  # f32 accumulation and bias add, rounded once (gemm_bias_bf16)
        wide = "f32"
        wt = f"tensor<?x?x{wide}>"
        lines += [f"%m = tensor.dim %a0, %c0 : {ins[0]}", f"%n = tensor.dim %a1, %c1 : {ins[1]}"]
        conv_b, bias = _convert("%a2", ins[2], _elem(ins[2]), wide, 1, "b32")  # a bf16 bias widened (exact)
        lines += conv_b
        lines += [f"%z = arith.constant 0.0 : {wide}", f"%e = tensor.empty(%m, %n) : {wt}", f"%f = linalg.fill ins(%z : {wide}) outs(%e : {wt}) -> {wt}"]
        lines.append(f"%r = linalg.matmul ins(%a0, %a1 : {ins[0]}, {ins[1]}) outs(%f : {wt}) -> {wt}")
        lines.append(f"%eo = tensor.empty(%m, %n) : {out}")
        lines.append(
            "%h = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], "
            f'iterator_types = ["parallel", "parallel"]}} ins(%r, {bias} : {wt}, tensor<?x{wide}>) outs(%eo : {out}) {{\n^bb0(%x: {wide}, %y: {wide}, %o: {acc}):\n'
            f"%s = arith.addf %x, %y : {wide}\n%t = arith.truncf %s : {wide} to {acc}\nlinalg.yield %t : {acc}\n}} -> {out}"
        )
        if op == "matmul+bias+residual":  # then the residual add in the result's type, as the model's (gemm_bias_residual_bf16)
            lines.append(
                "%hr = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], "
                f'iterator_types = ["parallel", "parallel"]}} ins(%h, %a3 : {out}, {ins[3]}) outs(%eo : {out}) {{\n^bb0(%x: {acc}, %y: {acc}, %o: {acc}):\n'
                f"%s = arith.addf %x, %y : {acc}\nlinalg.yield %s : {acc}\n}} -> {out}"
            )
            lines.append(f"return %hr : {out}")
        else:
            lines.append(f"return %h : {out}")
    elif op in ("matmul", "matmul+bias", "matmul+bias+residual", "batch_matmul"):  # the result's type throughout (f32)
        batch = op == "batch_matmul"
        named = "linalg.batch_matmul" if batch else "linalg.matmul"
        if batch:
            lines += [f"%b = tensor.dim %a0, %c0 : {ins[0]}", f"%m = tensor.dim %a0, %c1 : {ins[0]}", f"%n = tensor.dim %a1, %c2 : {ins[1]}"]
            sizes = "%b, %m, %n"
        else:
            lines += [f"%m = tensor.dim %a0, %c0 : {ins[0]}", f"%n = tensor.dim %a1, %c1 : {ins[1]}"]
            sizes = "%m, %n"
        lines += [f"%z = arith.constant 0.0 : {acc}", f"%e = tensor.empty({sizes}) : {out}", f"%f = linalg.fill ins(%z : {acc}) outs(%e : {out}) -> {out}"]
        lines.append(f"%r = {named} ins(%a0, %a1 : {ins[0]}, {ins[1]}) outs(%f : {out}) -> {out}")
        if op in ("matmul+bias", "matmul+bias+residual"):
            lines.append(
                "%rb = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], "
                f'iterator_types = ["parallel", "parallel"]}} ins(%r, %a2 : {out}, {ins[2]}) outs(%e : {out}) {{\n^bb0(%x: {acc}, %y: {acc}, %o: {acc}):\n'
                f"%s = arith.addf %x, %y : {acc}\nlinalg.yield %s : {acc}\n}} -> {out}"
            )
            result = "%rb"
            if op == "matmul+bias+residual":  # then the residual add (gemm_nt_bias_residual_f32)
                lines.append(
                    "%rr = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], "
                    f'iterator_types = ["parallel", "parallel"]}} ins(%rb, %a3 : {out}, {ins[3]}) outs(%e : {out}) {{\n^bb0(%x: {acc}, %y: {acc}, %o: {acc}):\n'
                    f"%s = arith.addf %x, %y : {acc}\nlinalg.yield %s : {acc}\n}} -> {out}"
                )
                result = "%rr"
            lines.append(f"return {result} : {out}")
        else:
            lines.append(f"return %r : {out}")
    elif op in ("matmul_nt", "matmul_nt+extf"):  # a @ b^T, b [N, K]: f32 accumulation, rounded once to the result's type
        lines += [f"%m = tensor.dim %a0, %c0 : {ins[0]}", f"%n = tensor.dim %a1, %c0 : {ins[1]}", f"%k = tensor.dim %a1, %c1 : {ins[1]}"]
        bt = f"tensor<?x?x{_elem(ins[1])}>"
        lines += [f"%eb = tensor.empty(%k, %n) : {bt}", f"%bt = linalg.transpose ins(%a1 : {ins[1]}) outs(%eb : {bt}) permutation = [1, 0]"]
        lines += ["%z = arith.constant 0.0 : f32", "%e = tensor.empty(%m, %n) : tensor<?x?xf32>", "%f = linalg.fill ins(%z : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>"]
        lines.append(f"%r = linalg.matmul ins(%a0, %bt : {ins[0]}, {bt}) outs(%f : tensor<?x?xf32>) -> tensor<?x?xf32>")
        if op == "matmul_nt+extf":  # rounded to the operands' type, then widened back
            narrow = f"tensor<?x?x{_elem(ins[0])}>"
            lines += [f"%rt = arith.truncf %r : tensor<?x?xf32> to {narrow}", f"%rw = arith.extf %rt : {narrow} to {out}", f"return %rw : {out}"]
        elif acc == "f32":
            lines.append("return %r : tensor<?x?xf32>")
        else:
            lines += [f"%rt = arith.truncf %r : tensor<?x?xf32> to {out}", f"return %rt : {out}"]
    elif op in ("matmul+bias+gelu", "matmul+bias+gelu_erf"):  # f32 accumulation, bias and GELU (tanh or erf) in f32, rounded once
        lines += [f"%m = tensor.dim %a0, %c0 : {ins[0]}", f"%n = tensor.dim %a1, %c1 : {ins[1]}"]
        lines += ["%z = arith.constant 0.0 : f32", "%e = tensor.empty(%m, %n) : tensor<?x?xf32>", "%f = linalg.fill ins(%z : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>"]
        lines.append(f"%r = linalg.matmul ins(%a0, %a1 : {ins[0]}, {ins[1]}) outs(%f : tensor<?x?xf32>) -> tensor<?x?xf32>")
        conv_b, bias = _convert("%a2", ins[2], _elem(ins[2]), "f32", 1, "b32")
        lines += conv_b + [f"%eo = tensor.empty(%m, %n) : {out}"]
        lines.append(
            "%h = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], "
            f'iterator_types = ["parallel", "parallel"]}} ins(%r, {bias} : tensor<?x?xf32>, tensor<?xf32>) outs(%eo : {out}) {{\n^bb0(%x: f32, %y: f32, %o: {acc}):\n'
            "%v = arith.addf %x, %y : f32\n%chalf = arith.constant 0.5 : f32\n%cone = arith.constant 1.0 : f32\n"
            + (_GELU_ERF if op.endswith("gelu_erf") else _GELU_TANH)
            + "%t5 = arith.mulf %v, %chalf : f32\n%g = arith.mulf %t5, %t4 : f32\n"
            + ("%gt = arith.truncf %g : f32 to bf16\nlinalg.yield %gt : bf16\n" if acc == "bf16" else "linalg.yield %g : f32\n")
            + f"}} -> {out}"
        )
        lines.append(f"return %h : {out}")
    elif op == "swiglu":  # silu(gate) * up in f32, rounded once to the result's type (swiglu_f32, swiglu_bf16)
        gate, up = ins
        lines += [f"%m = tensor.dim %a0, %c0 : {gate}", f"%n = tensor.dim %a0, %c1 : {gate}", f"%e = tensor.empty(%m, %n) : {out}"]
        widen = [f"%{v}f = arith.extf %{v} : {_elem(t)} to f32" if _elem(t) != "f32" else f"%{v}f = arith.addf %{v}, %zero : f32" for v, t in (("g", gate), ("u", up))]
        rounded = f"%r = arith.truncf %p : f32 to {acc}" if acc != "f32" else "%r = arith.addf %p, %zero : f32"
        lines.append(
            "%h = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], "
            f'iterator_types = ["parallel", "parallel"]}} ins(%a0, %a1 : {gate}, {up}) outs(%e : {out}) {{\n^bb0(%g: {_elem(gate)}, %u: {_elem(up)}, %o: {acc}):\n'
            "%zero = arith.constant 0.0 : f32\n%one = arith.constant 1.0 : f32\n" + "\n".join(widen) + "\n"
            "%ng = arith.negf %gf : f32\n%ex = math.exp %ng : f32\n%den = arith.addf %ex, %one : f32\n%s = arith.divf %gf, %den : f32\n"
            f"%p = arith.mulf %s, %uf : f32\n{rounded}\nlinalg.yield %r : {acc}\n}} -> {out}"
        )
        lines.append(f"return %h : {out}")
    elif op == "softmax":
        src, dst = _elem(ins[0]), acc
        lines += [f"%m = tensor.dim %a0, %c0 : {ins[0]}", f"%n = tensor.dim %a0, %c1 : {ins[0]}", "%e = tensor.empty(%m, %n) : tensor<?x?xf32>"]
        conv, x = _convert("%a0", ins[0], src, "f32", 2, "x32")
        lines += conv
        lines.append(f"%s = linalg.softmax dimension(1) ins({x} : tensor<?x?xf32>) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>")
        conv, r = _convert("%s", "", "f32", dst, 2, "r")
        lines += conv + [f"return {r} : {out}"]
    elif op == "rmsnorm":
        prologue, x, (w,), eps_value, red = _norm_prologue(ins, eps, ["w32"])
        lines += prologue
        lines.append(
            f"%ss = linalg.generic {red} ins({x} : tensor<?x?xf32>) outs(%fr : tensor<?xf32>) {{\n^bb0(%v: f32, %o: f32):\n"
            "%q = arith.mulf %v, %v : f32\n%s = arith.addf %q, %o : f32\nlinalg.yield %s : f32\n} -> tensor<?xf32>"
        )
        full = (
            '{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d1)>, '
            'affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}'
        )
        lines.append(
            f"%y = linalg.generic {full} ins({x}, %ss, {w} : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>) outs(%ex : tensor<?x?xf32>) {{\n"
            f"^bb0(%v: f32, %s: f32, %wv: f32, %o: f32):\n%ms = arith.divf %s, %nf : f32\n%me = arith.addf %ms, {eps_value} : f32\n"
            "%rs = math.rsqrt %me : f32\n%t = arith.mulf %v, %rs : f32\n%tw = arith.mulf %t, %wv : f32\nlinalg.yield %tw : f32\n} -> tensor<?x?xf32>"
        )
        conv, r = _convert("%y", "", "f32", _elem(out), 2, "r")
        lines += conv + [f"return {r} : {out}"]
    elif op == "layernorm":
        prologue, x, (w, bb), eps_value, red = _norm_prologue(ins, eps, ["w32", "b32"])
        lines += prologue
        lines.append(
            f"%sum = linalg.generic {red} ins({x} : tensor<?x?xf32>) outs(%fr : tensor<?xf32>) {{\n"
            "^bb0(%v: f32, %o: f32):\n%s = arith.addf %v, %o : f32\nlinalg.yield %s : f32\n} -> tensor<?xf32>"
        )
        par = '{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}'
        lines.append(
            f"%d = linalg.generic {par} ins({x}, %sum : tensor<?x?xf32>, tensor<?xf32>) outs(%ex : tensor<?x?xf32>) {{\n^bb0(%v: f32, %s: f32, %o: f32):\n"
            "%mean = arith.divf %s, %nf : f32\n%r = arith.subf %v, %mean : f32\nlinalg.yield %r : f32\n} -> tensor<?x?xf32>"
        )
        lines.append(
            f"%ss = linalg.generic {red} ins(%d : tensor<?x?xf32>) outs(%fr : tensor<?xf32>) {{\n^bb0(%v: f32, %o: f32):\n"
            "%q = arith.mulf %v, %v : f32\n%s = arith.addf %q, %o : f32\nlinalg.yield %s : f32\n} -> tensor<?xf32>"
        )
        full = (
            '{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d1)>, '
            'affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}'
        )
        lines.append(
            f"%y = linalg.generic {full} ins(%d, %ss, {w}, {bb} : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) outs(%ex : tensor<?x?xf32>) {{\n"
            f"^bb0(%v: f32, %s: f32, %wv: f32, %bv: f32, %o: f32):\n%var = arith.divf %s, %nf : f32\n%ve = arith.addf %var, {eps_value} : f32\n"
            "%rs = math.rsqrt %ve : f32\n%t = arith.mulf %v, %rs : f32\n%tw = arith.mulf %t, %wv : f32\n"
            "%tb = arith.addf %tw, %bv : f32\nlinalg.yield %tb : f32\n} -> tensor<?x?xf32>"
        )
        conv, r = _convert("%y", "", "f32", _elem(out), 2, "r")
        lines += conv + [f"return {r} : {out}"]
    elif op == "attention":  # softmax(q @ kt / 8 + mask[z // (Z / B)]) @ v: f32 math, the probabilities rounded to bf16 as the kernel does
        q, kt, v, mask = ins
        lines += [f"%z = tensor.dim %a0, %c0 : {q}", f"%s = tensor.dim %a0, %c1 : {q}", f"%b = tensor.dim %a3, %c0 : {mask}", "%h = arith.divui %z, %b : index"]
        lines += ["%zero = arith.constant 0.0 : f32", "%scale = arith.constant 0.125 : f32", "%es = tensor.empty(%z, %s, %s) : tensor<?x?x?xf32>",
                  "%fs = linalg.fill ins(%zero : f32) outs(%es : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>",
                  f"%sc = linalg.batch_matmul ins(%a0, %a1 : {q}, {kt}) outs(%fs : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>"]
        lines.append(
            '%x = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], '
            'iterator_types = ["parallel", "parallel", "parallel"]} ins(%sc : tensor<?x?x?xf32>) outs(%es : tensor<?x?x?xf32>) {\n'
            "^bb0(%v: f32, %o: f32):\n%i0 = linalg.index 0 : index\n%i1 = linalg.index 1 : index\n%i2 = linalg.index 2 : index\n"
            f"%bi = arith.divui %i0, %h : index\n%m = tensor.extract %a3[%bi, %i1, %i2] : {mask}\n%mf = arith.extf %m : bf16 to f32\n"
            "%t = arith.mulf %v, %scale : f32\n%r = arith.addf %t, %mf : f32\nlinalg.yield %r : f32\n} -> tensor<?x?x?xf32>"
        )
        lines += ["%p = linalg.softmax dimension(2) ins(%x : tensor<?x?x?xf32>) outs(%es : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>",
                  "%pb = arith.truncf %p : tensor<?x?x?xf32> to tensor<?x?x?xbf16>",
                  "%eo = tensor.empty(%z, %s) : tensor<?x?x64xf32>", "%fo = linalg.fill ins(%zero : f32) outs(%eo : tensor<?x?x64xf32>) -> tensor<?x?x64xf32>",
                  f"%o = linalg.batch_matmul ins(%pb, %a2 : tensor<?x?x?xbf16>, {v}) outs(%fo : tensor<?x?x64xf32>) -> tensor<?x?x64xf32>",
                  f"%ob = arith.truncf %o : tensor<?x?x64xf32> to {out}", f"return %ob : {out}"]
    elif op in ("sdpa", "sdpa_causal", "sdpa_mask"):
        return sdpa_reference(symbol, op, kernel)
    elif op in ("sdpa_qkv", "sdpa_qkv_causal", "sdpa_qkv_mask"):
        return sdpa_qkv_reference(symbol, op, kernel)
    elif op in ("sdpa_bshd", "sdpa_bshd_causal", "sdpa_bshd_mask"):
        return sdpa_bshd_reference(symbol, op, kernel)
    elif op == "attention_qkv":  # the same on q, k, v sliced and transposed from [B, S, 3, H, 64], the result transposed to [B, S, H, 64]
        return attention_qkv_reference(symbol, kernel)
    else:
        raise AssertionError(op)
    if as_stored:
        lines = lines[:prologue] + [line.replace("%a1", "%a1t") for line in lines[prologue:]]
    body = "\n".join("    " + line for line in "\n".join(lines).splitlines())
    return f"  func.func private @{symbol}({', '.join(args)}) -> {out} {{\n{body}\n  }}"


def with_reference_kernels(program: str, report) -> str:
    done = set()
    for d in report.replaced:
        cap = d.capability
        if cap.label in done:
            continue
        done.add(cap.label)
        pattern = re.compile(rf"^\s*func\.func private @{re.escape(cap.label)}\(.*\)\s*->.*$", re.M)
        assert pattern.search(program), cap.label
        program = pattern.sub(lambda _m: reference_function(cap.label, cap.op, cap.kernel, cap.eps), program, count=1)
    return program


def _compile_cpu(text: str, path: Path) -> Path:
    import subprocess

    from iree.compiler.tools.binaries import find_tool

    src = path.with_suffix(".mlir")
    src.write_text(text)
    cmd = [find_tool("iree-compile"), "--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=generic"]
    cmd += [str(src), "-o", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return path


def _run(vmfb: Path, function: str, args):
    import iree.runtime as ireert

    config = ireert.Config("local-task")
    module = ireert.load_vm_module(ireert.VmModule.mmap(config.vm_instance, str(vmfb)), config)
    out = module[function](*args)
    outs = out if isinstance(out, (list, tuple)) else [out]
    return [o.to_host() for o in outs]


def _run_with_parameters(vmfb: Path, function: str, args, parameters):
    """_run with an export's params_as_globals weights ((name, tensor or array) pairs) provided as IREE parameters."""
    import iree.runtime as ireert

    from iree_dispatch.models.torch_export import parameter_module

    config = ireert.Config("local-task")
    module = ireert.load_vm_modules(parameter_module(parameters, config.vm_instance), ireert.VmModule.mmap(config.vm_instance, str(vmfb)), config=config)[-1]
    out = module[function](*args)
    outs = out if isinstance(out, (list, tuple)) else [out]
    return [o.to_host() for o in outs]


def _random_args(text: str, function: str, rng):
    import ml_dtypes

    sig = re.search(rf"func\.func @{function}\((.*?)\)\s*->", text)
    args = []
    types = [t.split("x") for t in re.findall(r"(?<!v)tensor<([^>]*)>", sig[1])]
    types += [[*dims.split(","), elem] for dims, elem in re.findall(r"vtensor<\[([\d,]*)\],(\w+)>", sig[1])]
    for *dims, elem in types:
        if elem == "si64":  # token ids (the GPT-2 layer models' vocabulary: 64)
            args.append(rng.integers(0, 64, [int(d) for d in dims]).astype(np.int64))
            continue
        dtype = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16, "f64": np.float64}[elem]
        args.append(rng.standard_normal([3 if d == "?" else int(d) for d in dims]).astype(np.float32).astype(dtype))  # dynamic dims: 3
    return args


def attention_qkv_reference(symbol: str, kernel) -> str:
    """qkv [B, S, 3, H, 64] -> q, kt, v as [B*H, S, 64] / [B*H, 64, S] (slices and transposes),
    softmax(q @ kt * 0.125 + mask[b]) @ v in f32 with the probabilities rounded to bf16 (as
    attention_bf16's reference body), rounded once to bf16 and transposed to [B, S, H, 64]."""
    (qkv, mask), (out,) = kernel_function_type(kernel)
    heads, kt_t, z3, kt3 = "tensor<?x?x?x64xbf16>", "tensor<?x?x64x?xbf16>", "tensor<?x?x64xbf16>", "tensor<?x64x?xbf16>"
    lines = ["%c0 = arith.constant 0 : index", "%c1 = arith.constant 1 : index", "%c3 = arith.constant 3 : index",
             f"%b = tensor.dim %a0, %c0 : {qkv}", f"%s = tensor.dim %a0, %c1 : {qkv}", f"%h = tensor.dim %a0, %c3 : {qkv}", "%z = arith.muli %b, %h : index"]
    for i, name in enumerate("qkv"):  # [B, S, H, 64] each, as [B, H, S, 64] (k: [B, H, 64, S]), heads merged into the batch
        lines.append(f"%{name}4 = tensor.extract_slice %a0[0, 0, {i}, 0, 0] [%b, %s, 1, %h, 64] [1, 1, 1, 1, 1] : {qkv} to {heads}")
        if name == "k":
            lines += [f"%ek = tensor.empty(%b, %h, %s) : {kt_t}",
                      f"%kt4 = linalg.transpose ins(%k4 : {heads}) outs(%ek : {kt_t}) permutation = [0, 2, 3, 1]",
                      f"%kt = tensor.collapse_shape %kt4 [[0, 1], [2], [3]] : {kt_t} into {kt3}"]
        else:
            lines += [f"%e{name} = tensor.empty(%b, %h, %s) : {heads}",
                      f"%{name}t4 = linalg.transpose ins(%{name}4 : {heads}) outs(%e{name} : {heads}) permutation = [0, 2, 1, 3]",
                      f"%{name}3 = tensor.collapse_shape %{name}t4 [[0, 1], [2], [3]] : {heads} into {z3}"]
    lines += ["%zero = arith.constant 0.0 : f32", "%scale = arith.constant 0.125 : f32", "%es = tensor.empty(%z, %s, %s) : tensor<?x?x?xf32>",
              "%fs = linalg.fill ins(%zero : f32) outs(%es : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>",
              f"%sc = linalg.batch_matmul ins(%q3, %kt : {z3}, {kt3}) outs(%fs : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>"]
    lines.append(
        '%x = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], '
        'iterator_types = ["parallel", "parallel", "parallel"]} ins(%sc : tensor<?x?x?xf32>) outs(%es : tensor<?x?x?xf32>) {\n'
        "^bb0(%v: f32, %o: f32):\n%i0 = linalg.index 0 : index\n%i1 = linalg.index 1 : index\n%i2 = linalg.index 2 : index\n"
        f"%bi = arith.divui %i0, %h : index\n%m = tensor.extract %a1[%bi, %i1, %i2] : {mask}\n%mf = arith.extf %m : bf16 to f32\n"
        "%t = arith.mulf %v, %scale : f32\n%r = arith.addf %t, %mf : f32\nlinalg.yield %r : f32\n} -> tensor<?x?x?xf32>"
    )
    lines += ["%p = linalg.softmax dimension(2) ins(%x : tensor<?x?x?xf32>) outs(%es : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>",
              "%pb = arith.truncf %p : tensor<?x?x?xf32> to tensor<?x?x?xbf16>",
              "%eo = tensor.empty(%z, %s) : tensor<?x?x64xf32>", "%fo = linalg.fill ins(%zero : f32) outs(%eo : tensor<?x?x64xf32>) -> tensor<?x?x64xf32>",
              f"%o = linalg.batch_matmul ins(%pb, %v3 : tensor<?x?x?xbf16>, {z3}) outs(%fo : tensor<?x?x64xf32>) -> tensor<?x?x64xf32>",
              f"%ob = arith.truncf %o : tensor<?x?x64xf32> to {z3}",
              f"%o4 = tensor.expand_shape %ob [[0, 1], [2], [3]] output_shape [%b, %h, %s, 64] : {z3} into {heads}",
              f"%et = tensor.empty(%b, %s, %h) : {out}",
              f"%ot = linalg.transpose ins(%o4 : {heads}) outs(%et : {out}) permutation = [0, 2, 1, 3]",
              f"return %ot : {out}"]
    body = "\n".join("    " + line for line in "\n".join(lines).splitlines())
    return f"  func.func private @{symbol}(%a0: {qkv}, %a1: {mask}) -> {out} {{\n{body}\n  }}"


def _flow_dispatches(linked: Path) -> list[str]:
    from iree.compiler.tools.binaries import find_tool

    out = linked.with_suffix(".flow.mlir")
    cmd = [find_tool("iree-compile"), "--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80", "--compile-to=flow", linked.name, "-o", str(out)]
    subprocess.run(cmd, check=True, cwd=linked.parent, capture_output=True)
    return re.findall(r"flow\.dispatch (\{[^}]*\}|@\S+)", out.read_text())


def _as_f32(value: str, dtype: str) -> tuple[str, str]:
    """(the line widening `value` of `dtype` to f32, the f32 value's name); f32 needs no line."""
    if dtype == "f32":
        return "", value
    return f"{value}f = arith.extf {value} : {dtype} to f32\n", f"{value}f"


def sdpa_reference(symbol: str, op: str, kernel) -> str:
    """softmax(q @ k^T * scale + mask) @ v over q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D] (query head
    h reads head h / (Hq / Hkv)): iree_linalg_ext.attention's semantics, f32 scores, softmax and
    context, rounded once. sdpa_causal masks key j > query i with -inf; sdpa_mask adds
    mask[b % MB, h % MH, min(i, MQ - 1), j] (its dims of size 1 broadcast)."""
    ins, (out,) = kernel_function_type(kernel)
    return _sdpa_function(symbol, op, ins, out)


def sdpa_qkv_reference(symbol: str, op: str, kernel) -> str:
    """The sdpa reference on q, k, v sliced from qkv [B, S, 3, H, D] and transposed to [B, H, S, D],
    its result transposed back to [B, S, H, D]: a function calling the sdpa one (`symbol`_heads)."""
    ins, (out,) = kernel_function_type(kernel)
    qkv, dtype = ins[0], _elem(out)
    d = re.search(r"x(\d+)x\w+>$", out).group(1)
    heads, seq = f"tensor<?x?x?x{d}x{dtype}>", f"tensor<?x?x?x{d}x{dtype}>"
    lines = [f"%c{i} = arith.constant {i} : index" for i in (0, 1, 3)]
    lines += [f"%b = tensor.dim %a0, %c0 : {qkv}", f"%s = tensor.dim %a0, %c1 : {qkv}", f"%h = tensor.dim %a0, %c3 : {qkv}"]
    for i, name in enumerate("qkv"):  # [B, S, H, D] each, transposed to [B, H, S, D]
        lines += [f"%{name}4 = tensor.extract_slice %a0[0, 0, {i}, 0, 0] [%b, %s, 1, %h, {d}] [1, 1, 1, 1, 1] : {qkv} to {seq}",
                  f"%e{name} = tensor.empty(%b, %h, %s) : {heads}",
                  f"%{name} = linalg.transpose ins(%{name}4 : {seq}) outs(%e{name} : {heads}) permutation = [0, 2, 1, 3]"]
    rest = [f"%a{i}" for i in range(1, len(ins))]
    plain_op = op.replace("_qkv", "")
    return _heads_transposed(symbol, plain_op, ins, out, lines, rest, heads, "%b, %s, %h")


def sdpa_bshd_reference(symbol: str, op: str, kernel) -> str:
    """The sdpa reference on q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] each transposed to [B, H, S, D],
    its result transposed back to [B, Sq, Hq, D]: a function calling the sdpa one (`symbol`_heads)."""
    ins, (out,) = kernel_function_type(kernel)
    dtype = _elem(out)
    d = re.search(r"x(\d+)x\w+>$", out).group(1)
    heads = f"tensor<?x?x?x{d}x{dtype}>"
    lines = [f"%c{i} = arith.constant {i} : index" for i in (0, 1, 2)]
    for i, name in enumerate("qkv"):  # [B, S, H, D] each, transposed to [B, H, S, D]
        lines += [f"%{name}b = tensor.dim %a{i}, %c0 : {ins[i]}", f"%{name}s = tensor.dim %a{i}, %c1 : {ins[i]}", f"%{name}h = tensor.dim %a{i}, %c2 : {ins[i]}",
                  f"%e{name} = tensor.empty(%{name}b, %{name}h, %{name}s) : {heads}",
                  f"%{name} = linalg.transpose ins(%a{i} : {ins[i]}) outs(%e{name} : {heads}) permutation = [0, 2, 1, 3]"]
    rest = [f"%a{i}" for i in range(3, len(ins))]
    return _heads_transposed(symbol, op.replace("_bshd", ""), ins, out, lines, rest, heads, "%qb, %qs, %qh")


def _heads_transposed(symbol: str, plain_op: str, ins: list[str], out: str, lines: list[str], rest: list[str], heads: str, out_dims: str) -> str:
    """`symbol`: `lines` (which leave q, k and v as [B, H, S, D] in %q, %k, %v), then the plain sdpa
    reference (`symbol`_heads) on them and the rest of the arguments, its result transposed back to
    [B, S, H, D] (sizes `out_dims`) and cast to `out`."""
    inner_ins = [heads, heads, heads, *ins[len(ins) - len(rest):]]
    lines = [*lines, f"%o = func.call @{symbol}_heads(%q, %k, %v, {', '.join(rest)}) : ({', '.join(inner_ins)}) -> {heads}",
             f"%eo = tensor.empty({out_dims}) : {heads}",
             f"%ot = linalg.transpose ins(%o : {heads}) outs(%eo : {heads}) permutation = [0, 2, 1, 3]",
             f"%oc = tensor.cast %ot : {heads} to {out}", f"return %oc : {out}"]
    args = [f"%a{i}: {t}" for i, t in enumerate(ins)]
    body = "\n".join("    " + line for line in lines)
    outer = f"  func.func private @{symbol}({', '.join(args)}) -> {out} {{\n{body}\n  }}"
    return _sdpa_function(f"{symbol}_heads", plain_op, inner_ins, heads) + "\n" + outer


def _sdpa_function(symbol: str, op: str, ins: list[str], out: str) -> str:
    dtype = _elem(out)
    q, k = ins[0], ins[1]
    f4 = "tensor<?x?x?x?xf32>"
    args = [f"%a{i}: {t}" for i, t in enumerate(ins)]
    scale = f"%a{len(ins) - 1}"
    lines = [f"%c{i} = arith.constant {i} : index" for i in range(4)]
    lines += [f"%b = tensor.dim %a0, %c0 : {q}", f"%hq = tensor.dim %a0, %c1 : {q}", f"%sq = tensor.dim %a0, %c2 : {q}", f"%d = tensor.dim %a0, %c3 : {q}",
              f"%hkv = tensor.dim %a1, %c1 : {k}", f"%sk = tensor.dim %a1, %c2 : {k}", "%g = arith.divui %hq, %hkv : index",
              "%zero = arith.constant 0.0 : f32", "%ninf = arith.constant 0xFF800000 : f32",
              f"%es = tensor.empty(%b, %hq, %sq, %sk) : {f4}", f"%fs = linalg.fill ins(%zero : f32) outs(%es : {f4}) -> {f4}"]
    (widen_x, xf), (widen_y, yf) = _as_f32("%x", dtype), _as_f32("%y", dtype)
    red5 = ('{indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>], '
            'iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}')
    # scores[b, h, i, j] = sum_d q[b, h, i, d] * k[b, h / G, j, d]
    lines.append(
        f"%sc = linalg.generic {red5} ins(%a0 : {q}) outs(%fs : {f4}) {{\n^bb0(%x: {dtype}, %acc: f32):\n"
        "%i0 = linalg.index 0 : index\n%i1 = linalg.index 1 : index\n%i3 = linalg.index 3 : index\n%i4 = linalg.index 4 : index\n"
        f"%hk = arith.divui %i1, %g : index\n%y = tensor.extract %a1[%i0, %hk, %i3, %i4] : {k}\n"
        f"{widen_x}{widen_y}%p = arith.mulf {xf}, {yf} : f32\n%s = arith.addf %acc, %p : f32\n"
        f"linalg.yield %s : f32\n}} -> {f4}"
    )
    if op == "sdpa_mask":
        mask = ins[3]
        lines += [f"%mb = tensor.dim %a3, %c0 : {mask}", f"%mh = tensor.dim %a3, %c1 : {mask}", f"%mq = tensor.dim %a3, %c2 : {mask}",
                  "%mq1 = arith.subi %mq, %c1 : index"]
        widen_m, mf = _as_f32("%m", dtype)
        extra = (f"%mbi = arith.remui %i0, %mb : index\n%mhi = arith.remui %i1, %mh : index\n%mqi = arith.minui %i2, %mq1 : index\n"
                 f"%m = tensor.extract %a3[%mbi, %mhi, %mqi, %i3] : {mask}\n{widen_m}%r = arith.addf %t, {mf} : f32\n")
    elif op == "sdpa_causal":
        extra = "%above = arith.cmpi ugt, %i3, %i2 : index\n%r = arith.select %above, %ninf, %t : f32\n"
    else:
        extra = "%r = arith.addf %t, %zero : f32\n"
    ident4 = "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>"
    lines.append(
        f'%x = linalg.generic {{indexing_maps = [{ident4}, {ident4}], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} '
        f"ins(%sc : {f4}) outs(%es : {f4}) {{\n^bb0(%v: f32, %o: f32):\n"
        "%i0 = linalg.index 0 : index\n%i1 = linalg.index 1 : index\n%i2 = linalg.index 2 : index\n%i3 = linalg.index 3 : index\n"
        f"%t = arith.mulf %v, {scale} : f32\n{extra}linalg.yield %r : f32\n}} -> {f4}"
    )
    lines += [f"%pr = linalg.softmax dimension(3) ins(%x : {f4}) outs(%es : {f4}) -> {f4}",
              f"%eo = tensor.empty(%b, %hq, %sq, %d) : {f4}", f"%fo = linalg.fill ins(%zero : f32) outs(%eo : {f4}) -> {f4}"]
    # out[b, h, i, e] = sum_j p[b, h, i, j] * v[b, h / G, j, e]
    lines.append(
        f"%o = linalg.generic {red5} ins(%pr : {f4}) outs(%fo : {f4}) {{\n^bb0(%pv: f32, %acc: f32):\n"
        "%i0 = linalg.index 0 : index\n%i1 = linalg.index 1 : index\n%i3 = linalg.index 3 : index\n%i4 = linalg.index 4 : index\n"
        f"%hk = arith.divui %i1, %g : index\n%y = tensor.extract %a2[%i0, %hk, %i4, %i3] : {ins[2]}\n"
        f"{widen_y}%p = arith.mulf %pv, {yf} : f32\n%s = arith.addf %acc, %p : f32\nlinalg.yield %s : f32\n}} -> {f4}"
    )
    if dtype == "f32":  # the context is the result: no rounding
        lines += [f"%oc = tensor.cast %o : {f4} to {out}", f"return %oc : {out}"]
    else:
        lines += [f"%ot = arith.truncf %o : {f4} to tensor<?x?x?x?x{dtype}>", f"%oc = tensor.cast %ot : tensor<?x?x?x?x{dtype}> to {out}", f"return %oc : {out}"]
    body = "\n".join("    " + line for line in "\n".join(lines).splitlines())
    return f"  func.func private @{symbol}({', '.join(args)}) -> {out} {{\n{body}\n  }}"
