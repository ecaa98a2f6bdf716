"""span_gqa: compiled generation's decoding attention on CUDA, a Triton kernel that reads only each
live row's attended span of the static cache. Here it runs under Triton's interpreter on the CPU
(``TRITON_INTERPRET``, set by conftest), in float32: the interpreter's bfloat16 matrix product is
not usable on the CPU."""

from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="span_gqa's kernel is Triton's")


def test_span_gqa_reads_only_each_live_rows_span_and_changes_no_token(monkeypatch, tiny_qwen35, decoding_step_inputs,
                                                                     one_row_ends_early):
    """Compiled, one decoding step gives SDPA's output on rows with gaps inside their span and spans
    that start and end off the 64-slot grid, and zeros on a row whose mask is empty; in greedy
    static-cache generation of the tiny Qwen3.5 a row that ends early has an empty span from then
    on, and every token is the one plain SDPA decoding gives. Switched back to packed GQA, the same
    model leaves finished rows' masks alone (SDPA would give NaN for an empty one)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from rlplugs.adapters.trl import span_gqa
    from rlplugs.adapters.trl.packed_gqa import use_packed_gqa

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen35, dtype=torch.float32, attn_implementation="sdpa").eval()
    layer, query, key, value, mask = decoding_step_inputs(model, batch=4)
    mask[0, ..., 10:260] = True
    mask[1, ..., :] = True
    mask[2, ..., 70:75] = mask[2, ..., 200] = True  # a gap of 125 slots inside the span
    step = torch.compile(lambda q, k, v, m: span_gqa.span_gqa_attention(layer, q, k, v, m, scaling=layer.scaling)[0], fullgraph=True)
    got = step(query, key, value, mask)
    want, _ = sdpa_attention_forward(layer, query, key, value, mask, scaling=layer.scaling)
    torch.testing.assert_close(got[:3], want[:3], atol=1e-5, rtol=1e-4)
    assert not got[3].any()  # row 3: a finished row

    greedy, eos, want = one_row_ends_early(model)
    span_gqa.use_span_gqa(model)
    span_gqa.use_span_gqa(model)  # a second switch wraps generate once
    assert isinstance(model.generate.__self__, span_gqa.FinishedRowsMasked)
    assert not isinstance(model.generate.__self__._generate.__self__, span_gqa.FinishedRowsMasked)
    spans = []
    span = span_gqa.span_attention
    monkeypatch.setattr(span_gqa, "span_attention",
                        lambda q, k, v, m, first, end, scale: spans.append((end - first).clamp(min=0).tolist()) or span(q, k, v, m, first, end, scale))  # fmt: skip
    assert torch.equal(greedy(eos), want)
    layers = len(spans) // 39  # every full-attention layer of a step sees the same spans
    per_step = spans[::layers]
    assert len(per_step) == 39 and all(len(set(map(tuple, spans[i : i + layers]))) == 1 for i in range(0, len(spans), layers))
    end = int((want[1, 12:] == eos).nonzero()[0])  # decoding step k reads generated token k - 1
    assert [rows[1] > 0 for rows in per_step] == [True] * end + [False] * (39 - end)
    assert [rows[0] for rows in per_step] == [8 + 1 + k for k in range(39)]  # row 0's 4 pads are outside its span
    assert [rows[2] for rows in per_step] == [12 + 1 + k for k in range(39)]

    use_packed_gqa(model)
    seen = []
    prepare = model.generate.__self__._prepare
    monkeypatch.setattr(model.generate.__self__, "_prepare", lambda ids, *a, attention_mask=None, **k: seen.append(attention_mask.any(-1).all().item()) or prepare(ids, *a, attention_mask=attention_mask, **k))  # fmt: skip
    assert torch.equal(greedy(eos), want) and len(spans) == 39 * layers
    assert len(seen) == 40 and all(seen)  # no row's mask was emptied: finished rows are masked under span GQA only


def test_compiled_generation_off_cuda_decodes_with_packed_gqa(tiny_qwen35):
    """Off CUDA (and for float32 weights) ``use_decoding_attention`` picks packed GQA, which runs
    everywhere; span GQA is only chosen where its kernel compiles (bf16/fp16 on a CUDA device,
    power-of-two heads)."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlplugs.adapters.trl.packed_gqa import PACKED_GQA, span_gqa_runs, use_decoding_attention

    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert span_gqa_runs(cuda, torch.bfloat16, 64) and span_gqa_runs(cuda, torch.float16, 256)
    assert not span_gqa_runs(cuda, torch.float32, 64) and not span_gqa_runs(cuda, torch.bfloat16, 80)
    assert not span_gqa_runs(cpu, torch.bfloat16, 64)

    for dtype in (torch.float32, torch.bfloat16):
        model = AutoModelForCausalLM.from_pretrained(tiny_qwen35, dtype=dtype, attn_implementation="sdpa")
        use_decoding_attention(model)
        assert model.config._attn_implementation == PACKED_GQA
        assert getattr(model.generate, "__self__", None) is model  # no finished-row wrapper
    eager = AutoModelForCausalLM.from_pretrained(tiny_qwen35, attn_implementation="eager")
    use_decoding_attention(eager)
    assert eager.config._attn_implementation == "eager"  # a chosen attention is left as it is


def test_a_grpo_step_decodes_through_span_gqa_with_trls_end_tokens(tiny_qwen35, tmp_path, episode_grpo_trainer, monkeypatch):
    """The path ``compile_generation`` takes on CUDA, run here under the interpreter: the trainer's
    model switched to span GQA, one real GRPO step of a multi-turn env (count-test: three rounds
    through TRL's ``_generate_single_turn``) decodes every round through the kernel, with the
    finished-row wrapper active and holding the end tokens of TRL's generation config."""
    import torch

    from rlplugs.adapters.trl import span_gqa

    _, _, trainer = episode_grpo_trainer(
        tiny_qwen35, "count-test", {"rows": 4}, tmp_path, max_completion_length=64, turn_tokens=6, max_steps=1,
        compile_generation=True,
    )  # fmt: skip
    model = trainer.accelerator.unwrap_model(trainer.model)
    span_gqa.use_span_gqa(model)
    wrapper = model.generate.__self__
    calls = []
    span = span_gqa.span_attention
    monkeypatch.setattr(span_gqa, "span_attention",
                        lambda q, *rest: calls.append((q.shape[0], wrapper.prompt_len, wrapper.eos.tolist())) or span(q, *rest))  # fmt: skip
    trainer.train()
    eos = trainer.generation_config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos)
    assert len(calls) >= 3 * 5  # three rounds of up to 6 new tokens: 5 decoding steps each at least
    assert {c[0] for c in calls} == {4} and all(c[1] is not None and c[2] == eos for c in calls)
    assert {c[1] for c in calls} == {trainer.pad_to_multiple_of}  # every round's prompts padded to the bucket
    assert torch.isfinite(torch.tensor(trainer.state.log_history[0]["loss"]))
