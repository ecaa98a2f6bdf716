"""Judges: the MLIP (relaxation + energy), the band-gap predictor and the elastic-fit judge.

Each judge is a small object with one batched method; any of them can run in-process or behind
the HTTP judge service (:mod:`matrl.service`: one process, or Ray Serve replicas, serving many env
workers) through :class:`~matrl.judge_client.HttpJudges`, which has the same methods and retries
transport faults itself. Episodes call judges through :func:`call_judge`, which retries transient
failures with exponential backoff per :class:`rlplugs.rewards.RetryPolicy` and raises
:class:`JudgeUnavailable` when the retries are spent, so the caller records the term as *unscored*
instead of scoring 0. Relaxations are cached by structure hash in a bounded LRU (the card lost runs
to an unbounded cache).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from pymatgen.core import Structure

from matrl.elastic import EOSFitError, fit_birch_murnaghan, strained_cells
from matrl.hull import MP2020_SCALE
from matrl.structures import parse_structure, structure_key, structure_to_json
from rlplugs import RETRYABLE, RetryPolicy

log = logging.getLogger(__name__)
T = TypeVar("T")


class JudgeUnavailable(RuntimeError):
    """A judge could not answer (switched off, or transient failures outlasted the retries)."""


@dataclass(frozen=True)
class RelaxRecord:
    """What the MLIP judge returns for one structure; plain data so it crosses HTTP unchanged."""

    structure_json: str
    energy_per_atom: float
    scale: str
    steps: int
    converged: bool
    max_force: float

    @property
    def structure(self) -> Structure:
        return parse_structure(self.structure_json, max_atoms=10_000)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class LRUCache:
    """A thread-safe dict with a size limit; the least recently used key goes first."""

    def __init__(self, max_items: int):
        self.max_items = max_items
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key):
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
            self.misses += 1
            return None

    def put(self, key, value) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_items:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


class CHGNetJudge:
    """The reward MLIP: CHGNet 0.3.0 (weights inside the ``chgnet`` wheel), batched FIRE."""

    name = "chgnet"
    scale = MP2020_SCALE

    def __init__(self, device: str = "cpu", steps: int = 20, fmax: float = 0.1, cache_size: int = 4096,
                 graph_workers: int = 0):
        from matrl.relax import BatchRelaxer

        self.relaxer = BatchRelaxer(device=device, graph_workers=graph_workers)
        self.steps, self.fmax = steps, fmax
        self.cache = LRUCache(cache_size)
        self._lock = threading.Lock()  # one forward pass at a time per model

    def relax(self, structures: list[Structure]) -> list[RelaxRecord]:
        keys = [structure_key(s) for s in structures]
        out: list[RelaxRecord | None] = [self.cache.get(k) for k in keys]
        todo = [i for i, r in enumerate(out) if r is None]
        if todo:
            with self._lock:
                relaxed = self.relaxer.relax([structures[i] for i in todo], self.steps, self.fmax)
            for i, r in zip(todo, relaxed):
                out[i] = RelaxRecord(structure_to_json(r.structure), r.energy_per_atom, self.scale, r.steps,
                                     r.converged, r.max_force)
                self.cache.put(keys[i], out[i])
        return out  # type: ignore[return-value]

    def energies(self, structures: list[Structure]) -> list[float]:
        """Static total energies (eV per cell)."""
        with self._lock:
            return [e * len(s) for s, (e, _, _) in zip(structures, self.relaxer.static(structures))]


class SevenNetJudge:
    """Held-out judge for evaluation: SevenNet (weights inside the ``sevenn`` wheel) through ASE.

    SevenNet predicts raw PBE energies, *not* MP2020-corrected ones, so its results carry their own
    scale label and are compared only with a hull rebuilt by the same judge.
    """

    name = "sevenn"

    def __init__(self, model: str = "7net-0", device: str = "cpu", steps: int = 20, fmax: float = 0.1,
                 cache_size: int = 4096):
        from sevenn.calculator import SevenNetCalculator

        self.calc = SevenNetCalculator(model=model, device=device)
        self.scale = f"sevennet-{model}/raw-pbe"
        self.steps, self.fmax = steps, fmax
        self.cache = LRUCache(cache_size)
        self._lock = threading.Lock()

    def relax(self, structures: list[Structure]) -> list[RelaxRecord]:
        from ase.filters import UnitCellFilter
        from ase.optimize import FIRE
        from pymatgen.io.ase import AseAtomsAdaptor

        out = []
        for s in structures:
            key = structure_key(s)
            record = self.cache.get(key)
            if record is None:
                with self._lock:
                    atoms = AseAtomsAdaptor.get_atoms(s)
                    atoms.calc = self.calc
                    opt = FIRE(UnitCellFilter(atoms), logfile=None)
                    converged = bool(opt.run(fmax=self.fmax, steps=self.steps))
                    energy = float(atoms.get_potential_energy()) / len(atoms)
                record = RelaxRecord(structure_to_json(AseAtomsAdaptor.get_structure(atoms)), energy, self.scale,
                                     opt.nsteps, converged, float("nan"))
                self.cache.put(key, record)
            out.append(record)
        return out

    def energies(self, structures: list[Structure]) -> list[float]:
        from pymatgen.io.ase import AseAtomsAdaptor

        with self._lock:
            out = []
            for s in structures:
                atoms = AseAtomsAdaptor.get_atoms(s)
                atoms.calc = self.calc
                out.append(float(atoms.get_potential_energy()))
            return out


class MEGNetBandGapJudge:
    """PBE band gap from MatGL's multi-fidelity MEGNet weights, run by :mod:`matrl.megnet`.

    ``model_dir`` is any MatGL-format MEGNet folder (``model.json`` + ``state.pt``), e.g. the
    ``MEGNet-MP-2019.4.1-BandGap-mfi`` files or a model you trained with MatGL.
    """

    name = "megnet-bandgap"

    def __init__(self, model_dir: str | Path, fidelity: str = "pbe"):
        from matrl.megnet import MEGNetPredictor

        if not Path(model_dir, "state.pt").is_file():
            raise JudgeUnavailable(f"band-gap model folder {model_dir} has no state.pt")
        self.model = MEGNetPredictor(model_dir)
        self.fidelity = fidelity

    def band_gap(self, structures: list[Structure]) -> list[float]:
        return [max(0.0, g) for g in self.model.predict(structures, self.fidelity)]


class EOSElasticJudge:
    """Bulk modulus (GPa) of relaxed cells: 5 clamped-ion points per cell, one batched MLIP call."""

    name = "bm-eos"

    def __init__(self, mlip):
        self.mlip = mlip

    def bulk_modulus(self, structures: list[Structure]) -> list[float | None]:
        cells = [strained_cells(s) for s in structures]
        energies = self.mlip.energies([c for group in cells for c in group])
        out: list[float | None] = []
        for k, group in enumerate(cells):
            points = energies[k * len(group) : (k + 1) * len(group)]
            try:
                out.append(fit_birch_murnaghan([c.volume for c in group], points).k_gpa)
            except EOSFitError as exc:
                log.info("bulk modulus of structure %d: %s", k, exc)
                out.append(None)
        return out


class SwitchedOff:
    """Stands in for a judge that the config disabled; every call says so (never a silent 0)."""

    def __init__(self, what: str):
        self.what = what

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)

        def refuse(*_a, **_k):
            raise JudgeUnavailable(f"the {self.what} judge is switched off in the matrl config")

        return refuse


class JudgeStats:
    """Counts calls, retries and give-ups per judge method (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.retries: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()

    def bump(self, counter: Counter, key: str) -> None:
        with self._lock:
            counter[key] += 1

    def summary(self) -> dict[str, dict[str, int]]:
        with self._lock:
            keys = sorted(set(self.calls) | set(self.failures))
            return {k: {"calls": self.calls[k], "retries": self.retries[k], "unscored": self.failures[k]} for k in keys}


def call_judge(what: str, fn: Callable[[], T], policy: RetryPolicy, stats: JudgeStats | None = None,
               sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()`` with retries on transient errors; :class:`JudgeUnavailable` once they are spent."""
    for attempt in range(policy.attempts):
        if stats:
            stats.bump(stats.calls, what)
        try:
            return fn()
        except JudgeUnavailable:
            if stats:
                stats.bump(stats.failures, what)
            raise
        except RETRYABLE as exc:
            if attempt + 1 >= policy.attempts:
                if stats:
                    stats.bump(stats.failures, what)
                raise JudgeUnavailable(f"{what} judge failed {policy.attempts} times: {type(exc).__name__}: {exc}") from exc
            if stats:
                stats.bump(stats.retries, what)
            delay = policy.backoff_s * 2**attempt
            log.info("%s judge: %s; retry %d in %.2fs", what, exc, attempt + 1, delay)
            sleep(delay)
    raise AssertionError("unreachable")
