"""Registration of ``factorio-build``: rows, prompt, scorer and tools assembled into an EnvSpec.

Single-turn: the model answers each row's prompt with one program; :class:`ProgramScorer` runs
it once through the sandbox pool on every scene of the row and returns both reward components.
"""

from __future__ import annotations

import functools

import rlplugs
from rlplugs import EnvSpec, EvalProtocol, QWEN35_LORA_TARGETS, Registration, RewardComponent, Sample

from factorio_build import diverse, pictures, prompt, reference, rows, sampled, sft
from factorio_build.config import FactorioBuildConfig
from factorio_build.scoring import ProgramScorer

EVAL = EvalProtocol(
    splits=("validation", "holdout"),
    rows=16,
    samples_per_row=4,
    temperature=0.6,
    enable_thinking=False,
    max_new_tokens=12288,
    report_by=("family",),
    success_component="success",
)


def dataset_rows(config: FactorioBuildConfig, split: str) -> list[dict]:
    """A split's rows as dataset records (``prompt`` in chat format plus what the scorer reads)."""
    count = config.rows if split == "train" else config.eval_rows
    messages = prompt.messages(config.task, config.n_scenes)
    return [
        {
            "prompt": messages,
            "task": r.task,
            "split": r.split,
            "family": r.family,
            "seeds": list(r.seeds),
            "row_id": r.row_id,
            "digest": r.digest,
        }
        for r in rows.draw_rows(config.task, split, count, config.n_scenes, config.seed)
    ]


def _dataset(config: FactorioBuildConfig, split: str):
    from datasets import Dataset

    return Dataset.from_list(dataset_rows(config, split))


def build_env(config: FactorioBuildConfig | None = None) -> EnvSpec:
    config = config or FactorioBuildConfig()
    scorer = ProgramScorer(config)
    solvable = config.task in reference.SOLVES

    def preflight_samples() -> list[Sample]:
        completion = reference.as_completion(reference.program())
        return [
            Sample(prompt=row["prompt"], completion=completion, row=row)
            for split in ("train", "holdout")
            for row in dataset_rows(config.model_copy(update={"rows": 1, "eval_rows": 1}), split)
        ]

    return EnvSpec(
        description=f"Write one Python program that solves {config.task} on {config.n_scenes} unseen factory-sim scenes.",
        datasets={split: functools.partial(_dataset, config, split) for split in rows.SPLITS},
        components=RewardComponent.from_batch(scorer, [  # one sandbox run per program scores both
            ("success", 1.0, "fraction of the row's scenes where the build verified"),
            ("validity", 0.1, "1 sandbox-valid, 0 no code/crash/timeout, -1 refused or killed"),
        ]),
        preflight_samples=preflight_samples,
        eval=EVAL,
        trainer_defaults={"chat_template_kwargs": {"enable_thinking": False}},
        model_defaults={"lora_target_modules": list(QWEN35_LORA_TARGETS), "lora_r": 16, "lora_alpha": 32},
        sft_datasets=sft_sets(config) if solvable else {},
        reference_policy=reference.reference_policy if solvable else None,
        render=functools.partial(pictures.render, scorer=scorer),
    )


def sft_sets(config: FactorioBuildConfig) -> dict:
    """The template warm-start sets; where the task has builders, the diverse set and the diverse
    set followed by model-written programs."""
    sets = {name: functools.partial(sft.sft_dataset, config, size) for name, size in sft.WARMSTART_SETS.items()}
    if config.task in diverse.TASKS:
        for module, sizes in ((diverse, diverse.DIVERSE_SETS), (sampled, sampled.SAMPLED_SETS)):
            sets |= {name: functools.partial(sft.sft_dataset, config, size, module.verified_programs) for name, size in sizes.items()}
    return sets


@rlplugs.hookimpl
def rlplugs_register_environments() -> list[Registration]:
    return [
        Registration(
            name="factorio-build",
            factory=build_env,
            summary="one Python program per row builds a smelting line on 8 unseen factory-sim scenes (sandboxed)",
            config=FactorioBuildConfig,
        )
    ]
