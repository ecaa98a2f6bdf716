"""GRPO on an rlplugs environment: the script ``rlplugs grpo`` and ``trl grpo --env`` launch.

Shaped like TRL's own ``trl/scripts/grpo.py`` (parse dataclasses, build the trainer, train, save)
and adding only what comes from the EnvSpec: the dataset, one reward function per component with
its weight, the multi-turn rollout, checkpoint-fixup callbacks and the preflight check. Run through
accelerate (``python -m rlplugs.adapters.trl.grpo`` in each process)::

    rlplugs grpo --env letters-test --model_name_or_path DIR --max_steps 2
"""

from __future__ import annotations

import logging

from rlplugs.adapters.trl.arguments import EnvGRPOScriptArguments, make_grpo_parser, parse_training_args, quiet_checkpointing_rename

log = logging.getLogger(__name__)


def load_user_dataset(script_args, dataset_args):
    """The dataset named by stock TRL flags (``--dataset_name`` or a YAML ``datasets:`` mixture), or None."""
    from datasets import load_dataset
    from trl import get_dataset

    if dataset_args.datasets:
        return get_dataset(dataset_args)
    if script_args.dataset_name:
        return load_dataset(
            script_args.dataset_name, name=script_args.dataset_config, streaming=script_args.dataset_streaming
        )
    return None


def set_model_init_kwargs(training_args, model_args) -> None:
    """How the trainer loads the model from ``--model_name_or_path`` (explicit
    ``--model_init_kwargs`` win), as TRL's own scripts do."""
    from_model_args = dict(
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    training_args.model_init_kwargs = {**from_model_args, **(training_args.model_init_kwargs or {})}


def set_single_process_ranks(training_args) -> None:
    """Give a lone DeepSpeed process its rank variables: ``accelerate launch`` starts one process
    (no ``--use_deepspeed``) without them, and DeepSpeed then asks MPI for them and fails on a
    machine without mpi4py. Rank 0 of 1 on a free local port; a launcher's own variables are kept."""
    import os
    import socket

    if not training_args.deepspeed or "RANK" in os.environ:
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))  # fmt: skip


def build_callbacks(script_args, training_args, spec) -> list:
    """TRL callbacks of the checkpoint fixups named with ``--fixups`` (options: ``--fixup_args``)."""
    from rlplugs.adapters.trl.arguments import fixups

    return [fixup.trainer_callback(training_args, spec) for fixup in fixups(script_args)]


def train_and_save(trainer, training_args, spec) -> None:
    """Train (resuming where asked), save the final model and the trainer state beside it, push it if
    asked, and end the run. The state holds the step log: a run that a guard stopped between two
    checkpoints (or that saves none) would otherwise keep it only in its console output."""
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # <output_dir>/trainer_state.json, from the main process
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=spec.name)
    if hasattr(trainer, "end"):  # transformers >= 5.18: finish trackers, destroy the process group
        trainer.end()


def main(script_args: EnvGRPOScriptArguments, training_args, model_args, dataset_args, spec) -> None:
    """Train; the arguments were checked by :func:`~rlplugs.adapters.trl.arguments.parse_training_args`."""
    from trl import get_peft_config, get_quantization_config

    from rlplugs.adapters.trl.rewards import EnvRewardFunctions
    from rlplugs.adapters.trl.rollout import make_episode_rollout
    from rlplugs.adapters.trl.trainer import EnvGRPOTrainer

    set_single_process_ranks(training_args)
    set_model_init_kwargs(training_args, model_args)
    if not script_args.skip_preflight:  # a reward that never computes must stop the run before step 0
        report = spec.preflight()
        log.info("preflight of env '%s': %s", spec.name, {k: f"{v['scored']}/{v['of']}" for k, v in report.items()})
    rewards = EnvRewardFunctions(spec)
    if training_args.reward_weights is None:
        training_args.reward_weights = rewards.weights
    dataset = load_user_dataset(script_args, dataset_args)
    if dataset is not None:
        train_dataset = dataset[script_args.dataset_train_split]
        eval_dataset = dataset[script_args.dataset_test_split] if training_args.eval_strategy != "no" else None
    else:
        train_dataset = spec.dataset(script_args.env_split)
        eval_split = (
            script_args.dataset_test_split if script_args.dataset_test_split in spec.datasets else spec.eval.splits[0]
        )
        eval_dataset = spec.dataset(eval_split) if training_args.eval_strategy != "no" else None

    trainer = EnvGRPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=rewards.functions,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        callbacks=build_callbacks(script_args, training_args, spec),
        quantization_config=get_quantization_config(model_args),
        peft_config=get_peft_config(model_args),
        rollout_func=make_episode_rollout(spec, script_args.max_episode_turns) if spec.multi_turn else None,
        filter_zero_spread_groups=script_args.filter_zero_spread_groups,
        compile_generation=script_args.compile_generation,
        sampling_logprobs=script_args.sampling_logprobs,
        keep_sampling_mask=script_args.keep_sampling_mask,
    )
    train_and_save(trainer, training_args, spec)
    summary = rewards.ledger.summary()
    if any(v["unscored"] for v in summary.values()):
        log.warning("unscored rewards during training: %s", summary)


def make_parser(prog: str | None = None):
    return make_grpo_parser(prog=prog)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    quiet_checkpointing_rename()
    parsed = parse_training_args("grpo", make_parser())
    main(*parsed.args, parsed.spec)
