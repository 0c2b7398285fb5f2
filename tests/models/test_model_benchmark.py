"""benchmarks/model.py's CPU-side pieces: the families' selection, their inputs and weights (with
torch), the error measures against numpy, and the results table."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from ..support.environment import ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("benchmark_model", ROOT / "benchmarks" / "model.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_models_option_names_the_families(bench):
    assert [f.name for f in bench._selected("bert,gpt2")] == ["bert", "gpt2"]
    with pytest.raises(SystemExit, match="unknown model.*t5.*the families are gpt2, llama, bert"):
        bench._selected("gpt2,t5")


def test_families_as_the_benchmark_states(bench):
    f = bench.FAMILIES
    assert (f["gpt2"].batch, f["gpt2"].seq, f["gpt2"].dtypes, f["gpt2"].padded) == (8, 1024, ("bf16",), False)
    assert (f["llama"].batch, f["llama"].seq, f["llama"].dtypes, f["llama"].padded) == (4, 1024, ("bf16",), False)
    assert (f["bert"].batch, f["bert"].seq, f["bert"].dtypes, f["bert"].padded, f["bert"].output) == (16, 512, ("bf16", "f32"), True, "hidden")


def _results(rng, bench) -> dict:
    def timed(**extra):
        return {"ms": float(rng.uniform(1, 50)), "max_rel": float(rng.uniform(0, 0.02)), **extra}

    lm = {"top1_agree": float(rng.uniform(0.9, 1))}
    enc = {"cosine": float(rng.uniform(0.99, 1)), "cosine_min": float(rng.uniform(0.9, 0.99))}
    return {
        "meta": {"seed": 0, "iters": 20, "run_torch": "2.x"},
        "device": "a GPU",
        "models": {
            "gpt2": {"title": "GPT-2 small", "batch": 8, "seq": 1024, "dtypes": {"bf16": {
                "torch_eager": timed(**lm), "torch_compile": timed(**lm), "iree": timed(**lm),
                "subst": timed(**lm, kernels={"gemm.gemm_bf16": 48}), "subst_wide": {"what": "wide", "skipped": "over the time limit"}}}},
            "llama": {"title": "Llama", "batch": 4, "seq": 1024, "dtypes": {"bf16": {"error": "RuntimeError: out of memory"}}},
            "bert": {"title": "BERT-base", "batch": 16, "seq": 512, "dtypes": {"f32": {
                "torch_eager": timed(**enc), "torch_compile": timed(**enc), "subst": {"error": "prepare: compile failed", "what": "subst"}}}},
        },
    }


def test_table_speed_against_torch_compile_and_failures(bench):
    rng = np.random.default_rng()
    results = _results(rng, bench)
    text = bench.table(results)
    gpt2 = results["models"]["gpt2"]["dtypes"]["bf16"]
    ratio = gpt2["torch_compile"]["ms"] / gpt2["subst"]["ms"]
    row = next(line for line in text.splitlines() if line.startswith("| GPT-2 small, 8 x 1024 | bf16 |"))
    assert f"| {ratio:.2f}x |" in row and f"| {gpt2['iree']['ms']:.2f} |" in row and "| skipped |" in row
    assert "| Llama, 4 x 1024 | bf16 | failed: RuntimeError: out of memory |" in text
    bert = results["models"]["bert"]["dtypes"]["f32"]
    assert f"cos {bert['torch_eager']['cosine']:.6f} (min {bert['torch_eager']['cosine_min']:.6f})" in text
    assert "failed: prepare: compile failed" in text
    assert "gemm_bf16 x48" in text and f"top-1 {gpt2['iree']['top1_agree'] * 100:.2f}%" in text


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def test_bert_inputs_pad_on_the_right(bench, torch):
    seed = int(np.random.default_rng().integers(1000))
    ids, padding = bench.make_inputs(bench.FAMILIES["bert"], 16, 512, seed, 30522)
    assert ids.shape == padding.shape == (16, 512) and int(ids.max()) < 30522
    lengths = padding.sum(1).numpy()
    assert lengths[0] == 512 and lengths.min() >= 256 and (lengths < 512).any()
    expected = np.arange(512)[None, :] < lengths[:, None]  # ones, then zeros
    np.testing.assert_array_equal(padding.numpy(), expected.astype(np.int64))
    assert bench.make_inputs(bench.FAMILIES["gpt2"], 2, 16, seed, 1000)[1] is None


def test_weights_from_the_seed_and_buffers_in_f32(bench, torch):
    pytest.importorskip("transformers")
    llama = bench.FAMILIES["llama"]
    a, b = bench.make_model(llama, "bf16", 3, tiny=True), bench.make_model(llama, "bf16", 3, tiny=True)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert next(a.parameters()).dtype == torch.bfloat16
    assert a.model.rotary_emb.inv_freq.dtype == torch.float32  # as from_pretrained(dtype=bfloat16) leaves it


def test_errors_against_numpy(bench, torch):
    rng = np.random.default_rng()
    ref = rng.standard_normal((2, 8, 50))
    x = ref + 0.1 * rng.standard_normal(ref.shape)
    lm = bench._errors(bench.FAMILIES["gpt2"], torch.from_numpy(x), torch.from_numpy(ref), None)
    assert lm["max_rel"] == pytest.approx(np.abs(x - ref).max() / np.abs(ref).max())
    assert lm["top1_agree"] == pytest.approx(np.mean(x.argmax(-1) == ref.argmax(-1)))
    padding = np.ones((2, 8), np.int64)
    padding[1, 5:] = 0
    x[1, 5:] = 1e6  # padding: not compared
    enc = bench._errors(bench.FAMILIES["bert"], torch.from_numpy(x), torch.from_numpy(ref), torch.from_numpy(padding))
    keep = padding.astype(bool)
    xs, rs = x[keep], ref[keep]
    assert enc["cosine"] == pytest.approx(np.dot(xs.ravel(), rs.ravel()) / (np.linalg.norm(xs) * np.linalg.norm(rs)))
    per_token = np.sum(xs * rs, -1) / (np.linalg.norm(xs, axis=-1) * np.linalg.norm(rs, axis=-1))
    assert enc["cosine_min"] == pytest.approx(per_token.min())
    assert enc["max_rel"] == pytest.approx(np.abs(xs - rs).max() / np.abs(rs).max())


def test_run_refuses_a_model_not_prepared(bench, tmp_path):
    (tmp_path / "meta.json").write_text('{"seed": 0, "models": {"gpt2": {"batch": 2, "seq": 16, "dtypes": {}}}}')
    with pytest.raises(SystemExit, match="not prepared in .*: llama; prepared: gpt2"):
        bench.main(["run", "--dir", str(tmp_path), "--out", str(tmp_path / "out"), "--models", "gpt2,llama"])


def _trace_call(t0: float, correlation: int, launches: list[tuple[float, float, float, float]]) -> list[dict]:
    """A profiled call's trace events from t0: per activity (launch start, launch duration, kernel
    start, kernel duration) relative to t0, correlation ids from `correlation` on."""
    events = []
    for i, (ls, ld, ks, kd) in enumerate(launches):
        c = correlation + i
        events.append({"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "ts": t0 + ls, "dur": ld, "args": {"correlation": c}})
        events.append({"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": t0 + ks, "dur": kd, "args": {"correlation": c}})
    return events


def test_timeline_of_the_second_call_splits_host_and_gpu_gaps(bench):
    """The breakdown reads the profiled forward only (not the warm-up call before it), and tells a
    gap the host caused (the next launch returned after the previous kernel ended) from one the
    GPU's queue took (the launch was already queued), before/after times from the call's range."""
    warm_up = {"ph": "X", "cat": "user_annotation", "name": bench._WARM_UP, "ts": 0.0, "dur": 900.0}
    forward = {"ph": "X", "cat": "user_annotation", "name": bench._FORWARD, "ts": 1000.0, "dur": 200.0}
    # warm-up: one slow first launch (CUPTI's buffer request) that must not count
    events = [warm_up, forward, *_trace_call(0.0, 1, [(10, 400, 20, 5), (415, 5, 430, 5)])]
    # forward: k0 at 20-40; k1 launched early (queued), starts 2 us after k0; k2 launched late, 30 us after k1 ends
    events += _trace_call(1000.0, 10, [(5, 10, 20, 20), (16, 4, 42, 18), (85, 5, 90, 60)])
    mine = bench._of_call(events, forward)
    assert {e["args"]["correlation"] for e in mine} == {10, 11, 12}
    t = bench._timeline(mine, forward)
    assert t["gpu_activities"] == 3 and t["busy_ms"] == pytest.approx(0.098)
    assert t["gpu_gaps_ms"] == pytest.approx(0.002) and t["host_gaps_ms"] == pytest.approx(0.030)
    assert t["gaps_ms"] == pytest.approx(0.032) and t["span_ms"] == pytest.approx(0.130)
    assert t["before_first_gpu_ms"] == pytest.approx(0.020) and t["after_last_gpu_ms"] == pytest.approx(0.050)
    assert [(g["us"], g["host"], g["before"]) for g in t["largest_gaps"]] == [(30.0, True, "k2"), (2.0, False, "k1")]
