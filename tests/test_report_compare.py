"""``rlplugs report RUN...``: several evaluations in one table and picture, with row-bootstrap
intervals, from the folders ``rlplugs eval`` writes (made here by the real command)."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess

import pytest

from rlplugs.tools.report import bootstrap_interval, difference_text, row_bootstrap, scores_by_row
from test_cli import RLPLUGS


def rlplugs(*args: str, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([RLPLUGS, *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_qwen35, plugin_env):
    """Three evaluations: the tiny model and the reference on count-test, the reference on letters-test."""
    root = tmp_path_factory.mktemp("evals")
    commands = {
        "tiny": ["--env", "count-test", "--model", str(tiny_qwen35), "--rows", "4", "--samples", "2",
                 "--max_new_tokens", "6", "--temperature", "1.0"],
        "count-ref": ["--env", "count-test", "--policy", "reference"],
        "letters-ref": ["--env", "letters-test", "--policy", "reference"],
    }  # fmt: skip
    for name, args in commands.items():
        out = rlplugs("eval", *args, "--out", str(root / name), env=plugin_env)
        assert out.returncode == 0, out.stderr[-2000:]
    return root


def test_report_compares_evaluations_with_intervals(runs, tmp_path, plugin_env):
    names = ["tiny", "count-ref", "letters-ref"]
    out = rlplugs("report", *[str(runs / n) for n in names], "--labels", "tiny model,count ref,letters ref",
                  "--out", str(tmp_path / "cmp"), env=plugin_env, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "written to" in out.stdout
    table = json.loads((tmp_path / "cmp" / "comparison.json").read_text())["table"]
    assert [(r["run"], r["env"], r["split"]) for r in table] == [
        ("tiny model", "count-test", "validation"), ("count ref", "count-test", "validation"),
        ("letters ref", "letters-test", "validation"),
    ]  # fmt: skip
    for name, row in zip(names, table):
        report = json.loads((runs / name / "report.json").read_text())["splits"]["validation"]
        assert row["mean"] == pytest.approx(report["success_rate"])  # the eval's own figure
        assert row["rows"] == report["counts"]["rows"] and row["samples"] == report["counts"]["samples"]
        assert row["ci95"][0] <= row["mean"] <= row["ci95"][1]
    assert table[1]["mean"] == 1.0 and table[1]["ci95"] == [1.0, 1.0]  # the reference always succeeds
    assert (tmp_path / "cmp" / "comparison.png").stat().st_size > 5000
    md = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "| letters ref | letters-test |" in md and "![comparison](comparison.png)" in md


def test_report_of_a_component_other_than_success(runs, tmp_path, plugin_env):
    out = rlplugs("report", str(runs / "tiny"), str(runs / "count-ref"), "--metric", "final_len",
                  "--out", str(tmp_path / "cmp"), env=plugin_env, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    table = json.loads((tmp_path / "cmp" / "comparison.json").read_text())["table"]
    assert [r["metric"] for r in table] == ["final_len", "final_len"]
    report = json.loads((runs / "tiny" / "report.json").read_text())["splits"]["validation"]
    assert table[0]["mean"] == pytest.approx(report["components"]["final_len"])


def test_report_reads_an_archived_folder_whose_samples_are_gzipped(runs, tmp_path, plugin_env):
    """benchmarks/results keeps evaluation folders with ``samples.jsonl.gz``: same table as the plain folder."""
    archived = tmp_path / "tiny-archived"
    archived.mkdir()
    shutil.copy(runs / "tiny" / "report.json", archived)
    (archived / "samples.jsonl.gz").write_bytes(gzip.compress((runs / "tiny" / "samples.jsonl").read_bytes()))
    tables = []
    for name, folder in {"plain": runs / "tiny", "archived": archived}.items():
        out = rlplugs("report", str(folder), str(runs / "count-ref"), "--labels", "tiny,ref", "--against", "tiny=ref",
                      "--out", str(tmp_path / name), env=plugin_env, timeout=300)  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        table = json.loads((tmp_path / name / "comparison.json").read_text())["table"]
        tables.append([{k: v for k, v in row.items() if k != "folder"} for row in table])
    assert tables[0] == tables[1] and tables[0][0]["samples"] == 8 and tables[0][0]["diff_from"] == "ref"


@pytest.mark.parametrize(
    "args, message",
    [
        (["{missing}"], "not an evaluation folder"),
        (["{tiny}", "{tiny}", "--labels", "one"], "--labels gives 1 names for 2 runs"),
        (["{tiny}", "{tiny}", "--labels", "a,a"], "--labels names a more than once"),
        (["{broken}"], "is not valid JSON"),
        (["{broken_gz}"], "samples.jsonl.gz is not valid gzipped JSON (Not a gzipped file"),
        (["{tiny}", "{listed}"], "listed: report.json is no evaluation report (no splits in it)"),  # an AttributeError
        (["{tiny}", "--against", "tiny=tinny"], "--against names 'tinny' (did you mean 'tiny'?)"),
        (["{tiny}", "--against", "tiny"], "--against takes RUN=BASE pairs"),
        (["{tiny}", "{letters}", "--against", "letters-ref=tiny"], "--against letters-ref=tiny: no split"),
        (["{tiny}", "--metric", "digit"],
         ("--metric 'digit' (did you mean 'digits'?)", "tiny has no such component; its components: digits, final_len")),
    ],
)
def test_report_bad_input_is_one_line_exit_2(args, message, runs, tmp_path, plugin_env):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "report.json").write_text("{not json")
    (broken / "samples.jsonl").write_text("")
    broken_gz = tmp_path / "broken_gz"
    broken_gz.mkdir()
    shutil.copy(runs / "tiny" / "report.json", broken_gz)
    (broken_gz / "samples.jsonl.gz").write_text("plain text")
    listed = tmp_path / "listed"
    listed.mkdir()
    (listed / "report.json").write_text("[1, 2]")
    shutil.copy(runs / "tiny" / "samples.jsonl", listed)
    paths = {"listed": str(listed), "missing": str(tmp_path / "nope"), "tiny": str(runs / "tiny"), "broken": str(broken), "broken_gz": str(broken_gz),
             "letters": str(runs / "letters-ref")}
    out = rlplugs("report", *[a.format(**paths) for a in args], "--out", str(tmp_path / "cmp"), env=plugin_env, timeout=120)
    needles = (message,) if isinstance(message, str) else message
    assert out.returncode == 2 and all(n in out.stderr for n in needles) and "Traceback" not in out.stderr


def test_bootstrap_interval_of_any_statistic_draws_the_same_resamples_for_each_run():
    a = [0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    b = [x + 0.25 for x in a]  # the same items, every one 0.25 better

    def mean(values):
        return lambda picks: sum(values[i] for i in picks) / len(picks)

    # the mean of single-value rows is what row_bootstrap resamples, with the same draws
    found = bootstrap_interval(mean(a), len(a))
    assert (found.low, found.high) == row_bootstrap([[x] for x in a]) and found.unscored == 0
    assert 0.2 < found.low < 0.6 < found.high < 0.95
    # paired: a difference of two runs over the same resampled items has no spread of its own
    paired = bootstrap_interval(lambda p: mean(b)(p) - mean(a)(p), len(a))
    assert (paired.low, paired.high) == pytest.approx((0.25, 0.25))
    assert bootstrap_interval(mean(a), 0) is None


def test_a_resample_where_the_statistic_is_undefined_is_left_out_and_counted_never_a_zero():
    """Only item 0 is scored (e.g. the one played episode of a clemscore): a resample without it has
    no value (None), and is left out of the interval instead of pulling it towards 0."""
    found = bootstrap_interval(lambda picks: 1.0 if 0 in picks else None, 10, resamples=2000)
    assert (found.low, found.high) == (1.0, 1.0)
    assert 500 < found.unscored < 900  # a resample misses item 0 with probability 0.9**10 = 0.35
    assert bootstrap_interval(lambda picks: None, 10) is None  # nothing scored in any resample


def test_row_bootstrap_resamples_whole_rows():
    assert row_bootstrap([[1.0, 1.0], [1.0]]) == (1.0, 1.0)
    low, high = row_bootstrap([[1.0] * 10, [0.0] * 10])  # two rows: resampled means are 0, 0.5 or 1
    assert (low, high) == (0.0, 1.0)
    low, high = row_bootstrap([[1.0, 0.0]] * 20)  # every row the same: no spread between rows
    assert low == high == 0.5
    assert row_bootstrap([[], []]) is None



def test_a_missing_mean_gets_no_bar_only_na():
    """The report's bars (comparison and success-by pictures): a run without scores is not drawn
    as a measured zero."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlplugs.tools.report import bars_or_na

    fig, ax = plt.subplots()
    bars_or_na(ax, [0, 1], [0.5, None], 0.8, ["", ""], yerr=[[0.25, 0.0], [0.25, 0.0]])
    heights = [p.get_height() for p in ax.patches]
    assert heights[0] == 0.5 and heights[1] != heights[1]  # NaN: no bar
    assert [t.get_text() for t in ax.texts] == ["0.500", "n/a"]
    plt.close(fig)


def test_a_bars_label_sits_above_its_interval_not_under_the_error_bar():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlplugs.tools.report import bars_or_na

    fig, ax = plt.subplots()
    bars_or_na(ax, [0, 1, 2], [0.5, 0.3, None], 0.8, ["", "", ""], intervals=[[0.25, 0.75], None, None])
    from matplotlib.container import ErrorbarContainer

    (errorbar,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    (error_lines,) = errorbar.lines[2]  # the vertical lines
    assert [tuple(y for _, y in segment) for segment in error_lines.get_segments()][0] == (0.25, 0.75)
    assert [t.xy[1] for t in ax.texts] == [0.75, 0.3, 0.0]  # above the interval; the bar; the baseline
    plt.close(fig)


def test_a_run_on_the_same_rows_gets_its_difference_with_a_paired_interval(runs, tmp_path, plugin_env):
    """The reference scores 1 on every count-test row, so in every paired resample the difference
    is 1 minus the tiny model's pooled mean on the same rows: its interval is the tiny model's
    own, mirrored. An unpaired bootstrap would draw other rows for each run and miss it."""
    out = rlplugs("report", str(runs / "tiny"), str(runs / "count-ref"), str(runs / "letters-ref"),
                  "--out", str(tmp_path / "cmp"), env=plugin_env, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    tiny, ref, letters = json.loads((tmp_path / "cmp" / "comparison.json").read_text())["table"]
    assert tiny["rows"] == ref["rows"]
    assert tiny["diff"] is None and letters["diff"] is None  # first on its rows; another env
    assert ref["diff"] == pytest.approx(1.0 - tiny["mean"])
    assert ref["diff_ci95"] == pytest.approx([1.0 - tiny["ci95"][1], 1.0 - tiny["ci95"][0]])
    assert f"| {difference_text(ref)} |" in (tmp_path / "cmp" / "comparison.md").read_text()
    digests = [{json.loads(line)["row_digest"] for line in (runs / n / "samples.jsonl").read_text().splitlines()}
               for n in ("tiny", "count-ref")]  # fmt: skip
    assert digests[0] == digests[1] and len(digests[0]) == tiny["rows"]  # paired on the rows' content


def test_against_measures_a_run_from_the_base_it_names(runs, tmp_path, plugin_env):
    """Two chains in one table: run c (the tiny model again) measured from b (the reference), not
    from a (the first run on these rows, where its difference would be exactly 0)."""
    out = rlplugs("report", str(runs / "tiny"), str(runs / "count-ref"), str(runs / "tiny"), "--labels", "a,b,c",
                  "--against", "c=b", "--out", str(tmp_path / "cmp"), env=plugin_env, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    a, b, c = json.loads((tmp_path / "cmp" / "comparison.json").read_text())["table"]
    assert (a["diff_from"], b["diff_from"], c["diff_from"]) == (None, "a", "b")
    assert b["diff"] == pytest.approx(1.0 - a["mean"]) and c["diff"] == pytest.approx(a["mean"] - 1.0)
    assert c["diff_ci95"] == pytest.approx([-x for x in reversed(b["diff_ci95"])])
    assert difference_text(c).endswith(" vs b") and "vs b" in out.stdout


def test_rows_are_told_apart_by_content_not_position():
    """Two evaluations of other rows at the same positions share no row, so they are not paired."""
    first = [{"split": "validation", "group": 0, "row_digest": "a", "scores": {"success": 1.0}}]
    other = [{"split": "validation", "group": 0, "row_digest": "b", "scores": {"success": 0.0}}]
    assert scores_by_row(first, "validation", "success").keys() != scores_by_row(other, "validation", "success").keys()


def test_report_says_why_the_samples_scored_what_they_did(tmp_path, tiny_qwen35, plugin_env):
    """factorio-build's scorer gives every program its verdict; the report counts them per run, numbers as #."""
    env_args = ["--env", "factorio-build", "--env_args", json.dumps({"workers": 1, "eval_rows": 2}), "--rows", "2",
                "--samples", "1", "--split", "holdout"]  # fmt: skip
    policies = {"tiny": ["--model", str(tiny_qwen35), "--max_new_tokens", "8"], "reference": ["--policy", "reference"]}
    for name, policy in policies.items():
        out = rlplugs("eval", *env_args, *policy, "--render", "0", "--out", str(tmp_path / name), env=plugin_env)
        assert out.returncode == 0, out.stderr[-2000:]
    out = rlplugs("report", str(tmp_path / "tiny"), str(tmp_path / "reference"), "--out", str(tmp_path / "cmp"), env=plugin_env)
    assert out.returncode == 0, out.stderr[-2000:]
    tiny, reference = json.loads((tmp_path / "cmp" / "comparison.json").read_text())["table"]
    assert [g["samples"] for g in tiny["reasons"]] == [2] and tiny["reasons"][0]["reason"].startswith("no_code_block: ")
    assert reference["reasons"] == [{"reason": "ok: #/# scenes verified", "samples": 2, "mean": 1.0}]
    # the tiny model's 8 tokens never finish a program; the reference policy's replies do not say
    assert (tiny["at_cap"], reference["at_cap"]) == (1.0, None)
    md = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "- **reference** (holdout): 2 x `ok: #/# scenes verified` (1.000)" in md
    assert "| 100% |" in md and "| n/a |" in md


def test_a_long_title_is_wrapped_to_fit_the_picture():
    """A run's description as the title ran off both edges of comparison.png (session 32)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlplugs.tools.report import fit_title

    fig, ax = plt.subplots(figsize=(5, 3))
    long = "factorio-build holdout, seed 1 with the sampling mask kept: each policy at both samplers, top_p 1.0 and 0.9"
    fit_title(ax, long)
    fig.canvas.draw()
    box = ax.title.get_window_extent()
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width, (box, fig.bbox.width)
    assert box.width > 0.6 * fig.bbox.width  # wrapped to the longest lines that fit, not to a column
    assert ax.get_title().replace("\n", " ") == long and ax.get_title().count("\n") >= 1
    fit_title(ax, long + "\nat T 0.7")  # the caller's line break stays (session 33's picture lost it)
    assert ax.get_title().endswith("0.9\nat T 0.7"), ax.get_title()
    fit_title(ax, "short")
    assert ax.get_title() == "short"
    plt.close(fig)
