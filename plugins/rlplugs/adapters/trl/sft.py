"""SFT on an rlplugs environment's SFT dataset: the script ``rlplugs sft`` and ``trl sft --env`` launch.

Shaped like TRL's ``trl/scripts/sft.py``; the only addition is where the data comes from: the
environment's SFT dataset (``--sft_dataset NAME``, default its first) unless a stock
``--dataset_name``/``datasets:`` is given. Environment trainer defaults that SFT also has (e.g.
``max_length``) apply; GRPO-only ones are skipped.
"""

from __future__ import annotations

import logging

from rlplugs.adapters.trl.arguments import make_sft_parser, parse_training_args, quiet_checkpointing_rename
from rlplugs.adapters.trl.grpo import build_callbacks, load_user_dataset, set_model_init_kwargs, set_single_process_ranks, train_and_save

log = logging.getLogger(__name__)


def main(script_args, training_args, model_args, dataset_args, spec) -> None:
    """Train; the arguments were checked by :func:`~rlplugs.adapters.trl.arguments.parse_training_args`."""
    from trl import SFTTrainer, get_peft_config, get_quantization_config

    set_single_process_ranks(training_args)
    set_model_init_kwargs(training_args, model_args)
    dataset = load_user_dataset(script_args, dataset_args)
    if dataset is not None:
        train_dataset = dataset[script_args.dataset_train_split]
        eval_dataset = dataset[script_args.dataset_test_split] if training_args.eval_strategy != "no" else None
    else:
        train_dataset, eval_dataset = spec.sft_dataset(script_args.sft_dataset), None

    trainer = SFTTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        callbacks=build_callbacks(script_args, training_args, spec),
        quantization_config=get_quantization_config(model_args),
        peft_config=get_peft_config(model_args),
    )
    train_and_save(trainer, training_args, spec)


def make_parser(prog: str | None = None):
    return make_sft_parser(prog=prog)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    quiet_checkpointing_rename()
    parsed = parse_training_args("sft", make_parser())
    main(*parsed.args, parsed.spec)
