"""The zero-spread filter: groups whose rewards are all equal leave the loss and its normalisation.

The 2-process test runs this file as an accelerate worker (two CPU ranks over gloo), with a
global batch of 12 rows in groups of 4 and 6 rows per rank, so the middle group is split between
the ranks: a filter that looked only at local rewards would get that group wrong, and so would a
group reward component that scored only the local half. The same workers then train two updates
on generation batches that lose all their tokens to the filter, where the forward and backward
passes are skipped only where no process needs them to synchronise gradients.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from gloo_ranks import run_two_ranks

from rlplugs.adapters.trl.trainer import zero_spread_rows

NAN = float("nan")


def _spread_in_first_batch_only(calls: list):
    """A reward with spread in the first generation batch it scores and none after."""

    def spread_once(completions, **_):
        calls.append(len(completions))
        return [float(i % 2) if len(calls) == 1 else 1.0 for i in range(len(completions))]

    return spread_once


def _count_grad_forwards(trainer) -> list[int]:
    """The update each forward pass with gradients belongs to (generation runs without)."""
    forwards: list[int] = []

    def count_forward(*_):
        if torch.is_grad_enabled():
            forwards.append(trainer.state.global_step + 1)

    trainer.model.register_forward_hook(count_forward)
    return forwards

# Global rewards (the ``k`` column) of the 12 rows; rank 0 holds rows 0-5, rank 1 rows 6-11.
CASES = {
    # group 1 (rows 4-7) is constant on each rank (1,1 | 0,0) but has spread as a whole
    "split_group_with_spread": ([5, 5, 5, 5, 1, 1, 0, 0, 2, 3, 2, 3], list(range(0, 4))),
    # group 1 (rows 4-7) has no spread and spans both ranks; group 2 has none either
    "split_group_without_spread": ([1, 2, 1, 2, 7, 7, 7, 7, 4, 4, 4, 4], list(range(4, 12))),
}


def test_zero_spread_rows_uses_weighted_totals_and_ignores_unscored():
    rewards = torch.tensor(
        [[1, 0], [1, 0], [1, 0], [1, 0],  # constant -> no spread
         [1, 0], [2, 0], [1, 0], [1, 0],  # spread
         [NAN, NAN], [1, 0], [NAN, NAN], [1, 0],  # unscored rows ignored; the scored ones are equal
         [1, 0], [0, 1], [1, 0], [0, 1]],  # components vary but the weighted total does not
        dtype=torch.float32,
    )  # fmt: skip
    weights = torch.tensor([1.0, 1.0])
    rows = zero_spread_rows(rewards, weights, group_size=4)
    assert rows.view(-1, 4).all(dim=1).tolist() == [True, False, True, True]
    assert rows.view(-1, 4).any(dim=1).tolist() == rows.view(-1, 4).all(dim=1).tolist()  # whole groups
    per_component = zero_spread_rows(rewards, weights, group_size=4, per_component=True)
    assert per_component.view(-1, 4)[:, 0].tolist() == [True, False, True, False]


def test_group_with_a_single_scored_row_has_no_spread():
    rewards = torch.tensor([[NAN], [3.0], [NAN], [NAN]])
    assert zero_spread_rows(rewards, torch.tensor([1.0]), group_size=4).all()


def test_filter_over_two_gloo_ranks_masks_whole_groups_and_renormalises(tmp_path, tiny_qwen35):
    ranks = run_two_ranks(__file__, tmp_path, tiny_qwen35)
    for case, (_, filtered) in CASES.items():
        r0, r1 = ranks[0][case], ranks[1][case]
        got = [i for i, f in enumerate(r0["filtered"] + r1["filtered"]) if f]
        assert got == filtered, case
        # the normaliser is global and equal on both ranks: all tokens minus the filtered groups'
        assert r0["n_on"] == r1["n_on"] and r0["n_off"] == r1["n_off"]
        assert r0["n_on"] == r0["n_off"] - r0["filtered_tokens"] - r1["filtered_tokens"] < r0["n_off"]
        # zero-spread rows add nothing to the loss sum, so the filter rescales the loss by n_off / n_on
        for r in (r0, r1):
            assert math.isclose(r["loss_on"] * r["n_on"], r["loss_off"] * r["n_off"], rel_tol=1e-4, abs_tol=1e-7)
        assert r0["frac"] == pytest.approx(len(filtered) / 12)
        # a group component saw all 4 completions of every group, the split one included
        assert r0["members_seen"] == r1["members_seen"] == [4.0] * 12
    # and in the real training loop over gloo: one of the three groups has constant rewards
    assert ranks[0]["train_filtered_frac"] == pytest.approx(1 / 3)
    # an update whose last micro-batch has no token still synchronises the gradients (the ranks'
    # weights agree); an update with none anywhere runs no forward on either rank
    s0, s1 = ranks[0]["skipped"], ranks[1]["skipped"]
    assert s0["forwards"] == s1["forwards"] == [1, 1] and s0["moved"] > 0 and s0["checksum"] == s1["checksum"]


def test_micro_batches_without_tokens_log_no_token_means_and_an_update_without_any_moves_no_weight(tmp_path, tiny_qwen35):
    """One generation batch a micro-batch (``steps_per_generation`` 1, two micro-batches an
    update), and only the first batch has spread. Update 1's second micro-batch has no token in
    the loss, yet runs its forward and backward: that backward is the one that synchronises the
    first micro-batch's gradients across processes. Its token means (entropy, clip ratios) are
    unmeasured (NaN), not 0.0, which read as a collapsed policy in session 35's factorio-build
    curves and would set an entropy guard's level to 0. Update 2 has no token anywhere: no forward
    or backward runs, its token means are None in the log, and its optimizer step is skipped,
    where AdamW would still move every weight along its momentum."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig

    from rlplugs.adapters.trl.trainer import EnvGRPOTrainer

    batches = []
    weights, entropies = {}, {}

    class Snapshot(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **_):
            weights[state.global_step] = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
            # the micro-batches' entries, read before the log averages and clears them
            entropies[state.global_step] = list(trainer._metrics["train"].get("entropy", []))

        on_train_begin = on_step_end  # step 0: the start

    prompt = [{"role": "user", "content": "Say something."}]
    args = GRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, gradient_checkpointing=False, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, steps_per_generation=1, num_generations=4, max_completion_length=8,
        max_steps=2, learning_rate=1e-3, report_to="none", save_strategy="no", logging_steps=1,
        chat_template_kwargs={"enable_thinking": False},
    )  # fmt: skip
    train = Dataset.from_list([{"prompt": prompt}] * 4)
    trainer = EnvGRPOTrainer(model=str(tiny_qwen35), reward_funcs=[_spread_in_first_batch_only(batches)], args=args,
                             train_dataset=train, filter_zero_spread_groups=True, callbacks=[Snapshot()])  # fmt: skip
    forwards = _count_grad_forwards(trainer)
    trainer.train()
    assert batches == [4, 4, 4, 4] and forwards == [1, 1]  # update 2 ran no forward with gradients
    (first_measured, first_empty), second = entropies[1], entropies[2]
    assert first_measured > 0 and math.isnan(first_empty) and len(second) == 2 and all(map(math.isnan, second))
    first, second = (h for h in trainer.state.log_history if "entropy" in h)
    assert first["zero_spread/filtered_frac"] == 0.5 and first["entropy"] == pytest.approx(first_measured)
    assert second["zero_spread/filtered_frac"] == 1.0 and second["grad_norm"] == 0.0
    assert second["entropy"] is None and second["clip_ratio/region_mean"] is None
    assert not torch.equal(weights[1], weights[0]) and torch.equal(weights[2], weights[1])
    # a second train() asks for the optimizer again and gets accelerate's wrapper: hooking that
    # failed, and a second hook on the optimizer inside would find the first one's "no token since
    # the last step" and throw away an update that had tokens: a step after tokens still moves
    assert trainer.create_optimizer() is trainer.optimizer
    param = next(p for p in trainer.model.parameters() if p.requires_grad)
    before = param.detach().clone()
    param.grad = torch.ones_like(param)
    trainer._tokens_since_step = True  # as after a micro-batch with tokens
    for group in trainer.optimizer.param_groups:
        group["lr"] = 1e-3  # the schedule ended at 0
    trainer.optimizer.step()
    assert not torch.equal(param.detach(), before)


def _worker(out_dir: str, model_dir: str) -> None:
    from datasets import Dataset
    from trl import GRPOConfig

    from rlplugs.envspec import EnvSpec
    from rlplugs.rewards import RewardComponent
    from rlplugs.adapters.trl.rewards import EnvRewardFunctions
    from rlplugs.adapters.trl.trainer import EnvGRPOTrainer

    def members_seen(members):
        """A group component: how many completions of its group it was given (constant per group,
        so it does not change which groups have spread)."""
        return [float(len(members))] * len(members)

    group_spec = EnvSpec(
        name="groups", description="group component probe", datasets={}, preflight_samples=list,
        components=[RewardComponent("members_seen", members_seen, group=True)],
    )  # fmt: skip

    def k_reward(completions, k, **_):
        """The row's ``k``; for k < 0 the share of ASCII letters (varies on a random model)."""
        texts = [c[0]["content"] for c in completions]
        return [float(v) if v >= 0 else sum(ch.isalpha() for ch in t) / max(len(t), 1) for v, t in zip(k, texts)]

    prompt = [{"role": "user", "content": "Say something."}]
    args = GRPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, gradient_checkpointing=False, per_device_train_batch_size=6,
        num_generations=4, max_completion_length=8, max_steps=1, learning_rate=0.1, report_to="none",
        save_strategy="no", logging_steps=1, chat_template_kwargs={"enable_thinking": False},
    )  # fmt: skip
    train = Dataset.from_list([{"prompt": prompt, "k": k} for k in (-1, 3, -1)])
    reward_funcs = [k_reward, *EnvRewardFunctions(group_spec).functions]
    trainer = EnvGRPOTrainer(model=model_dir, reward_funcs=reward_funcs, args=args, train_dataset=train)
    rank = trainer.accelerator.process_index
    result = {}
    for case, (ks, expected) in CASES.items():
        rows = [{"prompt": prompt, "k": k} for k in ks[6 * rank : 6 * rank + 6]]
        outs = {}
        for flag in (False, True):
            trainer.filter_zero_spread_groups = flag
            trainer.model.train()
            torch.manual_seed(1234)  # same completions with and without the filter
            outs[flag] = trainer._generate_and_score_completions([dict(r) for r in rows])
        trainer.model.eval()  # loss normalised by num_items_in_batch alone (no accumulation factor)
        with torch.no_grad():
            loss = {flag: trainer.compute_loss(trainer.model, outs[flag]).item() for flag in outs}
        off_tokens = outs[False]["completion_mask"].sum(dim=1)
        mine = [6 * rank + i for i in range(6)]
        result[case] = {
            "filtered": (outs[True]["completion_mask"].sum(dim=1) == 0).tolist(),
            "filtered_tokens": int(sum(off_tokens[i - 6 * rank] for i in mine if i in expected)),
            "n_on": int(outs[True]["num_items_in_batch"]),
            "n_off": int(outs[False]["num_items_in_batch"]),
            "loss_on": loss[True],
            "loss_off": loss[False],
            "frac": trainer._metrics["train"]["zero_spread/filtered_frac"][-1],
            "members_seen": list(trainer._logs["rewards"]["members_seen"])[-12:],
        }
    trainer.filter_zero_spread_groups = True
    trainer.model.train()
    trainer._metrics["train"].clear()  # logged metrics are averaged since the last log: drop the calls above
    trainer.train()
    result["train_filtered_frac"] = next(
        h["zero_spread/filtered_frac"] for h in trainer.state.log_history if "zero_spread/filtered_frac" in h
    )
    result["skipped"] = _skip_over_ranks(out_dir, model_dir)
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    trainer.end()  # as `trl grpo --env` ends: without it gloo's threads can abort the exiting interpreter


def _skip_over_ranks(out_dir: str, model_dir: str) -> dict:
    """Two updates of two micro-batches, one generation batch (one group across both ranks) each;
    only the first batch has spread. Update 1's second micro-batch has no token but must run its
    backward, which all-reduces the first's gradients; update 2 runs no forward on either rank."""
    from datasets import Dataset
    from trl import GRPOConfig

    from rlplugs.adapters.trl.trainer import EnvGRPOTrainer

    args = GRPOConfig(
        output_dir=str(Path(out_dir, "skip")), use_cpu=True, bf16=False, gradient_checkpointing=False,
        per_device_train_batch_size=2, gradient_accumulation_steps=2, steps_per_generation=1, num_generations=4,
        max_completion_length=8, max_steps=2, learning_rate=0.1, report_to="none", save_strategy="no", logging_steps=1,
        chat_template_kwargs={"enable_thinking": False},
    )  # fmt: skip
    train = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Say {i}."}]} for i in range(4)])
    trainer = EnvGRPOTrainer(model=model_dir, reward_funcs=[_spread_in_first_batch_only([])], args=args,
                             train_dataset=train, filter_zero_spread_groups=True)  # fmt: skip
    forwards = _count_grad_forwards(trainer)
    start = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    trainer.train()
    end = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    return {"forwards": forwards, "moved": float((end - start).abs().max()), "checksum": float(end.double().sum())}


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
