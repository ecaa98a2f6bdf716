"""Scoring: each program runs once, on every scene of its row, and yields both reward components.

``success`` (weight 1.0) is the fraction of the row's scenes where factory-sim verified the build
(at least 10 machine-made plates in the 3,600-tick window after the build phase). ``validity``
(weight 0.1) says whether the program was a well-behaved sandbox citizen. Every outcome has a
documented value and a reason that is logged and carried on the :class:`~rlplugs.rewards.Score`:

=====================  =========  ========  ===================================================
outcome                success    validity  when
=====================  =========  ========  ===================================================
``ok``                 k / n      1.0       ran on every scene without raising
``crash``              k / n      0.0       raised its own exception on some scene
``timeout``            k / n      0.0       overran its per-scene CPU time limit (stopped
                                            there, the scene still verified)
``killed``             0 (k / n)  -1.0      hit a process limit: the job's CPU seconds, memory,
                                            or its process died (k / n when only a
                                            ``MemoryError`` stopped it)
``sandbox_violation``  0          -1.0      refused by the static layer
``no_code_block``      0          0.0       no ```python block defining ``build(world)``
=====================  =========  ========  ===================================================

So the total reward is ``success + 0.1 * validity``. Both limits of a program count its own CPU
seconds, so the machine's load never changes an outcome. A reward is *unscored*
(``Score(None, ...)``) only when it could not be computed, with the reason: the pool could not
start workers, a sandbox worker died or stopped answering, the job's wall-clock backstop expired
before it had used its CPU allowance (the machine was overloaded), something outside the sandbox
killed it, or the row names no scenes. A program cannot cause any of these (it cannot wait
without using CPU), so a hostile program always gets its documented value.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from rlplugs import Sample, Score, reason_kind

from factorio_build.config import FactorioBuildConfig
from factorio_build.pool import JobFailure, PoolFailure, SandboxPool
from factorio_build.programs import check_completion

log = logging.getLogger(__name__)

VALIDITY = {"ok": 1.0, "crash": 0.0, "timeout": 0.0, "killed": -1.0, "sandbox_violation": -1.0, "no_code_block": 0.0}
COMPONENTS = ("success", "validity")
DECISION_BUDGETS = {"belt_smelting": 2500}


@dataclass
class Verdict:
    """What one program did on its row."""

    outcome: str
    success: float
    reason: str
    scenes: list[dict] = field(default_factory=list)
    isolation: dict = field(default_factory=dict)

    def scores(self) -> dict[str, Score]:
        return {
            "success": Score(self.success, f"{self.outcome}: {self.reason}"),
            "validity": Score(VALIDITY[self.outcome], f"{self.outcome}: {self.reason}"),
        }


def judge(result: dict | JobFailure, n_scenes: int) -> Verdict | Score:
    """Turn a job's result (or how its job ended) into an outcome, or an unscored ``Score``."""
    if isinstance(result, JobFailure):
        if result.outcome == "unscored":
            return Score(None, result.reason)
        return Verdict(result.outcome, 0.0, result.reason)
    scenes = result["scenes"]
    verified = sum(s["success"] for s in scenes)
    success = verified / n_scenes
    errors = [s["error"] for s in scenes if s["error"]]
    tally = f"{verified}/{n_scenes} scenes verified"
    if any(e.startswith("MemoryError") for e in errors):
        return Verdict("killed", success, f"{tally}; program hit the memory limit", scenes, result["isolation"])
    if any(s["timed_out"] for s in scenes):
        overran = sum(s["timed_out"] for s in scenes)
        return Verdict("timeout", success, f"{tally}; overran its CPU time limit on {overran} scenes", scenes,
                       result["isolation"])
    if errors:
        return Verdict("crash", success, f"{tally}; raised on {len(errors)} scenes, first: {errors[0]}", scenes, result["isolation"])
    return Verdict("ok", success, tally, scenes, result["isolation"])


class ProgramScorer:
    """The environment's batch scorer: static checks here, programs in the sandbox pool."""

    def __init__(self, config: FactorioBuildConfig, pool: SandboxPool | None = None):
        self.config = config
        self.pool = pool or SandboxPool(config.workers, config.job_timeout_s)

    def payload(self, source: str, row: dict) -> dict:
        task = row["task"]
        budget = self.config.decision_budget or DECISION_BUDGETS.get(task, 600)
        return {
            "source": source,
            "task": task,
            "split": row["split"],
            "seeds": [str(s) for s in row["seeds"]],
            "decision_budget": budget,
            "program_cpu_limit_s": self.config.program_cpu_limit_s,
            "cpu_limit_s": self.config.cpu_limit_s,
            "job_timeout_s": self.config.job_timeout_s,
            "memory_bytes": self.config.memory_limit_mb * 2**20,
        }

    def verdicts(self, samples: Sequence[Sample]) -> list[Verdict | Score]:
        """One :class:`Verdict` per sample, or an unscored ``Score`` saying why there is none.
        Identical (program, row) pairs in one batch run once."""
        out: list[Verdict | Score | None] = [None] * len(samples)
        jobs: dict[tuple, list[int]] = {}
        payloads: list[dict] = []
        for i, sample in enumerate(samples):
            row = sample.row or {}
            if not row.get("seeds") or not row.get("task") or not row.get("split"):
                out[i] = Score(None, "row names no task/split/seeds to run the program on")
                continue
            checked = check_completion(sample.completion)
            if checked.source is None:
                out[i] = Verdict(checked.outcome, 0.0, checked.reason)
                continue
            key = (checked.source, row["task"], row["split"], tuple(str(s) for s in row["seeds"]))
            if key not in jobs:
                jobs[key] = []
                payloads.append(self.payload(checked.source, row))
            jobs[key].append(i)
        try:
            results = self.pool.run(payloads)
        except PoolFailure as exc:
            log.error("factorio-build: %s; %d samples unscored", exc, sum(map(len, jobs.values())))
            results = [Score(None, str(exc))] * len(payloads)
        for (key, indices), result in zip(jobs.items(), results):
            verdict = result if isinstance(result, Score) else judge(result, len(key[3]))
            for i in indices:
                out[i] = verdict
        self._log(out)
        return out

    def score_batch(self, samples: Sequence[Sample]) -> list[dict[str, Score]]:
        return [v.scores() if isinstance(v, Verdict) else {c: v for c in COMPONENTS} for v in self.verdicts(samples)]

    async def __call__(self, samples: Sequence[Sample]) -> list[dict[str, Score]]:
        return await asyncio.to_thread(self.score_batch, samples)

    @staticmethod
    def _log(verdicts: list) -> None:
        counts = Counter(v.outcome if isinstance(v, Verdict) else "unscored" for v in verdicts)
        log.info("factorio-build scored %d programs: %s", len(verdicts), dict(counts))
        failures = Counter(reason_kind(f"{v.outcome}: {v.reason}") for v in verdicts if isinstance(v, Verdict) and v.outcome != "ok")
        if failures:  # a training log then says which call a batch's refusals were about, not only how many
            log.info("factorio-build most frequent failures: %s", "; ".join(f"{n} x {r}" for r, n in failures.most_common(3)))
        for v in verdicts:
            if isinstance(v, Verdict):
                log.debug("factorio-build %s: %s", v.outcome, v.reason)
            else:
                log.warning("factorio-build unscored: %s", v.reason)
