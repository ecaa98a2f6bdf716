"""Novelty and uniqueness with pymatgen's ``StructureMatcher`` (MatterGen's ordered-structure settings).

A structure is *novel* when no reference structure of the same reduced formula matches it
(``ltol=0.2, stol=0.3, angle_tol=5``, primitive cells, volumes scaled). The reference is the
default hull's relaxed prototypes unless the config names MP-20-style CSVs (e.g. MP-20 train):
the embedded set is tiny, so novelty against it is generous; every report says which set was used.
Look-ups are indexed by reduced formula and the verdicts are cached in a bounded LRU.
"""

from __future__ import annotations

import warnings
from collections import defaultdict

from pymatgen.analysis.structure_matcher import StructureMatcher
from pymatgen.core import Composition, Structure

from matrl.judges import LRUCache
from matrl.structures import structure_key


def make_matcher() -> StructureMatcher:
    return StructureMatcher(ltol=0.2, stol=0.3, angle_tol=5, primitive_cell=True, scale=True)


def structures_match(a: Structure, b: Structure, matcher: StructureMatcher | None = None) -> bool:
    if a.composition.reduced_formula != b.composition.reduced_formula:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool((matcher or make_matcher()).fit(a, b))


class NoveltyReference:
    """Known structures indexed by reduced formula, with named entries for ``retrieve_materials``."""

    def __init__(self, named_structures: list[tuple[str, Structure]], source: str, cache_size: int = 8192):
        self.source = source
        self.by_formula: dict[str, list[tuple[str, Structure]]] = defaultdict(list)
        for name, s in named_structures:
            self.by_formula[s.composition.reduced_formula].append((name, s))
        self.matcher = make_matcher()
        self.cache = LRUCache(cache_size)

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_formula.values())

    def match(self, structure: Structure) -> str | None:
        """Name of a matching known structure, or None when the structure is novel."""
        key = structure_key(structure)
        cached = self.cache.get(key)
        if cached is not None:
            return cached or None
        hit = next((name for name, known in self.by_formula.get(structure.composition.reduced_formula, [])
                    if structures_match(structure, known, self.matcher)), None)
        self.cache.put(key, hit or "")
        return hit

    def lookup(self, query: str, limit: int = 5) -> list[tuple[str, Structure]]:
        """Entries for a reduced formula ('NaCl') or an element list ('Na,Cl' / 'Na-Cl')."""
        query = query.strip()
        parts = [p.strip() for p in query.replace("-", ",").split(",") if p.strip()]
        if len(parts) > 1:
            wanted = set(parts)
            hits = [e for f, entries in self.by_formula.items()
                    if {el.symbol for el in Composition(f).elements} == wanted for e in entries]
        else:
            try:
                formula = Composition(query).reduced_formula
            except Exception:  # noqa: BLE001 - a bad query is answered with no hits
                return []
            hits = list(self.by_formula.get(formula, []))
        return hits[:limit]
