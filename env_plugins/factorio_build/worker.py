"""What runs inside a job process: its lock-down, the episode job and the isolation probe.

A job process is forked by a zygote (:mod:`factorio_build.zygote`) for one program and exits when
that program has run on its row; nothing it does outlives it. Before any program code runs it
locks itself down, in this order:

1. **descriptors**: everything inherited is closed except stdio and the pipe its result goes back
   on (so the zygote's own pipe to the trainer is out of reach);
2. **network**: an empty network namespace (entered once by the zygote; here only if the zygote
   could not, e.g. not root and already threaded), which has only a down loopback;
3. **user**: when started as root it drops to ``nobody`` (uid/gid 65534, no groups), so the
   kernel enforces the process limit below, files owned by anyone else are read-only, and the
   zygote (still root) cannot be signalled or traced from here; it dies if its zygote does;
4. **rlimits**: ``RLIMIT_NPROC = 0`` (no new processes or threads), ``RLIMIT_FSIZE = 0`` (no byte
   written to any file), ``RLIMIT_NOFILE`` = the descriptors kept (no new file or socket),
   ``RLIMIT_AS`` (address space), ``RLIMIT_CORE = 0``, and ``RLIMIT_CPU`` = the job's CPU seconds
   (a fresh process starts at zero, so this is exactly the job's own allowance).

Each step the machine does not allow (not root; user namespaces disabled) is reported in the
result's ``isolation`` map instead of silently assumed.

**Limits count the program's own work, not the machine's load.** A program's time on a scene is
bounded in *CPU* seconds of this process (``ITIMER_PROF``: user + system time; no watchdog thread,
since threads are processes to ``RLIMIT_NPROC``); when it fires the program is stopped and the
scene still runs to its verification, as factory-sim does with its wall-clock limit. A program on
a node whose cores are shared five ways gets the same CPU seconds as on an idle one, so a correct
program is never stopped for the neighbours' load; the zygote keeps only a generous wall-clock
backstop, whose expiry is reported as unscored (the machine), not as the program's failure.

**The program holds only private objects.** Besides ``world`` (a new one per scene) and its own
functions, factory-sim hands a program the real ``math`` module, whose attributes it may assign
(``math.floor = math.ceil``) and so change what the simulator, the observation decoder and the
scene generator compute afterwards. Here it gets a private namespace with the same names instead,
and every scene of its row is generated before any of its code runs.
"""

from __future__ import annotations

import ctypes
import math
import os
import resource
import signal
import traceback
import types

from evolve import sandbox
from fsim.program_api import run_episode

from factorio_build import programs, rows

NOBODY = 65534
#: The descriptor a job process writes its report to (after stdin, stdout, stderr).
REPORT_FD = 3
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
#: Scenes a program may overrun its time limit on before the rest of its row is not run.
MAX_TIME_LIMIT_HITS = 2
#: An error message longer than this is cut: it becomes part of a reason, and a program that
#: raises ``KeyError`` on a megabyte key should not ship the megabyte back.
MAX_ERROR_CHARS = 500
#: The file name factory-sim's sandbox compiles a program under (its frames in a traceback).
PROGRAM_FILENAME = "<program>"
#: The program line quoted after an error is cut to this many characters.
MAX_LINE_CHARS = 80

NETWORK_ISOLATED = "empty network namespace"

#: Whether the CPU timer may stop the program now (only while ``build`` runs, never the simulator).
_timer = {"armed": False}


class ProgramTimeout(Exception):
    """Raised inside a program that used up its per-scene CPU time."""


def enter_network_namespace() -> str:
    """An empty network namespace for this process and its children; what was managed, in words."""
    libc = ctypes.CDLL(None, use_errno=True)
    # As root a network namespace needs no user namespace (which a threaded process cannot enter).
    flags = CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNET
    if libc.unshare(flags) == 0:
        return NETWORK_ISOLATED
    return f"namespace refused ({os.strerror(ctypes.get_errno())}); no new sockets via RLIMIT_NOFILE"


def lock_down(payload: dict, network: str) -> dict[str, str]:
    """Apply the process-level sandbox to this job process; returns what is enforced, step by step.

    The report pipe is already on :data:`REPORT_FD`. ``network`` is what the zygote managed; a
    refused namespace is tried again here, where the process is single-threaded."""
    os.closerange(REPORT_FD + 1, max(map(int, os.listdir("/proc/self/fd"))) + 1)
    done = {"descriptors": "stdio and the report pipe only"}
    done["network"] = network if network == NETWORK_ISOLATED else enter_network_namespace()
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        done["user"] = "nobody"
    else:
        done["user"] = f"uid {os.geteuid()} (not root: unchanged)"
    # Dies with its zygote (a pool closed mid-job) instead of running on as an orphan; set after
    # the user change, which clears it.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write then fails with EFBIG instead of killing
    cpu = int(payload["cpu_limit_s"])
    for name, soft, hard in (
        ("RLIMIT_NPROC", 0, 0),
        ("RLIMIT_FSIZE", 0, 0),
        ("RLIMIT_CORE", 0, 0),
        ("RLIMIT_AS", payload["memory_bytes"], payload["memory_bytes"]),
        ("RLIMIT_NOFILE", REPORT_FD + 1, REPORT_FD + 1),
        # SIGXCPU at the soft limit; SIGKILL a second later if that was somehow survived.
        ("RLIMIT_CPU", cpu, cpu + 1),
    ):
        resource.setrlimit(getattr(resource, name), (soft, hard))
        done[name] = str(soft)
    return done


def _on_cpu_timer(signum, frame):
    if _timer["armed"]:
        _timer["armed"] = False
        raise ProgramTimeout("ran past its CPU time limit")


def _guarded(build, cpu_seconds: float, placed: list, raised_at: list):
    """``build`` under a CPU-time limit, recording the facing of each placement that lands and
    the program line an exception left it from (:func:`program_line`)."""

    def run(world):
        place = world.place

        def recording_place(item, x, y, facing):
            before = len(world._built)
            ok = place(item, x, y, facing)
            if len(world._built) > before:
                placed.append((item, int(x), int(y), facing))
            return ok

        world.place = recording_place
        _timer["armed"] = True
        signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
        try:
            return build(world)
        except BaseException as exc:
            _timer["armed"] = False  # the timer fires into the program, not into this
            raised_at.append(program_line(exc))
            raise
        finally:
            _timer["armed"] = False
            signal.setitimer(signal.ITIMER_PROF, 0)

    return run


def program_line(exc: BaseException) -> int | None:
    """The line of the program's own code that ``exc`` last passed through on its way out (the
    call into the API, for an error raised there), or None."""
    lines = [line for frame, line in traceback.walk_tb(exc.__traceback__) if frame.f_code.co_filename == PROGRAM_FILENAME]
    return lines[-1] if lines else None


def located(error: str, line: int | None, source: str) -> str:
    """``error``, cut to :data:`MAX_ERROR_CHARS`, with the program line it came from: a reason says
    where, so a batch whose programs all fail on one line (a policy that lost a token) shows it."""
    error = error[:MAX_ERROR_CHARS]
    lines = source.splitlines()
    if line is None or not 0 < line <= len(lines):
        return error
    return f"{error} (program line {line}: {lines[line - 1].strip()[:MAX_LINE_CHARS]})"


def _private_math() -> types.SimpleNamespace:
    """The ``math`` a program sees: the public names of the real module in a namespace of its own."""
    return types.SimpleNamespace(**{name: getattr(math, name) for name in sandbox.MATH_NAMES})


def load_program(source: str):
    """The program's ``build``, checked again on this side of the wall, holding a private ``math``.

    ``sandbox.load`` puts its module global ``math`` into the program's globals, and evaluates
    default arguments (``def h(m=math)``) while loading; so that global is replaced first. This
    process is thrown away after the job, so the replacement is too."""
    programs.check_program(source)
    sandbox.math = _private_math()
    return sandbox.load(source)


def run_program(payload: dict, env) -> dict:
    """One checked program on every scene of one row, in the simulator ``env``.

    Returns ``{"scenes": [...]}``; a scene result has ``seed``, ``family``, ``success``,
    ``verified_output``, ``error`` (the program's exception, if any), ``timed_out`` and ``built``
    (item, x, y, facing)."""
    signal.signal(signal.SIGPROF, _on_cpu_timer)
    task = payload["task"]
    scenes = [(seed, *rows.scene(task, payload["split"], seed)) for seed in payload["seeds"]]
    build = load_program(payload["source"])
    results, hits = [], 0
    for seed, family, blueprint in scenes:
        if hits >= MAX_TIME_LIMIT_HITS:
            results.append(_not_run(seed, family, f"not run: the program overran its time limit on {hits} scenes"))
            continue
        placed: list = []
        raised_at: list = []
        episode = run_episode(
            _guarded(build, payload["program_cpu_limit_s"], placed, raised_at),
            blueprint,
            task=task,
            decision_budget=payload["decision_budget"],
            env=env,
        )
        timed_out = bool(episode.error and episode.error.startswith("ProgramTimeout"))
        hits += timed_out
        results.append(
            {
                "seed": str(seed),
                "family": family,
                "success": bool(episode.success),
                "verified_output": int(episode.verified_output),
                "error": located(episode.error, raised_at[-1] if raised_at else None, payload["source"]) if episode.error else None,
                "timed_out": timed_out,
                "built": placed,
            }
        )
    return {"scenes": results}


def _not_run(seed, family: str, why: str) -> dict:
    return {"seed": str(seed), "family": family, "success": False, "verified_output": 0, "error": why,
            "timed_out": True, "built": []}


def isolation_probe(payload: dict, env) -> dict:
    """Run raw, *unchecked* Python in a locked-down job process and report what it could do.

    Only the isolation tests call this: it proves the process layer holds on its own, as if a
    program had slipped past the static layer."""
    scope: dict = {}
    try:
        exec(payload["code"], scope)  # noqa: S102 - the point of the probe
        outcome = "ran"
    except BaseException as exc:  # noqa: BLE001
        outcome = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
    return {"outcome": outcome}
