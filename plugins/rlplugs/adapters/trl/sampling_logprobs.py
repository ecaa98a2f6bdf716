"""The sampler's own log-probability of every token that TRL's plain ``generate`` draws.

The policy-gradient ratio assumes the rollouts came from the policy being trained. Generation
takes another path than the training forward: a static cache, its own decoding attention (span
or packed GQA), and under mixed precision a half-precision copy of the model
(:mod:`rlplugs.adapters.trl.generation_copy`). Where the two disagree, updates are off-policy in a
way TRL measures only for vLLM, which returns the sampler's log-probabilities. This gives plain
``generate`` the same: :class:`SampledLogprobs` stands in for the temperature warper, so it sees
the exact distribution the next token is drawn from, and keeps the log-probability of the token
drawn. TRL then carries them as ``sampling_per_token_logps`` (which its
``off_policy_mask_threshold`` uses), and the trainer logs their gap to its own log-probabilities.
Sampling warpers other than temperature (top-k, top-p, min-p, ...) run after it and would change
the distribution again, so they are refused (:func:`unsupported_warpers`).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList

# generation-config fields that add a sampling warper after temperature, with their "off" values
OTHER_WARPERS = {"top_k": (None, 0), "top_p": (None, 1.0), "min_p": (None,), "typical_p": (None, 1.0),
                 "epsilon_cutoff": (None, 0.0), "eta_cutoff": (None, 0.0), "top_h": (None,)}  # fmt: skip


def unsupported_warpers(config: Any, defaults: Any = None) -> list[str]:
    """The sampling warpers besides temperature that ``config`` (a generation config or TRL's
    GRPOConfig) turns on, as ``name=value``. ``generate`` fills a field the passed config leaves
    None from the model's own generation config, given as ``defaults``."""
    found = []
    for name, off in OTHER_WARPERS.items():
        value = getattr(config, name, None)
        value = getattr(defaults, name, None) if value is None else value
        if value not in off:
            found.append(f"{name}={value}")
    return found


class SampledLogprobs(LogitsProcessor):
    """Temperature scaling that also records, per row, the log-probability of each token drawn
    from the scaled distribution. The token drawn at one step shows as the last input id of the
    next call; the last one comes from the finished sequences (:meth:`take`)."""

    def __init__(self, temperature: float):
        self.temperature = temperature
        # the scaled scores of the step whose token is not drawn yet, and their log-normaliser: a
        # reduction per step, where a log-softmax would write a second (rows, vocabulary) tensor
        self._pending: tuple[torch.Tensor, torch.Tensor] | None = None
        self._values: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self._keep(input_ids[:, -1:])
        scores = scores.float() / self.temperature
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
        self._pending, self._values = None, []
        return taken


class RecordedGenerate:
    """``model.generate`` for the duration of a ``with`` block: sampling goes through a
    :class:`SampledLogprobs` in place of the temperature warper, and :attr:`logprobs` holds the
    recorded values of the last call, ``(rows, generated tokens)``."""

    def __init__(self, model: torch.nn.Module, temperature: float):
        self.model, self.recorder = model, SampledLogprobs(temperature)
        self.logprobs: torch.Tensor | None = None

    def __enter__(self) -> RecordedGenerate:
        self._generate = self.model.generate
        self.model.generate = self.generate
        return self

    def __exit__(self, *exc: Any) -> None:
        self.model.generate = self._generate

    def generate(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        processors = LogitsProcessorList([*(kwargs.pop("logits_processor", None) or []), self.recorder])
        out = self._generate(*args, logits_processor=processors, temperature=1.0, **kwargs)
        self.logprobs = self.recorder.take(out)
        return out
