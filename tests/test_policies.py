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
