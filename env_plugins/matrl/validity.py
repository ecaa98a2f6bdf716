"""SUN validity: structural (CDVAE/MatterGen rules) and compositional (SMACT charge neutrality).

Structural: every interatomic distance (periodic images included) >= 0.5 Å and cell volume
>= 0.1 Å^3. Compositional: one element, or only metals (an alloy), or some combination of SMACT
oxidation states is charge neutral for the reduced formula and passes the Pauling electronegativity
test. We use SMACT's original ("smact14") oxidation-state table for parity with published SUN
numbers; SMACT 4's default is the ICSD-2024 table.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import lru_cache, reduce

from pymatgen.core import Structure

MIN_DISTANCE = 0.5
MIN_VOLUME = 0.1


@dataclass(frozen=True)
class Validity:
    structural: bool
    compositional: bool
    findings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def valid(self) -> bool:
        return self.structural and self.compositional


def check_validity(structure: Structure) -> Validity:
    findings = []
    structural = True
    if structure.volume < MIN_VOLUME:
        structural = False
        findings.append(f"cell volume {structure.volume:.3g} Å^3 is below {MIN_VOLUME} Å^3")
    shortest = shortest_distance(structure)
    if shortest < MIN_DISTANCE:
        structural = False
        findings.append(f"two atoms are {shortest:.2f} Å apart (minimum {MIN_DISTANCE} Å)")
    counts = structure.composition.get_el_amt_dict()
    compositional = charge_neutral(tuple(sorted((el, int(round(n))) for el, n in counts.items())))
    if not compositional:
        findings.append(f"{structure.composition.reduced_formula} has no charge-neutral SMACT oxidation-state assignment")
    return Validity(structural, compositional, tuple(findings))


def shortest_distance(structure: Structure) -> float:
    """Shortest interatomic distance including periodic images (a 1-atom cell: its lattice vector)."""
    _, _, _, d = structure.get_neighbor_list(r=max(MIN_DISTANCE * 4, 2.0), exclude_self=True)
    if len(d):
        return float(d.min())
    return float(min(structure.lattice.abc)) if len(structure) == 1 else math.inf


@lru_cache(maxsize=4096)
def charge_neutral(counts: tuple[tuple[str, int], ...]) -> bool:
    """SMACT validity of a composition given as ((element, count), ...)."""
    import smact
    from smact.screening import pauling_test

    symbols = [el for el, _ in counts]
    amounts = [n for _, n in counts]
    if len(symbols) == 1:
        return True
    if all(el in smact.metals for el in symbols):
        return True
    divisor = reduce(math.gcd, amounts)
    stoichs = [(n // divisor,) for n in amounts]
    elements = [smact.Element(el) for el in symbols]
    electronegativities = [e.pauling_eneg for e in elements]
    oxidation_states = [e.oxidation_states_smact14 for e in elements]
    threshold = max(s[0] for s in stoichs)
    for combo in itertools.product(*oxidation_states):
        if not smact.neutral_ratios(combo, stoichs=stoichs, threshold=threshold):
            continue
        try:
            if pauling_test(combo, electronegativities):
                return True
        except TypeError:  # an element without electronegativity data: accepted, as CDVAE does
            return True
    return False
