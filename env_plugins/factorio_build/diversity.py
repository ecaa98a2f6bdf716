"""How varied a set of builder programs is: the figures the warm-start sets are compared by.

- distinct normalised ASTs (``evolve.sandbox.normalized_hash``: blind to layout, comments and
  renaming), and distinct *structures*: the same hash after every constant is blanked, so the
  template family's knob settings (coal amounts, facing orders) count as one structure;
- mean pairwise token edit distance: Levenshtein distance between the programs' Python token
  streams (comments and blank lines dropped), over a seeded sample of pairs, raw and divided by
  the longer stream's length;
- lines shared with the reference program: per program, the fraction of its non-blank lines
  (stripped) that also occur in the reference, as a histogram of tenths, and the count of lines
  that do not.
"""

from __future__ import annotations

import ast
import io
import random
import statistics
import tokenize
from collections import Counter

import numpy as np
from evolve.sandbox import normalized_hash

_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}


def tokens(source: str) -> list[str]:
    return [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in _SKIP]


def edit_distance(a: list[int], b: list[int]) -> int:
    """Levenshtein distance of two integer sequences, one numpy row at a time: substitutions and
    deletions come from the previous row, insertions by a running minimum along the row."""
    if not a or not b:
        return max(len(a), len(b))
    b_arr = np.asarray(b)
    offsets = np.arange(len(b) + 1)
    row = offsets.copy()
    for i, token in enumerate(a, 1):
        cand = np.empty_like(row)
        cand[0] = i
        cand[1:] = np.minimum(row[1:] + 1, row[:-1] + (b_arr != token))
        row = np.minimum.accumulate(cand - offsets) + offsets  # cand[k] + (j - k) minimised over k <= j
    return int(row[-1])


def structure_hash(source: str) -> str:
    """The normalised hash with every non-string constant blanked (strings keep docstrings apart
    from code: they only name items and directions here)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and not isinstance(node.value, str):
            node.value = 0
    return normalized_hash(ast.unparse(tree))


def _lines(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if line.strip()]


def measure(sources: list[str], reference: str, pairs: int = 200, seed: int = 0) -> dict:
    """The figures above for one set of programs."""
    vocab: dict[str, int] = {}
    streams = [[vocab.setdefault(t, len(vocab)) for t in tokens(s)] for s in sources]
    rng = random.Random(seed)
    chosen = [tuple(rng.sample(range(len(sources)), 2)) for _ in range(pairs)] if len(sources) > 1 else []
    distances = [edit_distance(streams[i], streams[j]) for i, j in chosen]
    normalised = [d / max(len(streams[i]), len(streams[j])) for d, (i, j) in zip(distances, chosen)]
    ref_lines = set(_lines(reference))
    shared = [sum(line in ref_lines for line in _lines(s)) / len(_lines(s)) for s in sources]
    not_in_ref = [sum(line not in ref_lines for line in _lines(s)) for s in sources]
    histogram = Counter(min(int(f * 10), 9) for f in shared)
    return {
        "programs": len(sources),
        "distinct_normalised_asts": len({normalized_hash(s) for s in sources}),
        "distinct_structures": len({structure_hash(s) for s in sources}),
        "pairs_sampled": len(chosen),
        "mean_pairwise_token_edit_distance": round(statistics.fmean(distances), 1) if distances else None,
        "mean_pairwise_token_edit_distance_normalised": round(statistics.fmean(normalised), 4) if normalised else None,
        "mean_tokens": round(statistics.fmean(len(s) for s in streams), 1),
        "median_lines_not_in_reference": statistics.median(not_in_ref),
        "mean_fraction_of_lines_shared_with_reference": round(statistics.fmean(shared), 4),
        "histogram_fraction_of_lines_shared_with_reference": {
            f"{k / 10:.1f}-{(k + 1) / 10:.1f}": histogram.get(k, 0) for k in range(10)
        },
    }
