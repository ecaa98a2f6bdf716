"""Pictures of builds and blueprint strings that round-trip through factorio-draftsman."""

from __future__ import annotations

import pytest
from draftsman.blueprintable import get_blueprintable_from_string
from draftsman.constants import Direction

from factorio_build import pictures, reference
from rlplugs.registry import make_env
from rlplugs.rewards import Sample


@pytest.fixture(scope="module")
def spec():
    return make_env("factorio-build", {"workers": 2, "eval_rows": 1, "rows": 1})


def test_render_draws_every_scene_and_writes_verified_blueprints(spec, tmp_path):
    row = dict(spec.dataset("holdout")[0])
    written = spec.render(Sample(prompt=row["prompt"], completion=reference.reference_policy([]), row=row), tmp_path)
    png, *blueprints = written
    assert png.suffix == ".png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert len(blueprints) == 8  # the reference verifies on all 8 holdout scenes of this row
    for path in blueprints:
        decoded = get_blueprintable_from_string(path.read_text().strip())
        assert sorted(e.name for e in decoded.entities) == ["burner-mining-drill", "stone-furnace"]


def test_render_of_a_program_that_never_ran_writes_nothing(spec, tmp_path):
    row = dict(spec.dataset("holdout")[0])
    assert spec.render(Sample(prompt=row["prompt"], completion="no code", row=row), tmp_path) == []


def test_blueprint_string_round_trips_to_the_same_entities():
    built = [("burner-mining-drill", 3, -4, "S"), ("stone-furnace", 3, -2, "N"), ("burner-mining-drill", -7, 0, "E")]
    decoded = get_blueprintable_from_string(pictures.blueprint_string(built))
    back = [(e.name, *e.tile_position, e.direction) for e in decoded.entities]
    facing = {"N": Direction.NORTH, "E": Direction.EAST, "S": Direction.SOUTH, "W": Direction.WEST}
    assert back == [(item, x, y, facing[f]) for item, x, y, f in built]
    assert decoded.label == "factorio-build"


def test_reference_eval_on_holdout_writes_report_pictures_and_blueprints(spec, tmp_path):
    from rlplugs.tools.evaluation import evaluate_to_dir

    spec = make_env("factorio-build", {"workers": 2})  # the card's protocol: 16 rows x 4 samples
    report, out = evaluate_to_dir(spec, ["holdout"], spec.reference_policy, tmp_path, policy_name="reference", render=1)
    holdout = report["splits"]["holdout"]
    assert holdout["counts"]["samples"] == 64 and holdout["success_rate"] >= 0.95
    assert set(holdout["by"]["family"]) == {"obstructed_patch"}
    assert (out / "report.json").exists() and (out / "report.md").exists()
    renders = [out / p for p in holdout["renders"]]
    assert any(p.suffix == ".png" for p in renders) and any(p.name.endswith(".blueprint.txt") for p in renders)
