"""SUN validity: structural (CDVAE/MatterGen rules) and compositional (SMACT charge neutrality).

Structural: every interatomic distance (periodic images included) >= 0.5 Å and cell volume
>= 0.1 Å^3. Compositional: one element, or only metals (an alloy), or some combination of SMACT
oxidation states is charge neutral for the reduced formula and passes the Pauling electronegativity
test. We use SMACT's original ("smact14") oxidation-state table for parity with published SUN
numbers; SMACT 4's default is the ICSD-2024 table. A composition whose element has no oxidation
states or electronegativity in that table fails, with that reason.
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
    problem = composition_problem(tuple(sorted((el, int(round(n))) for el, n in counts.items())))
    compositional = problem is None
    if problem:
        findings.append(f"{structure.composition.reduced_formula} {problem}")
    return Validity(structural, compositional, tuple(findings))


def shortest_distance(structure: Structure) -> float:
    """Shortest interatomic distance including periodic images (a 1-atom cell: its lattice vector)."""
    _, _, _, d = structure.get_neighbor_list(r=max(MIN_DISTANCE * 4, 2.0), exclude_self=True)
    if len(d):
        return float(d.min())
    return float(min(structure.lattice.abc)) if len(structure) == 1 else math.inf


@lru_cache(maxsize=4096)
def composition_problem(counts: tuple[tuple[str, int], ...]) -> str | None:
    """Why a composition given as ((element, count), ...) fails SMACT validity; None when it passes.

    An element without SMACT oxidation states or a Pauling electronegativity (He, Ne, Ar, Pm, Rn,
    ...) cannot pass the test, so the composition fails with that reason: CDVAE counted such
    compositions as valid, which let any of them through unchecked.
    """
    import smact
    from smact.screening import pauling_test

    symbols = [el for el, _ in counts]
    amounts = [n for _, n in counts]
    if len(symbols) == 1 or all(el in smact.metals for el in symbols):
        return None
    try:
        elements = [smact.Element(el) for el in symbols]
    except KeyError as exc:
        return f"has an element SMACT has no data for ({exc})"
    no_data = [el for el, e in zip(symbols, elements) if not e.oxidation_states_smact14 or e.pauling_eneg is None]
    if no_data:
        return (f"contains {', '.join(no_data)}, which SMACT lists without oxidation states or Pauling "
                "electronegativity, so charge balance cannot be confirmed")
    divisor = reduce(math.gcd, amounts)
    stoichs = [(n // divisor,) for n in amounts]
    electronegativities = [e.pauling_eneg for e in elements]
    threshold = max(s[0] for s in stoichs)
    for combo in itertools.product(*(e.oxidation_states_smact14 for e in elements)):
        if smact.neutral_ratios(combo, stoichs=stoichs, threshold=threshold) and pauling_test(combo, electronegativities):
            return None
    return "has no charge-neutral SMACT oxidation-state assignment"
