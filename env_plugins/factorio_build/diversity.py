"""How varied a set of builder programs is: the figures the warm-start sets are compared by.

Every program (and the reference) is first printed in one layout (``ast.unparse``: comments
dropped, one quote style), so formatting never counts as variety. Then:

- distinct normalised ASTs (``evolve.sandbox.normalized_hash``: blind to layout, comments and
  renaming), and distinct *structures* (:func:`structure_hash`: also blind to constants, so the
  template family's knob settings count as one structure);
- mean pairwise token edit distance: Levenshtein distance between the programs' Python token
  streams, over a seeded sample of pairs, raw and divided by the longer stream's length;
- lines shared with the reference program: per program, the fraction of its non-blank lines
  (stripped) that also occur in the reference, as a histogram of tenths, and the count of lines
  that do not.
"""

from __future__ import annotations

import ast
import hashlib
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


class _Skeleton(ast.NodeTransformer):
    """Names numbered by first appearance, docstrings dropped, constants (and tuples or lists of
    constants) blanked: what is left is the program's shape."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def _name(self, name: str) -> str:
        return self.names.setdefault(name, f"n{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self._name(node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self._name(node.arg)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = self._name(node.name)
        if ast.get_docstring(node) is not None:
            node.body = node.body[1:] or [ast.Pass()]
        return self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.Constant(0)

    def visit_Tuple(self, node: ast.Tuple) -> ast.AST:
        return ast.Constant(0) if all(isinstance(e, ast.Constant) for e in node.elts) else self.generic_visit(node)

    visit_List = visit_Tuple


def structure_hash(source: str) -> str:
    """A digest blind to naming, docstrings and constants: the template family's knob settings
    (coal amounts, facing orders, thresholds) are one structure, its source swaps are others."""
    tree = _Skeleton().visit(ast.parse(source))
    return hashlib.sha256(ast.dump(tree, annotate_fields=False).encode()).hexdigest()[:16]


def canonical(source: str) -> str:
    return ast.unparse(ast.parse(source)) + "\n"


def _lines(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if line.strip()]


def measure(sources: list[str], reference: str, pairs: int = 200, seed: int = 0, hashes: list[str] | None = None) -> dict:
    """The figures above for one set of programs (``hashes``: their normalised hashes where known,
    since factory-sim's hash is slow: about 0.1 s a program)."""
    hashes = hashes if hashes is not None else [normalized_hash(s) for s in sources]
    # one layout for every program (the rewrites print through ast.unparse, the template does
    # not): quotes, spacing and comments must not count as variety
    sources, reference = [canonical(s) for s in sources], canonical(reference)
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
        "distinct_normalised_asts": len(set(hashes)),
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
