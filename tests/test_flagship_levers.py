"""The flagship's levers on the CPU: the chunked linear cross-entropy against matmul + cross-entropy
(forward and backward), the loss heads against Hugging Face's own loss, FP8 casting, the memory
categories and the kernel timeline."""

import pytest
import torch

from helpers.train.linear_ce import IGNORE, chunked_linear_ce, shifted_targets


def _problem(n=70, h=24, v=50, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, h, generator=g, dtype=dtype, requires_grad=True)
    w = torch.randn(v, h, generator=g, dtype=dtype, requires_grad=True)
    t = torch.randint(0, v, (n,), generator=g)
    t[::7] = IGNORE
    return x, w, t


@pytest.mark.parametrize("chunk", [1, 16, 70, 1000])
def test_chunked_ce_equals_plain_forward_and_backward(chunk):
    x, w, t = _problem()
    loss = chunked_linear_ce(x, w, t, chunk_rows=chunk)
    (loss * 3).backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    ref = torch.nn.functional.cross_entropy(x @ w.t(), t, ignore_index=IGNORE)
    (ref * 3).backward()
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gw, w.grad)


def test_chunked_ce_rejects_bad_shapes():
    x, w, t = _problem()
    with pytest.raises(ValueError):
        chunked_linear_ce(x, w[:, :5], t)
    with pytest.raises(ValueError):
        chunked_linear_ce(x, w, t, chunk_rows=0)


def test_shifted_targets_pads_the_last_position():
    labels = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert shifted_targets(labels).tolist() == [2, 3, IGNORE, 5, 6, IGNORE]


@pytest.mark.parametrize("kind", ["plain", "chunked"])
def test_loss_heads_equal_hugging_face(kind):
    from helpers.models.llama import build_llama, llama_config, token_batch
    from helpers.train.levers import use_loss

    config = llama_config(layers=2, hidden=32, heads=4, vocab=64, max_seq=32)
    model, batch = build_llama(config), token_batch(0, 2, 16, 64)
    ref = model(**batch).loss
    ref.backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    use_loss(model, kind, chunk_rows=5)
    loss = model(**batch).loss
    loss.backward()
    torch.testing.assert_close(loss, ref)
    for p, g in zip(model.parameters(), ref_grads):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)


def test_fp8_cast_keeps_the_absolute_maximum_and_a_small_error():
    from helpers.train.fp8 import E4M3_MAX, to_fp8

    t = torch.randn(64, 64, generator=torch.Generator().manual_seed(1))
    q, inv = to_fp8(t)
    assert q.dtype == torch.float8_e4m3fn
    assert q.float().abs().max().item() == E4M3_MAX
    back = q.float() * inv
    assert ((back - t).norm() / t.norm()).item() < 0.05  # E4M3: 3 mantissa bits


def test_colossal_fp8_fails_on_scaled_mm_returning_a_tensor():
    from helpers.train.fp8 import colossal_fp8_failure, scaled_mm_returns

    assert scaled_mm_returns() == "tensor"
    assert colossal_fp8_failure(64, 32, 48) == "shape '[64, 48]' is invalid for input of size 48"


def test_memory_categories_from_a_made_up_trace():
    from helpers.train.memory_snapshot import categorize

    trace = [
        {"action": "alloc", "addr": 1, "size": 2**30},  # forward: an activation
        {"action": "alloc", "addr": 2, "size": 2**30},  # forward: a temporary
        {"action": "free_requested", "addr": 2, "size": 2**30},
        {"action": "alloc", "addr": 3, "size": 2**30},  # backward: a gradient
        {"action": "free_requested", "addr": 1, "size": 2**30},
        {"action": "free_requested", "addr": 3, "size": 2**30},  # zero_grad
    ]
    out = categorize(trace, {"start": 0, "forward": 3, "backward": 5}, {"weights": 2**31}, 6)
    assert out["gib"]["activations"][:5] == [1, 1, 1, 1, 0]
    assert out["gib"]["gradients"][:6] == [0, 0, 0, 1, 1, 0]
    assert out["peak_gib"] == 4.0 and out["static_gib"]["weights"] == 2.0


def test_trace_intervals_merge_and_busy_share():
    from helpers.train.memory_snapshot import trace_intervals

    events = [("nvjet_gemm", 0.0, 10.0), ("nvjet_gemm", 11.0, 20.0), ("triton_x", 30.0, 40.0)]
    out = trace_intervals(events)
    assert [c for _, _, c in out["intervals"]] == ["matmul", "triton (compiled)"]
    assert out["busy"] == 0.75 and out["span_ms"] == 0.04


def test_each_sdpa_setting_compiles_into_its_own_cache(monkeypatch, tmp_path):
    """Inductor's cache ignores the SDPA switches, so each setting gets a folder of its own."""
    from helpers.train.levers import separate_compile_cache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    flash = separate_compile_cache("flash")
    assert flash == str(tmp_path / "sdpa-flash")
    assert separate_compile_cache("efficient") == str(tmp_path / "sdpa-efficient")  # not nested
    import os

    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "sdpa-efficient")


def test_a_row_that_ran_another_backends_attention_fails():
    """A profile naming flash's kernels in a run that allowed only the efficient ones: failed."""
    from helpers.record.flagship_levers import _check_sdpa

    flash_bwd = "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<"
    row = {"ok": True, "sdpa": "efficient", "kernels": {"top": [["nvjet_sm90_x", 1.0]]}}
    row["trace"] = {"kernels": {flash_bwd: 46.0}}
    _check_sdpa(row)
    assert not row["ok"] and "flash" in row["error"] and row["sdpa_ran"] == "flash"
    same = {"ok": True, "sdpa": "flash", "kernels": {"top": [[flash_bwd, 46.0]]}}
    _check_sdpa(same)
    assert same["ok"] and same["sdpa_ran"] == "flash"
    unseen = {"ok": True, "sdpa": "cudnn", "kernels": {"top": [["nvjet_sm90_x", 1.0]]}}
    _check_sdpa(unseen)  # no attention kernel among the names: nothing to say
    assert unseen["ok"] and unseen["sdpa_ran"] is None


def test_recomputed_layers_stay_compiled_and_keep_the_gradients(monkeypatch, tmp_path):
    """The recompute lever wraps the compiled layers: every layer's forward and each recomputed
    layer's second forward run the compiled function, and the gradients equal the plain model's."""
    from argparse import ArgumentParser
    from functools import partial

    from transformers import LlamaConfig, LlamaForCausalLM

    from helpers.train import decoder, levers

    calls = []

    def counting(gm, _inputs):
        def run(*a):
            calls.append(1)
            return gm.forward(*a)

        return run

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    compile_layers = partial(decoder.compile_layers, backend=counting)
    monkeypatch.setattr(levers, "compile_layers", lambda m, mode=None: compile_layers(m, mode=mode))
    p = ArgumentParser()
    levers.add_arguments(p)
    args = p.parse_args(["--recompute_layers", "2"])
    args.compile = True
    cfg = LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model, plain = LlamaForCausalLM(cfg), LlamaForCausalLM(cfg)
    plain.load_state_dict(model.state_dict())
    levers.apply(model, args)
    ids = torch.randint(0, 96, (2, 12))
    model(input_ids=ids, labels=ids).loss.backward()
    plain(input_ids=ids, labels=ids).loss.backward()
    assert len(calls) == 4 + 2  # four forwards, two recomputes
    named = dict(plain.named_parameters())
    for name, prm in model.named_parameters():
        ref = named[name.replace("._orig_mod", "")].grad
        torch.testing.assert_close(prm.grad, ref, rtol=1e-5, atol=1e-6)


def test_a_failed_runs_error_is_its_exception_line():
    """The page and the recorder's progress line quote the exception, not the hint lines torch
    prints after it."""
    from helpers.record.runner import exception_line, status

    dynamo = (
        "x\n  got RuntimeError(\"shape '[4, 8]' is invalid for input of size 8\")\nSet TORCH_X=1\n"
    )
    assert exception_line(dynamo) == "RuntimeError: shape '[4, 8]' is invalid for input of size 8"
    assert status({"ok": False, "error": dynamo}) == "FAILED: " + exception_line(dynamo)
    plain = "Traceback\n  File a\nValueError: bad flag\n\nhint line\n"
    assert exception_line(plain) == "ValueError: bad flag"
    assert exception_line("only this\n") == "only this" and exception_line("") == ""
