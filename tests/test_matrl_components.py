"""matrl's judge components as another environment registers them (``--extra_rewards
matrl-band-gap``): built from the registry with default options, they judge with the weights
that ship with matrl (the real MEGNet), and a switched-off or inapplicable one is unscored with
its reason, never 0."""

from __future__ import annotations

import pytest
from pymatgen.core import Lattice, Structure

from matrl.datafiles import MEGNET_BANDGAP
from matrl.judges import MEGNetBandGapJudge
from matrl.structures import structure_to_json
from matrl.toolcalls import format_call
from rlplugs.registry import get_registry
from rlplugs.rewards import Sample, run_sync, score_components

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NACL = Structure.from_spacegroup("Fm-3m", Lattice.cubic(5.69), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]]).get_primitive_structure()
SUBMISSION = format_call("submit", structure=structure_to_json(NACL))


def band_gap_scores(options: dict, rows: list[dict]):
    component = get_registry().get("reward_component", "matrl-band-gap").build(options)
    samples = [Sample(prompt="", completion=SUBMISSION, row=row) for row in rows]
    return [r[component.name] for r in run_sync(score_components([component], samples))]


def test_band_gap_component_judges_with_the_shipped_weights_by_default():
    gap = MEGNetBandGapJudge(str(MEGNET_BANDGAP)).band_gap([NACL])[0]
    on_target, far, no_target = band_gap_scores({}, [{"band_gap_ev": gap}, {"band_gap_ev": gap + 3.0}, {}])
    assert on_target.scored and on_target.value == pytest.approx(1.0)
    assert far.scored and far.value < 0.5
    assert not no_target.scored and no_target.reason == "row has no band_gap_ev target"


def test_band_gap_component_switched_off_is_unscored_with_its_reason():
    (score,) = band_gap_scores({"band_gap_model": None}, [{"band_gap_ev": 2.0}])
    assert not score.scored and "band-gap" in score.reason
