"""``rlplugs prm train``: fit a PRM to labelled turns with transformers' ``Trainer``.

TRL's ``PRMTrainer`` is gone (removed in TRL 1.14), and it labelled every step of one completion
with token classification; our rows are (context, candidate turn, soft label) instead, so the
script is the plain TRL shape around transformers' own ``Trainer``: read rows, build the model
(:func:`rlplugs.builtins.prm.model.new_prm`, optionally LoRA), tokenize, train with BCE, save.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlplugs.builtins.prm.labels import load_rows

log = logging.getLogger(__name__)


@dataclass
class PRMTrainConfig:
    """Options of ``rlplugs prm train`` (each field is a ``--flag``; the help is the documentation)."""

    data: str = field(metadata={"help": "JSON-lines PRM rows (from `rlplugs prm label`)"})
    model: str = field(metadata={"help": "causal LM checkpoint directory the PRM starts from"})
    out: str = field(metadata={"help": "directory to save the trained PRM to"})
    lora: bool = field(default=False, metadata={"help": "train a LoRA adapter (all linear layers) plus the head"})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank"})
    keep_adapter: bool = field(default=False, metadata={"help": "save the LoRA adapter instead of merged weights"})
    epochs: float = field(default=1.0, metadata={"help": "passes over the rows"})
    max_steps: int = field(default=-1, metadata={"help": "stop after this many optimizer steps (-1: use epochs)"})
    learning_rate: float = field(default=1e-4, metadata={"help": "peak learning rate"})
    batch_size: int = field(default=8, metadata={"help": "rows per device batch"})
    grad_accum: int = field(default=1, metadata={"help": "gradient accumulation steps"})
    max_length: int = field(default=2048, metadata={"help": "tokens kept per row (from the end)"})
    bf16: bool = field(default=False, metadata={"help": "train in bfloat16 mixed precision (GPU)"})
    seed: int = field(default=0, metadata={"help": "random seed"})

    def __post_init__(self) -> None:
        """Numbers out of range fail here, before the model loads. Trainer raised on some only after
        loading it, and took others without a word: ``epochs 0`` saved the untrained head as a PRM,
        ``max_length 0`` kept every row whole."""
        for name, low in (("lora_r", 1), ("learning_rate", 0), ("batch_size", 1), ("grad_accum", 1), ("max_length", 1)):
            if getattr(self, name) < low:
                raise ValueError(f"--{name} {getattr(self, name)}: give a value of at least {low}")
        if self.max_steps != -1 and self.max_steps < 1:
            raise ValueError(f"--max_steps {self.max_steps}: give at least 1, or -1 to train --epochs passes")
        if self.max_steps == -1 and self.epochs <= 0:
            raise ValueError(f"--epochs {self.epochs}: give a value above 0 (or --max_steps N)")
        if self.keep_adapter and not self.lora:  # merged weights were saved without a word
            raise ValueError("--keep_adapter keeps a LoRA adapter: pass --lora as well")
        if self.bf16:
            import torch

            if not torch.cuda.is_available():  # Trainer refused it once the model had loaded
                raise ValueError("--bf16 trains in bfloat16 mixed precision on a GPU, and torch sees none here; drop --bf16")


def train_prm(config: PRMTrainConfig) -> Path:
    """Train a PRM on ``config.data`` and save it to ``config.out``; returns the output directory."""
    import torch
    from transformers import Trainer, TrainingArguments, set_seed

    from rlplugs.builtins.prm.model import bce_loss, new_prm, pad_batch, save_prm, tokenize

    set_seed(config.seed)
    rows = load_rows(config.data)
    model, tokenizer = new_prm(config.model, lora=config.lora, lora_r=config.lora_r, lora_alpha=2 * config.lora_r)
    # A plain list is all the Trainer needs (len + indexing): no `datasets` dependency.
    ids = tokenize(tokenizer, [r["messages"] for r in rows], config.max_length)
    dataset = [{"input_ids": seq, "label": float(r["label"])} for seq, r in zip(ids, rows, strict=True)]
    pad_id = tokenizer.pad_token_id

    def collate(batch: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        out = pad_batch([b["input_ids"] for b in batch], pad_id)
        out["labels"] = torch.tensor([b["label"] for b in batch], dtype=torch.float32)
        return out

    args = TrainingArguments(
        output_dir=str(Path(config.out) / "trainer"),
        num_train_epochs=config.epochs,
        max_steps=config.max_steps,
        learning_rate=config.learning_rate,
        per_device_train_batch_size=config.batch_size,
        gradient_accumulation_steps=config.grad_accum,
        bf16=config.bf16,
        seed=config.seed,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        remove_unused_columns=False,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collate, compute_loss_func=bce_loss)
    result = trainer.train()
    out = save_prm(trainer.model, tokenizer, config.out, merge_lora=not config.keep_adapter)
    summary = {"config": asdict(config), "rows": len(rows), "train_loss": result.training_loss,
               "steps": result.global_step, "log": trainer.state.log_history}  # fmt: skip
    (out / "prm_training.json").write_text(json.dumps(summary, indent=2))
    log.info("PRM trained on %d rows, %d steps, loss %.4f -> %s", len(rows), result.global_step, result.training_loss, out)
    return out
