"""Warm-start programs a model wrote: the diverse set's third source, after builders and rewrites.

The builders of :mod:`factorio_build.diverse` and their rewrites are programs people wrote. This
source is programs a policy wrote: the completions of ``rlplugs eval`` runs (``samples.jsonl``),
each program taken out of its completion as the scorer takes it, and kept when it passes the
static sandbox, its normalised hash is new (within the runs and against the whole diverse set)
and it verifies on every scene of a train row no other stream used (candidate ``k`` on train row
``FIRST_ROW + k``). The completions' own rows and scores play no part in the choice, so a run
evaluated on holdout rows brings no holdout scene into the SFT data.

The kept programs ship with the package (``data/sampled_programs.json.gz``, with where they came
from), so ``warmstart-diverse-sampled`` (the diverse set, then these) builds offline without a
model. They were kept for the default task and scene count; another configuration's rows differ,
and it is refused rather than trusted.

    python -m factorio_build.sampled runs/repro20/eval-grpo93/samples.jsonl runs/repro20/eval-sft93/samples.jsonl --origin "..."
"""

from __future__ import annotations

import argparse
import gzip
import json
from importlib import resources
from pathlib import Path

from evolve.sandbox import normalized_hash

from factorio_build import diverse, sft
from factorio_build.config import FactorioBuildConfig
from factorio_build.programs import check_completion
from factorio_build.scoring import ProgramScorer

SAMPLED_SETS = {"warmstart-diverse-sampled": None}  # None: every shipped program after the diverse set
FIRST_ROW = 4096  # past the template (0-1023) and diverse (1024-) streams' rows
DATA = "data/sampled_programs.json.gz"


def shipped() -> dict:
    """The shipped file: ``{"origin", "config", "counts", "programs": [{"source", "hash", "row"}]}``."""
    with gzip.open(resources.files("factorio_build").joinpath(DATA).open("rb")) as f:
        return json.load(f)


def _config_key(config: FactorioBuildConfig) -> dict:
    return {"task": config.task, "n_scenes": config.n_scenes, "seed": config.seed}


def _diverse_set(config: FactorioBuildConfig, scorer: ProgramScorer | None) -> list[dict]:
    return diverse.verified_programs(config, next(iter(diverse.DIVERSE_SETS.values())), scorer)


def read_completions(paths: list[Path]) -> list[str]:
    """Every completion of the ``samples.jsonl`` files; a file that is missing or not an eval
    run's samples is one line naming it."""
    completions = []
    for path in paths:
        try:
            lines = path.read_text().splitlines()
            completions += [json.loads(line)["completion"] for line in lines if line.strip()]
        except OSError as exc:
            raise SystemExit(f"cannot read {path}: {exc.strerror}") from None
        except (json.JSONDecodeError, KeyError, TypeError):
            raise SystemExit(f"{path} is not an `rlplugs eval` samples.jsonl (one JSON record with a 'completion' per line)") from None
    return completions


def collect(config: FactorioBuildConfig, completions: list[str], seen: set[str], scorer: ProgramScorer) -> tuple[list[dict], dict]:
    """The programs of ``completions`` that are new against ``seen`` and each other and verify on
    their train row (candidates in order of first appearance, on rows ``FIRST_ROW``, ...), and how
    many completions passed each filter."""
    sources = [check_completion(c).source for c in completions]  # None: no program, or one the sandbox refuses
    candidates, hashes = [], set(seen)
    for source in filter(None, sources):
        digest = normalized_hash(source)
        if digest not in hashes:
            hashes.add(digest)
            candidates.append((source, digest))
    checked = sft.on_train_rows(config, [src for src, _ in candidates], FIRST_ROW, scorer)
    kept = [{"source": src, "hash": digest, "row": row_id}
            for (src, digest), (row_id, verified) in zip(candidates, checked) if verified]  # fmt: skip
    counts = {"completions": len(completions), "sandbox_valid_programs": sum(s is not None for s in sources),
              "new_programs": len(candidates), "verified_kept": len(kept)}  # fmt: skip
    return kept, counts


def verified_programs(config: FactorioBuildConfig, count: int | None = None, scorer: ProgramScorer | None = None) -> list[dict]:
    """The diverse set, then the shipped model-written programs (the first ``count`` in all)."""
    data = shipped()
    if data["config"] != _config_key(config):
        raise ValueError(
            f"the model-written warm-start programs were verified for {data['config']}, not {_config_key(config)}; "
            "use warmstart-diverse-1200 for this configuration"
        )
    programs = _diverse_set(config, scorer) + data["programs"]
    return programs[:count] if count is not None else programs


def main() -> None:
    p = argparse.ArgumentParser(description="Keep the verified, new programs of an eval run's samples.jsonl as warm-start data.")
    p.add_argument("samples", type=Path, nargs="+", help="samples.jsonl of `rlplugs eval` runs on factorio-build")
    p.add_argument("--origin", required=True, help="which model and run wrote them (stored with the programs)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / DATA)
    a = p.parse_args()
    completions = read_completions(a.samples)
    config = FactorioBuildConfig(workers=a.workers)
    scorer = ProgramScorer(config)
    try:
        kept, counts = collect(config, completions, {q["hash"] for q in _diverse_set(config, scorer)}, scorer)
    finally:
        scorer.pool.close()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    document = {"origin": a.origin, "config": _config_key(config), "counts": counts, "programs": kept}
    with gzip.open(a.out, "wt") as f:
        json.dump(document, f)
    print(f"kept {len(kept)} of {len(completions)} completions {counts} -> {a.out}")


if __name__ == "__main__":
    main()
