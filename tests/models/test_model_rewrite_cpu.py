"""The rewrite computes what the model computes: each kernel's function is given a reference body
(plain linalg, with the kernel's types and float32 math where the kernel computes in f32), the
rewritten model and the original are compiled for the CPU, and their results compared. This checks
everything but the CUDA kernels themselves (which their own GPU tests check): operand order,
collapses and expansions, casts, epsilons, narrowing, the uses redirected."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.compiler")  # the model compiler: not in a runtime-only install

from iree_dispatch.models.compiler import rewrite_model  # noqa: E402
from iree_dispatch.models.rewrite import kernel_function_type  # noqa: E402

MODELS = Path(__file__).parent / "models"
K = MODELS / "kernels"
ALL = [K / "naive.toml", K / "library.toml", K / "gemm.toml", K / "fixed_eps.toml"]


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


def reference_function(symbol: str, op: str, kernel, eps: float | None) -> str:
    ins, outs = kernel_function_type(kernel)
    out = outs[0]
    lines: list[str] = []
    c = "%c0 = arith.constant 0 : index\n%c1 = arith.constant 1 : index\n%c2 = arith.constant 2 : index"
    lines += c.splitlines()
    args = [f"%a{i}: {t}" for i, t in enumerate(ins)]
    acc = _elem(out)
    if op == "matmul+bias" and _elem(ins[2]) != acc:  # f32 accumulation and bias add, rounded once (gemm_bias_bf16)
        wide = _elem(ins[2])
        wt = f"tensor<?x?x{wide}>"
        lines += [f"%m = tensor.dim %a0, %c0 : {ins[0]}", f"%n = tensor.dim %a1, %c1 : {ins[1]}"]
        lines += [f"%z = arith.constant 0.0 : {wide}", f"%e = tensor.empty(%m, %n) : {wt}", f"%f = linalg.fill ins(%z : {wide}) outs(%e : {wt}) -> {wt}"]
        lines.append(f"%r = linalg.matmul ins(%a0, %a1 : {ins[0]}, {ins[1]}) outs(%f : {wt}) -> {wt}")
        lines.append(f"%eo = tensor.empty(%m, %n) : {out}")
        lines.append(
            "%h = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], "
            f'iterator_types = ["parallel", "parallel"]}} ins(%r, %a2 : {wt}, {ins[2]}) outs(%eo : {out}) {{\n^bb0(%x: {wide}, %y: {wide}, %o: {acc}):\n'
            f"%s = arith.addf %x, %y : {wide}\n%t = arith.truncf %s : {wide} to {acc}\nlinalg.yield %t : {acc}\n}} -> {out}"
        )
        lines.append(f"return %h : {out}")
    elif op in ("matmul", "matmul+bias", "batch_matmul"):
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
        if op == "matmul+bias":
            lines.append(
                "%rb = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], "
                f'iterator_types = ["parallel", "parallel"]}} ins(%r, %a2 : {out}, {ins[2]}) outs(%e : {out}) {{\n^bb0(%x: {acc}, %y: {acc}, %o: {acc}):\n'
                f"%s = arith.addf %x, %y : {acc}\nlinalg.yield %s : {acc}\n}} -> {out}"
            )
            lines.append(f"return %rb : {out}")
        else:
            lines.append(f"return %r : {out}")
    elif op == "matmul_nt":  # a @ b^T, b [N, K]: f32 accumulation, rounded once to the result's type
        lines += [f"%m = tensor.dim %a0, %c0 : {ins[0]}", f"%n = tensor.dim %a1, %c0 : {ins[1]}", f"%k = tensor.dim %a1, %c1 : {ins[1]}"]
        bt = f"tensor<?x?x{_elem(ins[1])}>"
        lines += [f"%eb = tensor.empty(%k, %n) : {bt}", f"%bt = linalg.transpose ins(%a1 : {ins[1]}) outs(%eb : {bt}) permutation = [1, 0]"]
        lines += ["%z = arith.constant 0.0 : f32", "%e = tensor.empty(%m, %n) : tensor<?x?xf32>", "%f = linalg.fill ins(%z : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>"]
        lines.append(f"%r = linalg.matmul ins(%a0, %bt : {ins[0]}, {bt}) outs(%f : tensor<?x?xf32>) -> tensor<?x?xf32>")
        if acc == "f32":
            lines.append("return %r : tensor<?x?xf32>")
        else:
            lines += [f"%rt = arith.truncf %r : tensor<?x?xf32> to {out}", f"return %rt : {out}"]
    elif op == "matmul+bias+gelu":  # f32 accumulation, bias and GELU (tanh) in f32, rounded once
        lines += [f"%m = tensor.dim %a0, %c0 : {ins[0]}", f"%n = tensor.dim %a1, %c1 : {ins[1]}"]
        lines += ["%z = arith.constant 0.0 : f32", "%e = tensor.empty(%m, %n) : tensor<?x?xf32>", "%f = linalg.fill ins(%z : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>"]
        lines.append(f"%r = linalg.matmul ins(%a0, %a1 : {ins[0]}, {ins[1]}) outs(%f : tensor<?x?xf32>) -> tensor<?x?xf32>")
        conv_b, bias = _convert("%a2", ins[2], _elem(ins[2]), "f32", 1, "b32")
        lines += conv_b + [f"%eo = tensor.empty(%m, %n) : {out}"]
        lines.append(
            "%h = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], "
            f'iterator_types = ["parallel", "parallel"]}} ins(%r, {bias} : tensor<?x?xf32>, tensor<?xf32>) outs(%eo : {out}) {{\n^bb0(%x: f32, %y: f32, %o: {acc}):\n'
            "%v = arith.addf %x, %y : f32\n%c044 = arith.constant 0.044715 : f32\n%c079 = arith.constant 0.7978845608028654 : f32\n"
            "%chalf = arith.constant 0.5 : f32\n%cone = arith.constant 1.0 : f32\n"
            "%v2 = arith.mulf %v, %v : f32\n%v3 = arith.mulf %v2, %v : f32\n%t0 = arith.mulf %v3, %c044 : f32\n%t1 = arith.addf %v, %t0 : f32\n"
            "%t2 = arith.mulf %t1, %c079 : f32\n%t3 = math.tanh %t2 : f32\n%t4 = arith.addf %t3, %cone : f32\n%t5 = arith.mulf %v, %chalf : f32\n"
            + "%g = arith.mulf %t5, %t4 : f32\n"
            + ("%gt = arith.truncf %g : f32 to bf16\nlinalg.yield %gt : bf16\n" if acc == "bf16" else "linalg.yield %g : f32\n")
            + f"}} -> {out}"
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
    elif op == "attention_qkv":  # the same on q, k, v sliced and transposed from [B, S, 3, H, 64], the result transposed to [B, S, H, 64]
        from .test_model_attention_qkv import attention_qkv_reference

        return attention_qkv_reference(symbol, kernel)
    else:
        raise AssertionError(op)
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
        dtype = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f64": np.float64}[elem]
        args.append(rng.standard_normal([3 if d == "?" else int(d) for d in dims]).astype(np.float32).astype(dtype))  # dynamic dims: 3
    return args


@pytest.mark.parametrize(
    "model, function, wide, tol",
    [
        ("mlp_f32.mlir", "mlp", False, 1e-5),
        ("attention_f32.mlir", "attention", False, 1e-5),
        ("attention_bf16.mlir", "attention", False, 1e-5),  # bf16 x bf16 -> f32 batch matmuls (gemm_batched_bf16), one left to IREE
        ("layernorm.mlir", "ln_eps5", False, 1e-5),
        ("layernorm.mlir", "ln_eps6", False, 1e-5),
        ("layernorm.mlir", "ln_bf16", True, 5e-2),  # the model computes in bf16, the kernel in f32
        ("softmax_bf16.mlir", "softmax_bf16", False, 1e-2),
        ("refusals.mlir", "bf16_accumulator", True, 5e-2),  # f32 accumulation narrowed to bf16
        ("refusals.mlir", "long_rows", False, 1e-5),
        ("norms_f32.torch.mlir", "main", False, 1e-5),  # RMSNorm; LayerNorms without weight or bias (ones and zeros passed)
        ("dynamic_f32.mlir", "linear", False, 1e-5),  # dynamic rows
        ("dynamic_f32.mlir", "softmax_rows", False, 1e-5),  # dynamic leading dim, collapsed into rows and expanded back
        # matmul + bias + GELU (tanh) fused, its bf16 bias widened
        ("mlp_gelu_bf16.torch.mlir", "main", True, 3e-2),
        ("mlp_gelu_bf16.torch.mlir", "main", False, 1e-2),
        ("mlp_gelu_bf16.torch.mlir", "padded", False, 1e-2),  # the LM-head-like matmul's N = 100 padded to 104 and sliced
        ("linear_gelu_bf16.torch.mlir", "main", True, 3e-2),  # a Linear on 3-D input (one matmul over B*M rows) + torch's tanh GELU
        # bf16 matmul + bias (addmm, and a Linear on 3-D input) fused, its bf16 bias widened, rounded once
        ("linear_bias_bf16.torch.mlir", "main", True, 3e-2),
        ("linear_bias_bf16.torch.mlir", "main", False, 1e-2),
        # torch's linear(x, w) in bf16 (f32 accumulation, rounded to bf16) as matmul_nt, w read as stored: a tied LM head on
        # 3-D input (N = 77) and a Linear on 2-D input (K = 13); the same numerics as the model's
        ("lm_head_bf16.torch.mlir", "main", False, 1e-2),
        ("matmul_nt.mlir", "lm_head", False, 1e-2),
        # a GPT-2 layer (head_dim 64): its attention chain as one call (attention_qkv_bf16, computed in f32, rounded once)
        ("gpt2_layer_bf16.torch.mlir", "main", True, 3e-2),
    ],
)
def test_rewritten_model_computes_the_same(tmp_path, model, function, wide, tol):
    kernels = [*ALL[:2], K / "gemm_padded.toml", *ALL[3:]] if function == "padded" else ALL
    kernels = [*kernels, K / "gemm_batched.toml"] if model == "attention_bf16.mlir" else kernels
    kernels = [*kernels, K / "attention.toml"] if model.startswith("gpt2_layer") else kernels
    kernels = [*kernels, K / "gemm_nt.toml"] if model in ("lm_head_bf16.torch.mlir", "matmul_nt.mlir") else kernels
    function = "main" if function == "padded" else function
    report, program = rewrite_model(MODELS / model, kernels, allow_wider_accumulation=wide)
    assert report.replaced
    original = (MODELS / model).read_text()
    if function == "bf16_accumulator":  # IREE's own CPU codegen of that op is the reference here
        pytest.importorskip("ml_dtypes")
    ref_vmfb = _compile_cpu(original, tmp_path / "original.vmfb")
    new_vmfb = _compile_cpu(with_reference_kernels(program, report), tmp_path / "rewritten.vmfb")
    rng = np.random.default_rng(0)
    args = _random_args(original, function, rng)
    if model.startswith("gpt2_layer"):  # ids, mask, then the parameters: at GPT-2's scale (N(0, 1) weights saturate the bf16 softmax)
        args = args[:2] + [(a.astype(np.float32) * 0.1).astype(a.dtype) for a in args[2:]]
    expected = _run(ref_vmfb, function, args)
    got = _run(new_vmfb, function, args)
    for e, g in zip(expected, got):
        e, g = np.asarray(e, np.float32), np.asarray(g, np.float32)
        assert e.shape == g.shape
        assert np.max(np.abs(e - g)) <= tol * max(1.0, float(np.max(np.abs(e))))
