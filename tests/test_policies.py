"""HFPolicy on the tiny Qwen3.5 with the real tokenizer: batching, sampling, thinking switch."""

from __future__ import annotations

import pytest

from rlplugs import HFPolicy, as_batch_policy

SHORT = [{"role": "user", "content": "hi"}]
LONG = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colours, then three fruits, please."}]


@pytest.fixture(scope="module")
def greedy(tiny_qwen35):
    return HFPolicy(tiny_qwen35, temperature=0.0, max_new_tokens=6, batch_size=4)


def test_left_padded_batch_gives_the_same_greedy_reply_as_alone(greedy):
    alone = greedy(SHORT)
    batched = greedy.generate([LONG, SHORT], n=1)
    assert batched[1][0] == alone
    assert batched[0][0] == greedy(LONG)


def test_generate_returns_n_samples_per_conversation_reproducibly(tiny_qwen35, greedy):
    sampler = HFPolicy(greedy.model, greedy.tokenizer, temperature=1.0, max_new_tokens=6, seed=3, batch_size=3)
    first = sampler.generate([SHORT, LONG], n=2)
    assert [len(r) for r in first] == [2, 2]
    assert len({*first[0], *first[1]}) > 1  # sampling, not greedy
    again = HFPolicy(greedy.model, greedy.tokenizer, temperature=1.0, max_new_tokens=6, seed=3, batch_size=3)
    assert again.generate([SHORT, LONG], n=2) == first


def test_enable_thinking_switches_the_qwen35_prompt(greedy, tiny_qwen35):
    off = greedy.render(SHORT)
    on = HFPolicy(greedy.model, greedy.tokenizer, enable_thinking=True).render(SHORT)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.endswith("<|im_start|>assistant\n<think>\n")


def test_plain_policy_is_usable_as_batch_policy():
    batch = as_batch_policy(lambda messages: messages[-1]["content"].upper())
    assert batch.generate([SHORT, LONG], n=2) == [["HI", "HI"], [LONG[-1]["content"].upper()] * 2]


def test_compiled_generation_decodes_as_plain_generate(greedy, tiny_qwen35):
    """The static cache, the packed attention and the padded prompt bucket change no token."""
    compiled = HFPolicy(tiny_qwen35, temperature=0.0, max_new_tokens=6, batch_size=4, compile_generation=True)
    assert compiled.model.config._attn_implementation == "rlplugs_packed_gqa"
    enc = compiled.tokenizer([compiled.render(SHORT)], padding=True, pad_to_multiple_of=compiled.pad_to_multiple_of)
    assert len(enc["input_ids"][0]) == 256  # the short prompt fills one bucket
    assert compiled.generate([LONG, SHORT], n=1) == greedy.generate([LONG, SHORT], n=1)


def test_decoding_settings_are_read_off_the_loaded_model(greedy, tiny_qwen35):
    assert greedy.decoding_settings["compiled"] is False and greedy.decoding_settings["dtype"] == "float32"
    half = HFPolicy(tiny_qwen35, dtype="bfloat16", compile_generation=True)
    assert half.decoding_settings == {"dtype": "bfloat16", "compiled": True, "attention": "rlplugs_packed_gqa"}


def test_a_reply_says_how_many_tokens_it_took_and_whether_the_cap_cut_it_off(tiny_qwen35):
    """Each row of a batch stops at its own end-of-sequence token: a token SHORT's sampled reply
    holds and LONG's lacks is made the stop token, so in the same left-padded batch (same seed,
    same draws) SHORT stops before it and LONG runs on to max_new_tokens."""
    import pickle

    from transformers import set_seed

    policy = HFPolicy(tiny_qwen35, temperature=1.0, max_new_tokens=6, batch_size=2)  # a model of its own
    set_seed(5)
    uncut = [r[0] for r in policy.generate([SHORT, LONG], n=1)]
    assert [(r.tokens, r.at_cap) for r in uncut] == [(6, True), (6, True)]  # the random model did not stop
    enc = policy.tokenizer([policy.render(SHORT), policy.render(LONG)], return_tensors="pt", padding=True, add_special_tokens=False)
    set_seed(5)
    out = policy.model.generate(**enc, max_new_tokens=6, do_sample=True, temperature=1.0, top_p=1.0,
                                pad_token_id=policy.tokenizer.pad_token_id)  # fmt: skip
    short_ids, long_ids = out[:, enc["input_ids"].shape[1] :].tolist()
    k = next(i for i, t in enumerate(short_ids) if i >= 1 and t not in short_ids[:i] and t not in long_ids)
    policy.model.generation_config.eos_token_id = short_ids[k]
    set_seed(5)
    short, long = (r[0] for r in policy.generate([SHORT, LONG], n=1))
    assert (short.tokens, short.at_cap) == (k, False)
    assert (long.tokens, long.at_cap) == (6, True) and long == uncut[1]
    again = pickle.loads(pickle.dumps(short))  # as it travels to a sandbox worker
    assert (again, again.tokens, again.at_cap) == (short, k, False) and isinstance(again, str)
