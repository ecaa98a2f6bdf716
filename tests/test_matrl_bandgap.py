"""The band-gap judge: our MEGNet rebuild reproduces MatGL's reference predictions from the
unchanged BSD-3 weights that ship in ``matrl/data`` (values from upstream's example notebook, as
recorded in ``matrl/data/README.md``)."""


import pytest
from pymatgen.core import Lattice, Structure

from matrl.datafiles import MEGNET_BANDGAP as MEGNET
from matrl.judges import JudgeUnavailable, MEGNetBandGapJudge, SwitchedOff
from matrl.megnet import MEGNetPredictor

CSCL = Structure(Lattice.cubic(4.1437), ["Cs", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]])
REFERENCE = {"pbe": 4.825, "gllb-sc": 8.323, "hse": 6.317, "scan": 5.965}


@pytest.fixture(scope="module")
def predictor():
    return MEGNetPredictor(MEGNET)


@pytest.mark.parametrize("fidelity", sorted(REFERENCE))
def test_megnet_rebuild_matches_matgl_reference_for_cscl(predictor, fidelity):
    assert predictor.predict([CSCL], fidelity)[0] == pytest.approx(REFERENCE[fidelity], abs=2e-3)


def test_batched_prediction_equals_one_at_a_time(predictor):
    copper = Structure.from_spacegroup("Fm-3m", Lattice.cubic(3.61), ["Cu"], [[0, 0, 0]])
    batched = predictor.predict([CSCL, copper, CSCL])
    single = [predictor.predict([s])[0] for s in (CSCL, copper, CSCL)]
    assert batched == pytest.approx(single, abs=1e-4)
    assert batched[1] < 0.5 < batched[0]  # a metal next to a wide-gap salt


def test_unknown_element_is_a_clear_error(predictor):
    polonium = Structure(Lattice.cubic(3.35), ["Po"], [[0, 0, 0]])
    with pytest.raises(ValueError, match="no embedding for element"):
        predictor.predict([polonium])


def test_missing_model_folder_and_switched_off_judge_refuse_loudly(tmp_path):
    with pytest.raises(JudgeUnavailable, match="no state.pt"):
        MEGNetBandGapJudge(tmp_path)
    with pytest.raises(JudgeUnavailable, match="switched off"):
        SwitchedOff("band-gap").band_gap([CSCL])
