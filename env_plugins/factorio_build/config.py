"""Options of the ``factorio-build`` environment (``--env_args``, YAML ``env_args``, TOML ``env.taskset``).

One strict pydantic model: an unknown key is an error that names the closest valid one, so a typo
in a recipe fails before any compute is spent.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlplugs import StrictConfig

Task = Literal["construct_smelting_line", "build_line", "plate_line", "belt_smelting"]


class FactorioBuildConfig(StrictConfig):
    """How rows are drawn and how programs are run."""

    task: Task = Field("construct_smelting_line", description="factory-sim task the program must solve")
    n_scenes: int = Field(8, ge=1, le=64, description="unseen scenes per row; the program runs once on each")
    rows: int = Field(1024, ge=1, description="rows in the train split")
    eval_rows: int = Field(16, ge=1, description="rows in the validation and holdout splits")
    seed: int = Field(0, ge=0, description="first train seed (shifts the train stream only)")
    workers: int = Field(2, ge=1, description="sandbox worker processes")
    program_cpu_limit_s: float = Field(
        2.0, gt=0, description="CPU seconds a program may run per scene (the machine's load does not count)"
    )
    cpu_limit_s: int = Field(40, ge=1, description="CPU seconds one program may use on all its scenes (RLIMIT_CPU)")
    job_timeout_s: float = Field(
        300.0, gt=0, description="wall-clock backstop for one program's job; expiry = unscored (machine overloaded)"
    )
    memory_limit_mb: int = Field(2048, ge=256, description="address space of a worker (RLIMIT_AS)")
    decision_budget: int | None = Field(None, ge=1, description="decisions per scene; None = the task's own")

    @model_validator(mode="after")
    def _backstop_leaves_room_for_the_cpu_allowance(self):
        # A job whose backstop expires is unscored as the machine's fault, which is only true if
        # a job that had a core to itself would have hit its CPU limit first.
        if self.job_timeout_s <= self.cpu_limit_s:
            raise ValueError(
                f"job_timeout_s ({self.job_timeout_s:g}) must exceed cpu_limit_s ({self.cpu_limit_s}): the wall-clock "
                "backstop must leave room for the job's CPU allowance"
            )
        return self
