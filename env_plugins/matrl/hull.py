"""Hull reference energies and energy above the convex hull, on one labelled energy scale.

A :class:`HullReference` is a set of (composition, energy per atom) entries plus the *scale* they
were computed on (``"mp2020-compatible"`` for CHGNet relaxations or MP2020-corrected
DFT energies, which CHGNet was trained to reproduce). Energies from different scales cannot be
compared: a SevenNet energy (raw PBE) against a CHGNet hull would give nonsense E_hull, so every
operation that combines energies checks the labels and raises :class:`ScaleMismatchError`.

The package's default reference (``data/chgnet_hull_reference.json``) is built by
``python -m matrl.build_reference``: elemental phases and simple prototypes relaxed with CHGNet. It
is an *approximate* hull (few phases per system; sparse systems look more stable than they are) and
every report says so. Point ``MatrlConfig.hull_reference`` at a better file to replace it.
"""

from __future__ import annotations

import gzip
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from pymatgen.analysis.phase_diagram import PDEntry, PhaseDiagram
from pymatgen.core import Composition

from matrl.datafiles import HULL_REFERENCE as DEFAULT_REFERENCE

MP2020_SCALE = "mp2020-compatible"


class ScaleMismatchError(ValueError):
    """Energies from two different energy scales were about to be combined."""


class MissingReferenceError(LookupError):
    """The hull has no entry for an element of the composition (E_hull is undefined)."""


@dataclass(frozen=True)
class HullEntry:
    formula: str
    energy_per_atom: float
    label: str = ""
    structure: dict | None = None  # JSON form (see matrl.structures), kept for novelty / re-judging


@dataclass
class HullReference:
    """Entries on one scale, with a bounded LRU cache of phase diagrams per chemical system."""

    scale: str
    entries: list[HullEntry]
    approximate: bool = False
    source: str = ""
    cache_size: int = 256
    _diagrams: OrderedDict = field(default_factory=OrderedDict, repr=False)

    def __post_init__(self) -> None:
        self._by_elements: dict[frozenset, list[HullEntry]] = {}
        for entry in self.entries:
            key = frozenset(el.symbol for el in Composition(entry.formula).elements)
            self._by_elements.setdefault(key, []).append(entry)
        self.elements = {el for key in self._by_elements for el in key if len(key) == 1}

    def merged(self, other: HullReference) -> HullReference:
        """Union of two references; refuses to mix scales."""
        require_scale(self.scale, other.scale, what=f"merging {other.source or 'a reference'}")
        return HullReference(self.scale, [*self.entries, *other.entries], self.approximate or other.approximate,
                             f"{self.source}+{other.source}", self.cache_size)

    def _diagram(self, elements: frozenset) -> PhaseDiagram:
        if elements in self._diagrams:
            self._diagrams.move_to_end(elements)
            return self._diagrams[elements]
        entries = [
            PDEntry(Composition(e.formula), e.energy_per_atom * Composition(e.formula).num_atoms, name=e.label or e.formula)
            for key, group in self._by_elements.items() if key <= elements for e in group
        ]
        diagram = PhaseDiagram(entries)
        self._diagrams[elements] = diagram
        while len(self._diagrams) > self.cache_size:
            self._diagrams.popitem(last=False)
        return diagram

    def e_above_hull(self, composition: Composition | str, energy_per_atom: float, scale: str) -> float:
        """E_hull (eV/atom) of an energy computed on ``scale``; negative means below the known hull."""
        require_scale(self.scale, scale, what="energy above hull")
        composition = Composition(composition)
        elements = frozenset(el.symbol for el in composition.elements)
        missing = sorted(elements - self.elements)
        if missing:
            raise MissingReferenceError(f"hull reference has no elemental phase for {', '.join(missing)}")
        diagram = self._diagram(elements)
        entry = PDEntry(composition, energy_per_atom * composition.num_atoms)
        return float(diagram.get_e_above_hull(entry, allow_negative=True))

    @property
    def cached_systems(self) -> int:
        return len(self._diagrams)


def require_scale(expected: str, got: str, what: str = "") -> None:
    if expected != got:
        raise ScaleMismatchError(
            f"energy scale mismatch{' in ' + what if what else ''}: reference is on '{expected}', "
            f"energies are on '{got}'. Build a reference with the same MLIP (python -m matrl.build_reference) "
            "instead of mixing scales."
        )


def load_hull_reference(path: str | Path = DEFAULT_REFERENCE) -> HullReference:
    """Read a reference written by :func:`save_hull_reference` (``.json`` or ``.json.gz``)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        data = json.load(fh)
    if "scale" not in data:
        raise ValueError(f"{path}: a hull reference must declare its energy 'scale'")
    entries = [HullEntry(e["formula"], float(e["energy_per_atom"]), e.get("label", ""), e.get("structure"))
               for e in data["entries"]]
    return HullReference(data["scale"], entries, bool(data.get("approximate", False)), str(path))


def save_hull_reference(reference: HullReference, path: str | Path, meta: dict | None = None) -> None:
    data = {"scale": reference.scale, "approximate": reference.approximate, **(meta or {}),
            "entries": [{"formula": e.formula, "energy_per_atom": round(e.energy_per_atom, 5), "label": e.label,
                         **({"structure": e.structure} if e.structure else {})} for e in reference.entries]}
    Path(path).write_text(json.dumps(data, separators=(",", ":")))


def load_mp_elemental_refs(path: str | Path) -> HullReference:
    """matbench-discovery's MP elemental reference entries (``ComputedEntry`` dicts, GGA/GGA+U with
    MP2020 corrections, which leave elements uncorrected): the same scale CHGNet targets."""
    with gzip.open(path, "rt") as fh:
        data = json.load(fh)
    entries = []
    for symbol, entry in data.items():
        comp = Composition(entry["composition"])
        entries.append(HullEntry(symbol, float(entry["energy"]) / comp.num_atoms, entry.get("entry_id", symbol)))
    return HullReference(MP2020_SCALE, entries, approximate=False, source=str(path))


class RejudgedHull:
    """A hull on another judge's scale, built lazily per chemical system from a reference's
    structures (e.g. SevenNet re-relaxing the default prototypes), so held-out judging compares
    like with like instead of mixing scales."""

    def __init__(self, base: HullReference, judge):
        self.base, self.judge, self.scale = base, judge, judge.scale
        self.approximate = True
        self.source = f"{base.source} re-relaxed with {judge.name}"
        self._energies: dict[int, float] = {}

    def e_above_hull(self, composition: Composition | str, energy_per_atom: float, scale: str) -> float:
        from matrl.structures import parse_structure

        require_scale(self.scale, scale, what="energy above hull")
        elements = frozenset(el.symbol for el in Composition(composition).elements)
        wanted = [k for k, e in enumerate(self.base.entries)
                  if e.structure and frozenset(el.symbol for el in Composition(e.formula).elements) <= elements]
        todo = [k for k in wanted if k not in self._energies]
        if todo:
            records = self.judge.relax([parse_structure(json.dumps(self.base.entries[k].structure), 10_000) for k in todo])
            self._energies.update({k: r.energy_per_atom for k, r in zip(todo, records)})
        entries = [HullEntry(self.base.entries[k].formula, self._energies[k], self.base.entries[k].label) for k in wanted]
        return HullReference(self.scale, entries, True, self.source).e_above_hull(composition, energy_per_atom, scale)
