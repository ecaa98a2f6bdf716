"""Reward throughput of one factorio-build GRPO step: sandboxed pool vs in-process, side by side.

One step = 128 programs x 8 scenes, in groups of 16 per row, a mix like an early GRPO batch:
reference-family programs (the SFT generator's candidates), broken ones (crash, build nothing,
no code, syntax error) and hostile ones (statically refused escapes, infinite loops). Memory and
fork bombs are left out: without isolation they would take the benchmarking process down.

Both modes use the same static checks and the same per-scene program time limit (CPU seconds in
the sandbox, factory-sim's own wall-clock watchdog in process); the in-process mode runs each
program in this process, one scene after another, with no process isolation, while the sandbox
forks a fresh job process from a zygote for every program. The modes alternate, twice each, and
the best pass of each counts. It also times empty jobs through a warm one-zygote pool (the
trainer's pipe round trip, the fork, the lock-down, the exit and the reaping): the fixed cost the
fork-per-job design adds to every program. Prints scenes/s of both modes, their ratio and the
per-job cost, and writes ``benchmarks/results/factorio_reward.json``.

    python benchmarks/factorio_reward.py
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

from evolve import sandbox
from fsim.program_api import run_episode
from fsim.rl import RlEnv

from factorio_build import reference, rows
from factorio_build.config import FactorioBuildConfig
from factorio_build.pool import SandboxPool
from factorio_build.programs import check_completion
from factorio_build.scoring import ProgramScorer
from factorio_build.sft import candidate
from factorio_build.worker import MAX_TIME_LIMIT_HITS
from rlplugs.rewards import Sample

PROGRAMS, GROUP = 128, 16
REPEATS = 2
BROKEN = [
    "```python\ndef build(world):\n    return world.me()[5]\n```",
    "```python\ndef build(world):\n    world.wait()\n```",
    "I would place a drill on the ore and a furnace below it.",
    "```python\ndef build(world)\n    pass\n```",
]
ESCAPES = [
    "```python\nimport os\ndef build(world):\n    os.fork()\n```",
    "```python\ndef build(world):\n    ().__class__.__bases__[0].__subclasses__()\n```",
    "```python\ndef build(world):\n    g = (x for x in [1])\n    return g.gi_frame\n```",
]
LOOP = "```python\ndef build(world):\n    while True:\n        pass\n```"


def step_batch(config: FactorioBuildConfig) -> list[Sample]:
    """128 completions over 8 train rows: 80 reference-family, 24 broken, 20 escapes, 4 loops."""
    rng = random.Random(0)
    texts = [reference.as_completion(candidate(rng)) for _ in range(80)]
    texts += [BROKEN[i % len(BROKEN)] for i in range(24)] + [ESCAPES[i % len(ESCAPES)] for i in range(20)] + [LOOP] * 4
    rng.shuffle(texts)
    specs = rows.draw_rows(config.task, "train", PROGRAMS // GROUP, config.n_scenes)
    return [
        Sample(prompt=None, completion=t, row={"task": s.task, "split": s.split, "seeds": list(s.seeds)})
        for i, t in enumerate(texts)
        for s in [specs[i // GROUP]]
    ]


def in_process(samples: list[Sample], config: FactorioBuildConfig) -> float:
    """Seconds to score every sample in this process, without isolation."""
    env = RlEnv()
    start = time.perf_counter()
    for sample in samples:
        checked = check_completion(sample.completion)
        if checked.source is None:
            continue
        build = sandbox.load(checked.source)
        hits = 0
        for seed in sample.row["seeds"]:
            if hits >= MAX_TIME_LIMIT_HITS:
                break
            _, blueprint = rows.scene(sample.row["task"], sample.row["split"], seed)
            result = run_episode(build, blueprint, task=config.task, env=env, time_limit_s=config.program_cpu_limit_s)
            hits += bool(result.error and result.error.startswith("ProgramTimeLimit"))
    return time.perf_counter() - start


def sandboxed(samples: list[Sample], config: FactorioBuildConfig) -> float:
    """Seconds to score every sample through a warm sandbox pool."""
    scorer = ProgramScorer(config)
    try:
        scorer.score_batch(samples[:1])  # start the workers outside the timed step
        start = time.perf_counter()
        scorer.score_batch(samples)
        return time.perf_counter() - start
    finally:
        scorer.pool.close()


def empty_job_ms(config: FactorioBuildConfig, jobs: int = 100) -> dict[str, float]:
    """Milliseconds per empty job through a warm one-zygote pool: median and 90th percentile."""
    pool = SandboxPool(1, config.job_timeout_s, job="factorio_build.zygote:isolation_probe")
    payload = {"code": "x = 1", "memory_bytes": config.memory_limit_mb * 2**20, "cpu_limit_s": config.cpu_limit_s,
               "job_timeout_s": config.job_timeout_s}
    try:
        pool.run([payload])  # start the zygote outside the timing
        times = []
        for _ in range(jobs):
            start = time.perf_counter()
            pool.run([payload])
            times.append((time.perf_counter() - start) * 1e3)
    finally:
        pool.close()
    return {"median": statistics.median(times), "p90": statistics.quantiles(times, n=10)[-1]}


def main() -> None:
    config = FactorioBuildConfig()
    samples = step_batch(config)
    scenes = PROGRAMS * config.n_scenes
    load_before = os.getloadavg()
    one_worker = config.model_copy(update={"workers": 1})
    # Interleaved repeats, best of each: the machine is shared, so a single pass mostly measures
    # what the neighbours were doing at that moment.
    times: dict[str, list[float]] = {"in": [], "pool": [], "pool_1": []}
    for _ in range(REPEATS):
        times["in"].append(in_process(samples, config))
        times["pool"].append(sandboxed(samples, config))
        times["pool_1"].append(sandboxed(samples, one_worker))
    t_in, t_pool, t_pool_1 = min(times["in"]), min(times["pool"]), min(times["pool_1"])
    per_job = empty_job_ms(config)
    result = {
        "scenes_per_s_sandboxed": scenes / t_pool,
        "scenes_per_s_inprocess": scenes / t_in,
        "ratio_sandboxed_vs_inprocess": t_pool / t_in,
        "goal_ratio_max": 1.5,
        "workers": config.workers,
        "scenes_per_s_sandboxed_1_worker": scenes / t_pool_1,
        "ratio_sandboxed_1_worker_vs_inprocess": t_pool_1 / t_in,
        "empty_job_ms": {k: round(v, 2) for k, v in per_job.items()},
        "step": {"programs": PROGRAMS, "scenes_per_program": config.n_scenes, "group": GROUP,
                 "mix": "80 reference-family, 24 broken, 20 refused escapes, 4 infinite loops",
                 "program_cpu_limit_s": config.program_cpu_limit_s},
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
                    "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                    "note": "2-core CPU machine shared with other concurrent jobs; both modes measured in one run"},
        "seconds_per_pass": {k: [round(t, 2) for t in v] for k, v in times.items()},
        "command": "python benchmarks/factorio_reward.py",
    }
    for key in ("scenes_per_s_sandboxed", "scenes_per_s_inprocess", "scenes_per_s_sandboxed_1_worker"):
        sys.stdout.write(f"{key}: {result[key]:.1f}\n")
    sys.stdout.write(f"ratio sandboxed/in-process (time): {result['ratio_sandboxed_vs_inprocess']:.2f} "
                     f"({config.workers} workers), {result['ratio_sandboxed_1_worker_vs_inprocess']:.2f} (1 worker)\n")
    sys.stdout.write(f"empty job through the zygote: {per_job['median']:.1f} ms median, {per_job['p90']:.1f} ms p90\n")
    out = Path(__file__).parent / "results" / "factorio_reward.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    sys.stdout.write(f"wrote {out}\n")


if __name__ == "__main__":
    main()
