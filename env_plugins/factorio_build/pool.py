"""The sandbox pool: zygote processes that fork a job process per program, replaced when they die.

factory-sim's ``evolve.pool.EvalPool`` does the process management (one private pipe per worker,
a wall-clock deadline per job, terminate-and-respawn on a timeout or a crash); each of its workers
is one of our zygotes (:mod:`factorio_build.zygote`), and the program runs in a child the zygote
forks. How a *child* ended (the program's CPU limit, a signal, the machine's load) comes back as
the zygote's report and becomes a :class:`JobFailure` here. A failure of the *zygote* itself (it
died, stopped answering, could not fork) is never the program's doing: that job is unscored with
its reason. A pool that cannot start zygotes at all raises :class:`PoolFailure`, and the callers
mark those samples unscored.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from evolve.pool import EvalPool

log = logging.getLogger(__name__)

INIT = "factorio_build.zygote:init"
JOB = "factorio_build.zygote:run_program"
#: Seconds the pool waits for a zygote beyond the job's own wall-clock backstop, which the zygote
#: enforces on its child; past it the zygote itself is stuck.
ZYGOTE_GRACE_S = 30.0


class PoolFailure(RuntimeError):
    """The pool itself could not run jobs (workers do not start): rewards are unscored."""


@dataclass(frozen=True)
class JobFailure:
    """A job that returned no result: how it ended (``killed``/``crash``/``unscored``) and why."""

    outcome: str
    reason: str


def classify(error: str) -> JobFailure:
    """Name what the pool's error string says happened to a zygote: never the program's doing."""
    if error.startswith("initializer failed"):
        raise PoolFailure(f"sandbox pool failed: {error}")
    if error.startswith("timeout"):
        return JobFailure("unscored", f"unscored: the sandbox worker stopped answering ({error})")
    return JobFailure("unscored", f"unscored: the sandbox worker failed ({error})")


def _result(raw) -> dict | JobFailure:
    if isinstance(raw, dict) and set(raw) == {"error"}:
        return classify(str(raw["error"]))
    if isinstance(raw, dict) and "failure" in raw:
        return JobFailure(raw["failure"], raw["reason"])
    return raw


class SandboxPool:
    """Lazily started pool shared by every scoring call of one environment; thread-safe."""

    def __init__(self, workers: int, job_timeout_s: float, job: str = JOB):
        self.workers = workers
        self.job_timeout_s = job_timeout_s
        self.job = job
        self._pool: EvalPool | None = None
        self._lock = threading.Lock()

    def run(self, payloads: list[dict]) -> list[dict | JobFailure]:
        """One result per payload: the job's dict, or a :class:`JobFailure`. Raises
        :class:`PoolFailure` when the pool cannot run at all (and drops it, so the next call
        starts afresh)."""
        if not payloads:
            return []
        with self._lock:
            try:
                if self._pool is None:
                    timeout = self.job_timeout_s + ZYGOTE_GRACE_S
                    self._pool = EvalPool(self.workers, INIT, self.job, timeout_s=timeout)
                raw = self._pool.map(payloads)
            except Exception as exc:  # noqa: BLE001 - anything here is the pool's failure, not a program's
                self._drop()
                raise PoolFailure(f"sandbox pool failed: {type(exc).__name__}: {exc}") from exc
        try:
            return [_result(r) for r in raw]
        except PoolFailure:
            self.close()
            raise

    def _drop(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def close(self) -> None:
        with self._lock:
            self._drop()
