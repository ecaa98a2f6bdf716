"""The process reward model: a causal LM with a scalar head on the candidate turn's last token.

Why transformers' ``AutoModelForSequenceClassification`` with one label: it *is* a causal LM
backbone plus a linear ``score`` head read at the rightmost non-pad token, for every decoder
architecture we use (Qwen3.5, Llama/SmolLM2, Qwen3), and it saves and loads like any checkpoint
(``save_pretrained`` writes the head with the weights; peft knows to train and save the head
with a LoRA adapter). What this module adds is the PRM's contract:

- the input is the chat-templated conversation *through* the candidate turn (:func:`render`),
  truncated from the left so the candidate is never cut;
- the output is a logit; ``sigmoid`` of it is the estimated chance of winning from there;
- the loss is binary cross-entropy against a soft label in [0, 1] (:func:`bce_loss`).

A saved PRM directory holds either full weights (LoRA merged in, the default) or a LoRA adapter
over its base checkpoint; :func:`load_prm` reads both.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rlplugs import Message

log = logging.getLogger(__name__)


def render(tokenizer: Any, messages: Sequence[Message]) -> str:
    """The conversation through the candidate turn, as the model sees it."""
    return tokenizer.apply_chat_template(list(messages), tokenize=False)


def tokenize(tokenizer: Any, conversations: Sequence[Sequence[Message]], max_length: int) -> list[list[int]]:
    """Token ids of each conversation, keeping the last ``max_length`` tokens (the candidate)."""
    texts = [render(tokenizer, m) for m in conversations]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [seq[-max_length:] for seq in ids]


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad ids into ``input_ids`` and ``attention_mask`` tensors."""
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, seq in enumerate(sequences):
        input_ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[i, : len(seq)] = 1
    return {"input_ids": input_ids, "attention_mask": mask}


def bce_loss(outputs: Any, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None) -> torch.Tensor:
    """Binary cross-entropy of the head's logit against soft labels (Trainer's ``compute_loss_func``).

    Summed and divided by ``num_items_in_batch`` when the Trainer passes it, so gradient
    accumulation weighs every row equally."""
    logits = outputs.logits.squeeze(-1).float()
    losses = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels.float().to(logits.device), reduction="none")
    if num_items_in_batch is None:
        return losses.mean()
    return losses.sum() / num_items_in_batch


def new_prm(base: str | Path, *, lora: bool = False, lora_r: int = 16, lora_alpha: int = 32,
            dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:  # fmt: skip
    """A fresh PRM over the causal LM checkpoint ``base`` (the head starts random), and its tokenizer.

    ``lora`` wraps every linear layer of the backbone in a LoRA adapter and trains the head fully."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1, dtype=dtype)
    # The head reads the rightmost token that is not padding, so the model must know the pad id.
    model.config.pad_token_id = tokenizer.pad_token_id
    if lora:
        from peft import LoraConfig, TaskType, get_peft_model

        config = LoraConfig(task_type=TaskType.SEQ_CLS, r=lora_r, lora_alpha=lora_alpha, lora_dropout=0.0,
                            target_modules="all-linear")  # fmt: skip
        model = get_peft_model(model, config)
    return model, tokenizer


def save_prm(model: Any, tokenizer: Any, out: str | Path, *, merge_lora: bool = True) -> Path:
    """Save a PRM as a checkpoint directory (weights + head + tokenizer). A LoRA PRM is merged
    into full weights unless ``merge_lora`` is false, which keeps only the adapter (and head)."""
    out = Path(out)
    if hasattr(model, "peft_config") and merge_lora:
        model = model.merge_and_unload()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def load_prm(path: str | Path, *, device: str = "cpu", dtype: torch.dtype | None = None) -> tuple[Any, Any]:
    """Load a PRM saved by :func:`save_prm` (full weights or a LoRA adapter), in eval mode."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"PRM checkpoint {path} is not a directory")
    kwargs = {"dtype": dtype} if dtype is not None else {}
    if (path / "adapter_config.json").exists():
        from peft import AutoPeftModelForSequenceClassification

        model = AutoPeftModelForSequenceClassification.from_pretrained(path, num_labels=1, **kwargs)
    else:
        model = AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
        if model.config.num_labels != 1:
            raise ValueError(f"{path} is not a PRM: its head has {model.config.num_labels} outputs, expected 1")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.to(device).eval(), tokenizer


class PRMScorer:
    """Scores candidate turns in their contexts with a trained PRM (probabilities in [0, 1])."""

    def __init__(self, path: str | Path, *, device: str = "cpu", max_length: int = 2048, batch_size: int = 16,
                 dtype: torch.dtype | None = None):  # fmt: skip
        self.path = str(path)
        self.model, self.tokenizer = load_prm(path, device=device, dtype=dtype)
        self.device = device
        self.max_length = max_length
        self.batch_size = batch_size

    @torch.no_grad()
    def score(self, contexts: Sequence[Sequence[Message]], candidates: Sequence[str]) -> list[float]:
        """``P(win | context, candidate)`` for each pair, batched."""
        conversations = [[*c, {"role": "assistant", "content": t}] for c, t in zip(contexts, candidates, strict=True)]
        ids = tokenize(self.tokenizer, conversations, self.max_length)
        scores: list[float] = []
        for start in range(0, len(ids), self.batch_size):
            batch = pad_batch(ids[start : start + self.batch_size], self.tokenizer.pad_token_id)
            logits = self.model(**{k: v.to(self.device) for k, v in batch.items()}).logits
            scores += torch.sigmoid(logits.squeeze(-1).float()).tolist()
        return scores
