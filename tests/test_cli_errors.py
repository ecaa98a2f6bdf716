"""Bad input on the ``rlplugs`` commands a user types: exit code 2, one line that names the problem
and says what to do, no traceback, and (for the expensive commands) nothing computed first.

The console script runs in a subprocess, as a user runs it, where a case needs a fresh process
(the matrl options, plugin metadata) or shows the whole path (``eval --out``); the other cases call
``rlplugs.tools.cli.main`` in this process, because every ``rlplugs ckpt``/``eval`` process spends 10-25 s
importing torch and transformers on a loaded 2-core machine (an exception there fails the test)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rlplugs.tools import cli

RLPLUGS = shutil.which("rlplugs") or str(Path(sys.executable).with_name("rlplugs"))


def run(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([RLPLUGS, *args], env=env, capture_output=True, text=True, timeout=300, cwd=cwd)


def assert_usage_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, no traceback, and exactly one message line (log records aside) holding ``needles``."""
    return _one_line(proc.returncode, proc.stdout, proc.stderr, needles)


def main_usage_error(capsys, *args: str, needles: tuple[str, ...]) -> str:
    """``rlplugs ARGS`` in this process: the same checks as :func:`assert_usage_error`."""
    capsys.readouterr()
    code = cli.main(list(args))
    out = capsys.readouterr()
    return _one_line(code, out.out, out.err, needles)


def _one_line(code: int, stdout: str, stderr: str, needles: tuple[str, ...]) -> str:
    assert "Traceback" not in stdout + stderr, (stdout + stderr)[-3000:]
    assert code == 2, (stdout + stderr)[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith(("WARNING ", "INFO "))]
    assert len(lines) == 1, lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_ctrl_c_is_one_word_and_the_shells_exit_code(capsys):
    def interrupted():
        raise KeyboardInterrupt

    assert cli.run_script(interrupted) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def saved_checkpoint(tmp_path: Path, damage: str | None = None) -> Path:
    """A checkpoint-5 folder as a trainer saves one (config, step record, safetensors weights), with one ``damage``:
    a step record cut short (``state``) or with a step that is no count (``step``), no weights, or a
    weights file cut short (``shard``)."""
    import torch
    from safetensors.torch import save_file

    checkpoint = tmp_path / "checkpoint-5"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    state = {"state": '{"global_step": 5, "log_hist', "step": '{"global_step": "five"}'}.get(damage, '{"global_step": 5}')
    (checkpoint / "trainer_state.json").write_text(state)
    if damage != "weights":
        save_file({"w": torch.ones(4, 4)}, checkpoint / "model.safetensors")
    if damage == "shard":
        with open(checkpoint / "model.safetensors", "r+b") as f:
            f.truncate(f.seek(0, 2) - 10)
    return checkpoint


# --- rlplugs eval -----------------------------------------------------------------------------


def test_eval_model_path_that_does_not_exist(capsys, tmp_path):
    main_usage_error(capsys, "eval", "--env", "letters-test", "--model", "/nonexistent", "--out", str(tmp_path / "r"),
                     needles=("--model /nonexistent: no such directory",))
    assert not (tmp_path / "r").exists()  # refused before the report folder was made


def test_eval_model_whose_weights_were_cut_short(capsys, tmp_path):
    model = saved_checkpoint(tmp_path, "shard")
    main_usage_error(capsys, "eval", "--env", "count-test", "--model", str(model), "--out", str(tmp_path / "r"),
                     needles=("model.safetensors is damaged (", "save or download the model again"))
    assert not (tmp_path / "r").exists()


def test_eval_out_that_is_an_existing_file_is_refused_before_evaluating(plugin_env, tmp_path):
    existing = tmp_path / "report.md"
    existing.write_text("keep me")
    proc = run(plugin_env, "eval", "--env", "count-test", "--policy", "reference", "--out", str(existing))
    assert_usage_error(proc, f"--out {existing} is an existing file")
    assert existing.read_text() == "keep me"


def test_verbose_training_command_runs_as_its_fault_hint_says(capsys):
    """A training fault's hint says to rerun as `rlplugs -v grpo ...`; that was 'unrecognized arguments'."""
    main_usage_error(capsys, "-v", "grpo", "--env", "leters-test",
                     needles=("unknown environment 'leters-test'. Did you mean 'letters-test'",))


@pytest.mark.parametrize("flags, named", [
    (["--max_new_tokens", "3", "--no_thinking"], "--max_new_tokens, --thinking/--no_thinking"),  # in the report, not used
    (["--batch_size", "-5", "--seed", "3"], "--batch_size, --seed"),
    (["--tokenizer", "/tmp"], "--tokenizer"),
])  # fmt: skip
def test_eval_refuses_decoding_flags_for_the_reference_policy(capsys, tmp_path, flags, named):
    main_usage_error(capsys, "eval", "--env", "count-test", "--policy", "reference", *flags, "--out", str(tmp_path / "ev"),
                     needles=(f"{named} set how a --model decodes; the reference policy is no model",))
    assert not (tmp_path / "ev").exists()


def test_eval_out_that_cannot_be_written(capsys):
    main_usage_error(capsys, "eval", "--env", "count-test", "--policy", "reference", "--out", "/proc/rlplugs-report",
                     needles=("--out /proc/rlplugs-report: cannot write there",))


def test_eval_prm_that_does_not_exist(capsys, tiny_qwen35, tmp_path):
    main_usage_error(capsys, "eval", "--env", "count-test", "--model", str(tiny_qwen35), "--guidance", "best-of-n",
                     "--guidance_args", '{"prm": "/nonexistent/prm"}', "--out", str(tmp_path),
                     needles=("prm: '/nonexistent/prm' is not a directory", "rlplugs prm train"))


@pytest.mark.parametrize("flag, value, message", [
    ("--rows", "0", "--rows 0: give at least 1"),
    ("--samples", "0", "--samples 0: give at least 1"),  # named the protocol's samples_per_row, not the flag
    ("--render", "-1", "--render -1: give at least 0"),  # taken without a word
])  # fmt: skip
def test_eval_counts_out_of_range_are_refused(capsys, tmp_path, flag, value, message):
    main_usage_error(capsys, "eval", "--env", "count-test", "--policy", "reference", flag, value,
                     "--out", str(tmp_path / "ev"), needles=(message,))
    assert not (tmp_path / "ev").exists()


@pytest.mark.parametrize("args, message", [
    # a batch size below 1 was taken as 1 without a word
    ("eval --env count-test --batch_size 0 --out ev", "batch size 0: give at least 1 conversation per generate() call"),
    ("games collect --games wordle --batch-size 0 --out run", "batch size 0: give at least 1 conversation"),
    ("prm label --env count-test --batch_size 0 --out labels.jsonl", "batch size 0: give at least 1 conversation"),
    # a negative temperature was taken as greedy; no tokens failed inside generate, at the first call
    ("games collect --games wordle --temperature -1 --out run",
     "invalid 'sampling' options: temperature: Input should be greater than or equal to 0 (got -1.0)"),
    ("prm label --env count-test --max_new_tokens 0 --out labels.jsonl", "max_new_tokens: Input should be greater than or equal to 1 (got 0)"),
])  # fmt: skip
def test_sampling_numbers_out_of_range_are_refused_before_the_model_loads(capsys, tiny_qwen35, tmp_path, monkeypatch,
                                                                          args, message):  # fmt: skip
    """Every command that generates builds its policy the same way, and the policy checks them first."""
    monkeypatch.chdir(tmp_path)
    line = main_usage_error(capsys, *args.split(), "--model", str(tiny_qwen35), needles=(message,))
    assert "cannot load" not in line  # the number is wrong, not the model
    assert not list(tmp_path.glob("**/*.json*"))  # no report, episodes or labels


@pytest.mark.parametrize("args", [
    "eval --env count-test --out out",
    "games collect --games wordle --out out",  # was "error: ValueError: Unrecognized model ..." and an empty out/
    "prm label --env count-test --out out/labels.jsonl",
])  # fmt: skip
def test_a_model_that_does_not_load_is_one_line_and_leaves_no_output_folder(capsys, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "unknown").mkdir()
    (tmp_path / "unknown" / "config.json").write_text("{}")  # a config transformers cannot place
    (tmp_path / "unknown" / "pytorch_model.bin").write_bytes(b"")
    main_usage_error(capsys, *args.split(), "--model", "unknown",
                     needles=("--model unknown: cannot load it (Unrecognized model in unknown.",))
    assert not (tmp_path / "out").exists()


def test_policy_numbers_out_of_range_are_value_errors_for_library_callers(tiny_qwen35):
    from rlplugs import HFPolicy

    with pytest.raises(ValueError, match=r"top_p: Input should be greater than 0 \(got 0\)"):
        HFPolicy(tiny_qwen35, top_p=0)


# --- rlplugs prm label: minutes of rollouts, so the model and the output are checked first ----------


@pytest.mark.parametrize("model, out, message", [
    ("/nonexistent", "labels.jsonl", "--model /nonexistent: no such directory"),
    (None, "/proc/rlplugs/labels.jsonl", "--out /proc/rlplugs/labels.jsonl: its folder /proc/rlplugs: cannot write there"),
    (None, ".", "--out . is a directory; give the file to write"),
])  # fmt: skip
def test_prm_label_checks_model_and_out_before_any_rollout(capsys, tiny_qwen35, tmp_path, monkeypatch, model, out, message):
    monkeypatch.chdir(tmp_path)
    main_usage_error(capsys, "prm", "label", "--env", "count-test", "--model", model or str(tiny_qwen35), "--out", out,
                     needles=(message,))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, message", [
    ("--rows 0", "--rows 0: give at least 1"),  # wrote an empty labels file
    ("--k 0", "--k 0: give at least 1"),  # these three failed after the model had loaded
    ("--candidates 0", "--candidates 0: give at least 1"),
    ("--chunk 0", "--chunk 0: give at least 1"),
    ("--temperature 0", "--temperature 0.0: monte_carlo samples candidates (and continuations)"),  # copies of one reply
    ("--finish greedy --k 2", "--k 2: a greedy finish plays every candidate out the same way; leave --k at 1"),
    ("--policy_reply", "--policy_reply puts the greedy reply first among the candidates; pass --finish greedy as well"),
    ("--method outcome --finish greedy", "--finish greedy and --policy_reply shape monte_carlo's candidates"),
    # a TypeError and a ZeroDivisionError once the model had loaded and the games were played
    ("--outcome {\"success\":\"x\"}", "--outcome {\"success\":\"x\"}: give a JSON object of component: weight"),
    ("--outcome {}", "--outcome {}: give a JSON object of component: weight (weights of at least 0, not all 0)"),
    ("--method outcome --k 3", "--k and --candidates shape monte_carlo's labels; --method outcome labels the played turns"),
])  # fmt: skip
def test_prm_label_refuses_counts_below_1_and_greedy_monte_carlo(capsys, tiny_qwen35, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    main_usage_error(capsys, "prm", "label", "--env", "count-test", "--model", str(tiny_qwen35), "--out", "labels.jsonl",
                     *args.split(), needles=(message,))
    assert list(tmp_path.iterdir()) == []


# --- rlplugs games: each option checked before a model plays ------------------------------------


@pytest.mark.parametrize("args, message", [
    ("collect --games wordl", "--games: unknown game 'wordl' (did you mean 'wordle'?)"),
    ("collect --games wordle --episodes 0", "--episodes 0: give at least 1"),
    ("collect --games wordle --seats single --seat critic", "--seat critic: none of wordle has that seat"),
    ("sft-data --runs . --out .", "--out . is a directory; give the file to write"),
    ("sft-data --runs /nonexistent --out won.jsonl", "no run directory /nonexistent"),
    ("sft-data --runs . --out won.jsonl", ".: no episode records in it; give the folder `rlplugs games collect --out` wrote"),
    ("score --runs .", ".: no episode records in it"),  # a table of n/a before
])  # fmt: skip
def test_games_commands_check_their_options_first(capsys, tiny_qwen35, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    model = ["--model", str(tiny_qwen35), "--out", "run"] if args.startswith("collect") else []
    main_usage_error(capsys, "games", *args.split(), *model, needles=(message,))
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_games_collect_model_that_does_not_exist(capsys, tmp_path):
    main_usage_error(capsys, "games", "collect", "--games", "wordle", "--model", "/nonexistent", "--out", str(tmp_path / "r"),
                     needles=("--model /nonexistent: no such directory",))
    assert not (tmp_path / "r").exists()


# --- rlplugs preflight --env matrl: file and service options are checked before any model loads --


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("band_gap_model", "/nonexistent/megnet", "band_gap_model: '/nonexistent/megnet': no such folder"),
        ("hull_reference", "/nonexistent/hull.json", "hull_reference: '/nonexistent/hull.json': no such file"),
        ("reference_csvs", ["/nonexistent/mp_20/train.csv"], "reference_csvs: '/nonexistent/mp_20/train.csv': cannot read"),
        ("prompt_csv", "/nonexistent/mp_20/train.csv", "prompt_csv: '/nonexistent/mp_20/train.csv': cannot read"),
        ("judge_url", "http://127.0.0.1:9", "judge_url: http://127.0.0.1:9: no judge service answered within 30 s"),
    ],
)
def test_matrl_preflight_refuses_a_missing_file_or_service_at_once(option, value, message):
    proc = run(None, "preflight", "--env", "matrl", "--env_args", json.dumps({option: value}))
    line = assert_usage_error(proc, "invalid 'matrl' options", message)
    assert "give" in line or "start" in line  # and says what to do


@pytest.mark.parametrize(
    "options, message",
    [({"max_turns": 0}, "max_turns: Input should be greater than or equal to 1 (got 0)"),
     ({"fmax": -0.1}, "fmax: Input should be greater than 0 (got -0.1)"),
     # attempts 0 left the retry loop untried: an AssertionError reached the user
     ({"retry": {"attempts": 0}}, "retry.attempts: Input should be greater than or equal to 1 (got 0)"),
     # inf passed gt=0; NaN passes every bound (a comparison with it is False)
     ({"fmax": "inf"}, "fmax: Input should be a finite number (got 'inf')"),
     ({"retry": {"timeout_s": "NaN"}}, "retry.timeout_s: Input should be a finite number (got 'NaN')"),
     # taken, then torch's device list errored every episode
     ({"device": "tpu"}, "device: 'tpu' is not a torch device; give cpu, cuda or cuda:N")],
)
def test_matrl_preflight_refuses_a_number_out_of_range(options, message):
    proc = run(None, "preflight", "--env", "matrl", "--env_args", json.dumps(options))
    assert_usage_error(proc, "invalid 'matrl' options", message)


def test_matrl_serve_judges_on_a_port_it_cannot_take(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        main_usage_error(capsys, "matrl", "serve-judges", "--port", str(port),
                         needles=(f"cannot listen on 127.0.0.1:{port} (Address already in use); pick another --port",))
    main_usage_error(capsys, "matrl", "serve-judges", "--port", "99999",
                     needles=("cannot listen on 127.0.0.1:99999 (bind(): port must be 0-65535", "pick another --port"))


def test_matrl_prompt_csv_without_a_cif_column(tmp_path):
    csv = tmp_path / "formulas.csv"
    csv.write_text("material_id,pretty_formula\nmp-1,NaCl\n")
    proc = run(None, "preflight", "--env", "matrl", "--env_args", json.dumps({"prompt_csv": str(csv)}))
    assert_usage_error(proc, "prompt_csv:", "no 'cif' column (columns: material_id, pretty_formula)")


@pytest.mark.parametrize(
    "args, message",
    [(["--split", "nosuch"], "env 'matrl' has no split 'nosuch'"),
     (["--env_args", '{"eval_rowz": 2}'], "'eval_rowz' (did you mean 'eval_rows'"),
     (["--model", "/nonexistent"], "--model /nonexistent: no such directory"),
     (["--rollouts", "0"], "--rollouts 0: give at least 1"),  # named the protocol's samples_per_row
     (["--render", "-1"], "--render -1: give at least 0"),
     # overwritten by the --judge default, and the report said chgnet
     (["--env_args", '{"mlip": "chgnet"}'], "--env_args mlip: sun-eval sets them from --judge and --track; use those flags")],
)
def test_matrl_sun_eval_checks_its_inputs_as_rlplugs_eval_does(capsys, tmp_path, args, message):
    """``sun-eval`` is ``rlplugs eval`` with matrl's options (one function, ``rlplugs.run_eval``):
    its inputs fail the same way, before any model loads or any report folder is made."""
    who = [] if "--model" in args else ["--policy", "reference"]
    main_usage_error(capsys, "matrl", "sun-eval", *who, *args, "--out", str(tmp_path / "sun"), needles=(message,))
    assert not (tmp_path / "sun").exists()


# --- rlplugs ckpt -----------------------------------------------------------------------------


@pytest.mark.parametrize("damage, message", [
    ("state", "trainer_state.json is damaged (JSONDecodeError"), ("step", "global_step is 'five', not a step count"),
    ("weights", "no model weights"), ("shard", "checkpoint-5: model.safetensors is damaged ("),
])  # fmt: skip
def test_ckpt_strip_optimizer_refuses_a_checkpoint_no_trainer_could_resume(capsys, tmp_path, damage, message):
    checkpoint = saved_checkpoint(tmp_path, damage)
    main_usage_error(capsys, "ckpt", "strip-optimizer", str(checkpoint), needles=(message,))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-5"]  # nothing written


def test_ckpt_strip_optimizer_to_a_folder_that_cannot_be_written(capsys, tmp_path):
    checkpoint = saved_checkpoint(tmp_path)
    main_usage_error(capsys, "ckpt", "strip-optimizer", str(checkpoint), "--out", "/proc/x",
                     needles=("cannot write /proc/x", "pass --out in a writable folder"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-5"]


def test_ckpt_segments_on_a_corrupt_segments_file(capsys, tmp_path):
    (tmp_path / "rlplugs_segments.json").write_text('[{"start_step": 0, "optimizer_carr')
    main_usage_error(capsys, "ckpt", "segments", str(tmp_path),
                     needles=("rlplugs_segments.json: not a segments file", "move it away"))


@pytest.mark.parametrize(
    "args, message",
    [(["--begin", "-3"], "cannot begin at step -3"),
     (["--end", "3", "--begin", "5"], "--begin 5 is after --end 3"),
     # each printed the chain and was ignored
     (["--fresh-optimizer", "--resumed-from", "checkpoint-3"], "describe a new segment: pass --begin STEP"),
     (["--reason", "guard"], "--reason says why a segment ended: pass --end STEP")],
)
def test_ckpt_segments_refuses_impossible_steps(capsys, tmp_path, args, message):
    assert cli.main(["ckpt", "segments", str(tmp_path), "--begin", "0"]) == 0  # one open segment
    before = (tmp_path / "rlplugs_segments.json").read_text()
    main_usage_error(capsys, "ckpt", "segments", str(tmp_path), *args, needles=(message,))
    assert (tmp_path / "rlplugs_segments.json").read_text() == before


def test_ckpt_segments_records_only_into_a_run_folder_that_is_there(capsys, tmp_path):
    """A typo in the folder made a new one, and a new chain in it."""
    main_usage_error(capsys, "ckpt", "segments", str(tmp_path / "rnu"), "--begin", "0", "--fresh-optimizer",
                     needles=(f"{tmp_path / 'rnu'}: no such run folder; give the run's --output_dir",))
    assert list(tmp_path.iterdir()) == []


def test_ckpt_repair_optimizer_on_metadata_that_does_not_load(capsys, tmp_path):
    (tmp_path / ".metadata").write_bytes(b"garbage\n")  # was "ValueError: invalid literal for int() ..."
    line = main_usage_error(capsys, "ckpt", "repair-optimizer", str(tmp_path), needles=(".metadata does not load (",))
    assert "the checkpoint is damaged" in line
    assert (tmp_path / ".metadata").read_bytes() == b"garbage\n"


def test_ckpt_fix_dtype_on_a_config_that_is_a_list(capsys, tmp_path):
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2, dtype=torch.float32)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text("[]")
    main_usage_error(capsys, "ckpt", "fix-dtype", str(tmp_path),
                     needles=("config.json: a model config is a JSON object, this file holds a list",))
    assert (tmp_path / "config.json").read_text() == "[]"


# --- rlplugs list -----------------------------------------------------------------------------


@pytest.fixture
def extra_plugin_env(plugin_env, tmp_path) -> dict[str, str]:
    """An installed-looking distribution whose plugins need a module from one of its extras: one
    imports it when it loads, one registers an env that imports it when it is built."""
    (tmp_path / "extra_needing_plugin.py").write_text("import rlplugs_absent_module  # noqa: F401\n")
    (tmp_path / "extra_env_plugin.py").write_text(
        "import rlplugs\nfrom rlplugs.registry import Registration\n\n"
        "def build(options=None):\n    import rlplugs_absent_module  # noqa: F401\n\n"
        "@rlplugs.hookimpl\ndef rlplugs_register_environments():\n    return [Registration('extra-env', build)]\n"
    )
    info = tmp_path / "rlplugs_extra_test-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: rlplugs-extra-test\nVersion: 0.1\nProvides-Extra: fancy\n"
        'Requires-Dist: rlplugs-absent-module>=1; extra == "fancy"\n'
    )
    (info / "entry_points.txt").write_text("[rlplugs]\nextra-test = extra_needing_plugin\nextra-env = extra_env_plugin\n")
    return {**plugin_env, "PYTHONPATH": f"{tmp_path}:{plugin_env['PYTHONPATH']}", "COLUMNS": "400"}  # no wrapping


def test_list_names_the_extra_that_installs_a_missing_module(extra_plugin_env):
    proc = run(extra_plugin_env, "list")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {line.split("│")[1].strip(): line for line in proc.stdout.splitlines() if line.count("│") == 4}
    assert ("ModuleNotFoundError: No module named 'rlplugs_absent_module'; install it with: "
            'pip install "rlplugs-extra-test[fancy]"') in rows["extra-test"]
    assert "pip install" not in rows["broken-test"]  # an error that no extra fixes gets no hint


def test_env_that_needs_a_missing_extra_says_which(extra_plugin_env):
    proc = run(extra_plugin_env, "preflight", "--env", "extra-env")
    assert_usage_error(proc, "env 'extra-env' needs a module that is not installed",
                       'install it with: pip install "rlplugs-extra-test[fancy]"')
