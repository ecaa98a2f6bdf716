"""The sandbox pool: spawned worker processes that run programs and are replaced when they die.

factory-sim's ``evolve.pool.EvalPool`` does the process management (one private pipe per worker,
a wall-clock deadline per job, terminate-and-respawn on a timeout or a crash); the lock-down and
the job itself are ours (:mod:`factorio_build.worker`). This module turns what the pool reports
into outcomes a reward can name: a job past its deadline is a ``timeout``, a worker that died is
``killed`` with the signal that killed it (SIGXCPU = CPU limit, SIGKILL = memory or the deadline).
Only a pool that cannot start workers at all is a failure of *ours*: the callers mark those
samples unscored.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
from dataclasses import dataclass

from evolve.pool import EvalPool

log = logging.getLogger(__name__)

INIT = "factorio_build.worker:init"
JOB = "factorio_build.worker:run_program"


class PoolFailure(RuntimeError):
    """The pool itself could not run jobs (workers do not start): rewards are unscored."""


@dataclass(frozen=True)
class JobFailure:
    """A job that returned no result: how it ended (``timeout``/``killed``/``crash``) and why."""

    outcome: str
    reason: str


_EXIT = re.compile(r"exit code (-?\d+)")


def classify(error: str) -> JobFailure:
    """Name what the pool's error string says happened to a worker."""
    if error.startswith("timeout"):
        return JobFailure("timeout", f"timeout: program killed at the job's wall-clock deadline ({error})")
    if error.startswith("initializer failed"):
        raise PoolFailure(f"sandbox pool failed: {error}")
    match = _EXIT.search(error)
    if match:
        code = int(match.group(1))
        if code < 0:
            name = signal.Signals(-code).name
            what = {"SIGXCPU": "CPU time limit", "SIGKILL": "killed (memory or deadline)", "SIGSEGV": "segfault"}
            return JobFailure("killed", f"killed: worker died of {name} ({what.get(name, 'signal')})")
        return JobFailure("killed", f"killed: worker exited with code {code}")
    if error.startswith("MemoryError"):
        return JobFailure("killed", f"killed: out of memory outside the program ({error})")
    return JobFailure("crash", f"crash: {error}")


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
                    self._pool = EvalPool(self.workers, INIT, self.job, timeout_s=self.job_timeout_s)
                raw = self._pool.map(payloads)
            except Exception as exc:  # noqa: BLE001 - anything here is the pool's failure, not a program's
                self._drop()
                raise PoolFailure(f"sandbox pool failed: {type(exc).__name__}: {exc}") from exc
        try:
            return [
                classify(str(r["error"])) if isinstance(r, dict) and set(r) == {"error"} else r for r in raw
            ]
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
