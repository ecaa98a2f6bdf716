"""A generic TRL ``rollout_func`` that plays an environment's multi-turn episodes through the
trainer's own generation backend.

TRL's ``rollout_func(prompts, trainer)`` must return, per prompt entry, the token ids the model
saw (``prompt_ids``), everything after them (``completion_ids``), an ``env_mask`` (1 = written
by the model, 0 = environment text, left out of the loss) and the sampling ``logprobs`` where the
backend gives them. One episode is played per entry (TRL has already repeated each prompt
``num_generations`` times), all episodes in lock-step: every round, the pending turns of all
running episodes are generated in one call of ``GRPOTrainer._generate_single_turn``, the method
TRL's own tool loop generates with. So whatever backend the trainer is configured for generates
every round: vLLM (``use_vllm``, server or colocate; its weights are synced once per step by TRL
before the rollout starts), transformers continuous batching
(``use_transformers_continuous_batching``) or plain ``generate`` (optionally static-cache and
compiled: ``EnvGRPOTrainer(compile_generation=True)``). rlplugs owns no generate call.

**Why a ``rollout_func`` and not TRL's ``environment_factory``.** ``environment_factory`` drives
episodes by tool calls the model makes on an env object: it fits matrl's evaluate/submit tools, but
not the games, whose other seats speak between the trained seat's turns and whose turns are plain
text the game master parses. One lock-step rollout over the Episode protocol serves every
environment, with one record of stopped episodes and unscored rewards.

**Token record.** The trained seat's sequence is built from the tokens actually generated plus
the environment's replies rendered with the chat template, and the model always generates its
next turn from exactly that sequence. So the training sequence is what the model saw, even for
chat templates that re-render history differently (Qwen's drop earlier ``<think>`` blocks).
``max_completion_length`` caps the whole multi-turn completion, as in TRL's own tool loop, and
the per-turn cap is ``generation_kwargs`` ``max_new_tokens`` (transformers) or ``max_tokens``
(vLLM); an episode whose trained seat runs out of budget stops and is scored as it stands (the
model's own doing: components decide whether an unfinished episode is unscorable).

**Sharded training and vLLM server mode.** Under ZeRO-3 or FSDP every generation call is a
collective (parameters are gathered), and vLLM server mode gathers every rank's prompts into one
request and hands each rank back an equal slice. So every round is decided across processes: the
rollout continues while any process has a turn due, and each process passes the same number of
contexts (its own, then a one-message filler whose output is discarded); a process whose episodes
are all over keeps generating fillers until the others finish. The number of generation calls per
step is thus the same on every rank.

**Errors.** Episodes are started and played guarded (:func:`rlplugs.episode.start_episode`): an
environment or judge error in ``step`` or at the start stops that episode alone (one that could not
start returns its row's prompt and an empty turn), and so does running past ``max_turns`` rounds;
every reward component of a stopped episode is then unscored with the reason (``None`` for TRL, left
out of the loss), never the zeros of an episode scored as it stands.

Seats other than the trained one (opponents in a game) are played by the same model (self-play);
which seat a row trains is its ``seat`` column, else the episode's first trained seat. The finished
episodes reach the reward functions as the ``episode`` column (``Sample.episode``). The tokens
generated for every seat in real rounds (fillers left out) are logged per step as
``rollout/generated_tokens`` (mean per process, through TRL's ``log_metric``): the generation work of a self-play step, which the trained seat's
completion lengths do not show.
"""

from __future__ import annotations

import itertools
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
    logprobs: list[float] | None = None  # sampling logprobs parallel to completion_ids (0.0 off the model's turns)

    def add_logprobs(self, values: list[float] | None, n: int) -> None:
        """Extend the logprobs by ``n`` values; a backend that gave none ends the record."""
        if self.logprobs is not None:
            self.logprobs = self.logprobs + values if values is not None and len(values) == n else None


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
    """Plays one batch of episodes through a GRPOTrainer's generation backend (see the module docstring)."""

    def __init__(self, spec: EnvSpec, trainer, max_turns: int = 256):
        self.spec = spec
        self.trainer = trainer
        self.max_turns = max_turns
        self.render = ChatRenderer(trainer.processing_class, trainer.chat_template_kwargs)
        self.budget = trainer.max_completion_length
        self.turn_limit = turn_limit(trainer) or self.budget  # by default a turn may use the whole budget
        self.eos_ids = set(trainer.eos_token_ids)
        self.filler = self.render.ids([{"role": "user", "content": "."}])
        self.generated_tokens = 0  # every seat's, real rounds only

    def run(self, prompts: list[Any]) -> dict[str, list[Any]]:
        rows = self.trainer.rollout_rows
        if rows is None or len(rows) != len(prompts):
            raise RuntimeError("episode rollouts need the batch rows: train with rlplugs.adapters.trl.trainer.EnvGRPOTrainer")
        episodes = [start_episode(self.spec.episodes, dict(row)) for row in rows]
        sampled = self.trainer.use_vllm or self.trainer.sampling_logprobs  # the backend returns logprobs
        records = [
            _SeatRecord(seat=row.get("seat") or ep.trained_seats[0], logprobs=[] if sampled else None)
            for row, ep in zip(rows, episodes)
        ]
        for turn in itertools.count():
            due, contexts = self._turns_due(episodes, records)
            if turn == self.max_turns and due:
                log.warning("%d episodes still running after %d turns; stopping them", len(due), self.max_turns)
                for i in due:
                    episodes[i].stop(f"episode did not end within the rollout's {self.max_turns} rounds")
                due, contexts = [], []
            generated = self._generate(contexts, width=len(episodes))
            if generated is None:  # no process has a turn due
                break
            for i, (new_ids, new_logprobs) in zip(due, generated):
                self.generated_tokens += len(new_ids)
                self._take_turn(episodes[i], records[i], new_ids, new_logprobs)
        self.trainer._log_metric("rollout/generated_tokens", float(self.generated_tokens))  # averaged over processes
        return self._output(episodes, records)

    def _turns_due(self, episodes: list[GuardedEpisode], records: list[_SeatRecord]) -> tuple[list[int], list[list[int]]]:
        """The running episodes with a turn to generate, and the context of each."""
        due, contexts = [], []
        for i, (ep, rec) in enumerate(zip(episodes, records)):
            if ep.done or rec.out_of_budget:
                continue
            if ep.current_seat == rec.seat:
                ids = self._extend_record(rec, ep.observation())
                if len(rec.completion_ids) >= self.budget:
                    rec.out_of_budget = True
                    continue
            else:
                ids = self.render.ids(ep.observation())
            due.append(i)
            contexts.append(ids)
        return due, contexts

    def _take_turn(self, ep: GuardedEpisode, rec: _SeatRecord, new_ids: list[int], new_logprobs: list[float] | None) -> None:
        if ep.current_seat == rec.seat:
            new_ids = new_ids[: self.budget - len(rec.completion_ids)]
            rec.completion_ids += new_ids
            rec.env_mask += [1] * len(new_ids)
            rec.add_logprobs(new_logprobs[: len(new_ids)] if new_logprobs is not None else None, len(new_ids))
            if not new_ids or new_ids[-1] not in self.eos_ids:
                if len(rec.completion_ids) >= self.budget:
                    rec.out_of_budget = True  # the whole multi-turn budget is spent
                else:  # cut by the per-turn limit: close the turn as the template would, outside the loss
                    rec.completion_ids.append(self.render.tokenizer.eos_token_id)
                    rec.env_mask.append(0)
                    rec.add_logprobs([0.0], 1)
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
            rec.add_logprobs([0.0] * len(suffix), len(suffix))
        rec.messages_seen = len(observation)
        return rec.prompt_ids + rec.completion_ids

    def _generate(self, contexts: list[list[int]], width: int) -> list[tuple[list[int], list[float] | None]] | None:
        """One round on every process through the trainer's backend; None when no process has a turn due.

        Each process passes as many contexts as the busiest one (vLLM server mode slices its answer
        by that count), or, with ``compile_generation``, always ``width`` of them, so the compiled
        shapes do not change from round to round. Each row is cut at its first eos and the turn limit.
        """
        t = self.trainer
        sizes = t.accelerator.gather(torch.tensor([[len(contexts), width]], device=t.accelerator.device)).max(dim=0).values
        busiest = int(sizes[0])
        if busiest == 0:
            return None
        if getattr(t, "compile_generation", False):
            busiest = max(busiest, int(sizes[1]))
        batch = contexts + [self.filler] * (busiest - len(contexts))
        ids, logprobs = t._generate_single_turn(batch, None, {}, num_generations=1)
        results = []
        for k in range(len(contexts)):
            row = list(ids[k])[: self.turn_limit]
            end = next((j for j, tok in enumerate(row) if tok in self.eos_ids), None)
            row = row[: end + 1] if end is not None else row
            results.append((row, list(logprobs[k][: len(row)]) if logprobs is not None else None))
        return results

    def _output(self, episodes: list[GuardedEpisode], records: list[_SeatRecord]) -> dict[str, list[Any]]:
        prompt_ids, completion_ids, env_mask, logprobs = [], [], [], []
        for ep, rec in zip(episodes, records):
            if rec.prompt_ids is None:  # the trained seat never got a turn
                rec.prompt_ids = self.render.ids(ep.transcript(rec.seat))
                rec.completion_ids, rec.env_mask = [self.render.tokenizer.eos_token_id], [0]
                rec.add_logprobs([0.0], 1)
            prompt_ids.append(rec.prompt_ids)
            completion_ids.append(rec.completion_ids[: self.budget])
            env_mask.append(rec.env_mask[: self.budget])
            logprobs.append(rec.logprobs[: self.budget] if rec.logprobs is not None else None)
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": logprobs if all(lp is not None for lp in logprobs) else None,
            "env_mask": env_mask,
            "episode": episodes,
        }


def turn_cap_name(use_vllm: bool) -> str:
    """The ``generation_kwargs`` key of the per-turn token cap for a backend: vLLM takes them as
    sampling parameters (``max_tokens``), transformers as a generation config (``max_new_tokens``)."""
    return "max_tokens" if use_vllm else "max_new_tokens"


def turn_limit(trainer) -> int | None:
    """The per-turn token cap the user set. Without vLLM, TRL has already folded
    ``generation_kwargs`` into its generation config, where the cap defaults to the whole budget."""
    vllm = getattr(trainer, "use_vllm", False)
    config = None if vllm else getattr(trainer, "generation_config", None)
    if config is not None:
        return getattr(config, turn_cap_name(False))
    return (trainer.args.generation_kwargs or {}).get(turn_cap_name(vllm))


def make_episode_rollout(spec: EnvSpec, max_turns: int = 256):
    """A TRL ``rollout_func`` playing ``spec``'s episodes (use with ``EnvGRPOTrainer``)."""

    def rollout_func(prompts: list[Any], trainer) -> dict[str, list[Any]]:
        return EpisodeRollout(spec, trainer, max_turns).run(prompts)

    return rollout_func
