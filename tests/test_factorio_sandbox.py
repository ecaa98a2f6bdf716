"""The factorio-build sandbox: a hostile corpus through both layers, and the process layer alone.

Every hostile program is scored in one batch through a real pool of zygotes, each forking a job
process per program (so the corpus runs in parallel), with short limits; each must get its documented outcome and a reason
that says why, the host must be untouched, and the pool must go on scoring real programs.
"""

from __future__ import annotations

import socket
import textwrap

import pytest

from factorio_build import reference, rows
from factorio_build.config import FactorioBuildConfig
from factorio_build.pool import JobFailure, PoolFailure, SandboxPool
from factorio_build.scoring import VALIDITY, ProgramScorer
from rlplugs.rewards import Sample

LIMITS = dict(workers=2, program_cpu_limit_s=0.3, job_timeout_s=30.0, cpu_limit_s=2, memory_limit_mb=1024)


def fenced(body: str) -> str:
    return f"```python\n{textwrap.dedent(body).strip()}\n```"


def program(body: str) -> str:
    """A completion whose build() runs ``body``."""
    return fenced("def build(world):\n" + textwrap.indent(textwrap.dedent(body).strip(), "    "))


@pytest.fixture(scope="module")
def scorer():
    s = ProgramScorer(FactorioBuildConfig(**LIMITS))
    yield s
    s.pool.close()


@pytest.fixture(scope="module")
def row():
    spec = rows.draw_rows("construct_smelting_line", "holdout", 1, 8)[0]
    return {"task": spec.task, "split": spec.split, "seeds": list(spec.seeds), "row_id": spec.row_id}


def hostile_corpus(sentinel: str, port: int) -> list[tuple[str, str, str, str]]:
    """(name, completion, expected outcome, a word the reason must contain)."""
    refused = [
        ("import_os", fenced(f"import os\ndef build(world):\n    os.system('touch {sentinel}')"), "import"),
        ("from_import", fenced("from os import system\ndef build(world):\n    system('id')"), "import"),
        ("import_in_body", program("import subprocess\nsubprocess.run(['id'])"), "import"),
        ("dunder_import", program("__import__('os').fork()"), "__import__"),
        ("open_file", program(f"open('{sentinel}', 'w').write('x')"), "open"),
        ("eval", program("eval('1+1')"), "eval"),
        ("exec", program("exec('import os')"), "exec"),
        ("compile", program("compile('1', 'x', 'eval')"), "compile"),
        ("getattr", program("getattr(world, '_backend')"), "getattr"),
        ("type_call", program("type(world)"), "type"),
        ("object", program("object.__subclasses__()"), "object"),
        ("subclasses", program("().__class__.__bases__[0].__subclasses__()"), "__class__"),
        ("mro", program("x = [].__class__.__mro__"), "__class__"),
        ("globals_attr", program("f = build.__globals__"), "__globals__"),
        ("globals_call", program("g = globals()"), "globals"),
        ("vars", program("v = vars(world)"), "vars"),
        ("dir", program("d = dir(world)"), "dir"),
        ("gen_frame", program("g = (x for x in [1])\nf = g.gi_frame"), "gi_frame"),
        ("code_object", program("c = build.__code__"), "__code__"),
        ("func_closure", program("c = build.__closure__"), "__closure__"),
        ("private_world", program("world._backend.step([0] * 6)"), "_backend"),
        ("private_env", program("world._env.rl"), "_env"),
        ("undeclared_world_attr", program("n = world.decisions"), "not part of the API"),
        ("format_escape", program("s = '{0.__class__}'.format(world)"), "format"),
        ("fstring_spec", program("s = f'{world.me():>10}'"), "format spec"),
        ("class_def", fenced("class A:\n    pass\ndef build(world):\n    pass"), "class"),
        ("try_except", program("try:\n    world.wait()\nexcept Exception:\n    pass"), "try"),
        ("with_stmt", program(f"with open('{sentinel}') as f:\n    pass"), "with"),
        ("raise_stmt", program("raise SystemExit(1)"), "raise"),
        ("global_stmt", program("global x\nx = 1"), "global"),
        ("yield_frame", program("yield world"), "yield"),
        ("lambda_dunder", program("f = lambda: world.__dict__"), "__dict__"),
        ("breakpoint", program("breakpoint()"), "breakpoint"),
        ("input", program("input()"), "input"),
        ("exit", program("exit(0)"), "exit"),
        ("memoryview", program("memoryview(bytearray(10))"), "memoryview"),
        ("print_flood", program("while True:\n    print('x' * 100000)"), "print"),
        ("star_kwargs", fenced("def build(world, **kw):\n    pass"), "build must take"),
        ("decorator", fenced("def deco(f):\n    return f\n@deco\ndef build(world):\n    pass"), "decorator"),
        ("top_level_code", fenced("x = world\ndef build(world):\n    pass"), "top level"),
        ("no_build", fenced("def builder(world):\n    pass\n# def build"), "build"),
        ("syntax_error", fenced("def build(world):\n    return )"), "syntax"),
        ("huge_literal", program("s = '" + "x" * 5000 + "'"), "string literal"),
        ("huge_int", program("n = 10000000000000000000"), "integer literal"),
        ("too_long", fenced("def build(world):\n" + "    world.wait()\n" * 400), "lines"),
        ("huge_completion", fenced("def build(world):\n    x = 1\n" + "#" * 30000), "characters"),
        ("async_def", fenced("async def build(world):\n    pass"), "async"),
        ("socket_name", program(f"socket.create_connection(('127.0.0.1', {port}))"), "socket"),
    ]
    corpus = [(name, text, "sandbox_violation", why) for name, text, why in refused]
    corpus += [
        ("no_code", "I would build a drill next to the furnace.", "no_code_block", "no ```python"),
        ("wrong_language", "```js\nfunction build(world) {}\n```", "no_code_block", "no ```python"),
        ("infinite_loop", program("while True:\n    pass"), "timeout", "time limit"),
        ("query_loop", program("while True:\n    world.entities()"), "timeout", "time limit"),
        ("busy_helper", fenced("def spin(n):\n    while n >= 0:\n        n = n + 1\ndef build(world):\n    spin(0)"),
         "timeout", "time limit"),
        ("memory_bomb", program("x = [0] * (10 ** 11)"), "killed", "memory"),
        ("string_bomb", program("s = 'a' * (10 ** 11)"), "killed", "memory"),
        ("c_level_spin", program("n = sum(range(10 ** 11))"), "killed", "SIGXCPU"),
        ("deep_recursion", fenced("def down(n):\n    return down(n + 1)\ndef build(world):\n    down(0)"),
         "crash", "RecursionError: maximum recursion depth exceeded (program line 2: return down(n + 1))"),
        ("division", program("return 1 / 0"), "crash", "ZeroDivisionError: division by zero (program line 2: return 1 / 0)"),
        ("bad_key", program("return world.inventory()['uranium'] + {}['x']"), "crash", "KeyError"),
        ("lost_token", program("for _ in range('NESW'):\n    world.wait()"), "crash",  # session 27's broken policy
         "TypeError: 'str' object cannot be interpreted as an integer (program line 2: for _ in range('NESW'):)"),
        ("budget_burner", program("while True:\n    world.wait()"), "ok", "0/8"),
        ("garbage_actions", program("world.place('stone-furnace', 10 ** 6, 0, 'Q')\nworld.move('up')"), "ok", "0/8"),
    ]
    return corpus


def test_hostile_corpus_gets_documented_scores_and_pool_keeps_serving(scorer, row, tmp_path):
    sentinel = tmp_path / "sentinel"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    corpus = hostile_corpus(str(sentinel), listener.getsockname()[1])
    assert len(corpus) >= 50

    verdicts = scorer.verdicts([Sample(prompt=None, completion=text, row=row) for _, text, _, _ in corpus])

    wrong = []
    for (name, _, outcome, why), verdict in zip(corpus, verdicts):
        if verdict.outcome != outcome or why.lower() not in verdict.reason.lower():
            wrong.append((name, verdict.outcome, verdict.reason))
        scores = verdict.scores()
        assert scores["validity"].value == VALIDITY[outcome]
        assert scores["success"].scored and scores["validity"].reason
    assert not wrong, wrong
    assert not sentinel.exists()
    with pytest.raises(BlockingIOError):
        listener.accept()  # nobody connected
    listener.close()

    after = scorer.verdicts([Sample(prompt=None, completion=reference.reference_policy([]), row=row)])[0]
    assert (after.outcome, after.success) == ("ok", 1.0)


def test_a_batchs_log_names_its_most_frequent_failures_once_across_lines(scorer, row, caplog):
    """A training log says what a batch's failures were, not only how many: the same refused name on
    different lines counts as one failure (session 23's batch of 226 refusals could not be traced)."""
    refused = [program("world.wait()\n" * k + "n = world.decisions") for k in (0, 1, 2)]
    texts = [*refused, "no program here", reference.reference_policy([])]
    with caplog.at_level("INFO", logger="factorio_build.scoring"):
        verdicts = scorer.verdicts([Sample(prompt=None, completion=t, row=row) for t in texts])
    assert [v.outcome for v in verdicts] == ["sandbox_violation"] * 3 + ["no_code_block", "ok"]
    assert len({v.reason for v in verdicts[:3]}) == 3  # the line numbers differ
    [line] = [r.getMessage() for r in caplog.records if "most frequent failures" in r.getMessage()]
    assert line.startswith("factorio-build most frequent failures: 3 x sandbox_violation: sandbox: line #: world.decisions")
    assert "; 1 x no_code_block: " in line and "ok:" not in line


def test_slow_but_legal_program_is_scored_normally(scorer, row):
    slow = reference.program().replace(
        'def build(world):\n', 'def build(world):\n    total = sum(i * i for i in range(200000))\n', 1
    )
    verdict = scorer.verdicts([Sample(prompt=None, completion=reference.as_completion(slow), row=row)])[0]
    assert (verdict.outcome, verdict.success) == ("ok", 1.0)


def test_program_past_its_cpu_seconds_is_killed_and_next_program_scored(row):
    scorer = ProgramScorer(FactorioBuildConfig(**{**LIMITS, "workers": 1, "cpu_limit_s": 1}))
    try:
        killer = scorer.verdicts([Sample(prompt=None, completion=program("n = sum(range(10 ** 11))"), row=row)])[0]
        assert killer.outcome == "killed" and "SIGXCPU" in killer.reason
        ok = scorer.verdicts([Sample(prompt=None, completion=reference.reference_policy([]), row=row)])[0]
        assert (ok.outcome, ok.success) == ("ok", 1.0)
    finally:
        scorer.pool.close()


def test_backstop_shorter_than_the_cpu_allowance_is_refused():
    with pytest.raises(ValueError, match="job_timeout_s"):
        FactorioBuildConfig(**{**LIMITS, "job_timeout_s": 1.5, "cpu_limit_s": 60})


# --- the process layer on its own: raw, unchecked code in a locked-down job process -----------


@pytest.fixture(scope="module")
def probe_pool():
    pool = SandboxPool(1, job_timeout_s=20.0, job="factorio_build.zygote:isolation_probe")
    yield pool
    pool.close()


def probe(pool: SandboxPool, code: str, cpu_limit_s: int = 5):
    payload = {"code": textwrap.dedent(code), "memory_bytes": 1024 * 2**20, "cpu_limit_s": cpu_limit_s, "job_timeout_s": 20.0}
    return pool.run([payload])[0]


def test_process_layer_blocks_fork_threads_files_and_network(probe_pool, tmp_path):
    sentinel = tmp_path / "sentinel"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    attempts = {
        "fork": "import os\nos.fork()",
        "thread": "import threading\nthreading.Thread(target=print).start()",
        "subprocess": "import subprocess\nsubprocess.run(['true'])",
        "write": f"open({str(sentinel)!r}, 'w').write('x')",
        "socket": f"import socket\nsocket.create_connection(('127.0.0.1', {listener.getsockname()[1]}), timeout=2)",
    }
    for name, code in attempts.items():
        result = probe(probe_pool, code)
        assert isinstance(result, dict), (name, result)
        assert result["outcome"] != "ran", name
        assert result["isolation"]["RLIMIT_NPROC"] == "0" and result["isolation"]["RLIMIT_FSIZE"] == "0"
    assert not sentinel.exists()
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()
    descriptors = """
        import os
        def is_open(fd):
            try:
                os.fstat(fd)
                return True
            except OSError:
                return False
        raise SystemExit(str([fd for fd in range(4096) if is_open(fd)]))
    """
    # stdio and the report pipe: nothing inherited from the zygote (its pipe to the trainer) is open
    assert probe(probe_pool, descriptors)["outcome"] == "SystemExit: [0, 1, 2, 3]"
    death_signal = "import ctypes\nv = ctypes.c_int()\nctypes.CDLL(None).prctl(2, ctypes.byref(v))\nraise SystemExit(v.value)"
    assert probe(probe_pool, death_signal)["outcome"] == "SystemExit: 9"  # SIGKILL when the zygote dies


def test_process_layer_caps_memory_and_cpu(probe_pool):
    memory = probe(probe_pool, "x = bytearray(4 * 1024 ** 3)")
    assert memory["outcome"].startswith("MemoryError")
    spin = probe(probe_pool, "while True:\n    pass", cpu_limit_s=1)
    assert isinstance(spin, JobFailure) and "SIGXCPU" in spin.reason
    assert probe(probe_pool, "x = 1 + 1")["outcome"] == "ran"  # the zygote forks the next job as before


def test_pool_that_cannot_start_is_unscored_not_zero(row):
    broken = ProgramScorer(FactorioBuildConfig(**LIMITS), SandboxPool(1, 5.0, job="factorio_build.zygote:no_such_job"))
    scores = broken.score_batch([Sample(prompt=None, completion=reference.reference_policy([]), row=row)])[0]
    assert scores["success"].value is None and "pool" in scores["success"].reason
    assert scores["validity"].value is None
    with pytest.raises(PoolFailure):  # the pool was dropped; the next call tries afresh and says why
        broken.pool.run([{"source": "x"}])
