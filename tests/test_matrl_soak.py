"""Memory soak: many episodes through one worker keep RSS flat, because every cache is a bounded LRU
(the card lost three runs to host OOMs from an unbounded relaxation cache). Kept short for CI."""

import gc
import os

import numpy as np
import pytest
from pymatgen.core import Lattice, Structure

from matrl.plugin import MatrlConfig, build_env, judge_set
from matrl.policy import ReplayPolicy
from matrl.structures import structure_to_json
from matrl.tasks import task_row
from matrl.toolcalls import format_call
from rlplugs.episode import play


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_many_episodes_keep_memory_flat_and_caches_bounded():
    config = MatrlConfig(relax_steps=2, cache_size=8, elastic_judge=False)
    spec = build_env(config)
    system = spec.dataset("validation")[0]["prompt"][0]
    rng = np.random.default_rng(0)

    def episode(k: int):
        a = 5.4 + 0.5 * rng.random()  # every cell differs: each relaxation misses the cache
        cell = Structure(Lattice.cubic(a), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5 + 0.02 * rng.random()]])
        r = task_row("formula", "NaCl")
        row = {**r, "prompt": [system, {"role": "user", "content": r["request"]}], "task_id": f"soak-{k}"}
        ep = play(spec.episodes(row), ReplayPolicy([
            "</think>" + format_call("evaluate_structure", structure=structure_to_json(cell)),
            "</think>" + format_call("submit", structure=structure_to_json(cell)),
        ]))
        assert ep.done
        ep.scores()

    for k in range(20):  # warm-up: models, allocator, caches fill
        episode(k)
    gc.collect()
    start = rss_mb()
    samples = []
    for k in range(20, 100):
        episode(k)
        if k % 20 == 0:
            gc.collect()
            samples.append(rss_mb())
    gc.collect()
    grown = rss_mb() - start
    judges = judge_set(config)
    assert len(judges.mlip.cache) <= 8 and len(judges.novelty.cache) <= 8
    assert grown < 40, f"RSS grew {grown:.1f} MB over 80 episodes (samples {samples})"
