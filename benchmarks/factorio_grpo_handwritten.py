"""The baseline for the plugin-overhead figure: a hand-written TRL GRPO script for factorio-build.

What a researcher would write without rlplugs: build the rows, call factory-sim's scoring in one
reward function (``success + 0.1 * validity``), hand both to ``GRPOTrainer``. It takes the same
command-line flags as ``trl grpo --env factorio-build`` (so ``benchmarks/factorio_repro.py`` runs
both with identical settings) and ignores the rlplugs-only ones it has no use for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer, ModelConfig, TrlParser

from factorio_build.config import FactorioBuildConfig
from factorio_build.plugin import dataset_rows
from factorio_build.scoring import ProgramScorer
from rlplugs.rewards import Sample


@dataclass
class Args:
    environment: str = field(default="factorio-build", metadata={"aliases": ["--env"]})
    env_args: str = "{}"
    skip_preflight: bool = True


def main() -> None:
    import json

    args, training_args, model_args = TrlParser((Args, GRPOConfig, ModelConfig)).parse_args_and_config()
    config = FactorioBuildConfig(**json.loads(args.env_args))
    scorer = ProgramScorer(config)

    def factorio_reward(prompts, completions, **columns):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        rows = [{k: columns[k][i] for k in ("task", "split", "seeds", "row_id")} for i in range(len(texts))]
        scores = scorer.score_batch([Sample(prompt=p, completion=t, row=r) for p, t, r in zip(prompts, texts, rows)])
        return [
            None if s["success"].value is None else s["success"].value + 0.1 * (s["validity"].value or 0.0)
            for s in scores
        ]

    training_args.chat_template_kwargs = {"enable_thinking": False}
    training_args.model_init_kwargs = {"dtype": model_args.dtype}
    trainer = GRPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=factorio_reward,
        args=training_args,
        train_dataset=Dataset.from_list(dataset_rows(config, "train")),
    )
    trainer.train()
    trainer.save_model(training_args.output_dir)


if __name__ == "__main__":
    main()
