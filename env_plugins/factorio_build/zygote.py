"""The zygote: a clean, pre-imported process that forks one throwaway job process per program.

Every job must start from a state no earlier job could touch. A worker that runs program after
program cannot promise that by checking: a program can change whatever it can reach (``math``'s
functions, a class attribute, a cache, the simulator's memory, leaked memory, a stray reference
kept alive), and a list of checks covers only the ways someone thought of. So no program runs in
a long-lived process at all. Each sandbox worker of the pool (``evolve.pool.EvalPool``) is a
zygote: at start it imports the simulator, runs one empty episode per task (so every data file
the simulator and the scene generators read lazily is loaded), enters an empty network namespace
and freezes its objects for copy-on-write. From then on it only receives payloads from the
trainer, forks, and reads back what the child reports; it never executes a line of program code,
so it is in the same state before every fork. Each job runs in a fresh child
(:mod:`factorio_build.worker` locks it down and runs the program), and whatever the program
changed, it changed in a copy that dies with that child. The guarantee is structural: it holds
for state nobody has listed. It is cheap: on a 2-core machine shared with other jobs (load 5-10)
``fork()`` returned in about 1 ms, fork, exit and reaping took 7-12 ms, and an empty job through
the pool 27 ms (median), against about 0.3 CPU seconds for the reference program on a row of 8
scenes (``benchmarks/factorio_reward.py`` measures the whole step).

The child's report comes back as JSON over a pipe, read here with a size cap and never
unpickled, so a process that ran program code cannot make the zygote or the trainer execute
anything; the child also closes the zygote's pipe to the trainer before any program runs.

The zygote keeps each job's wall clock only as a backstop (``job_timeout_s``). The program's
limits count its own CPU seconds (:mod:`factorio_build.worker`), so when the backstop expires the
job had not used its CPU allowance: it was waiting for a core, not working (a program has no way
to wait: no sleep, I/O, locks or threads). That is the machine's load, and the job is reported
*unscored* with its figures, never as the program's failure. How a job process can end:

=================================  ==========  ============================================
end                                outcome     why
=================================  ==========  ============================================
report with scenes                 (judged)    the program ran on its row
SIGXCPU, or SIGKILL at the hard    killed      the program used its CPU seconds
CPU limit
another signal, or an exit         killed      the process died (segfault, memory outside
without a readable report                      the program)
report: an error outside the       crash /     the job raised (``MemoryError``: killed)
program                            killed
the wall-clock backstop expired    unscored    the machine was too loaded to run it
SIGKILL below the CPU limit        unscored    killed from outside the sandbox (the kernel's
                                               out-of-memory killer, an operator)
report: lock-down failed           unscored    the machine does not allow the sandbox
=================================  ==========  ============================================
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import sys
import time

from fsim.program_api import TASK_PROFILES, run_episode
from fsim.rl import RlEnv

from factorio_build import rows, worker

#: A report larger than this is not read further: no honest report comes near it.
MAX_REPORT_BYTES = 8 * 2**20

_state: dict = {}


def init() -> None:
    """Pool initializer: the zygote's one-time preparation (no program code runs here, ever)."""
    sys.dont_write_bytecode = True
    env = RlEnv()
    for task in TASK_PROFILES:
        _, blueprint = rows.scene(task, "train", 0)
        run_episode(lambda world: None, blueprint, task=task, env=env)
    _state["env"] = env
    _state["network"] = worker.enter_network_namespace()
    gc.freeze()  # children's garbage collection then leaves the zygote's pages shared


def run_program(payload: dict) -> dict:
    """Pool job: the program of ``payload`` on its row, in a fresh job process."""
    return fork_job(worker.run_program, payload)


def isolation_probe(payload: dict) -> dict:
    """Pool job for the isolation tests: raw code in a fresh, locked-down job process."""
    return fork_job(worker.isolation_probe, payload)


def fork_job(job, payload: dict) -> dict:
    """Run ``job(payload, env)`` in a forked, locked-down child; its report with ``cpu_s`` and
    ``wall_s``, or ``{"failure": outcome, "reason": ...}`` saying how the child ended."""
    read_fd, write_fd = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(job, payload, write_fd)
    os.close(write_fd)
    try:
        report, expired = _collect(pid, read_fd, start + payload["job_timeout_s"])
    finally:
        os.close(read_fd)
    _, status, usage = os.wait4(pid, 0)
    cpu, wall = usage.ru_utime + usage.ru_stime, time.monotonic() - start
    ended = _ended(report, status, expired, cpu, wall, payload)
    return {**ended, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3)}


def _child(job, payload: dict, write_fd: int) -> None:
    """The job process: lock down, run, report, exit. Never returns into the zygote's loop."""
    code = 1
    try:
        os.dup2(write_fd, worker.REPORT_FD)
        try:
            isolation = worker.lock_down(payload, _state["network"])
        except Exception as exc:  # noqa: BLE001 - reported: the machine, not the program
            report = {"lockdown_failed": f"{type(exc).__name__}: {exc}"}
        else:
            try:
                report = {**job(payload, _state["env"]), "isolation": isolation}
            except BaseException as exc:  # noqa: BLE001 - an error outside the program
                report = {"error": f"{type(exc).__name__}: {exc}"[: worker.MAX_ERROR_CHARS]}
        data = json.dumps(report).encode()
        while data:
            data = data[os.write(worker.REPORT_FD, data):]
        code = 0
    finally:
        os._exit(code)


def _collect(pid: int, read_fd: int, deadline: float) -> tuple[bytes, bool]:
    """The child's report, read until it has exited; (report, whether the backstop expired)."""
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(read_fd, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    chunks, size, eof, exited = [], 0, False, False
    try:
        while not (eof and exited):
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                return b"", True
            for fd, _ in poller.poll(left * 1000):
                if fd == pidfd:
                    exited = True
                    poller.unregister(pidfd)
                    continue
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    eof = True
                    poller.unregister(read_fd)
                elif size <= MAX_REPORT_BYTES:
                    chunks.append(chunk)
                    size += len(chunk)
    finally:
        os.close(pidfd)
    return b"".join(chunks), False


def _failure(outcome: str, reason: str) -> dict:
    return {"failure": outcome, "reason": reason}


def _ended(report: bytes, status: int, expired: bool, cpu: float, wall: float, payload: dict) -> dict:
    """What the child's end means (the table in the module docstring)."""
    limit = payload["cpu_limit_s"]
    figures = f"{cpu:.2f} of its {limit} CPU seconds in {wall:.1f} s wall-clock"
    if expired:
        return _failure("unscored", f"unscored: the machine was overloaded: the job got {figures} "
                                    f"(backstop {payload['job_timeout_s']:g} s); not the program's doing")
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        if name == "SIGXCPU" or (name == "SIGKILL" and cpu >= limit):
            return _failure("killed", f"killed: used its {limit} CPU seconds ({name})")
        if name == "SIGKILL":
            return _failure("unscored", f"unscored: killed from outside the sandbox (SIGKILL) after {figures}; "
                                        "the machine's out-of-memory killer?")
        return _failure("killed", f"killed: job process died of {name}")
    try:
        if len(report) > MAX_REPORT_BYTES:
            raise ValueError(f"report over {MAX_REPORT_BYTES} bytes")
        parsed = json.loads(report)
        if not isinstance(parsed, dict):
            raise ValueError("report is not an object")
    except ValueError as exc:
        return _failure("killed", f"killed: job process exited with code {os.WEXITSTATUS(status)} "
                                  f"without a readable report ({exc})")
    if "lockdown_failed" in parsed:
        return _failure("unscored", f"unscored: the sandbox could not lock down: {parsed['lockdown_failed']}")
    if "error" in parsed:
        error = str(parsed["error"])
        if error.startswith("MemoryError"):
            return _failure("killed", f"killed: out of memory outside the program ({error})")
        return _failure("crash", f"crash: {error}")
    return parsed
