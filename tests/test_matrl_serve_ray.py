"""The judges on Ray Serve as users start them (``rlplugs matrl serve-judges --ray``): two
replicas on CPU, one killed mid-batch; every request is still answered (the client retries what
the dead replica dropped, Serve routes it to the live one) and Serve replaces the dead replica."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from test_matrl_service import cells, free_port, wait_until_up

pytest.importorskip("ray.serve")
pytestmark = pytest.mark.slow

RLPLUGS = str(Path(sys.executable).with_name("rlplugs"))


def replica_pids(url: str, seconds: float) -> set[int]:
    """The replica pids that answer ``/health`` within ``seconds`` (stops at two). Serve routes to
    the first replica as soon as it runs, while the second may still be loading its model on a
    loaded machine: 40 quick tries saw one pid in CI."""
    seen: set[int] = set()
    deadline = time.monotonic() + seconds
    while len(seen) < 2 and time.monotonic() < deadline:
        seen.add(httpx.get(url + "/health", timeout=30).json()["pid"])
        time.sleep(0.05)
    return seen


def wait_until_busy(pid: int, seconds: float = 120) -> None:
    """Return once ``pid`` burns CPU (over half a core for 0.5 s), i.e. a model call is running in
    it; a fixed sleep raced the routing of the first batches on a loaded machine."""
    process, deadline = psutil.Process(pid), time.monotonic() + seconds
    while time.monotonic() < deadline:
        before = sum(process.cpu_times()[:2])
        time.sleep(0.5)
        if sum(process.cpu_times()[:2]) - before > 0.25:
            return
    raise AssertionError(f"replica {pid} never started relaxing")


def test_two_replicas_one_killed_mid_batch_lose_nothing(plugin_env):
    from matrl.judge_client import HttpJudges

    port = free_port()
    process = subprocess.Popen(
        [RLPLUGS, "matrl", "serve-judges", "--ray", "--replicas", "2", "--cpus_per_replica", "0.5", "--port", str(port),
         "--max_batch_size", "8", "--batch_window_s", "0.2"],
        env={**plugin_env, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, process, seconds=400)
        pids = replica_pids(url, seconds=300)
        assert len(pids) == 2, pids
        judges = HttpJudges(url, 120, attempts=6, backoff_s=0.5, startup_wait_s=300)
        # 48 requests through 16 client threads: a finished request is followed by the next, so
        # both replicas hold requests until the stream drains. 16 sent at once made one wave; the
        # victim could answer its share in the moment between "busy" and the kill (CI saw 0 retries).
        requests = [cells(4 * i, 4, step=0.003) for i in range(48)]  # distinct: the service caches
        with ThreadPoolExecutor(16) as pool:
            futures = [pool.submit(judges.relax, r) for r in requests]
            victim = min(pids)
            wait_until_busy(victim)  # a batch is relaxing there: the kill drops requests in flight
            done_before_kill = sum(f.done() for f in futures)
            os.kill(victim, signal.SIGKILL)
            answers = [f.result() for f in futures]
        assert done_before_kill < 32, f"the stream had nearly drained ({done_before_kill} of 48 answered) before the kill"
        assert [len(a) for a in answers] == [4] * 48
        assert all(r.energy_per_atom < 0 for a in answers for r in a)
        assert judges.stats["retries"] > 0, judges.stats  # the kill did hit requests in flight
        deadline = time.monotonic() + 180
        while not (replica_pids(url, seconds=1) - pids) and time.monotonic() < deadline:
            time.sleep(2)
        assert replica_pids(url, seconds=5) - pids, "Serve did not replace the killed replica"
    finally:
        process.send_signal(signal.SIGINT)  # removes the app and stops the Ray cluster it started
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
