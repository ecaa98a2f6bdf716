"""Diversity of the factorio-build warm-start sets: the template 800 set beside the diverse set.

Builds (or reads from the cache) ``warmstart-800`` and ``warmstart-diverse-1200`` (whose first 800
programs are the 800 set's), measures both with :mod:`factorio_build.diversity`, and the 400
programs the diverse set adds on their own, and the model-written programs that follow them in
``warmstart-diverse-sampled`` (:mod:`factorio_build.sampled`), and writes ``benchmarks/results/factorio_warmstart.json``
with the command that made it. Every program in both sets verified on all scenes of its train row
when it was kept; ``--reverify N`` re-runs a seeded sample of N added programs to show it.

    python benchmarks/factorio_warmstart.py --reverify 64
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from collections import Counter
from pathlib import Path

from factorio_build import diverse, diversity, reference, sampled, sft
from factorio_build.config import FactorioBuildConfig
from factorio_build.scoring import ProgramScorer

log = logging.getLogger("factorio_warmstart")


def measure(programs: list[dict], ref: str, pairs: int) -> dict:
    return diversity.measure([q["source"] for q in programs], ref, pairs, hashes=[q["hash"] for q in programs])


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=next(iter(diverse.DIVERSE_SETS.values())))
    p.add_argument("--pairs", type=int, default=300, help="program pairs sampled for the edit distance")
    p.add_argument("--reverify", type=int, default=0, help="added programs re-run on their rows")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/factorio_warmstart.json"))
    a = p.parse_args()
    config = FactorioBuildConfig(workers=a.workers)
    scorer = ProgramScorer(config)
    start = time.perf_counter()
    old = sft.verified_programs(config, diverse.PREFIX, scorer)
    new = diverse.verified_programs(config, a.size, scorer)
    assert [q["hash"] for q in new[: diverse.PREFIX]] == [q["hash"] for q in old], "the 800 set must be the prefix"
    added = new[diverse.PREFIX :]
    ref = reference.program()
    state = json.loads(diverse._cache_path(config).read_text())
    result = {
        "command": "python " + " ".join(sys.argv),
        "machine": "2-core CPU, shared with other sessions",
        "task": config.task,
        "n_scenes": config.n_scenes,
        "sets": {
            "warmstart-800 (template)": measure(old, ref, a.pairs),
            f"warmstart-diverse-{a.size}": measure(new, ref, a.pairs),
            f"added {len(added)} (builders + rewrites)": measure(added, ref, a.pairs),
        },
        "added_by_builder": dict(Counter(q["builder"] for q in added).most_common()),
        "added_rewrites_applied": dict(Counter(r for q in added for r in q["rewrites"]).most_common()),
        "added_stream": {"tried": state["tried"], "kept": len(state["kept"]), "first_train_row": diverse.FIRST_ROW},
    }
    written = sampled.shipped()
    model_written = written["programs"]
    result["sets"][f"model-written {len(model_written)} (shipped)"] = measure(model_written, ref, a.pairs)
    result["sets"][f"warmstart-diverse-sampled ({len(new) + len(model_written)})"] = measure(new + model_written, ref, a.pairs)
    result["model_written"] = {"origin": written["origin"], **written["counts"], "first_train_row": sampled.FIRST_ROW,
                               "made_by": "python -m factorio_build.sampled SAMPLES.jsonl ... --origin ..."}  # fmt: skip
    if a.reverify:
        sample = random.Random(0).sample(added, min(a.reverify, len(added)))
        success = sft.success_on_own_rows(config, scorer, sample)
        result["reverified_added"] = {"programs": len(sample), "verified_on_every_scene": sum(s == 1.0 for s in success)}
        success = sft.success_on_own_rows(config, scorer, model_written)
        result["reverified_model_written"] = {"programs": len(model_written), "verified_on_every_scene": sum(s == 1.0 for s in success)}
    scorer.pool.close()
    result["wall_s"] = round(time.perf_counter() - start, 1)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    log.info("wrote %s", a.out)


if __name__ == "__main__":
    main()
