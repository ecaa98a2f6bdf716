"""Scripted episodes with known good and known bad structures give the expected per-component
rewards; malformed input gets actionable tool messages; limits hold. Real CHGNet, real MEGNet,
real MP-20 rows (shipped in ``matrl/data``) as the novelty reference."""

import json

import pytest
from pymatgen.core import Lattice, Structure

from matrl.datafiles import MEGNET_BANDGAP, MP20_SUBSET
from matrl.episode import MatrlEpisode
from matrl.plugin import MatrlConfig, build_env
from matrl.policy import ReplayPolicy
from matrl.structures import structure_to_json
from matrl.tasks import load_mp20_csv
from matrl.toolcalls import format_call
from rlplugs.episode import Episode, play
from rlplugs.rewards import Sample, run_sync, score_components

MP20_TEST = str(MP20_SUBSET["test"])
MEGNET = str(MEGNET_BANDGAP)
NACL = Structure.from_spacegroup("Fm-3m", Lattice.cubic(5.69), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]]).get_primitive_structure()
MGO = Structure.from_spacegroup("Fm-3m", Lattice.cubic(4.25), ["Mg", "O"], [[0, 0, 0], [0.5, 0.5, 0.5]]).get_primitive_structure()


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def spec():
    return build_env(MatrlConfig(band_gap_model=MEGNET, reference_csvs=[MP20_TEST], relax_steps=8, max_evaluations=3))


def _row(spec, task, target, max_atoms=20):
    from matrl.tasks import task_row

    r = task_row(task, target, max_atoms)
    system = spec.dataset("validation")[0]["prompt"][0]
    return {"prompt": [system, {"role": "user", "content": r["request"]}], "task": task,
            "target": json.dumps(r["target"]), "task_id": f"test-{task}", "max_atoms": max_atoms}


def _play(spec, row, replies) -> MatrlEpisode:
    return play(spec.episodes(row), ReplayPolicy(replies), max_turns=20)


def _think(call: str) -> str:
    return "Let me check this candidate.\n</think>\n\n" + call


def test_known_good_rocksalt_scores_valid_stable_and_meets_the_formula(spec):
    ep = _play(spec, _row(spec, "formula", "NaCl"), [
        _think(format_call("evaluate_structure", structure=structure_to_json(NACL))),
        _think(format_call("submit", structure=structure_to_json(NACL))),
    ])
    assert isinstance(ep, Episode) and ep.done and ep.finish_reason == "submitted" and ep.turns == 2
    evaluation = json.loads(ep.messages[3]["content"])
    assert evaluation["valid"] and evaluation["e_above_hull"] is not None and evaluation["evaluations_left"] == 2
    scores = ep.scores()
    assert {k: scores[k].value for k in ("valid", "condition_met", "novel", "stable")} == {
        "valid": 1.0, "condition_met": 1.0, "novel": 1.0, "stable": 1.0}
    assert scores["band_gap_target"].value is None and "not applicable" in scores["band_gap_target"].reason


def test_known_mp20_structure_is_not_novel(spec):
    gate = load_mp20_csv(MP20_TEST)[0].structure  # GaTe, mp-10009
    ep = _play(spec, _row(spec, "chemsys", "Ga-Te"), [_think(format_call("submit", structure=gate.to(fmt="cif")))])
    scores = ep.scores()
    assert scores["valid"].value == 1.0 and scores["condition_met"].value == 1.0
    assert scores["novel"].value == 0.0
    assert "mp-10009" in ep.submission["matches_known"]


@pytest.mark.parametrize("species, coords, finding", [
    (["Na", "Cl"], [[0, 0, 0], [0.04, 0, 0]], "apart"),          # overlapping atoms
    (["Na", "Cl", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5], [0.25, 0.25, 0.25]], "charge-neutral"),
])
def test_known_bad_structures_score_zero_with_findings(spec, species, coords, finding):
    bad = Structure(Lattice.cubic(4.0), species, coords)
    ep = _play(spec, _row(spec, "unconditional", "u1"), [_think(format_call("submit", structure=structure_to_json(bad)))])
    scores = ep.scores()
    assert scores["valid"].value == 0.0 and scores["stable"].value == 0.0 and scores["novel"].value == 0.0
    assert any(finding in f for f in ep.submission["findings"])


def test_band_gap_task_scores_the_real_megnet_prediction(spec):
    ep = _play(spec, _row(spec, "band_gap", 5.0), [_think(format_call("submit", structure=structure_to_json(NACL)))])
    gap = ep.submission["band_gap_ev"]
    assert 3.0 < gap < 7.0  # a wide-gap halide per MEGNet
    expected = 1.0 if abs(gap - 5.0) <= 0.3 else max(0.0, 1 - (abs(gap - 5.0) - 0.3))
    assert ep.scores()["band_gap_target"].value == pytest.approx(expected)


def test_malformed_replies_get_fix_it_messages_and_never_crash(spec):
    big = Structure(Lattice.cubic(12), ["Na"] * 11 + ["Cl"] * 11, [[i / 22, 0.1 * (i % 2), 0] for i in range(22)])
    ep = _play(spec, _row(spec, "formula", "NaCl"), [
        "I forgot to call a tool.",
        "<tool_call>{broken</tool_call>",
        _think(format_call("evaluate_structure", structure="{not json")),
        _think(format_call("evaluate_structure", structure=structure_to_json(big))),
        _think(format_call("teleport", structure="x")),
        _think(format_call("retrieve_materials", query="Ga,Te")),
    ] * 2)
    tool_replies = [m["content"] for m in ep.messages if m["role"] == "tool"]
    assert "No tool call found" in tool_replies[0]
    assert "not understood" in tool_replies[1]
    assert "does not parse" in tool_replies[2]
    assert "22 atoms; the limit is 20" in tool_replies[3]
    assert "Unknown tool 'teleport'" in tool_replies[4]
    assert json.loads(tool_replies[5])["materials"][0]["formula"] == "GaTe"
    assert ep.finish_reason == "turn_limit" and ep.turns == 10 and ep.evaluations == []
    assert all(s.value == 0.0 for k, s in ep.scores().items() if k in ("valid", "stable", "novel"))


def test_evaluation_budget_is_enforced(spec):
    ev = _think(format_call("evaluate_structure", structure=structure_to_json(NACL)))
    ep = _play(spec, _row(spec, "formula", "NaCl"), [ev] * 4 + [_think(format_call("submit", structure=structure_to_json(NACL)))])
    assert len(ep.evaluations) == 3
    assert "budget spent" in ep.messages[-3]["content"]


def test_group_components_reward_uniqueness_and_diversity(spec):
    episodes = [
        _play(spec, _row(spec, "unconditional", "u2"), [_think(format_call("submit", structure=structure_to_json(s)))])
        for s in (NACL, NACL, MGO)
    ]
    clone = episodes[0].clone()
    assert clone.record()["submission"] == episodes[0].record()["submission"] and clone is not episodes[0]
    samples = [Sample(prompt=[], completion="", row={}, episode=e.record(), group=7) for e in episodes]
    results = run_sync(score_components(spec.components, samples))
    assert [r["unique"].value for r in results] == [0.5, 0.5, 1.0]
    assert [r["group_diversity"].value for r in results] == pytest.approx([0.5, 0.5, 1.0])
    assert results[2]["sun_marginal"].value > results[0]["sun_marginal"].value
    assert [r["sun"].value for r in results][:2] == [0.0, 0.0]


def test_clone_branches_the_game_state(spec):
    ep = spec.episodes(_row(spec, "formula", "NaCl"))
    ep.step(_think(format_call("retrieve_materials", query="NaCl")))
    twin = ep.clone()
    twin.step(_think(format_call("submit", structure=structure_to_json(NACL))))
    assert twin.done and not ep.done and len(ep.messages) == len(twin.messages) - 2
