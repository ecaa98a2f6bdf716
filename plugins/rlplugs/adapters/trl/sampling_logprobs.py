"""The sampler's own log-probability of every token that TRL's plain ``generate`` draws.

The policy-gradient ratio assumes the rollouts came from the policy being trained. Generation
takes another path than the training forward: a static cache, its own decoding attention (span
or packed GQA), and under mixed precision a half-precision copy of the model
(:mod:`rlplugs.adapters.trl.generation_copy`). Where the two disagree, updates are off-policy in a
way TRL measures only for vLLM, which returns the sampler's log-probabilities. This gives plain
``generate`` the same: :class:`SampledLogprobs` stands in for the temperature, top-k and top-p
warpers (transformers' own, in generate's order), so it sees the exact distribution the next token
is drawn from, and keeps the log-probability of the token drawn. Under top-k or top-p that is the
truncated, renormalised distribution: the rollouts' true behaviour policy, which the trainer's
log-probabilities (temperature only) are not. TRL then carries them as ``sampling_per_token_logps``
(which its ``off_policy_mask_threshold`` uses), and the trainer logs their gap to its own
log-probabilities. Other sampling warpers (min-p, typical-p, ...) would run after it and change the
distribution again, so they are refused (:func:`unsupported_warpers`). With ``keep_sets`` it also
records each token's kept set, the tokens the truncation left drawable, for
:mod:`rlplugs.adapters.trl.keep_sampling_mask`.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

# generation-config fields that add a sampling warper after temperature, with their "off" values
OTHER_WARPERS = {"min_p": (None,), "typical_p": (None, 1.0), "epsilon_cutoff": (None, 0.0), "eta_cutoff": (None, 0.0),
                 "top_h": (None,)}  # fmt: skip
TRUNCATIONS = {"top_k": (None, 0), "top_p": (None, 1.0)}  # the ones the recorder applies itself, and their "off"


def _setting(config: Any, defaults: Any, name: str) -> Any:
    """``config``'s ``name``; ``generate`` fills a field the passed config leaves None from the
    model's own generation config, given as ``defaults``."""
    value = getattr(config, name, None)
    return getattr(defaults, name, None) if value is None else value


def unsupported_warpers(config: Any, defaults: Any = None) -> list[str]:
    """The sampling warpers besides temperature, top-k and top-p that ``config`` (a generation
    config or TRL's GRPOConfig) turns on, as ``name=value``."""
    found = [(name, _setting(config, defaults, name), off) for name, off in OTHER_WARPERS.items()]
    return [f"{name}={value}" for name, value, off in found if value not in off]


def truncations(config: Any, defaults: Any = None) -> dict[str, Any]:
    """The top-k and top-p that ``generate`` would apply with ``config``, as :class:`RecordedGenerate` takes them."""
    found = {name: _setting(config, defaults, name) for name in TRUNCATIONS}
    return {name: value for name, value in found.items() if value not in TRUNCATIONS[name]}


class SampledLogprobs(LogitsProcessor):
    """Temperature scaling, then top-k and top-p, that also records, per row, the log-probability of
    each token drawn from the resulting distribution. The token drawn at one step shows as the last
    input id of the next call; the last one comes from the finished sequences (:meth:`take`). With
    ``keep_sets`` it records each step's kept set as well (:attr:`kept` after :meth:`take`)."""

    def __init__(self, temperature: float, top_k: int | None = None, top_p: float | None = None,
                 keep_sets: bool = False):  # fmt: skip
        self.temperature = temperature
        self.keep_sets = keep_sets
        self._sets: list[torch.Tensor] = []  # per step: (entries, 2) of (row, token id)
        #: per row of the last call, ``(entries, 2)`` of (generated position, token id): its kept sets
        self.kept: list[torch.Tensor] | None = None
        self.truncate = [*([TopKLogitsWarper(top_k)] if top_k else []), *([TopPLogitsWarper(top_p)] if top_p else [])]
        # the scaled scores of the step whose token is not drawn yet, and their log-normaliser: a
        # reduction per step, where a log-softmax would write a second (rows, vocabulary) tensor
        self._pending: tuple[torch.Tensor, torch.Tensor] | None = None
        self._values: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self._keep(input_ids[:, -1:])
        scores = scores.float() / self.temperature
        for warper in self.truncate:  # what they leave out is -inf: log-probability -inf, never drawn
            scores = warper(input_ids, scores)
        if self.keep_sets:
            self._sets.append(torch.isfinite(scores).nonzero())
        self._pending = (scores, torch.logsumexp(scores, dim=-1, keepdim=True))
        return scores

    def _keep(self, drawn: torch.Tensor) -> None:
        """Record the log-probability of the ``drawn`` tokens ``(rows, 1)`` under the pending step."""
        if self._pending is not None:
            scores, normaliser = self._pending
            self._values.append(scores.gather(1, drawn) - normaliser)

    def take(self, sequences: torch.Tensor) -> torch.Tensor:
        """``(rows, generated tokens)``: the log-probability of each token of the last call; resets."""
        self._keep(sequences[:, -1:])
        rows = sequences.size(0)
        taken = torch.cat(self._values, dim=1) if self._values else sequences.new_zeros((rows, 0), dtype=torch.float)
        if self.keep_sets:
            self.kept = _by_row(self._sets, rows)
        self._pending, self._values, self._sets = None, [], []
        return taken


def _by_row(sets: list[torch.Tensor], rows: int) -> list[torch.Tensor]:
    """Per-step ``(entries, 2)`` (row, token id) tensors, regrouped as one ``(entries, 2)``
    (step, token id) tensor per row."""
    if not sets:
        return [torch.zeros((0, 2), dtype=torch.long) for _ in range(rows)]
    entries = torch.cat(sets)
    steps = torch.arange(len(sets), device=entries.device).repeat_interleave(torch.tensor([len(s) for s in sets], device=entries.device))
    order = torch.argsort(entries[:, 0], stable=True)
    per_row = torch.bincount(entries[:, 0], minlength=rows).tolist()
    return list(torch.stack([steps, entries[:, 1]], dim=1)[order].split(per_row))


class RecordedGenerate:
    """``model.generate`` for the duration of a ``with`` block: sampling goes through a
    :class:`SampledLogprobs` in place of the temperature, top-k and top-p warpers, and
    :attr:`logprobs` holds the recorded values of the last call, ``(rows, generated tokens)``."""

    def __init__(self, model: torch.nn.Module, temperature: float, top_k: int | None = None, top_p: float | None = None,
                 keep_sets: bool = False):  # fmt: skip
        self.model, self.recorder = model, SampledLogprobs(temperature, top_k, top_p, keep_sets)
        self.logprobs: torch.Tensor | None = None

    def __enter__(self) -> RecordedGenerate:
        self._generate = self.model.generate
        self.model.generate = self.generate
        return self

    def __exit__(self, *exc: Any) -> None:
        self.model.generate = self._generate

    def generate(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        processors = LogitsProcessorList([*(kwargs.pop("logits_processor", None) or []), self.recorder])
        out = self._generate(*args, logits_processor=processors, temperature=1.0, top_k=0, top_p=1.0, **kwargs)
        self.logprobs = self.recorder.take(out)
        return out
