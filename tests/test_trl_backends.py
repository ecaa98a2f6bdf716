"""The multi-turn rollout generates every round through the trainer's own generation backend
(TRL's ``GRPOTrainer._generate_single_turn``), on the real tiny Qwen3.5 and ``count-test``.

vLLM cannot be installed on these machines, so its path runs with a recording stand-in for TRL's
``VLLMGeneration`` (``tests/vllm_standin.py``).
"""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from rlplugs.adapters.trl.packed_gqa import PACKED_GQA  # noqa: E402
from vllm_standin import StandInVLLM  # noqa: E402

TURNS = 3  # count-test episodes end after three replies


@pytest.fixture(scope="module")
def vllm_trainer(tiny_qwen35, tmp_path_factory, episode_grpo_trainer):
    """A count-test trainer switched to the vLLM path with the stand-in backend."""
    spec, rewards, trainer = episode_grpo_trainer(
        tiny_qwen35, "count-test", {"rows": 4}, tmp_path_factory.mktemp("vllm"),
        max_completion_length=64, turn_tokens=6, max_steps=2,
    )  # fmt: skip
    trainer.use_vllm = True
    trainer.args.generation_kwargs = {"max_tokens": 6}  # vLLM's name for the per-turn cap
    trainer.vllm_generation = StandInVLLM(trainer)
    trainer._last_loaded_step = -1
    return spec, trainer


def test_rounds_go_through_the_vllm_backend_with_one_weight_sync_per_step(vllm_trainer):
    _, trainer = vllm_trainer
    backend = trainer.vllm_generation
    trainer.train()

    # weights reach the engine once per optimizer step, the trained ones at step 1
    assert [step for step, _ in backend.syncs] == [0, 1]
    assert backend.syncs[0][1] != backend.syncs[1][1]
    # every round of every episode was one backend call: three rounds per step, four episodes each
    per_step = {s: [prompts for step, prompts in backend.calls if step == s] for s in (0, 1)}
    assert [len(rounds) for rounds in per_step.values()] == [TURNS, TURNS]
    for rounds in per_step.values():
        assert all(len(prompts) == 4 for prompts in rounds)
        for earlier, later in zip(rounds, rounds[1:]):  # each context extends the one before
            assert all(b[: len(a)] == a and len(b) > len(a) for a, b in zip(earlier, later))
    # the sampling logprobs line up with the trained tokens: the trainer's own logprobs of the
    # same tokens with the same weights differ only by float noise (environment text masked)
    logs = [h for h in trainer.state.log_history if "sampling/sampling_logp_difference/max" in h]
    assert len(logs) == 2
    assert all(h["sampling/sampling_logp_difference/max"] < 1e-3 for h in logs), logs


def test_vllm_rollout_returns_logprobs_for_every_completion_token(vllm_trainer, run_rollout):
    spec, trainer = vllm_trainer
    rows = [dict(r) for r in spec.dataset("train").select(range(2))]
    trainer._pending_metrics.clear()
    out = run_rollout(trainer, rows)
    # the step's generation work is logged: here every generated token is one the trained seat wrote
    written = sum(sum(mask) for mask in out["env_mask"])
    assert trainer._pending_metrics["rollout/generated_tokens"] == [float(written)]
    for completion, mask, logprobs, episode in zip(
        out["completion_ids"], out["env_mask"], out["logprobs"], out["episode"]
    ):
        assert episode.done and len(episode.replies) == TURNS
        assert len(logprobs) == len(completion) == len(mask)
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if m == 0)  # environment text
        assert all(lp < 0.0 for lp, m in zip(logprobs, mask) if m == 1)  # sampled tokens


def test_rollout_through_continuous_batching(tmp_path, episode_grpo_trainer, run_rollout):
    """On SmolLM2-135M: transformers' continuous batching has no cache for Qwen3.5's linear attention."""
    smollm2 = pytest.importorskip("rlplugs.testing.smollm2").smollm2_dir()
    spec, _, trainer = episode_grpo_trainer(
        smollm2, "count-test", {"rows": 4}, tmp_path, max_completion_length=64, turn_tokens=6, max_steps=1,
        use_transformers_continuous_batching=True,
    )  # fmt: skip
    calls = []
    model = trainer.accelerator.unwrap_model(trainer.model)
    generate_batch = model.generate_batch
    model.generate_batch = lambda inputs, **kw: calls.append(len(inputs)) or generate_batch(inputs, **kw)
    out = run_rollout(trainer, [dict(r) for r in spec.dataset("train").select(range(2))])
    assert calls == [2] * TURNS  # one continuous-batching call per round
    assert all(ep.done and len(ep.replies) == TURNS for ep in out["episode"])


def test_compiled_generation_pads_rounds_to_full_width_and_buckets_prompts(
    tiny_qwen35, tmp_path, episode_grpo_trainer, run_rollout
):
    spec, _, trainer = episode_grpo_trainer(
        tiny_qwen35, "count-test", {"rows": 4, "turns_by_start": {0: 1}}, tmp_path, max_completion_length=64,
        turn_tokens=6, max_steps=1, compile_generation=True,
    )  # fmt: skip
    assert trainer.generation_config.cache_implementation == "static"
    assert trainer.generation_config.disable_compile is False and trainer.pad_to_multiple_of == 256
    shapes = []
    model = trainer.accelerator.unwrap_model(trainer.model)
    assert model.config._attn_implementation == PACKED_GQA
    generate = model.generate
    model.generate = lambda **kw: shapes.append(tuple(kw["input_ids"].shape)) or generate(**kw)
    # three rows; the first episode ends after one turn, yet every round generates the full width
    out = run_rollout(trainer, [dict(r) for r in spec.dataset("train").select(range(3))])
    assert shapes == [(3, 256)] * TURNS, shapes
    assert [len(ep.replies) for ep in out["episode"]] == [1, TURNS, TURNS]


def test_compiled_generation_under_mixed_precision_decodes_on_a_synced_half_precision_copy(
    tiny_qwen35, tmp_path, episode_grpo_trainer, run_rollout
):
    """fp32 weights trained under bf16 autocast: the rounds decode on a bf16 copy with packed GQA
    (transformers 5.17's static cache failed on the mixed key/value dtypes on the H200; 5.24's,
    installed here, does not fail, so this asserts the design), the trained model stays fp32 SDPA,
    and once the optimizer has stepped the next generation decodes with the weights it left."""
    spec, _, trainer = episode_grpo_trainer(
        tiny_qwen35, "count-test", {"rows": 4}, tmp_path, max_completion_length=64, turn_tokens=6, max_steps=1,
        compile_generation=True, bf16=True,
    )  # fmt: skip
    trainer.train()
    model = trainer.accelerator.unwrap_model(trainer.model)
    copy = trainer._generation_copy.model
    assert model.dtype == torch.float32 and model.config._attn_implementation == "sdpa"
    assert copy.dtype == torch.bfloat16 and copy.config._attn_implementation == PACKED_GQA
    assert trainer._generation_copy.synced_at == 0  # the step's generation used the weights before the update
    with torch.no_grad():  # weights the copy has not seen (count-test's first group may carry no advantage)
        for p in model.parameters():
            p.add_(0.5)
    trained = model.state_dict()
    assert not any(torch.equal(v, trained[k].to(torch.bfloat16)) for k, v in copy.state_dict().items())
    calls = []
    generate = copy.generate
    copy.generate = lambda **kw: calls.append(kw["input_ids"].shape) or generate(**kw)
    run_rollout(trainer, [dict(r) for r in spec.dataset("train").select(range(2))])
    assert len(calls) == TURNS and trainer._generation_copy.synced_at == 1
    assert all(torch.equal(v, trained[k].to(torch.bfloat16)) for k, v in copy.state_dict().items())


@pytest.mark.parametrize("truncation", [{}, {"top_k": 20, "top_p": 0.9}], ids=["temperature", "top_k+top_p"])
def test_sampling_logprobs_are_the_samplers_own_and_their_gap_to_the_trainers_is_logged(
    tiny_qwen35, tmp_path, episode_grpo_trainer, truncation
):
    """Compiled generation (static cache, packed GQA) of a multi-turn env at T = 0.7, one
    generation batch serving two updates so that TRL computes the trainer's old log-probabilities:
    the recorded ones are the sampler's at the same temperature, so in float32 the logged gap is
    float noise. Recorded one token late or without the temperature, it would be far larger. With
    TRL's top_k and top_p they are the truncated distribution's: above the trainer's for every token."""
    spec, _, trainer = episode_grpo_trainer(
        tiny_qwen35, "count-test", {"rows": 8}, tmp_path, max_completion_length=64, turn_tokens=6, max_steps=2,
        compile_generation=True, sampling_logprobs=True, temperature=0.7, generation_batch_size=8, **truncation,
    )  # fmt: skip
    outputs = []
    score = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: outputs.append(score(inputs)) or outputs[-1]
    trainer.train()
    (output,) = outputs  # one generation for both updates
    sampled, old = output["sampling_per_token_logps"], output["old_per_token_logps"]
    mask = output["completion_mask"] * output["tool_mask"]  # the model's tokens (env text carries 0.0)
    assert mask.sum() > 40 and (sampled[mask.bool()] < 0).all()
    (logged,) = [h for h in trainer.state.log_history if "sampling/logp_gap/mean" in h]
    if not truncation:
        torch.testing.assert_close(sampled * mask, old * mask, atol=1e-4, rtol=0)
        assert 0 <= logged["sampling/logp_gap/mean"] <= logged["sampling/logp_gap/max"] < 1e-4
        return
    lifted = (sampled - old)[mask.bool()]  # log(1 / kept mass): the tiny random model spreads its mass wide
    assert lifted.min() > 0.01 and logged["sampling/logp_gap/mean"] == pytest.approx(lifted.mean().item(), rel=1e-3)


def test_sampling_logprobs_refuse_warpers_after_top_p(tiny_qwen35, tmp_path, episode_grpo_trainer):
    with pytest.raises(ValueError, match="temperature, top-k and top-p sampling only, and min_p=0.05 would reshape"):
        episode_grpo_trainer(
            tiny_qwen35, "count-test", {"rows": 4}, tmp_path, max_completion_length=64, turn_tokens=6, max_steps=1,
            sampling_logprobs=True, top_k=5, min_p=0.05,
        )  # fmt: skip


def test_keep_sampling_mask_refuses_episode_rollouts(tiny_qwen35, tmp_path, episode_grpo_trainer):
    """Episodes generate turn by turn through other calls; their kept sets are not assembled."""
    with pytest.raises(ValueError, match="keep_sampling_mask supports single-turn environments; this one plays episodes"):
        episode_grpo_trainer(
            tiny_qwen35, "count-test", {"rows": 4}, tmp_path, max_completion_length=64, turn_tokens=6, max_steps=1,
            sampling_logprobs=True, keep_sampling_mask=True, top_k=20, top_p=0.9,
        )  # fmt: skip


def test_keep_sampling_mask_refuses_heads_that_scale_their_logits(tiny_qwen35):
    """The kept sets' logits are the plain product of hidden state and output embedding; Gemma 2
    caps its logits after it (so the rescored ones would be another policy's), Qwen3.5 and Llama
    (SmolLM2) do not."""
    from transformers import AutoConfig, Gemma2Config, LlamaConfig

    from rlplugs.adapters.trl.keep_sampling_mask import head_scalings

    assert head_scalings(Gemma2Config()) == ["final_logit_softcapping=30.0"]
    assert head_scalings(AutoConfig.from_pretrained(tiny_qwen35)) == head_scalings(LlamaConfig()) == []


def test_sampling_logprobs_under_top_k_and_top_p_are_the_truncated_distributions(tiny_qwen35):
    """Top-k and top-p go through transformers' own warpers after temperature, in generate's order:
    with one seed the recorder draws exactly what generate draws, and records each token's
    log-probability under the truncated, renormalised distribution, recomputed here from a forward
    pass. Recorded before the truncation, they would be the trainer's, lower by log of the kept mass."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    from rlplugs.adapters.trl.sampling_logprobs import RecordedGenerate

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen35, dtype=torch.float32).eval()
    prompt = torch.tensor([[11, 12, 13, 14, 15], [21, 22, 23, 24, 25]])
    config = GenerationConfig(do_sample=True, max_new_tokens=12, temperature=0.7, top_k=20, top_p=0.9, eos_token_id=None, pad_token_id=0)
    torch.manual_seed(0)
    plain = model.generate(prompt, generation_config=config)  # as TRL calls it
    with RecordedGenerate(model, 0.7, top_k=20, top_p=0.9) as recorded:
        torch.manual_seed(0)
        out = model.generate(prompt, generation_config=config)
    assert torch.equal(out, plain)
    drawn = out[:, prompt.size(1):]
    with torch.no_grad():
        scaled = model(out).logits[:, prompt.size(1) - 1 : -1].float() / 0.7
    top = scaled.softmax(-1).topk(20, dim=-1)  # the 20 most likely, renormalised
    kept = top.values / top.values.sum(-1, keepdim=True)
    nucleus = (kept.cumsum(-1) - kept) < 0.9  # a token stays while the mass above it is under 0.9
    rank = top.indices == drawn.unsqueeze(-1)
    assert (rank & nucleus).any(-1).all()  # every drawn token was in the nucleus
    want = ((kept * rank).sum(-1) / (kept * nucleus).sum(-1)).log()
    torch.testing.assert_close(recorded.logprobs, want, atol=1e-5, rtol=0)
    untruncated = scaled.log_softmax(-1).gather(-1, drawn.unsqueeze(-1)).squeeze(-1)
    assert (recorded.logprobs - untruncated).min() > 0.01  # the tiny random model spreads its mass wide


def test_kept_sets_are_the_nucleus_and_rescore_the_trainer_as_the_sampler(tiny_qwen35):
    """With ``keep_sets`` the recorder keeps, per row, the (position, token) pairs top-k and top-p
    left drawable: exactly the nucleus recomputed from a forward pass, the drawn token inside it.
    Rescored over those sets from the trainer's hidden states and output embedding
    (``kept_set_logps``, what ``keep_sampling_mask`` trains on), each token's log-probability is
    the sampler's; over the whole vocabulary it is lower by the log of the kept mass."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    from rlplugs.adapters.trl.keep_sampling_mask import rescored
    from rlplugs.adapters.trl.sampling_logprobs import RecordedGenerate

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen35, dtype=torch.float32).eval()
    prompt = torch.tensor([[11, 12, 13, 14, 15], [21, 22, 23, 24, 25]])
    config = GenerationConfig(do_sample=True, max_new_tokens=12, temperature=0.7, top_k=20, top_p=0.9, eos_token_id=None, pad_token_id=0)
    with RecordedGenerate(model, 0.7, top_k=20, top_p=0.9, keep_sets=True) as recorded:
        torch.manual_seed(0)
        out = model.generate(prompt, generation_config=config)
    drawn, head = out[:, prompt.size(1):], model.get_output_embeddings()
    with torch.no_grad(), rescored(model.base_model, head, drawn, recorded.recorder.kept, 0.7) as parts:
        scaled = model(out).logits[:, prompt.size(1) - 1 : -1].float() / 0.7
    top = scaled.softmax(-1).topk(20, dim=-1)
    kept = top.values / top.values.sum(-1, keepdim=True)
    nucleus = (kept.cumsum(-1) - kept) < 0.9
    for row, sets in enumerate(recorded.recorder.kept):
        want = {(step, token) for step in range(drawn.size(1)) for token in top.indices[row, step][nucleus[row, step]].tolist()}
        assert {tuple(pair) for pair in sets.tolist()} == want
        assert {(step, token) for step, token in enumerate(drawn[row].tolist())} <= want
    assert 1 < min(len(sets) / drawn.size(1) for sets in recorded.recorder.kept)  # sets of several tokens
    (logps,) = parts
    torch.testing.assert_close(logps, recorded.logprobs, atol=1e-5, rtol=0)
    untruncated = scaled.log_softmax(-1).gather(-1, drawn.unsqueeze(-1)).squeeze(-1)
    assert (logps - untruncated).min() > 0.01
    ended = [recorded.recorder.kept[0], recorded.recorder.kept[1][recorded.recorder.kept[1][:, 0] < 6]]  # row 1 ended at 6
    with rescored(model.base_model, head, drawn, ended, 0.7) as chunks:
        model(out[:1])  # two chunks of one row, as TRL's log-probability pass runs them
        model(out[1:])
    padded = torch.cat(chunks)
    torch.testing.assert_close(padded[0], logps[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(padded[1, :6], logps[1, :6], atol=1e-5, rtol=0)
    assert torch.equal(padded[1, 6:], torch.zeros(drawn.size(1) - 6))  # no set, no score (and no NaN)
    padded.sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)  # nor in the gradient


def test_sampling_logprobs_see_the_warpers_generate_takes_from_the_models_own_config(tmp_path):
    """``generate`` fills what TRL's generation config leaves None from the model's: a model whose
    config sets min-p would sample through a warper the recorder never sees. TRL's explicit
    top_k=0 and top_p=1.0 stay, whatever the model's config says."""
    from transformers import GenerationConfig
    from trl import GRPOConfig

    from rlplugs.adapters.trl.sampling_logprobs import truncations
    from rlplugs.adapters.trl.trainer import sampling_logprobs_conflict

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    trl_config = GenerationConfig(top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, temperature=0.7, do_sample=True)
    assert sampling_logprobs_conflict(args, trl_config, GenerationConfig(top_k=20, top_p=0.95)) is None
    assert truncations(trl_config, GenerationConfig(top_k=20, top_p=0.95)) == {}
    assert truncations(GenerationConfig(top_p=0.9), GenerationConfig(top_k=20)) == {"top_k": 20, "top_p": 0.9}
    refused = sampling_logprobs_conflict(args, trl_config, GenerationConfig(min_p=0.05))
    assert refused is not None and "min_p=0.05 would reshape the distribution" in refused


def test_compile_generation_refuses_other_backends(tiny_qwen35, tmp_path, episode_grpo_trainer):
    with pytest.raises(ValueError, match="compile_generation speeds up plain generate"):
        episode_grpo_trainer(
            tiny_qwen35, "count-test", {"rows": 4}, tmp_path, max_completion_length=64, turn_tokens=6, max_steps=1,
            compile_generation=True, use_transformers_continuous_batching=True,
        )  # fmt: skip


def test_packed_gqa_decoding_matches_sdpa_with_a_padded_static_cache(tiny_qwen35):
    """One decoding step of the tiny Qwen3.5's grouped full-attention layer (4 query heads over 2
    key/value heads) with a left-padded row and empty cache slots: the packed attention gives
    SDPA's output (which copies the key/value heads), and greedy static-cache generation with the
    model switched over yields the same tokens."""
    from transformers import AutoModelForCausalLM
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from rlplugs.adapters.trl.packed_gqa import packed_gqa_attention, use_packed_gqa

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen35, dtype=torch.float32, attn_implementation="sdpa").eval()
    layer = next(m for m in model.modules() if getattr(m, "num_key_value_groups", 1) > 1)
    assert layer.num_key_value_groups == 2
    batch, cache, dim = 3, 40, layer.head_dim
    query = torch.randn(batch, 4, 1, dim)
    key, value = torch.randn(batch, 2, cache, dim), torch.randn(batch, 2, cache, dim)
    mask = torch.zeros(batch, 1, 1, cache, dtype=torch.bool)
    mask[:, :, :, :25] = True  # 25 filled slots, 15 empty
    mask[0, :, :, :6] = False  # row 0 left-padded
    want, _ = sdpa_attention_forward(layer, query, key, value, mask, scaling=layer.scaling)
    got, _ = packed_gqa_attention(layer, query, key, value, mask, scaling=layer.scaling)
    assert got.shape == want.shape == (batch, 1, 4, dim)
    torch.testing.assert_close(got, want)

    ids = torch.randint(5, 1000, (2, 12))
    attention = torch.ones_like(ids)
    attention[0, :4] = 0

    def greedy():
        return model.generate(ids, attention_mask=attention, max_new_tokens=8, do_sample=False, pad_token_id=0,
                              cache_implementation="static", disable_compile=True)  # fmt: skip

    before = greedy()
    use_packed_gqa(model)
    assert model.config._attn_implementation == "rlplugs_packed_gqa"
    assert torch.equal(greedy(), before)
