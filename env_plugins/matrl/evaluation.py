"""One structure in, one evaluation out: relaxation, E_hull, validity, novelty, optional properties.

:class:`Evaluator` is what both tools use (``evaluate_structure`` shows the result to the model,
``submit`` stores it for scoring). Judge calls go through :func:`matrl.judges.call_judge`
(retries with backoff); a judge that stays down leaves its fields ``None`` with an ``*_error``
reason, which the reward components turn into *unscored* terms, never zeros.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

from pymatgen.core import Structure
from pymatgen.symmetry.analyzer import SpacegroupAnalyzer

from matrl.hull import HullReference, MissingReferenceError, ScaleMismatchError
from matrl.judges import JudgeStats, JudgeUnavailable, call_judge
from matrl.novelty import NoveltyReference
from matrl.structures import structure_to_json
from matrl.validity import check_validity
from rlplugs import RetryPolicy


@dataclass
class JudgeSet:
    """The judges one worker uses (in-process objects or one :class:`~matrl.judge_client.HttpJudges`)."""

    mlip: Any
    band_gap: Any
    elastic: Any
    hull: HullReference
    novelty: NoveltyReference
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    stats: JudgeStats = field(default_factory=JudgeStats)


class Evaluator:
    def __init__(self, judges: JudgeSet):
        self.judges = judges

    def evaluate(self, structure: Structure, properties: tuple[str, ...] = ()) -> dict[str, Any]:
        j = self.judges
        validity = check_validity(structure)
        result: dict[str, Any] = {
            "formula": structure.composition.reduced_formula, "n_atoms": len(structure),
            "valid": validity.valid, "structural_valid": validity.structural,
            "compositional_valid": validity.compositional, "findings": list(validity.findings),
        }
        if not validity.structural:
            # an overlapping or collapsed cell is not relaxed: MLIPs blow up on it and it is invalid anyway
            result["relax_error"] = "skipped: structurally invalid input"
            return result
        try:
            record = call_judge("relax", lambda: j.mlip.relax([structure])[0], j.retry, j.stats)
        except JudgeUnavailable as exc:
            result["relax_error"] = str(exc)
            return result
        relaxed = record.structure
        relaxed_validity = check_validity(relaxed)
        result.update({
            "energy_per_atom": round(record.energy_per_atom, 4), "scale": record.scale,
            "relax_steps": record.steps, "converged": record.converged,
            "relaxed": structure_to_json(relaxed),
            "valid": relaxed_validity.valid, "structural_valid": relaxed_validity.structural,
        })
        try:
            result["space_group"] = _space_group(relaxed)
        except Exception as exc:  # noqa: BLE001 - spglib fails on some odd cells: the group is unknown, not wrong
            result["space_group"] = None
            result["space_group_error"] = f"space group analysis failed: {type(exc).__name__}: {exc}"
        result["findings"] = list(dict.fromkeys([*result["findings"], *relaxed_validity.findings]))
        try:
            result["e_above_hull"] = round(j.hull.e_above_hull(relaxed.composition, record.energy_per_atom, record.scale), 4)
        except (MissingReferenceError, ScaleMismatchError) as exc:
            result["e_above_hull"], result["e_above_hull_error"] = None, str(exc)
        known = j.novelty.match(relaxed)
        result["novel"], result["matches_known"] = known is None, known
        if "band_gap" in properties:
            self._property(result, "band_gap_ev", "band_gap", lambda: j.band_gap.band_gap([relaxed])[0])
        if "bulk_modulus" in properties:
            self._property(result, "bulk_modulus_gpa", "bulk_modulus", lambda: j.elastic.bulk_modulus([relaxed])[0])
        return result

    def _property(self, result: dict, key: str, what: str, fn) -> None:
        try:
            value = call_judge(what, fn, self.judges.retry, self.judges.stats)
        except JudgeUnavailable as exc:
            result[key], result[f"{key}_error"] = None, str(exc)
            return
        if value is None:
            result[key], result[f"{key}_error"] = None, f"{what} could not be fitted for this cell"
        else:
            result[key] = round(float(value), 3)


def _space_group(structure: Structure) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sga = SpacegroupAnalyzer(structure, symprec=0.1)
        return {"number": sga.get_space_group_number(), "symbol": sga.get_space_group_symbol()}
