"""GRPO on factorio-build through the rlplugs TRL adapter, as a plain Python script.

The same thing ``trl grpo --env factorio-build`` does, spelled out: the EnvSpec gives the dataset,
one reward function per component (success, validity) and the LoRA targets; the trainer is TRL's
GRPOTrainer with rlplugs' zero-spread filter. Defaults run two steps on CPU with the embedded tiny
Qwen3.5; pass ``--model`` and drop ``--cpu`` for a real model.

    python examples/factorio_build_grpo.py --steps 2
"""

from __future__ import annotations

import argparse
import logging
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory or Hub id (default: the tiny Qwen3.5)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--output_dir", default="outputs/factorio-build-grpo-example")
    parser.add_argument("--cpu", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    from rlplugs import check_counts

    check_counts(args, steps=1)  # max_steps 0 is not "train nothing" to transformers: it still took a step
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    from peft import LoraConfig
    from trl import GRPOConfig

    from rlplugs.registry import make_env
    from rlplugs.testing.tiny_models import tiny_qwen35_dir
    from rlplugs.adapters.trl.rewards import EnvRewardFunctions
    from rlplugs.adapters.trl.trainer import EnvGRPOTrainer

    spec = make_env("factorio-build", {"rows": 8, "eval_rows": 2})
    spec.preflight()  # both components compute on the reference program before step 0
    rewards = EnvRewardFunctions(spec)
    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.steps,
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=64,
        temperature=0.7,
        beta=0.0,
        learning_rate=2e-5,
        reward_weights=rewards.weights,
        chat_template_kwargs=spec.trainer_defaults["chat_template_kwargs"],
        use_cpu=args.cpu,
        bf16=False,
        logging_steps=1,
        report_to="none",
    )
    trainer = EnvGRPOTrainer(
        model=args.model or str(tiny_qwen35_dir()),
        reward_funcs=rewards.functions,
        args=config,
        train_dataset=spec.dataset("train"),
        peft_config=LoraConfig(r=16, lora_alpha=32, target_modules=spec.model_defaults["lora_target_modules"]),
        filter_zero_spread_groups=True,
    )
    trainer.train()
    trainer.save_model(args.output_dir)


if __name__ == "__main__":
    from rlplugs import run_script

    sys.exit(run_script(main))  # a fault is one line; RLPLUGS_TRACEBACK=1 shows its traceback
