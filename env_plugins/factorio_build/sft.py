"""Warm-start SFT data: verified programs from a parameterised family plus mutations.

Each candidate is the reference template (:mod:`factorio_build.reference`) with its knobs drawn at
random (facing preference order, how strongly to prefer anchors near the patch centre, walking
tolerance, placing reach, how the coal is split) and a random subset of small source mutations
(place the furnace first, fuel the furnace first, watch the line for a few decisions). Candidate
``k`` is run through the sandbox pool on train row ``k``; it is kept only if it verifies on every
scene of that row and its normalised hash (``evolve.sandbox.normalized_hash``: blind to layout,
comments and renaming) is new. The first 93 and the first 800 kept programs are the model card's
two warm-start sets.

Generation is deterministic; the kept stream is cached on disk (``RLPLUGS_CACHE`` or
``~/.cache/rlplugs``) keyed by everything it depends on, and extended when a larger set is asked
for, so the 93 set is the prefix of the 800 set.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import random
from importlib.metadata import version

from evolve.sandbox import normalized_hash
from rlplugs import Sample, cache_root

from factorio_build import prompt, reference, rows
from factorio_build.config import FactorioBuildConfig
from factorio_build.scoring import ProgramScorer, Verdict

log = logging.getLogger(__name__)

GENERATOR_VERSION = 1
WARMSTART_SETS = {"warmstart-93": 93, "warmstart-800": 800}
BATCH = 64

KNOBS = {
    "facings": [tuple(p) for p in itertools.permutations("NESW")],
    "centre_weight": [0.0, 0.25, 0.5, 1.0, 2.0],
    "tolerance": [0.12, 0.15],
    "reach": [4, 5],
    "drill_coal": [(20,), (20, 5), (20, 1), (5, 20)],
    "furnace_coal": [(20,), (5, 5, 5), (20, 1)],
}

#: name -> (text in the template, replacement); each one keeps the program a valid builder.
MUTATIONS = {
    "furnace_first": (
        '    world.place("burner-mining-drill", a[0], a[1], facing)\n    world.place("stone-furnace", f[0], f[1], "N")\n',
        '    world.place("stone-furnace", f[0], f[1], "N")\n    world.place("burner-mining-drill", a[0], a[1], facing)\n',
    ),
    "fuel_furnace_first": (
        "    for amount in $drill_coal:\n        world.give(drill, \"coal\", amount)\n"
        "    for amount in $furnace_coal:\n        world.give(oven, \"coal\", amount)\n",
        "    for amount in $furnace_coal:\n        world.give(oven, \"coal\", amount)\n"
        "    for amount in $drill_coal:\n        world.give(drill, \"coal\", amount)\n",
    ),
    "watch": (
        "        fuel(world, drill, oven)\n",
        "        fuel(world, drill, oven)\n        for _ in range(3):\n            world.wait()\n",
    ),
}


def candidate(rng: random.Random) -> str:
    """One random member of the family."""
    template = reference.TEMPLATE.template
    for name, (old, new) in MUTATIONS.items():
        if rng.random() < 0.5:
            if old not in template:
                raise RuntimeError(f"mutation {name!r} no longer applies to the reference template")
            template = template.replace(old, new)
    knobs = {k: repr(rng.choice(v)) for k, v in KNOBS.items()}
    return type(reference.TEMPLATE)(template).substitute(knobs).lstrip("\n")


def _cache_key(config: FactorioBuildConfig) -> str:
    parts = [GENERATOR_VERSION, reference.TEMPLATE.template, sorted(KNOBS.items()), sorted(MUTATIONS.items()),
             config.task, config.n_scenes, version("factory-sim")]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


def _cache_path(config: FactorioBuildConfig):
    return cache_root() / "factorio-build" / f"sft-{config.task}-{_cache_key(config)}.json"


def verified_programs(config: FactorioBuildConfig, count: int, scorer: ProgramScorer | None = None) -> list[dict]:
    """The first ``count`` kept programs: ``{"source", "hash", "row"}`` (``row`` a train row)."""
    rng = random.Random(f"factorio-build-sft-{config.task}")
    return kept_stream(config, count, _cache_path(config), lambda: (candidate(rng), {}), first_row=0, scorer=scorer)


def kept_stream(config, count, path, make, first_row: int, seen: set[str] = frozenset(), scorer=None) -> list[dict]:
    """The first ``count`` programs of the stream ``make()`` (a deterministic generator of
    ``(source, extra fields)``) that verify on every scene of their train row and whose normalised
    hash is new (also against ``seen``); candidate ``k`` runs on train row ``first_row + k``.
    Cached at ``path`` after every batch, so a larger ask extends the cached stream."""
    state = json.loads(path.read_text()) if path.exists() else {"tried": 0, "kept": []}
    if len(state["kept"]) >= count:
        return state["kept"][:count]
    scorer = scorer or ProgramScorer(config)
    for _ in range(state["tried"]):  # replay the stream up to where the cache stopped
        make()
    seen = set(seen) | {p["hash"] for p in state["kept"]}
    while len(state["kept"]) < count:
        made = [make() for _ in range(BATCH)]
        checked = on_train_rows(config, [src for src, _ in made], first_row + state["tried"], scorer)
        for (src, extra), (row_id, verified) in zip(made, checked):
            digest = normalized_hash(src)
            if verified and digest not in seen:
                seen.add(digest)
                state["kept"].append({"source": src, "hash": digest, "row": row_id, **extra})
        state["tried"] += BATCH
        _save(path, state)  # after every batch, so an interrupted run resumes where it stopped
        log.info("factorio-build SFT (%s): %d kept of %d tried", path.name, len(state["kept"]), state["tried"])
    return state["kept"][:count]


def on_train_rows(config: FactorioBuildConfig, sources: list[str], first_row: int, scorer: ProgramScorer) -> list[tuple[str, bool]]:
    """Program ``k`` run on every scene of train row ``first_row + k``: that row's id, and whether
    the program verified on all of them."""
    specs = rows.draw_rows(config.task, "train", first_row + len(sources), config.n_scenes, config.seed)[first_row:]
    verdicts = scorer.verdicts([_on_row(src, spec) for src, spec in zip(sources, specs)])
    return [(spec.row_id, isinstance(v, Verdict) and v.outcome == "ok" and v.success == 1.0) for spec, v in zip(specs, verdicts)]


def success_on_own_rows(config: FactorioBuildConfig, scorer: ProgramScorer, programs: list[dict]) -> list[float]:
    """Re-run kept programs (``{"source", "row"}``) on the train rows they were kept for."""
    needed = 1 + max(int(p["row"].rsplit("/", 1)[1]) for p in programs)
    index = {r.row_id: r for r in rows.draw_rows(config.task, "train", needed, config.n_scenes, config.seed)}
    return [v.success for v in scorer.verdicts([_on_row(p["source"], index[p["row"]]) for p in programs])]


def _on_row(source: str, spec) -> Sample:
    """``source`` as a completion to score on every scene of the row ``spec`` (a ``rows.RowSpec``)."""
    return Sample(prompt=None, completion=reference.as_completion(source),
                  row={"task": spec.task, "split": spec.split, "seeds": list(spec.seeds), "row_id": spec.row_id})  # fmt: skip


def _save(path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def sft_rows(config: FactorioBuildConfig, count: int, source=None) -> list[dict]:
    """Chat-format SFT records: the row's prompt and the program as the assistant's answer, for
    the first ``count`` programs of ``source`` (``(config, count) -> programs``; default: this
    module's template set; :mod:`factorio_build.diverse` and :mod:`factorio_build.sampled` extend it)."""
    messages = prompt.messages(config.task, config.n_scenes)
    return [
        {
            "messages": [*messages, {"role": "assistant", "content": reference.as_completion(p["source"])}],
            "row_id": p["row"],
            "program_hash": p["hash"],
        }
        for p in (source or verified_programs)(config, count)
    ]


def sft_dataset(config: FactorioBuildConfig, count: int, source=None):
    from datasets import Dataset

    return Dataset.from_list(sft_rows(config, count, source))
