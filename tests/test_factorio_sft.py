"""The SFT warm-start sets: 93 and 800 distinct programs, each verified on its own row.

The generator caches its kept stream on disk; verification here re-runs every program of the 93
set (and a seeded sample of the 800 set) through the sandbox pool on the row it was kept for.
"""

from __future__ import annotations

import random

import pytest
from evolve.sandbox import normalized_hash

from factorio_build.config import FactorioBuildConfig
from factorio_build.programs import extract_program
from factorio_build.scoring import ProgramScorer
from factorio_build.sft import WARMSTART_SETS, candidate, sft_rows, success_on_own_rows
from rlplugs.registry import make_env

CONFIG = FactorioBuildConfig(workers=2)


@pytest.fixture(scope="module")
def scorer():
    s = ProgramScorer(CONFIG)
    yield s
    s.pool.close()


def verified_on_own_rows(scorer: ProgramScorer, records: list[dict]) -> list[float]:
    """Re-run each record's program on its own row; also re-derive its normalised hash."""
    programs = [{"source": extract_program(r["messages"][2]["content"]), "row": r["row_id"]} for r in records]
    for program, record in zip(programs, records):
        assert normalized_hash(program["source"]) == record["program_hash"]
    return success_on_own_rows(CONFIG, scorer, programs)


def check_set(records: list[dict], size: int) -> None:
    assert len(records) == size
    assert len({r["program_hash"] for r in records}) == size  # distinct after normalisation
    for r in records:
        assert [m["role"] for m in r["messages"]] == ["system", "user", "assistant"]
        assert r["messages"][2]["content"].startswith("```python\ndef build(world):")


def test_candidates_are_deterministic_and_varied():
    a = [candidate(random.Random(7)) for _ in range(3)]
    assert a == [candidate(random.Random(7)) for _ in range(3)]
    stream = random.Random(1)
    assert len({normalized_hash(candidate(stream)) for _ in range(20)}) == 20


def test_warmstart_93_all_distinct_and_each_verified_on_its_row(scorer):
    records = sft_rows(CONFIG, WARMSTART_SETS["warmstart-93"])
    check_set(records, 93)
    dataset = make_env("factorio-build").sft_dataset("warmstart-93")
    assert len(dataset) == 93 and dataset[0]["messages"] == records[0]["messages"]
    assert verified_on_own_rows(scorer, records) == [1.0] * 93


def test_warmstart_800_distinct_prefix_extends_93_and_sample_verifies(scorer):
    records = sft_rows(CONFIG, WARMSTART_SETS["warmstart-800"])
    check_set(records, 800)
    assert [r["program_hash"] for r in records[:93]] == [r["program_hash"] for r in sft_rows(CONFIG, 93)]
    sample = random.Random(0).sample(records, 48)
    assert verified_on_own_rows(scorer, sample) == [1.0] * 48
