"""A generic TRL ``rollout_func`` that plays an environment's multi-turn episodes.

TRL's ``rollout_func(prompts, trainer)`` must return, per prompt entry, the token ids the model
saw (``prompt_ids``), everything after them (``completion_ids``) and an ``env_mask`` (1 = written
by the model, 0 = environment text, left out of the loss). One episode is played per entry (TRL
has already repeated each prompt ``num_generations`` times), all episodes in lock-step: every
round, the pending turns of all running episodes are generated in one batched ``generate`` call
with the trainer's current model.

**Token record.** The trained seat's sequence is built from the tokens actually generated plus
the environment's replies rendered with the chat template, and the model always generates its
next turn from exactly that sequence. So the training sequence is what the model saw, even for
chat templates that re-render history differently (Qwen's drop earlier ``<think>`` blocks).
``max_completion_length`` caps the whole multi-turn completion, as in TRL's own tool loop, and
``generation_kwargs={"max_new_tokens": N}`` caps one turn; an episode whose trained seat runs out
of budget stops and is scored as it stands (the model's own doing: components decide whether an
unfinished episode is unscorable).

**Errors.** Episodes are started and played guarded (:func:`rlplugs.episode.start_episode`): an
environment or judge error in ``step`` or at the start stops that episode alone (one that could not
start returns its row's prompt and an empty turn), and so does running past ``max_turns`` rounds; every
reward component of a stopped episode is then unscored with the reason (``None`` for TRL, left out
of the loss), never the zeros of an episode scored as it stands.

Seats other than the trained one (opponents in a game) are played by the same model (self-play);
which seat a row trains is its ``seat`` column, else the episode's first trained seat. The finished
episodes reach the reward functions as the ``episode`` column (``Sample.episode``).

Limits: generation uses the trainer's model (no vLLM), and each process plays its own episodes
for as many rounds as they need, which suits DDP but not ZeRO-3/FSDP (whose ``generate`` calls
must line up across processes).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from rlplugs.envspec import EnvSpec
from rlplugs.episode import GuardedEpisode, start_episode

log = logging.getLogger(__name__)

_MARKER = "\u2063rlplugs-turn-boundary\u2063"


@dataclass
class _SeatRecord:
    """Token record of the trained seat of one episode."""

    seat: str
    prompt_ids: list[int] | None = None
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    messages_seen: int = 0
    out_of_budget: bool = False  # the trained seat spent the multi-turn token budget


class ChatRenderer:
    """Chat-template rendering with the trainer's tokenizer and ``chat_template_kwargs``."""

    def __init__(self, processing_class, chat_template_kwargs: dict[str, Any]):
        self.tokenizer = getattr(processing_class, "tokenizer", processing_class)
        self.template = getattr(processing_class, "chat_template", None)
        self.kwargs = dict(chat_template_kwargs or {})

    def text(self, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=generation_prompt,
            chat_template=self.template,
            **self.kwargs,
        )

    def ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Token ids of a conversation followed by the generation prompt."""
        return self.encode(self.text(messages, generation_prompt=True))

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def reply_suffix_ids(self, new_messages: list[dict[str, Any]]) -> list[int]:
        """Tokens the template puts after a model reply's end-of-turn token: the environment's
        ``new_messages`` and the next generation prompt. Found by rendering a stand-in
        conversation whose assistant turn carries a marker, and cutting after its end token."""
        stand_in = [{"role": "user", "content": "."}, {"role": "assistant", "content": _MARKER}]
        full = self.text(stand_in + new_messages, generation_prompt=True)
        eos = self.tokenizer.eos_token
        start = full.find(_MARKER)
        end = full.find(eos, start) if start >= 0 and eos else -1
        if end < 0:
            raise ValueError(
                "cannot find where the chat template ends an assistant turn (no eos token after the reply); "
                "multi-turn rollouts need a template that closes turns with the tokenizer's eos token"
            )
        return self.encode(full[end + len(eos) :])


class EpisodeRollout:
    """Plays one batch of episodes with a GRPOTrainer's model (see the module docstring)."""

    def __init__(self, spec: EnvSpec, trainer, max_turns: int = 256):
        if getattr(trainer, "use_vllm", False):
            raise ValueError("rlplugs multi-turn rollouts generate with the trainer's model; use_vllm is not supported")
        self.spec = spec
        self.trainer = trainer
        self.max_turns = max_turns
        self.render = ChatRenderer(trainer.processing_class, trainer.chat_template_kwargs)
        self.budget = trainer.max_completion_length
        # ``generation_kwargs={"max_new_tokens": N}`` limits each turn; by default a turn may use the whole budget
        self.turn_limit = trainer.generation_config.max_new_tokens or self.budget
        self.eos_ids = set(trainer.eos_token_ids)

    def run(self, prompts: list[Any]) -> dict[str, list[Any]]:
        rows = self.trainer.rollout_rows
        if rows is None or len(rows) != len(prompts):
            raise RuntimeError("episode rollouts need the batch rows: train with rlplugs.adapters.trl.trainer.EnvGRPOTrainer")
        episodes = [start_episode(self.spec.episodes, dict(row)) for row in rows]
        records = [_SeatRecord(seat=row.get("seat") or ep.trained_seats[0]) for row, ep in zip(rows, episodes)]
        for turn in range(self.max_turns + 1):
            pending = [i for i, (ep, rec) in enumerate(zip(episodes, records)) if not ep.done and not rec.out_of_budget]
            if not pending:
                break
            if turn == self.max_turns:
                log.warning("%d episodes still running after %d turns; stopping them", len(pending), self.max_turns)
                for i in pending:
                    episodes[i].stop(f"episode did not end within the rollout's {self.max_turns} rounds")
                break
            self._play_round(pending, episodes, records)
        return self._output(episodes, records)

    def _play_round(self, pending: list[int], episodes: list[GuardedEpisode], records: list[_SeatRecord]) -> None:
        contexts, limits, active = [], [], []
        for i in pending:
            ep, rec = episodes[i], records[i]
            if ep.current_seat == rec.seat:
                ids = self._extend_record(rec, ep.observation())
                left = self.budget - len(rec.completion_ids)
                if left <= 0:
                    rec.out_of_budget = True
                    continue
            else:
                ids, left = self.render.ids(ep.observation()), self.budget
            contexts.append(ids)
            limits.append(min(left, self.turn_limit))
            active.append(i)
        if not active:
            return
        for i, new_ids in zip(active, self._generate(contexts, limits)):
            ep, rec = episodes[i], records[i]
            if ep.current_seat == rec.seat:
                rec.completion_ids += new_ids
                rec.env_mask += [1] * len(new_ids)
                if not new_ids or new_ids[-1] not in self.eos_ids:
                    if len(rec.completion_ids) >= self.budget:
                        rec.out_of_budget = True  # the whole multi-turn budget is spent
                    else:  # cut by the per-turn limit: close the turn as the template would, outside the loss
                        rec.completion_ids.append(self.render.tokenizer.eos_token_id)
                        rec.env_mask.append(0)
            ep.step(self.render.tokenizer.decode(new_ids, skip_special_tokens=True))  # guarded: an error stops it

    def _extend_record(self, rec: _SeatRecord, observation: list[dict[str, Any]]) -> list[int]:
        """Add what the environment said since the seat's last reply; return the full context."""
        if rec.prompt_ids is None:
            rec.prompt_ids = self.render.ids(observation)
        else:
            reply = observation[rec.messages_seen] if len(observation) > rec.messages_seen else None
            if reply is None or reply.get("role") != "assistant":
                raise ValueError(
                    f"env '{self.spec.name}': seat {rec.seat!r}'s observation must extend the previous one with "
                    "its own reply (an assistant message) followed by the new messages"
                )
            suffix = self.render.reply_suffix_ids(observation[rec.messages_seen + 1 :])
            rec.completion_ids += suffix
            rec.env_mask += [0] * len(suffix)
        rec.messages_seen = len(observation)
        return rec.prompt_ids + rec.completion_ids

    def _generate(self, contexts: list[list[int]], limits: list[int]) -> list[list[int]]:
        """One batched, left-padded ``generate``; each row cut at its first eos and its budget."""
        from trl.models import unwrap_model_for_generation

        t = self.trainer
        pad = self.render.tokenizer.pad_token_id
        width = max(len(c) for c in contexts)
        input_ids = torch.tensor([[pad] * (width - len(c)) + c for c in contexts], device=t.accelerator.device)
        attention_mask = torch.tensor(
            [[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=t.accelerator.device
        )
        config = copy.deepcopy(t.generation_config)
        config.max_new_tokens = max(limits)
        with (
            unwrap_model_for_generation(
                t.model_wrapped,
                t.accelerator,
                gather_deepspeed3_params=t.args.ds3_gather_for_generation,
                generation_kwargs=t.generation_kwargs,
                gradient_checkpointing_kwargs=t.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
        ):
            out = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
        results = []
        for row, limit in zip(out[:, width:].tolist(), limits):
            row = row[:limit]
            end = next((k for k, tok in enumerate(row) if tok in self.eos_ids), None)
            results.append(row[: end + 1] if end is not None else row)
        return results

    def _output(self, episodes: list[GuardedEpisode], records: list[_SeatRecord]) -> dict[str, list[Any]]:
        prompt_ids, completion_ids, env_mask = [], [], []
        for ep, rec in zip(episodes, records):
            if rec.prompt_ids is None:  # the trained seat never got a turn
                rec.prompt_ids = self.render.ids(ep.transcript(rec.seat))
                rec.completion_ids, rec.env_mask = [self.render.tokenizer.eos_token_id], [0]
            prompt_ids.append(rec.prompt_ids)
            completion_ids.append(rec.completion_ids[: self.budget])
            env_mask.append(rec.env_mask[: self.budget])
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": None,
            "env_mask": env_mask,
            "episode": episodes,
        }


def make_episode_rollout(spec: EnvSpec, max_turns: int = 256):
    """A TRL ``rollout_func`` playing ``spec``'s episodes (use with ``EnvGRPOTrainer``)."""

    def rollout_func(prompts: list[Any], trainer) -> dict[str, list[Any]]:
        return EpisodeRollout(spec, trainer, max_turns).run(prompts)

    return rollout_func
