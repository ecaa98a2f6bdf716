"""Why factorio-build completions run to the token cap (issue 19, item 2: truncation < 10%).

Reads evaluation folders (``rlplugs eval --out``, or a ``factorio_repro.py`` ``eval-STAGE``) of the
same checkpoint at different ``max_new_tokens`` and tells apart the two ways a completion can end
without a program: a long program cut short (it would close under a larger cap) and a program
that left the warm-start programs and never closes. Per folder: how many completions closed their
```python block, their lengths in tokens, and for the open ones the most repeated line (a loop
shows as one line written dozens of times) and the number of functions defined (the warm-start
template defines 16). Each completion's lines are also looked up among the 93 warm-start programs'
lines: how many are novel, and the first novel one (where it left what it was trained on).

    python benchmarks/factorio_truncation.py DIR[:LABEL] ... --out benchmarks/results/NAME.json

Token counts come from a sample's ``tokens`` (written by ``rlplugs eval`` since session 22), else
from re-tokenising the text with SmolLM2's tokenizer (within a few tokens of the generated count).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from collections import Counter
from pathlib import Path


def program_lines(completion: str) -> list[str]:
    return completion.split("```python\n", 1)[-1].split("```", 1)[0].splitlines()


def novel_lines(lines: list[str], known: set[str]) -> tuple[int, int | None]:
    """How many lines no warm-start program has (knob values and mutations are known lines), and
    the index of the first: where the completion left the programs it was trained on."""
    novel = [i for i, line in enumerate(lines) if line.strip() and line not in known]
    return len(novel), (novel[0] if novel else None)


def describe(sample: dict, known: set[str], count_tokens) -> dict:
    text = sample["completion"]
    lines = program_lines(text)
    repeated = Counter(line.strip() for line in lines if line.strip()).most_common(1)
    novel, first_novel = novel_lines(lines, known)
    return {
        "closed": text.count("```") >= 2,
        "tokens": sample["tokens"] if "tokens" in sample else count_tokens(text),
        "lines": len(lines),
        "functions": sum(line.startswith("def ") for line in lines),
        "most_repeated_line": repeated[0][1] if repeated else 0,
        "novel_lines": novel,
        "first_novel_line": first_novel,
        "success": sample["scores"].get("success"),
    }


def summary(described: list[dict]) -> dict:
    def median(key: str, rows: list[dict]) -> float | None:
        return statistics.median(r[key] for r in rows) if rows else None

    closed = [d for d in described if d["closed"]]
    open_ = [d for d in described if not d["closed"]]
    return {
        "samples": len(described), "closed": len(closed), "open": len(open_), "open_share": len(open_) / len(described),
        "median_tokens_closed": median("tokens", closed), "median_tokens_open": median("tokens", open_),
        "median_functions_closed": median("functions", closed), "median_functions_open": median("functions", open_),
        "open_with_a_line_repeated_20_times_or_more": sum(d["most_repeated_line"] >= 20 for d in open_),
        "closed_without_a_novel_line": sum(d["novel_lines"] == 0 for d in closed),
        "median_novel_lines_closed": median("novel_lines", closed), "median_novel_lines_open": median("novel_lines", open_),
        "median_first_novel_line_open": median("first_novel_line", [d for d in open_ if d["first_novel_line"] is not None]),
        "success_closed": statistics.mean(d["success"] for d in closed) if closed else None,
    }  # fmt: skip


def picture(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 3.6), squeeze=False)
    for ax, (label, result) in zip(axes[0], results.items()):
        rows = result["completions"]
        ax.hist([[d["tokens"] for d in rows if d["closed"]], [d["tokens"] for d in rows if not d["closed"]]],
                bins=32, range=(0, result["max_new_tokens"]), stacked=True, label=["closed the program", "never closed"], color=["tab:blue", "tab:red"])  # fmt: skip
        ax.axvline(result["max_new_tokens"], color="k", ls="--", lw=1)
        ax.set(title=f"{label}: {result['summary']['open']} of {result['summary']['samples']} never closed",
               xlabel="completion tokens (dashed: the cap)", ylabel="completions")  # fmt: skip
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+", help="evaluation folders, each optionally DIR:LABEL")
    p.add_argument("--out", type=Path, required=True, help="result JSON (the picture goes beside it as .png)")
    p.add_argument("--warm_start", type=int, default=93, help="warm-start programs to match against")
    args = p.parse_args(argv)

    from factorio_build.config import FactorioBuildConfig
    from factorio_build.sft import verified_programs
    from rlplugs.testing.smollm2 import build_smollm2_tokenizer, smollm2_gguf
    from rlplugs.tools.report import load_run

    @functools.cache
    def tokenizer():  # built only when a sample does not carry its token count
        return build_smollm2_tokenizer(smollm2_gguf())

    known = {line for p in verified_programs(FactorioBuildConfig(), args.warm_start) for line in p["source"].splitlines()}
    results = {}
    for spec in args.folders:
        folder, _, label = spec.partition(":")
        report, records = load_run(folder)
        described = [describe(s, known, lambda t: len(tokenizer()(t)["input_ids"])) for s in records]
        results[label or Path(folder).name] = {"policy": report["policy"], "max_new_tokens": report["protocol"]["max_new_tokens"],
                                               "temperature": report["protocol"]["temperature"],
                                               "summary": summary(described), "completions": described}  # fmt: skip
        print(label or folder, json.dumps(results[label or Path(folder).name]["summary"]))
    args.out.write_text(json.dumps({"command": "python benchmarks/factorio_truncation.py " + " ".join(argv),
                                    "warm_start_programs": args.warm_start, "evaluations": results}, indent=1) + "\n")  # fmt: skip
    picture(results, args.out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
