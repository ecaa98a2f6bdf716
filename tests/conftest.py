"""Shared fixtures: the test plugins' site directory and the offline tiny Qwen3.5.

``tests/plugins_site`` holds an installed-looking distribution (``.dist-info`` with ``rlplugs``
entry points), so the test environments load through the same entry-point path as any
third-party plugin, in this process and in subprocesses (via ``PYTHONPATH``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

PLUGINS_SITE = Path(__file__).parent / "plugins_site"
REPO = Path(__file__).resolve().parent.parent
#: Data folders that exist on the development machines but not on a user's clone or in CI: a test
#: (or the code it runs) that opens a path under one of them fails, so nothing comes to depend on
#: them (the data the tests need ships in the packages, e.g. ``matrl/data``).
OFF_LIMITS = tuple(str(p) + os.sep for p in {Path("/work/shared"), REPO.parent / "shared"})
_OFF_LIMITS_OPENED: list[str] = []


def _refuse_off_limits(event: str, args: tuple) -> None:
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.abspath(os.fsdecode(args[0]))
        if (path + os.sep).startswith(OFF_LIMITS):
            _OFF_LIMITS_OPENED.append(path)
            raise PermissionError(f"tests may not read {path}: it does not exist on a user's machine or in CI")


sys.addaudithook(_refuse_off_limits)


@pytest.fixture(autouse=True)
def _nothing_read_off_limits():
    """Fails a test that read under OFF_LIMITS even where the code caught the PermissionError."""
    start = len(_OFF_LIMITS_OPENED)
    yield
    assert _OFF_LIMITS_OPENED[start:] == [], f"read outside the repository: {_OFF_LIMITS_OPENED[start:]}"
if str(PLUGINS_SITE) not in sys.path:
    sys.path.insert(0, str(PLUGINS_SITE))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
# Without a GPU, Triton kernels (rlplugs.adapters.trl.span_gqa) run under Triton's interpreter,
# which Triton reads when a kernel is defined: set here, before any test module imports one.
if not Path("/dev/nvidiactl").exists():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def plugin_env() -> dict[str, str]:
    """Environment variables for a subprocess that must see the test plugins."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PLUGINS_SITE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@pytest.fixture(scope="session")
def tiny_qwen35() -> Path:
    """Directory of the tiny text-only Qwen3.5 with the real tokenizer (built once, cached)."""
    from rlplugs.testing.tiny_models import tiny_qwen35_dir

    return tiny_qwen35_dir()


@pytest.fixture(scope="session")
def tiny_qwen35_vl() -> Path:
    """Directory of the tiny vision-language Qwen3.5 (the class real checkpoints use)."""
    from rlplugs.testing.tiny_models import tiny_qwen35_dir

    return tiny_qwen35_dir(vision=True)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Run a module's tiny-graph torch work on one intra-op thread: on a shared 2-core machine,
    extra threads only add contention (matrl's small crystal graphs ran ~100x slower with them)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def episode_grpo_trainer():
    """Factory of real GRPO trainers on multi-turn envs (see :func:`_episode_grpo_trainer`)."""
    return _episode_grpo_trainer


def _episode_grpo_trainer(model_dir, env: str, options: dict, output_dir, *, max_completion_length: int, turn_tokens: int,
                          max_steps: int, num_generations: int = 4, compile_generation: bool = False, bf16: bool = False,
                          sampling_logprobs: bool = False, keep_sampling_mask: bool = False, **config):
    """A real ``EnvGRPOTrainer`` on a multi-turn env through the generic episode rollout (CPU,
    batches of 4 completions, ``num_generations`` per prompt, thinking off; ``config``: more
    ``GRPOConfig`` fields). Returns ``(spec, rewards, trainer)``."""
    from trl import GRPOConfig

    from rlplugs.registry import make_env
    from rlplugs.adapters.trl.rewards import EnvRewardFunctions
    from rlplugs.adapters.trl.rollout import make_episode_rollout
    from rlplugs.adapters.trl.trainer import EnvGRPOTrainer

    spec = make_env(env, options)
    rewards = EnvRewardFunctions(spec)
    args = GRPOConfig(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=bf16,
        gradient_checkpointing=False,
        per_device_train_batch_size=4,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        generation_kwargs={"max_new_tokens": turn_tokens},  # per turn
        chat_template_kwargs={"enable_thinking": False},
        max_steps=max_steps,
        learning_rate=0.1,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        reward_weights=rewards.weights,
        **config,
    )
    trainer = EnvGRPOTrainer(
        model=str(model_dir),
        reward_funcs=rewards.functions,
        args=args,
        train_dataset=spec.dataset("train"),
        rollout_func=make_episode_rollout(spec),
        compile_generation=compile_generation,
        sampling_logprobs=sampling_logprobs,
        keep_sampling_mask=keep_sampling_mask,
    )
    return spec, rewards, trainer


@pytest.fixture(scope="session")
def decoding_step_inputs():
    """``make(model, batch)``: one decoding step's inputs for the first grouped-query layer of
    ``model`` over a 300-slot cache, ``(layer, query, key, value, mask)``, random, the mask empty."""

    def make(model, batch: int):
        import torch

        layer = next(m for m in model.modules() if getattr(m, "num_key_value_groups", 1) > 1)
        kv_heads = model.config.get_text_config().num_key_value_heads
        query = torch.randn(batch, kv_heads * layer.num_key_value_groups, 1, layer.head_dim)
        key, value = (torch.randn(batch, kv_heads, 300, layer.head_dim) for _ in range(2))
        return layer, query, key, value, torch.zeros(batch, 1, 1, 300, dtype=torch.bool)

    return make


@pytest.fixture(scope="session")
def one_row_ends_early():
    """Greedy static-cache generation for the decoding-attention tests: ``make(model)`` draws 3
    prompts of 12 tokens (row 0 left-padded by 4, an end token hidden under its padding) and picks
    as the end token row 1's fourth generated token, so row 1 ends early and the others run on.
    Returns ``(greedy, eos, want)``: ``greedy(eos)`` generates 40 tokens, ``want`` is that under
    the model's attention at the time of the call."""

    def make(model):
        import torch

        ids = torch.randint(5, 1000, (3, 12))
        attention = torch.ones_like(ids)
        attention[0, :4] = 0

        def greedy(eos=None):
            return model.generate(ids, attention_mask=attention, max_new_tokens=40, do_sample=False, pad_token_id=0,
                                  eos_token_id=eos, cache_implementation="static", disable_compile=True)  # fmt: skip

        eos = int(greedy()[1, 12 + 3])
        ids[0, 0] = eos  # under row 0's padding: a prompt's end-of-sequence token ends nothing
        want = greedy(eos)
        assert (want[1, 12:] == 0).any() and not (want[0, 12:] == 0).all()
        return greedy, eos, want

    return make


@pytest.fixture(scope="session")
def run_rollout():
    """Call a trainer's episode ``rollout_func`` on dataset rows, as TRL would mid-step."""

    def run(trainer, rows: list[dict]) -> dict:
        trainer.rollout_rows = rows
        try:
            return trainer.rollout_func([r["prompt"] for r in rows], trainer)
        finally:
            trainer.rollout_rows = None

    return run
