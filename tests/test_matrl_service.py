"""The judge service as users run it (``rlplugs matrl serve-judges`` in its own process), reached
through the env's client, under the faults issue 14 found: truncated and garbled replies, a bad
cell batched with good ones, a service that is not up yet. Plus its health, readiness and metrics."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from pymatgen.core import Lattice, Structure

from fault_proxy import FaultProxy
from matrl.judges import JudgeUnavailable
from matrl.plugin import MatrlConfig, build_env
from matrl.policy import PrototypePolicy
from matrl.prototypes import binary_prototypes
from matrl.judge_client import HttpJudges
from matrl.tasks import task_row
from rlplugs.episode import play

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RLPLUGS = str(Path(sys.executable).with_name("rlplugs"))
ISOLATED_ATOM = Structure(Lattice.cubic(30.0), ["Na"], [[0, 0, 0]])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, process: subprocess.Popen, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"serve-judges exited: {process.stderr.read()}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"serve-judges did not come up at {url}")


@pytest.fixture(scope="module")
def service_url(plugin_env):
    """``rlplugs matrl serve-judges`` in a subprocess, batching requests that arrive within 0.3 s."""
    port = free_port()
    env = {**plugin_env, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([RLPLUGS, "matrl", "serve-judges", "--port", str(port),
                                "--batch_window_s", "0.3"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(30)


def cells(first: int, n: int, step: float = 0.01) -> list[Structure]:
    """``n`` distinct good cells (rock-salt NaCl at volumes growing by ``step``), none cached by the service."""
    nacl = dict(binary_prototypes("Na", "Cl"))["rocksalt"]
    out = []
    for k in range(first, first + n):
        cell = nacl.copy()
        cell.scale_lattice(nacl.volume * (1 + step * k))
        out.append(cell)
    return out


def episodes_rows(config: MatrlConfig, kinds: list[tuple[str, str]]) -> tuple:
    spec = build_env(config)
    system = spec.dataset("validation")[0]["prompt"][0]
    rows = [{**(r := task_row(k, c)), "prompt": [system, {"role": "user", "content": r["request"]}], "task_id": f"t{i}"}
            for i, (k, c) in enumerate(kinds)]
    return spec, rows


def test_truncated_and_garbled_replies_are_retried_and_no_episode_is_lost(service_url):
    proxy = FaultProxy(service_url, rate=0.3, faults=("truncate", "garble"), seed=4).start()
    try:
        config = MatrlConfig(judge_url=proxy.url, elastic_judge=False,
                             retry={"attempts": 8, "backoff_s": 0.01, "timeout_s": 120})
        spec, rows = episodes_rows(config, [("formula", "NaCl"), ("formula", "MgO"), ("chemsys", "Li-F"),
                                            ("formula", "KBr"), ("chemsys", "Ca-O"), ("formula", "LiCl")])
        episodes = [play(spec.episodes(row), PrototypePolicy()) for row in rows]
    finally:
        proxy.stop()
    assert proxy.counts["truncate"] > 0 and proxy.counts["garble"] > 0, proxy.counts
    for ep in episodes:
        assert ep.finish_reason == "submitted"
        scores = ep.scores()
        assert scores["valid"].value == 1.0 and scores["stable"].scored, scores  # relaxed and judged


def test_a_cell_the_model_cannot_score_fails_only_its_own_request_in_a_batch(service_url):
    judges = HttpJudges(service_url, 120)
    good = cells(0, 7)

    def relax(structure):
        try:
            return judges.relax([structure])[0]
        except JudgeUnavailable as exc:
            return exc

    with ThreadPoolExecutor(8) as pool:  # all eight arrive within the service's 0.3 s batch window
        bad, *answers = list(pool.map(relax, [ISOLATED_ATOM, *good]))
    assert all(not isinstance(a, Exception) and a.energy_per_atom < 0 for a in answers), answers
    assert isinstance(bad, JudgeUnavailable) and "400" in str(bad) and "isolated atom" in str(bad)


def test_the_first_episode_waits_for_a_service_that_is_not_up_yet(service_url):
    port = free_port()  # nothing listens here yet: connections are refused
    proxies = []
    threading.Timer(3.0, lambda: proxies.append(FaultProxy(service_url).start(port))).start()
    config = MatrlConfig(judge_url=f"http://127.0.0.1:{port}", elastic_judge=False,
                         retry={"attempts": 3, "backoff_s": 0.01, "timeout_s": 120})
    spec, (row,) = episodes_rows(config, [("formula", "NaBr")])
    try:
        episode = play(spec.episodes(row), PrototypePolicy())
    finally:
        for proxy in proxies:
            proxy.stop()
    assert episode.finish_reason == "submitted" and episode.scores()["stable"].scored


def test_health_readiness_and_prometheus_metrics(service_url):
    HttpJudges(service_url, 120).relax(cells(20, 2))
    assert httpx.get(service_url + "/health").json()["alive"] is True
    ready = httpx.get(service_url + "/ready").json()
    assert ready["ready"] and ready["mlip"] == "chgnet" and ready["scale"] == "mp2020-compatible"
    metrics = httpx.get(service_url + "/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    for line in ('matrl_judge_requests_total{route="/relax",status="200"}', 'matrl_judge_batch_size_count{route="/relax"}',
                 'matrl_judge_request_seconds_bucket{le="0.5",route="/relax"}'):
        assert line in text, line
    assert httpx.post(service_url + "/relax", content=b"{not json").status_code == 400
    assert 'matrl_judge_errors_total{kind="400",route="/relax"}' in httpx.get(service_url + "/metrics").text


@pytest.mark.parametrize("flags, shown", [
    # found once the service had started and CHGNet had loaded, and said twice
    (["--band_gap_model", "{tmp}"], "invalid 'serve-judges' options: band_gap_model: '{tmp}': no model.json or state.pt in it; give a MatGL-format MEGNet folder"),
    # pydantic's 13-line report of four errors
    (["--relax_steps", "-3", "--max_batch_size", "0"], "invalid 'serve-judges' options: relax_steps: Input should be greater than or equal to 1 (got -3); "
                                                        "max_batch_size: Input should be greater than or equal to 1 (got 0)"),
    (["--device", "banana"], "invalid 'serve-judges' options: device: 'banana' is not a torch device; give cpu, cuda or cuda:N"),
    # a plain local server started, and --detach did not return
    (["--replicas", "4", "--detach"], "--replicas, --detach: Ray Serve options; pass --ray as well"),
])  # fmt: skip
def test_serve_judges_refuses_its_flags_in_one_line_before_it_starts(plugin_env, tmp_path, flags, shown):
    flags = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    result = subprocess.run([RLPLUGS, "matrl", "serve-judges", "--port", str(free_port()), *flags],
                            env={**plugin_env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
    assert len(lines) == 1 and lines[0].startswith(f"error: {shown.replace('{tmp}', str(tmp_path))}"), lines
