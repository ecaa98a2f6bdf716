"""The diverse warm-start set: hand-written builders and rewrites, verified on the real simulator,
and measurably more varied than the template set.

The full set (``warmstart-diverse-1200``) is measured by ``benchmarks/factorio_warmstart.py``; here
the set is built to 800 + 64 programs (one batch past the template prefix) to keep the suite lean.
"""

from __future__ import annotations

import ast
import random

import pytest
from evolve.sandbox import normalized_hash

from factorio_build import diverse, diversity, mutations, reference, rows, sampled, sft
from factorio_build.config import FactorioBuildConfig
from factorio_build.programs import check_program
from factorio_build.scoring import ProgramScorer
from rlplugs.registry import make_env

CONFIG = FactorioBuildConfig(workers=2)
ADDED = 64


@pytest.fixture(scope="module")
def scorer():
    s = ProgramScorer(CONFIG)
    yield s
    s.pool.close()


@pytest.fixture(scope="module")
def programs(scorer):
    return diverse.verified_programs(CONFIG, diverse.PREFIX + ADDED, scorer)


def test_each_builder_passes_the_sandbox_and_verifies_on_every_train_family(scorer):
    builders = {k: v for k, v in diverse.builder_sources().items() if k != "reference"}
    assert len(builders) >= 3
    first_rows = [s.row_id for s in rows.draw_rows(CONFIG.task, "train", 4, CONFIG.n_scenes)]  # one per family
    for source in builders.values():
        check_program(source)
    runs = [{"source": src, "row": row} for src in builders.values() for row in first_rows]
    assert sft.success_on_own_rows(CONFIG, scorer, runs) == [1.0] * len(runs)
    assert len({diversity.structure_hash(s) for s in builders.values()}) == len(builders)
    template = [reference.program(), reference.program(reach=4, facings=("N", "E", "S", "W"), drill_coal=(20, 5))]
    assert len({diversity.structure_hash(s) for s in template}) == 1  # knobs are not structure


def function_names(source: str) -> set[str]:
    return {f.name for f in ast.parse(source).body if isinstance(f, ast.FunctionDef)}


def test_rewrites_change_the_program_and_keep_it_in_the_sandbox():
    source = diverse.builder_sources()["nearest_first"]
    plain = ast.unparse(ast.parse(source)) + "\n"
    for name, rewrite in mutations.REWRITES.items():
        outs = [ast.unparse(ast.fix_missing_locations(rewrite(ast.parse(source), random.Random(seed)))) + "\n" for seed in range(5)]
        for out in outs:
            check_program(out)
            assert out.startswith("def build(world):"), name
        assert any(out != plain for out in outs), name
    inlined = [ast.unparse(mutations.inline_helpers(ast.parse(source), random.Random(seed))) for seed in range(8)]
    assert {"within_reach", "drop_offset"} <= function_names(source)
    assert any({"within_reach", "drop_offset"}.isdisjoint(function_names(out)) for out in inlined)
    looped = ast.unparse(ast.fix_missing_locations(mutations.while_loops(ast.parse(source), random.Random(0))))
    assert "while _" in looped


def test_diverse_set_extends_the_800_set_and_its_added_programs_verify(programs, scorer):
    template = sft.verified_programs(CONFIG, diverse.PREFIX)
    assert [p["hash"] for p in programs[: diverse.PREFIX]] == [p["hash"] for p in template]
    added = programs[diverse.PREFIX :]
    assert len(added) == ADDED and len({p["hash"] for p in programs}) == len(programs)
    assert all(normalized_hash(p["source"]) == p["hash"] for p in added)
    assert {p["builder"] for p in added} >= {"nearest_first", "ring_search", "cost_table"}
    sample = random.Random(0).sample(added, 16)
    assert sft.success_on_own_rows(CONFIG, scorer, sample) == [1.0] * 16
    assert "warmstart-diverse-1200" in make_env("factorio-build").sft_datasets


def test_added_programs_are_more_diverse_than_the_template_set(programs):
    ref = reference.program()
    old, new = programs[:ADDED], programs[diverse.PREFIX :]
    old = diversity.measure([p["source"] for p in old], ref, pairs=60, hashes=[p["hash"] for p in old])
    new = diversity.measure([p["source"] for p in new], ref, pairs=60, hashes=[p["hash"] for p in new])
    assert old["distinct_normalised_asts"] == new["distinct_normalised_asts"] == ADDED
    assert new["distinct_structures"] > 2 * old["distinct_structures"]
    assert new["mean_pairwise_token_edit_distance_normalised"] > 2 * old["mean_pairwise_token_edit_distance_normalised"]
    assert new["mean_fraction_of_lines_shared_with_reference"] < old["mean_fraction_of_lines_shared_with_reference"] - 0.2


def test_edit_distance_matches_the_textbook_recurrence():
    def textbook(a, b):
        prev = list(range(len(b) + 1))
        for i, x in enumerate(a, 1):
            cur = [i]
            for j, y in enumerate(b, 1):
                cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
            prev = cur
        return prev[-1]

    rng = random.Random(0)
    for _ in range(200):
        a = [rng.randrange(4) for _ in range(rng.randrange(12))]
        b = [rng.randrange(4) for _ in range(rng.randrange(12))]
        assert diversity.edit_distance(a, b) == textbook(a, b)


def test_shipped_model_written_programs_are_new_and_verify_on_their_own_train_rows(programs, scorer):
    """``warmstart-diverse-sampled``'s third source: programs a model wrote, kept on train rows no
    other stream used; a seeded sample re-runs on the real simulator."""
    written = sampled.shipped()
    kept = written["programs"]
    assert kept and written["counts"]["verified_kept"] == len(kept) and written["origin"]
    assert all(normalized_hash(p["source"]) == p["hash"] for p in kept)
    assert len({p["hash"] for p in kept} | {p["hash"] for p in programs}) == len(kept) + len(programs)
    assert min(int(p["row"].rsplit("/", 1)[1]) for p in kept) >= sampled.FIRST_ROW
    sample = random.Random(0).sample(kept, min(8, len(kept)))
    assert sft.success_on_own_rows(CONFIG, scorer, sample) == [1.0] * len(sample)
    assert "warmstart-diverse-sampled" in make_env("factorio-build").sft_datasets


def test_model_written_programs_are_refused_for_a_configuration_they_were_not_verified_for():
    with pytest.raises(ValueError, match="use warmstart-diverse-1200 for this configuration"):
        sampled.verified_programs(CONFIG.model_copy(update={"n_scenes": 4}))


def test_collect_keeps_new_sandbox_valid_programs_that_verify_and_counts_each_filter(scorer, tmp_path):
    """A model's completions on the real simulator: the reference (kept), the reference again with
    a comment (not new), a builder that builds nothing (does not verify), a hostile one and prose."""
    ref = reference.program()
    completions = [reference.as_completion(ref), reference.as_completion("# again\n" + ref),
                   reference.as_completion("def build(world):\n    pass\n"),
                   reference.as_completion("import os\n\ndef build(world):\n    os.system('true')\n"), "no program here"]  # fmt: skip
    kept, counts = sampled.collect(CONFIG, completions, set(), scorer)
    assert counts == {"completions": 5, "sandbox_valid_programs": 3, "new_programs": 2, "verified_kept": 1}
    assert [p["source"] for p in kept] == [ref] and kept[0]["row"].endswith(f"/train/{sampled.FIRST_ROW}")
    assert sampled.collect(CONFIG, completions[:1], {kept[0]["hash"]}, scorer)[1]["new_programs"] == 0
    broken = tmp_path / "samples.jsonl"
    broken.write_text('{"completion": "x"}\nnot json\n')
    with pytest.raises(SystemExit, match="is not an `rlplugs eval` samples.jsonl"):
        sampled.read_completions([broken])
    with pytest.raises(SystemExit, match="cannot read"):
        sampled.read_completions([tmp_path / "missing.jsonl"])
