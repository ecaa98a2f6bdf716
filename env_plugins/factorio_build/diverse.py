"""The diverse warm-start set: hand-written builders of different designs plus AST rewrites.

The template family of :mod:`factorio_build.sft` is one program with knobs: a model trained on it
sees one way to solve the task. This set keeps the 800 template programs as its prefix (so runs on
``warmstart-93``/``warmstart-800`` stay reproducible) and continues with programs drawn from
several builders written for the project against the sandbox API (``builders/*.py``, plus the
reference program itself), each put through a random subset of semantics-preserving rewrites
(:mod:`factorio_build.mutations`). The builders differ in design, not in constants:

- ``nearest_first``: the nearest workable ore square, first one found; routes corner to corner;
  furnace placed first, furnace fuelled first;
- ``ring_search``: squares in growing rings around the patch marker, cheapest stand within the
  first ring; drill placed first; state passed around in a survey dict;
- ``cost_table``: every layout in view scored (steps + pull to the marker), the minimum taken;
  a straight walk tried before a routed one; each machine placed and fuelled before the next.

Candidate ``k`` runs on train row ``FIRST_ROW + k`` (rows the template stream never used) and is
kept only if it verifies on every scene of that row and its normalised hash is new across the
whole set. Only ``construct_smelting_line`` has builders.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import random
from importlib import resources
from importlib.metadata import version

from factorio_build import mutations, reference, sft
from factorio_build.config import FactorioBuildConfig
from factorio_build.scoring import ProgramScorer

GENERATOR_VERSION = 1
DIVERSE_SETS = {"warmstart-diverse-1200": 1200}
PREFIX = 800  # the template set this one extends
FIRST_ROW = 1024  # the template stream used rows 0-1023 to keep its first 800
TASKS = ("construct_smelting_line",)


def builder_sources() -> dict[str, str]:
    """Name -> source of every builder, the reference program included."""
    folder = resources.files("factorio_build") / "builders"
    found = {p.name.removesuffix(".py"): p.read_text() for p in sorted(folder.iterdir(), key=lambda p: p.name) if p.name.endswith(".py")}
    return {**found, "reference": reference.program()}


def candidate(rng: random.Random, sources: dict[str, str]) -> tuple[str, dict]:
    """One random builder through random rewrites; and which ones (kept with the program)."""
    name = rng.choice(sorted(sources))
    source, applied = mutations.mutate(sources[name], rng)
    return source, {"builder": name, "rewrites": applied}


def _cache_path(config: FactorioBuildConfig):
    sources = builder_sources()
    parts = [GENERATOR_VERSION, sorted(sources.items()), inspect.getsource(mutations), sft._cache_key(config),
             config.task, config.n_scenes, config.seed, version("factory-sim")]  # fmt: skip
    key = hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]
    return sft._cache_path(config).with_name(f"sft-diverse-{config.task}-{key}.json")


def verified_programs(config: FactorioBuildConfig, count: int, scorer: ProgramScorer | None = None) -> list[dict]:
    """The first ``count`` programs of the diverse set (the first 800 are the template set's)."""
    if config.task not in TASKS:
        raise ValueError(f"the diverse warm-start set has builders for {', '.join(TASKS)} only, not {config.task}")
    prefix = sft.verified_programs(config, min(count, PREFIX), scorer)
    if count <= PREFIX:
        return prefix
    sources = builder_sources()
    rng = random.Random(f"factorio-build-diverse-{config.task}")
    added = sft.kept_stream(config, count - PREFIX, _cache_path(config), lambda: candidate(rng, sources),
                            first_row=FIRST_ROW, seen={p["hash"] for p in prefix}, scorer=scorer)  # fmt: skip
    return prefix + added
