"""Judge service throughput, latency, start-up and memory: the old stdlib service vs the new
single-node service (FastAPI on uvicorn) vs Ray Serve (one replica), in one run.

    python benchmarks/judge_serving.py --requests 160 --out benchmarks/results/judge_serving.json
    python3 benchmarks/judge_serving.py --engines new@cuda,new@cpu --key h200   # on a GPU machine

Every engine runs as users start it, ``rlplugs matrl serve-judges`` in its own process (the old
one is that command at ``--old_ref``, the last commit with the ``http.server`` service, run from a
``git archive`` of it), with CHGNet on the CPU (``ENGINE@DEVICE`` picks another device: ``new@cuda``
serves with ``--device cuda``), 20 FIRE steps, fmax 0.1. A load process with that
engine's own client (``urllib`` for the old service, ``httpx`` for the new ones) then plays 8 and
32 concurrent env clients, each relaxing one distinct cell per request as an episode's
``evaluate_structure`` does (realistic 6-20 atom cells; none repeats, so no cache answers).
Reported per engine: requests/s and p50/p99 latency per client count, seconds from start to
ready, and the memory of the service's process tree (RSS, and USS: memory no other process shares).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from result_file import write_result

ROOT = Path(__file__).resolve().parents[1]
OLD_REF = "5780f5a"  # the last commit with the stdlib judge service and urllib client
CLIENTS = (8, 32)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def old_tree(ref: str, into: Path) -> dict[str, str]:
    """The package at ``ref`` (``git archive``), and the environment that runs it."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "plugins", "env_plugins"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return {"PYTHONPATH": os.pathsep.join([str(into / "plugins"), str(into / "env_plugins")])}


def tree_memory(pid: int) -> dict[str, float]:
    import psutil

    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)]
    rss = uss = 0
    for p in procs:
        try:
            info = p.memory_full_info()
            rss, uss = rss + info.rss, uss + info.uss
        except psutil.Error:
            pass
    return {"processes": len(procs), "rss_mb": round(rss / 2**20), "uss_mb": round(uss / 2**20)}


def start_engine(engine: str, device: str, env: dict[str, str], port: int) -> tuple[subprocess.Popen, float]:
    import httpx

    cli = "rlplugs.cli" if engine == "old" else "rlplugs.tools.cli"  # the old tree predates the tools/ package
    command = [sys.executable, "-m", cli, "matrl", "serve-judges", "--port", str(port), "--device", device,
               *(["--ray"] if engine == "ray" else [])]  # fmt: skip
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ready = "/health" if engine == "old" else "/ready"  # the old service answered only once loaded
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{engine} service exited: {process.stderr.read()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}{ready}", timeout=5).status_code == 200:
                return process, time.perf_counter() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.25)


def stop_engine(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def load(engine: str, url: str, clients: int, requests: int, offset: int) -> dict:
    """``clients`` threads relaxing distinct cells one request at a time (runs in its own process)."""
    if engine == "old":
        from matrl.service import HttpJudges  # the old client, from the old tree on PYTHONPATH
    else:
        from matrl.judge_client import HttpJudges
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from matrl_relax import cells  # after the client: it puts this checkout's env_plugins first on sys.path
    judges = HttpJudges(url, 600)
    pool = cells(offset + clients + requests, seed=offset)
    judges.relax(pool[offset : offset + 1])  # one warm-up relaxation (first forward pass)
    work = iter(range(offset + clients, offset + clients + requests))
    lock = threading.Lock()
    latencies: list[float] = []
    errors: list[str] = []

    def client() -> None:
        while True:
            with lock:
                i = next(work, None)
            if i is None:
                return
            t = time.perf_counter()
            try:
                judges.relax([pool[i]])
                with lock:
                    latencies.append(time.perf_counter() - t)
            except Exception as exc:  # noqa: BLE001 - counted, the run goes on
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    latencies.sort()

    def pct(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3) if latencies else float("nan")

    return {"clients": clients, "requests": requests, "answered": len(latencies), "errors": len(errors),
            "error_examples": errors[:3], "wall_s": round(wall, 2), "requests_per_s": round(len(latencies) / wall, 2),
            "p50_s": pct(0.50), "p99_s": pct(0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=160, help="timed requests per engine and client count")
    parser.add_argument("--engines", default="old,new,ray", help="ENGINE or ENGINE@DEVICE (CHGNet's device; cpu)")
    parser.add_argument("--old_ref", default=OLD_REF)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/judge_serving.json"))
    parser.add_argument("--key", help="write the figures under this key of --out, keeping the rest of the file")
    parser.add_argument("--dedicated_machine", action="store_true", help="the run had the machine to itself")
    parser.add_argument("--load", nargs=5, metavar=("ENGINE", "URL", "CLIENTS", "REQUESTS", "OFFSET"),
                        help=argparse.SUPPRESS)  # internal: one load run, JSON on stdout
    args = parser.parse_args()
    if args.load:
        engine, url, clients, requests, offset = args.load
        print(json.dumps(load(engine, url, int(clients), int(requests), int(offset))))
        return

    base_env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    results: dict = {"engines": {}}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for k, name in enumerate(args.engines.split(",")):
            engine, _, device = name.partition("@")
            env = {**base_env, **(old_tree(args.old_ref, Path(tmp)) if engine == "old" else {})}
            port = free_port()
            print(f"{name}: starting", file=sys.stderr, flush=True)
            process, startup = start_engine(engine, device or "cpu", env, port)
            runs = []
            try:
                for j, clients in enumerate(CLIENTS):
                    offset = (k * len(CLIENTS) + j) * (args.requests + 64)
                    out = subprocess.run([sys.executable, __file__, "--load", engine, f"http://127.0.0.1:{port}",
                                          str(clients), str(args.requests), str(offset)],
                                         env=env, capture_output=True, text=True, check=True)
                    runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
                    print(f"{name}: {runs[-1]}", file=sys.stderr, flush=True)
                memory = tree_memory(process.pid)
            finally:
                stop_engine(process)
            results["engines"][name] = {"startup_to_ready_s": round(startup, 1), "memory_after_load": memory,
                                        "runs": runs}
    for label, faster, slower in (("new_over_old", "new", "old"), ("cuda_over_cpu", "new@cuda", "new@cpu")):
        if faster in results["engines"] and slower in results["engines"]:
            results[f"{label}_requests_per_s"] = {
                str(c): round(f["requests_per_s"] / s["requests_per_s"], 3)
                for c, s, f in zip(CLIENTS, results["engines"][slower]["runs"], results["engines"][faster]["runs"])}
    results.update({
        "what": "CHGNet relaxations (20 FIRE steps, fmax 0.1, one torch thread; on the CPU unless the engine names "
                "a device: ENGINE@DEVICE) of distinct 6-20 atom cells, one cell per request, by 8 and 32 concurrent "
                "env clients; engines started with `rlplugs matrl serve-judges` (old: that command at old_ref)",
        "old_ref": args.old_ref,
    })
    write_result(args.out, results, load_before[0], key=args.key, shared=not args.dedicated_machine)


if __name__ == "__main__":
    main()
