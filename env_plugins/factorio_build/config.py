"""Options of the ``factorio-build`` environment (YAML ``environment_options``, TOML ``env.taskset``).

One strict pydantic model: an unknown key is an error that names the closest valid one, so a typo
in a recipe fails before any compute is spent.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlplugs.config import StrictConfig

Task = Literal["construct_smelting_line", "build_line", "plate_line", "belt_smelting"]


class FactorioBuildConfig(StrictConfig):
    """How rows are drawn and how programs are run."""

    task: Task = Field("construct_smelting_line", description="factory-sim task the program must solve")
    n_scenes: int = Field(8, ge=1, le=64, description="unseen scenes per row; the program runs once on each")
    rows: int = Field(1024, ge=1, description="rows in the train split")
    eval_rows: int = Field(16, ge=1, description="rows in the validation and holdout splits")
    seed: int = Field(0, ge=0, description="first train seed (shifts the train stream only)")
    workers: int = Field(2, ge=1, description="sandbox worker processes")
    program_time_limit_s: float = Field(2.0, gt=0, description="wall-clock seconds a program may run per scene")
    job_timeout_s: float = Field(60.0, gt=0, description="wall-clock seconds for one program on all its scenes")
    cpu_limit_s: int = Field(40, ge=1, description="CPU seconds one program may use on all its scenes (RLIMIT_CPU)")
    memory_limit_mb: int = Field(2048, ge=256, description="address space of a worker (RLIMIT_AS)")
    decision_budget: int | None = Field(None, ge=1, description="decisions per scene; None = the task's own")
