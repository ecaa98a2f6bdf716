"""An EnvSpec's components as TRL reward functions: one function per component, one scoring call
per batch, ``None`` (TRL: excluded) for unscored values with the share and reasons logged.

The functions are called exactly as TRL's ``GRPOTrainer._calculate_rewards`` calls them (same
keyword arguments, conversational completions); the full trainer path is covered by
``test_trl_cli.py`` and ``test_trl_multiturn.py``.
"""

from __future__ import annotations

from collections import defaultdict

from transformers import TrainerState

from rlplugs.envspec import EnvSpec
from rlplugs.rewards import RewardComponent, Sample, Score, Unscorable
from rlplugs.adapters.trl.rewards import EnvRewardFunctions


def flaky_judge(sample: Sample) -> float:
    if "?" in sample.completion:
        raise Unscorable("judge cannot parse a question")
    if sample.completion == "boom":
        raise RuntimeError("judge crashed")
    return 1.0


def make_spec(components: list[RewardComponent] | None = None) -> EnvSpec:
    return EnvSpec(
        name="unit",
        description="unit-test environment",
        datasets={},
        components=components or [
            RewardComponent("chars", lambda s: float(len(s.completion)), 0.5),
            RewardComponent("judge", flaky_judge, 2.0),
        ],
        preflight_samples=lambda: [],
    )


def call_like_trl(functions, completions: list[str], **columns):
    """Invoke every reward function the way TRL 1.16 does for one batch; return (values, metrics, extra)."""
    metrics, extra = defaultdict(list), defaultdict(list)
    prompts = [[{"role": "user", "content": "Say something."}]] * len(completions)
    conversational = [[{"role": "assistant", "content": c}] for c in completions]
    ids = [[ord(ch) for ch in c] for c in completions]
    values = {}
    for fn in functions:
        values[fn.__name__] = fn(
            prompts=prompts, completions=conversational, completion_ids=ids, **columns, trainer_state=TrainerState(),
            log_extra=lambda col, v: extra[col].extend(v), log_metric=lambda name, v: metrics[name].append(v),
        )  # fmt: skip
    return values, metrics, extra


def test_each_component_is_a_named_weighted_function_and_failures_reach_trl_as_none():
    rewards = EnvRewardFunctions(make_spec())
    assert [f.__name__ for f in rewards.functions] == ["chars", "judge"]  # TRL logs rewards/<name>/mean
    assert rewards.weights == [0.5, 2.0]
    values, metrics, extra = call_like_trl(rewards.functions, ["fine", "why?", "boom", "ok"], row_id=[1, 2, 3, 4])
    assert values["chars"] == [4.0, 4.0, 4.0, 2.0]
    assert values["judge"] == [1.0, None, None, 1.0]
    assert metrics["unscored/judge"] == [0.5] and metrics["unscored/chars"] == [0.0]
    assert extra["unscored_reason/judge"] == [
        None,
        "judge cannot parse a question",
        "RuntimeError: judge crashed",
        None,
    ]
    summary = rewards.ledger.summary()["judge"]
    assert summary["unscored"] == 2 and summary["reasons"]["judge cannot parse a question"] == 1


def test_one_scoring_call_per_batch_is_shared_by_all_functions():
    calls = []

    async def scorer(samples: list[Sample]) -> list[dict[str, Score]]:
        calls.append([(s.completion, s.row["row_id"]) for s in samples])
        return [{"chars": Score(float(len(s.completion))), "judge": Score(1.0)} for s in samples]

    rewards = EnvRewardFunctions(make_spec(RewardComponent.from_batch(scorer, [("chars", 0.5, ""), ("judge", 2.0, "")])))
    call_like_trl(rewards.functions, ["a", "bb"], row_id=[7, 8])
    assert calls == [[("a", 7), ("bb", 8)]]  # dataset columns arrive as Sample.row
    call_like_trl(rewards.functions, ["ccc", "d"], row_id=[9, 10])
    assert len(calls) == 2  # a new batch is scored again


def test_extra_registered_components_join_the_environment_by_name_and_weight():
    from rlplugs.registry import get_registry
    from rlplugs.adapters.trl.arguments import EnvArguments, env_from_args

    args = EnvArguments(environment="letters-test", extra_rewards=["length-penalty:0.1", "think-format"],
                        reward_args='{"length-penalty": {"limit_chars": 4}}')  # fmt: skip
    spec = env_from_args(args)
    weights = {c.name: c.weight for c in spec.components}
    assert weights == {"letters": 1.0, "brevity": 0.5, "length-penalty": 0.1, "think-format": 1.0}
    assert get_registry().table("reward_component")["think-format"].plugin == "reward-components"
    values, _, _ = call_like_trl(EnvRewardFunctions(spec).functions, ["abcdef", "</think>ok"], row_id=[0, 1])
    assert values["length-penalty"] == [-0.5, -1.0]
    assert values["think-format"] == [0.0, 1.0]


def test_builtin_think_format_and_length_penalty_score_the_text():
    from rlplugs.builtins.rewards import LengthPenaltyConfig, ThinkFormatConfig, length_penalty, think_format

    think = think_format(ThinkFormatConfig()).fn
    cases = {"<think>plan</think>answer": 1.0, "plan</think> answer": 1.0, "just an answer": 0.0,
             "<think>plan</think>  ": 0.0, "a</think>b</think>c": 0.0, "<think>a<think>b</think>c": 0.0}  # fmt: skip
    assert {text: think(Sample("p", text)) for text in cases} == cases
    assert think_format(ThinkFormatConfig(require_answer=False)).fn(Sample("p", "<think>plan</think>")) == 1.0
    penalty = length_penalty(LengthPenaltyConfig(limit_chars=10)).fn
    assert [penalty(Sample("p", "x" * n)) for n in (0, 10, 15, 20, 50)] == [0.0, 0.0, -0.5, -1.0, -1.0]
