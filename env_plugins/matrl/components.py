"""Judge-backed reward components registered for *any* environment (``rlplugs_register_reward_components``).

The ``matrl`` environment uses its judges inside episodes; these components expose the same judges
to single-turn setups (a completion that ends in a ``submit`` tool call or a structure JSON/CIF):

- ``matrl-stability``: CHGNet relaxation + hull -> stability credit;
- ``matrl-band-gap``: MEGNet band gap vs the row's ``band_gap_ev``;
- ``matrl-bulk-modulus``: clamped-ion Birch–Murnaghan K vs the row's ``bulk_modulus_gpa``.

Each is a *remote* component (``retry`` set): with ``judge_url`` the judge runs in the HTTP judge
service and transient failures are retried with backoff by the core; anything else that stops a
judge (or a judge answering with a missing or non-finite number) makes the term unscored with its
reason. A completion without a structure the judges can take (none, malformed, beyond
:mod:`matrl.cell_limits`, or invalid) scores a real 0 with its reason: that is the model's doing.
"""

from __future__ import annotations

import functools
import math
import re

from pydantic import Field
from pymatgen.core import Structure

from matrl.cell_limits import check_cell_limits
from matrl.datafiles import MEGNET_BANDGAP
from matrl.judges import JudgeUnavailable
from matrl.rewards import BAND_GAP_TOL, BAND_GAP_WIDTH, BULK_TOL_FRAC, BULK_WIDTH_FRAC, closeness, stability_credit
from matrl.structures import StructureInputError, parse_structure
from matrl.toolcalls import parse_tool_calls
from matrl.validity import check_validity
from rlplugs import Registration, RetryPolicy, RewardComponent, Sample, Score, StrictConfig, Unscorable


class JudgeComponentConfig(StrictConfig):
    judge_url: str | None = Field(None, description="a running judge service; default: in-process judges")
    band_gap_model: str | None = Field(str(MEGNET_BANDGAP), description="MatGL-format MEGNet folder (matrl-band-gap); "
                                       "default: the weights that ship with matrl; null: band gap off")
    device: str = "cpu"
    weight: float = 1.0
    retry: RetryPolicy = Field(default_factory=RetryPolicy)


def structure_from_completion(text: str):
    """The structure of the last submit/evaluate call, else a bare JSON/CIF in the acting text."""
    for call in reversed(parse_tool_calls(text)):
        if isinstance(call.arguments.get("structure"), str):
            return parse_structure(call.arguments["structure"])
    body = text.split("</think>")[-1]
    match = re.search(r"\{.*\}", body, re.S)
    return parse_structure(match.group(0) if match else body)


@functools.lru_cache(maxsize=4)
def _judges(config: JudgeComponentConfig):
    """The MLIP, band-gap and elastic judges and the hull, built as the matrl environment builds
    them for the same options (one process-wide set per config)."""
    from matrl.plugin import MatrlConfig, judge_set

    judges = judge_set(MatrlConfig(judge_url=config.judge_url, band_gap_model=config.band_gap_model,
                                   device=config.device, retry=config.retry))
    return judges.mlip, judges.band_gap, judges.elastic, judges.hull


def _judgeable(sample: Sample) -> Structure | Score:
    """The completion's structure, or a real 0 when the model gave none the judges can take
    (missing, malformed, beyond the cell limits, or invalid): that is the model's doing."""
    try:
        structure = structure_from_completion(sample.completion)
        check_cell_limits(structure)
    except StructureInputError as exc:
        return Score(0.0, f"no usable structure in the completion: {exc}")
    validity = check_validity(structure)
    if not validity.valid:
        return Score(0.0, "invalid structure: " + "; ".join(validity.findings))
    return structure


def _finite(value: float | None, what: str) -> float:
    """A judge's number; a missing or non-finite one is the judge's failure, so unscored."""
    if value is None or not math.isfinite(value):
        raise Unscorable(f"the judge returned {what} = {value}")
    return float(value)


def _stability(config: JudgeComponentConfig, sample: Sample) -> float | Score:
    structure = _judgeable(sample)
    if isinstance(structure, Score):
        return structure
    mlip, _, _, hull = _judges(config)
    record = mlip.relax([structure])[0]
    e_hull = hull.e_above_hull(record.structure.composition, record.energy_per_atom, record.scale)
    return stability_credit(_finite(e_hull, "E_hull"))


def _band_gap(config: JudgeComponentConfig, sample: Sample) -> float | Score:
    if "band_gap_ev" not in sample.row:
        raise Unscorable("row has no band_gap_ev target")
    structure = _judgeable(sample)
    if isinstance(structure, Score):
        return structure
    _, band_gap, _, _ = _judges(config)
    try:
        gap = band_gap.band_gap([structure])[0]
    except JudgeUnavailable as exc:
        raise Unscorable(str(exc)) from None
    return closeness(_finite(gap, "band gap"), float(sample.row["band_gap_ev"]), BAND_GAP_TOL, BAND_GAP_WIDTH)


def _bulk_modulus(config: JudgeComponentConfig, sample: Sample) -> float | Score:
    if "bulk_modulus_gpa" not in sample.row:
        raise Unscorable("row has no bulk_modulus_gpa target")
    structure = _judgeable(sample)
    if isinstance(structure, Score):
        return structure
    mlip, _, elastic, _ = _judges(config)
    relaxed = mlip.relax([structure])[0].structure
    k = elastic.bulk_modulus([relaxed])[0]
    if k is None:
        raise Unscorable("Birch–Murnaghan fit failed for this cell")
    target = float(sample.row["bulk_modulus_gpa"])
    return closeness(_finite(k, "bulk modulus"), target, BULK_TOL_FRAC * target, BULK_WIDTH_FRAC * target)


def _factory(name: str, fn, description: str):
    def build(config: JudgeComponentConfig) -> RewardComponent:
        return RewardComponent(name.replace("-", "_"), functools.partial(fn, config), config.weight, description,
                               retry=config.retry)
    return Registration(name=name, factory=build, config=JudgeComponentConfig, summary=description)


JUDGE_COMPONENTS = [
    _factory("matrl-stability", _stability, "CHGNet-relaxed energy above the hull -> stability credit"),
    _factory("matrl-band-gap", _band_gap, "MEGNet PBE band gap close to the row's band_gap_ev"),
    _factory("matrl-bulk-modulus", _bulk_modulus, "clamped-ion Birch-Murnaghan bulk modulus close to bulk_modulus_gpa"),
]
