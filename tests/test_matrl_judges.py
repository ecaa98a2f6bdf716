"""Judges as services: retries and unscored accounting under injected faults, preflight that runs
real judges and fails loudly when one is off, and energies that refuse to mix scales."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from fault_proxy import FaultProxy

from matrl.hull import (MP2020_SCALE, HullEntry, HullReference, ScaleMismatchError, load_hull_reference,
                        load_mp_elemental_refs)
from matrl.judges import CHGNetJudge, EOSElasticJudge, MEGNetBandGapJudge
from matrl.plugin import MatrlConfig, build_env, judge_set
from matrl.policy import PrototypePolicy
from matrl.service import JudgeService, Judges
from matrl.tasks import task_row
from rlplugs.envspec import PreflightError
from rlplugs.episode import play

MEGNET = "/work/shared/data/megnet-bandgap/MEGNet-MP-2019.4.1-BandGap-mfi"
MP_ELEMENTS = "/work/shared/data/mp-elemental-refs/2023-02-07-mp-elemental-reference-entries.json.gz"


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


def test_preflight_runs_real_relaxation_band_gap_and_eos():
    report = build_env(MatrlConfig(band_gap_model=MEGNET, relax_steps=6)).preflight()
    for name in ("valid", "stable", "sun_marginal", "band_gap_target", "bulk_modulus_target", "group_diversity"):
        assert report[name]["scored"] >= 1, (name, report[name])


def test_preflight_fails_loudly_when_a_judge_is_switched_off():
    with pytest.raises(PreflightError, match="band_gap_target.*switched off"):
        build_env(MatrlConfig(band_gap_model=None, relax_steps=6)).preflight()


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
