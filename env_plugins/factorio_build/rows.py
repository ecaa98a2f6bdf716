"""Rows and splits: which unseen scenes each program is judged on.

A row is one task and ``n_scenes`` scene seeds of one split and one layout family. The model sees
only the task and the API; the program it writes runs once on every scene of the row.

- ``train``: factory-sim's train families, seeds counted up from ``seed``;
- ``validation``: the same families, seeds from factory-sim's validation offset (100,000), so no
  scene repeats a training one;
- ``holdout``: the task's *test* families, which the train split never samples (for
  ``construct_smelting_line`` the obstructed patch), on FactorioRL's frozen holdout seed stream
  (``evolve.evaluate.holdout_seed``), so holdout scenes are the ones FactorioRL policies were
  measured on.

Seeds are drawn through ``fsim.scenes.sample`` exactly as factory-sim draws them and then grouped
by the family that draw picked, so each row is single-family (results break down by family) and
every scene is byte-identical to factory-sim's own for that seed. Every row carries a digest of
its scenes' blueprints, and every split a digest of its rows: two machines that build the same
split get the same digests, and a test pins them.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from evolve.evaluate import HOLDOUT_START_INDEX, VAL_OFFSET, holdout_seed, scene_digest
from fsim import scenes

SPLITS = ("train", "validation", "holdout")


def scene_split(split: str) -> str:
    """The factory-sim family split a row split draws from."""
    return "test" if split == "holdout" else "train"


def scene(task: str, split: str, seed: str | int) -> tuple[str, dict]:
    """(family, blueprint) of one scene of a row."""
    return scenes.sample(task, scene_split(split), int(seed))


def _seed_stream(split: str, first_train_seed: int) -> Iterator[int]:
    if split == "train":
        return itertools.count(first_train_seed)
    if split == "validation":
        return itertools.count(VAL_OFFSET)
    return (holdout_seed(HOLDOUT_START_INDEX + k) for k in itertools.count())


@dataclass(frozen=True)
class RowSpec:
    """One row before its prompt is attached."""

    task: str
    split: str
    index: int
    family: str
    seeds: tuple[str, ...]
    digest: str

    @property
    def row_id(self) -> str:
        return f"{self.task}/{self.split}/{self.index}"


def draw_rows(task: str, split: str, rows: int, n_scenes: int, first_train_seed: int = 0) -> list[RowSpec]:
    """The first ``rows`` rows of a split; row ``i`` takes the next ``n_scenes`` seeds of family
    ``families[i % len(families)]`` from the split's seed stream."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
    families = scenes.families(task, scene_split(split))
    if not families:
        raise ValueError(f"task {task!r} has no {scene_split(split)} families")
    queues: dict[str, list[tuple[int, dict]]] = {f: [] for f in families}
    stream = _seed_stream(split, first_train_seed)
    out = []
    for index in range(rows):
        family = families[index % len(families)]
        while len(queues[family]) < n_scenes:
            seed = next(stream)
            if split == "train" and seed >= VAL_OFFSET:
                raise ValueError(f"the train split ran into the validation seeds ({VAL_OFFSET}); ask for fewer rows")
            drawn, blueprint = scenes.sample(task, scene_split(split), seed)
            queues[drawn].append((seed, blueprint))
        taken, queues[family] = queues[family][:n_scenes], queues[family][n_scenes:]
        digest = hashlib.sha256(",".join(scene_digest(bp) for _, bp in taken).encode()).hexdigest()[:16]
        out.append(RowSpec(task, split, index, family, tuple(str(s) for s, _ in taken), digest))
    return out


def split_digest(rows: list[RowSpec]) -> str:
    """One digest over a split's rows, in order: what a report pins."""
    return hashlib.sha256(",".join(r.digest for r in rows).encode()).hexdigest()[:16]
