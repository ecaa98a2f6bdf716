"""Judges as services: retries and unscored accounting under injected faults, preflight that runs
real judges as shipped and fails naming the switch of a dead one, and energies that refuse to mix
scales."""

import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fault_proxy import FaultProxy

from matrl.datafiles import MEGNET_BANDGAP, MP_ELEMENTAL_REFS
from matrl.hull import (MP2020_SCALE, HullEntry, HullReference, ScaleMismatchError, load_hull_reference,
                        load_mp_elemental_refs)
from matrl.judges import CHGNetJudge, EOSElasticJudge, MEGNetBandGapJudge
from matrl.plugin import MatrlConfig, build_env, judge_set
from matrl.policy import PrototypePolicy
from matrl.service import JudgeService, Judges
from matrl.tasks import task_row
from rlplugs.envspec import PreflightError
from rlplugs.episode import play

MEGNET = str(MEGNET_BANDGAP)
MP_ELEMENTS = MP_ELEMENTAL_REFS
RLPLUGS = shutil.which("rlplugs") or str(Path(sys.executable).with_name("rlplugs"))


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def flaky_service():
    """The judge service behind a proxy that will drop, reset, truncate or garble 10% of requests."""
    mlip = CHGNetJudge(steps=6)
    service = JudgeService(Judges(mlip, MEGNetBandGapJudge(MEGNET), EOSElasticJudge(mlip))).start()
    proxy = FaultProxy(service.url, faults=("drop", "reset", "truncate", "garble"), seed=3).start()
    yield proxy
    proxy.stop()
    service.stop()


def test_ten_percent_transient_faults_lose_no_episode(flaky_service):
    config = MatrlConfig(judge_url=flaky_service.url, retry={"attempts": 4, "backoff_s": 0.01, "timeout_s": 120})
    client = judge_set(config).mlip  # connected while the network is still clean
    flaky_service.rate = 0.1
    spec = build_env(config)
    system = spec.dataset("validation")[0]["prompt"][0]
    kinds = [("formula", "NaCl"), ("formula", "MgO"), ("chemsys", "Li-F"), ("band_gap", 2.0), ("bulk_modulus", 100.0),
             ("formula", "KBr"), ("chemsys", "Ca-O"), ("formula", "LiCl")] * 2
    rows = [{**(r := task_row(k, c)), "prompt": [system, {"role": "user", "content": r["request"]}], "task_id": f"f{i}"}
            for i, (k, c) in enumerate(kinds)]
    with ThreadPoolExecutor(4) as pool:
        episodes = list(pool.map(lambda row: play(spec.episodes(row), PrototypePolicy()), rows))
    assert all(ep.done and ep.finish_reason == "submitted" for ep in episodes)
    faults = sum(n for kind, n in flaky_service.counts.items() if kind != "requests")
    assert faults > 0
    assert client.stats["retries"] + client.stats["gave_up"] == faults  # every fault retried or counted
    for ep in episodes:  # a judge that stayed down shows as unscored with its reason, never as 0
        for name, score in ep.scores().items():
            assert score.scored or score.reason


def test_preflight_as_shipped_runs_real_relaxation_band_gap_and_eos():
    """`rlplugs preflight --env matrl` with the default judges and data: the band-gap judge is on
    with the weights inside the package (the relaxations are shortened to keep the test lean)."""
    proc = subprocess.run([RLPLUGS, "preflight", "--env", "matrl", "--env_args", '{"relax_steps": 6}', "--json"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    for name in ("valid", "stable", "sun_marginal", "band_gap_target", "bulk_modulus_target", "group_diversity"):
        assert report[name]["scored"] >= 1, (name, report[name])


@pytest.fixture(scope="module")
def service_without_band_gap_or_elastic():
    service = JudgeService(Judges(CHGNetJudge(steps=6))).start()
    yield service
    service.stop()


def test_dead_judges_fail_preflight_naming_the_options_that_switch_them_off(service_without_band_gap_or_elastic):
    url = service_without_band_gap_or_elastic.url
    with pytest.raises(PreflightError) as caught:
        build_env(MatrlConfig(judge_url=url)).preflight()
    message = str(caught.value)
    assert "'band_gap_target'" in message and "'bulk_modulus_target'" in message
    assert """switch it off with --env_args '{"band_gap_model": null}' (YAML: env_args: {band_gap_model: null})""" in message
    assert """--env_args '{"elastic_judge": false}'""" in message
    # following the message: both judges off, their components and tasks leave, the rest computes
    report = build_env(MatrlConfig(judge_url=url, band_gap_model=None, elastic_judge=False)).preflight()
    assert "band_gap_target" not in report and "bulk_modulus_target" not in report
    assert report["stable"]["scored"] == report["stable"]["of"] == 2


def test_energies_on_different_scales_refuse_to_mix():
    embedded = load_hull_reference()
    assert embedded.scale == MP2020_SCALE and embedded.approximate and len(embedded.entries) > 300
    merged = embedded.merged(load_mp_elemental_refs(MP_ELEMENTS))  # MP2020-corrected DFT: same scale
    assert merged.e_above_hull("NaCl", -3.6, MP2020_SCALE) == pytest.approx(
        merged.e_above_hull("NaCl", -3.6, MP2020_SCALE))
    with pytest.raises(ScaleMismatchError, match="raw-pbe"):
        embedded.e_above_hull("NaCl", -3.6, "sevennet-7net-0/raw-pbe")
    with pytest.raises(ScaleMismatchError):
        embedded.merged(HullReference("sevennet-7net-0/raw-pbe", [HullEntry("Na", -1.3)]))


def test_hull_cache_is_bounded():
    hull = load_hull_reference()
    hull.cache_size = 3
    for formula in ("NaCl", "MgO", "LiF", "KBr", "CaO"):
        hull.e_above_hull(formula, -4.0, MP2020_SCALE)
    assert hull.cached_systems == 3
