"""LoRA on the twelve Qwen3.5 text projections through the TRL adapter, on the vision-language
class real Qwen3.5 checkpoints use: every target gets a gradient, the vision tower none."""

from __future__ import annotations

import torch
from transformers import AutoTokenizer, TrainerCallback

from rlplugs.qwen35 import QWEN35_LORA_TARGETS


class RecordGradients(TrainerCallback):
    """Norms of every trainable parameter's gradient just before the first optimizer step."""

    def __init__(self) -> None:
        self.norms: dict[str, float] = {}

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if not self.norms:
            self.norms = {
                n: (p.grad.norm().item() if p.grad is not None else 0.0)
                for n, p in model.named_parameters()
                if p.requires_grad
            }


def test_lora_on_qwen35_targets_trains_every_target_and_leaves_vision_alone(tiny_qwen35_vl, tmp_path):
    from trl import GRPOConfig, ModelConfig, get_peft_config

    from rlplugs.registry import make_env
    from rlplugs.adapters.trl.rewards import EnvRewardFunctions
    from rlplugs.adapters.trl.trainer import EnvGRPOTrainer

    spec = make_env("letters-test", {"rows": 4})
    rewards = EnvRewardFunctions(spec)
    peft_config = get_peft_config(
        ModelConfig(use_peft=True, lora_r=8, lora_alpha=16, lora_target_modules=QWEN35_LORA_TARGETS)
    )
    grads = RecordGradients()
    trainer = EnvGRPOTrainer(
        model=str(tiny_qwen35_vl),
        reward_funcs=rewards.functions,
        args=GRPOConfig(
            output_dir=str(tmp_path),
            use_cpu=True,
            bf16=False,
            gradient_checkpointing=False,
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=16,
            max_steps=1,
            learning_rate=1e-3,
            report_to="none",
            save_strategy="no",
            reward_weights=rewards.weights,
            chat_template_kwargs={"enable_thinking": False},
        ),  # fmt: skip
        train_dataset=spec.dataset("train"),
        processing_class=AutoTokenizer.from_pretrained(tiny_qwen35_vl),  # the tiny dir has no image processor
        peft_config=peft_config,
        callbacks=[grads],
    )
    assert type(trainer.model.get_base_model()).__name__ == "Qwen3_5ForConditionalGeneration"
    trainer.train()

    lora_b = {n: g for n, g in grads.norms.items() if "lora_B" in n}
    assert len(lora_b) == 31  # 3 GDN layers x 5 + 1 attention layer x 4 + 4 MLPs x 3
    assert all(g > 0 for g in lora_b.values()), [n for n, g in lora_b.items() if g == 0]
    for target in QWEN35_LORA_TARGETS:
        assert any(f".{target}.lora_B" in n for n in lora_b), target
    assert not [n for n in grads.norms if ".visual." in n]  # nothing in the vision tower is trainable
    visual = [p for n, p in trainer.model.named_parameters() if ".visual." in n]
    assert visual and all(p.grad is None and not p.requires_grad for p in visual)
    assert not [n for n, _ in trainer.model.named_modules() if ".visual." in n and "lora" in n]
    assert torch.isfinite(torch.tensor(trainer.state.log_history[-1]["train_loss"]))
