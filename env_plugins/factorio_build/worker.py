"""What runs inside a sandbox worker process: the lock-down and the episode job.

A worker is a spawned process (``factorio_build.pool``) that imports the simulator, then on its
first job locks itself down for good, in this order:

1. **network**: it enters a fresh network namespace (``unshare``; unprivileged, together with a
   user namespace), which has only a down loopback, so no connection can leave it;
2. **user**: when started as root it drops to ``nobody`` (uid/gid 65534, no groups), so the
   kernel enforces the process limit below and files owned by anyone else are read-only;
3. **rlimits**: ``RLIMIT_NPROC = 0`` (no new processes or threads), ``RLIMIT_FSIZE = 0`` (no byte
   written to any file), ``RLIMIT_NOFILE`` = the descriptors already open (no new file or socket),
   ``RLIMIT_AS`` (address space), ``RLIMIT_CORE = 0``; and before every job ``RLIMIT_CPU`` is set
   to the CPU already used plus the job's allowance, so a job that spins is killed by SIGXCPU.

Each step that the machine does not allow (not root; user namespaces disabled) is reported in the
job result's ``isolation`` map instead of silently assumed. A program's own wall clock is bounded
per scene with ``ITIMER_REAL`` (no watchdog thread: threads are processes to ``RLIMIT_NPROC``);
when it fires the program is stopped and the scene still runs to its verification, as factory-sim
does with its own time limit. The pool keeps the job's overall wall clock and kills the worker.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys

from evolve import sandbox
from fsim.program_api import TASK_PROFILES, run_episode
from fsim.rl import RlEnv

from factorio_build import programs, rows

NOBODY = 65534
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
#: Scenes a program may overrun its time limit on before the rest of its row is not run.
MAX_TIME_LIMIT_HITS = 2

_state: dict = {}


class ProgramTimeout(Exception):
    """Raised inside a program that ran past its per-scene wall-clock limit."""


def init() -> None:
    """Pool initializer: one simulator per worker, reused by every job.

    One empty episode per task runs here, before the lock-down, so every data file the simulator
    and the scene generators read lazily (the map's water, belt timing tables) is already loaded:
    afterwards no new file can be opened."""
    sys.dont_write_bytecode = True
    _state["env"] = RlEnv()
    for task in TASK_PROFILES:
        _, blueprint = rows.scene(task, "train", 0)
        run_episode(lambda world: None, blueprint, task=task, env=_state["env"])


def _lowest_free_fd() -> int:
    fd = 0
    while True:
        try:
            os.fstat(fd)
        except OSError:
            return fd
        fd += 1


def lock_down(memory_bytes: int) -> dict[str, str]:
    """Apply the process-level sandbox once; returns what is enforced, step by step."""
    done: dict[str, str] = {}
    libc = ctypes.CDLL(None, use_errno=True)
    # As root a network namespace needs no user namespace (which a threaded process cannot enter).
    flags = CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNET
    if libc.unshare(flags) == 0:
        done["network"] = "empty network namespace"
    else:
        done["network"] = f"namespace refused ({os.strerror(ctypes.get_errno())}); no new sockets via RLIMIT_NOFILE"
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        done["user"] = "nobody"
    else:
        done["user"] = f"uid {os.geteuid()} (not root: unchanged)"
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write then fails with EFBIG instead of killing
    free = _lowest_free_fd()
    for name, limit in (
        ("RLIMIT_NPROC", 0),
        ("RLIMIT_FSIZE", 0),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_AS", memory_bytes),
        ("RLIMIT_NOFILE", free),
    ):
        resource.setrlimit(getattr(resource, name), (limit, limit))
        done[name] = str(limit)
    return done


def _cpu_allowance(seconds: int) -> None:
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (spent + seconds, resource.RLIM_INFINITY))


def _enter_job(payload: dict) -> None:
    """Lock down on the first job; give every job its own CPU allowance."""
    if "isolation" not in _state:
        _state["isolation"] = lock_down(payload["memory_bytes"])
        signal.signal(signal.SIGALRM, _on_alarm)
    _cpu_allowance(payload["cpu_limit_s"])


def _on_alarm(signum, frame):
    if _state.get("armed"):
        _state["armed"] = False
        raise ProgramTimeout("ran past its wall-clock limit")


def _guarded(build, seconds: float, placed: list):
    """``build`` under a wall-clock limit, recording the facing of each placement that lands."""

    def run(world):
        place = world.place

        def recording_place(item, x, y, facing):
            before = len(world._built)
            ok = place(item, x, y, facing)
            if len(world._built) > before:
                placed.append((item, int(x), int(y), facing))
            return ok

        world.place = recording_place
        _state["armed"] = True
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return build(world)
        finally:
            _state["armed"] = False
            signal.setitimer(signal.ITIMER_REAL, 0)

    return run


def run_program(payload: dict) -> dict:
    """Pool job: one checked program on every scene of one row.

    Returns ``{"scenes": [...], "isolation": {...}}``; a scene result has ``seed``, ``family``,
    ``success``, ``verified_output``, ``error`` (the program's exception, if any) and ``built``
    (item, x, y, facing)."""
    _enter_job(payload)
    programs.check_program(payload["source"])  # the static layer again, on this side of the wall
    build = sandbox.load(payload["source"])
    results, hits = [], 0
    for seed in payload["seeds"]:
        family, blueprint = rows.scene(payload["task"], payload["split"], seed)
        if hits >= MAX_TIME_LIMIT_HITS:
            results.append(_not_run(seed, family, f"not run: the program overran its time limit on {hits} scenes"))
            continue
        placed: list = []
        episode = run_episode(
            _guarded(build, payload["time_limit_s"], placed),
            blueprint,
            task=payload["task"],
            decision_budget=payload["decision_budget"],
            env=_state["env"],
        )
        timed_out = bool(episode.error and episode.error.startswith("ProgramTimeout"))
        hits += timed_out
        results.append(
            {
                "seed": str(seed),
                "family": family,
                "success": bool(episode.success),
                "verified_output": int(episode.verified_output),
                "error": episode.error,
                "timed_out": timed_out,
                "built": placed,
            }
        )
    return {"scenes": results, "isolation": dict(_state["isolation"])}


def _not_run(seed, family: str, why: str) -> dict:
    return {"seed": str(seed), "family": family, "success": False, "verified_output": 0, "error": why,
            "timed_out": True, "built": []}


def isolation_probe(payload: dict) -> dict:
    """Run raw, *unchecked* Python in a locked-down worker and report what it could do.

    Only the isolation tests call this: it proves the process layer holds on its own, as if a
    program had slipped past the static layer."""
    _enter_job(payload)
    scope: dict = {}
    try:
        exec(payload["code"], scope)  # noqa: S102 - the point of the probe
        outcome = "ran"
    except BaseException as exc:  # noqa: BLE001
        outcome = f"{type(exc).__name__}: {exc}"
    return {"outcome": outcome, "isolation": dict(_state["isolation"])}
