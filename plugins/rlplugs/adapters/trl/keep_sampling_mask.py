"""The trainer's log-probabilities over the tokens the sampler could draw (DeepSeek-V3.2's "keep
sampling mask", arXiv:2512.02556, section 3.1).

Under top-k or top-p the sampler draws each token from a truncated, renormalised distribution: its
*kept set*. The trainer scores the same token against the whole vocabulary, so the two policies
differ by the truncation even before any update, and the loss on a negative-advantage token
raises every other token, the tail the sampler never draws included, where no rollout can push it
back down until it enters the nucleus. Renormalising the trainer over each token's kept set makes the
two the same policy: ``log pi(a) = z_a - logsumexp_{j in S} z_j`` with ``z_j = h . W_j / T`` (``h``
the backbone's last hidden state, ``W`` the output embedding, ``T`` the temperature). Only the
set's rows of ``W`` are read, so the cost grows with the sets, not the vocabulary; ``top_k`` bounds
them. The same sets serve TRL's old log-probabilities, the loss and its off-policy mask, whose gap
then measures the policy's drift, not the truncation. The loss reaches no tail logit directly, on any
advantage, so the trained policy is the truncated one: decode it with the sampler it was trained
under (factorio-build: holdout at top_p 1.0 fell to 0 while the top_p 0.9 rollouts held, seed 1
in session 31 and seed 42 in session 32). It does not keep a high rate from breaking the
policy at its own sampler either (seed 1 in session 32; benchmarks/README.md).

:class:`~rlplugs.adapters.trl.sampling_logprobs.SampledLogprobs` records the sets;
:class:`~rlplugs.adapters.trl.trainer.EnvGRPOTrainer` (``keep_sampling_mask``) applies them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

#: Config fields by which a model scales or caps its logits after the output embedding; the sets'
#: logits here are the plain product, so such a model is refused.
HEAD_SCALINGS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")


def head_scalings(config: Any) -> list[str]:
    """The logit scalings ``config`` (a model config) turns on, as ``name=value``."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return [f"{name}={getattr(text, name)}" for name in HEAD_SCALINGS if getattr(text, name, None) is not None]


@contextlib.contextmanager
def rescored(backbone: torch.nn.Module, head: torch.nn.Module, completion_ids: torch.Tensor,
             kept: list[torch.Tensor], temperature: float) -> Iterator[list[torch.Tensor]]:  # fmt: skip
    """Inside the block, each forward of ``backbone`` (one per chunk of rows, in order, as TRL runs
    them) appends its rows' :func:`kept_set_logps`, computed from its last hidden states as they
    come, so no chunk's states are held for later."""
    parts: list[torch.Tensor] = []

    def rescore(module: torch.nn.Module, args: Any, out: Any) -> None:
        states = out.last_hidden_state
        start = sum(part.size(0) for part in parts)
        rows = slice(start, start + states.size(0))
        parts.append(kept_set_logps(states, head, completion_ids[rows], kept[rows], temperature))

    handle = backbone.register_forward_hook(rescore)
    try:
        yield parts
    finally:
        handle.remove()


def kept_set_logps(hidden: torch.Tensor, head: torch.nn.Module, completion_ids: torch.Tensor,
                   kept: list[torch.Tensor], temperature: float) -> torch.Tensor:  # fmt: skip
    """``(rows, C)``: each completion token's log-probability over its kept set, in float32.

    ``hidden`` ``(rows, L, H)`` holds the last hidden states of prompt and completion (the logits
    of completion token ``j`` come from position ``L - C - 1 + j``), ``head`` is the output
    embedding, ``kept`` one ``(entries, 2)`` tensor of (completion position, token id) per row.
    A position with no kept set (padding) gets 0."""
    rows, width = completion_ids.shape
    states = hidden[:, -width - 1 : -1].reshape(rows * width, -1)
    at = torch.cat([entries[:, 0] + r * width for r, entries in enumerate(kept)]).to(states.device)
    ids = torch.cat([entries[:, 1] for entries in kept]).to(states.device)

    def logits(positions: torch.Tensor | slice, tokens: torch.Tensor) -> torch.Tensor:
        z = (states[positions].float() * head.weight[tokens].float()).sum(-1)
        return (z if head.bias is None else z + head.bias[tokens].float()) / temperature

    z = logits(at, ids)
    top = torch.full((rows * width,), float("-inf"), device=z.device).scatter_reduce(0, at, z.detach(), "amax")
    has_set = torch.isfinite(top)
    top = torch.where(has_set, top, 0.0)
    total = torch.zeros(rows * width, device=z.device).index_add(0, at, torch.exp(z - top[at]))
    normaliser = top + torch.log(torch.where(has_set, total, 1.0))  # no inf on a position without a set
    drawn = logits(slice(None), completion_ids.reshape(-1).to(states.device))
    return torch.where(has_set, drawn - normaliser, 0.0).view(rows, width)
