"""``EnvGRPOTrainer``: TRL's GRPOTrainer with the six things rlplugs adds around its generation step.

1. **Zero-spread filter** (``filter_zero_spread_groups``). A group whose rewards are all equal has
   zero advantage everywhere, so it contributes no gradient; yet TRL keeps its tokens in the loss
   mask, so with the token-normalised losses (``dapo``, the default, ``cispo``, ``vespo``) it
   dilutes every other group's gradient by inflating ``num_items_in_batch``. TRL has no switch
   for this, so this subclass wraps two methods and nothing else: ``_calculate_rewards`` (which
   already returns the rewards of the *global* batch) records the groups without spread, and
   ``_generate_and_score_completions`` zeroes those rows' ``completion_mask``/``tool_mask`` and
   recomputes ``num_items_in_batch`` over all processes. Batch shapes stay the same, so nothing
   downstream changes; the training loop itself is untouched. TRL logs its token means (entropy,
   clip ratios, ...) once per micro-batch as ``sum / max(tokens, 1)``, so a micro-batch whose
   rows were all left out would log 0.0 and pull the update's mean down (every micro-batch of an
   update when the whole generation batch lacks spread: factorio-build, session 35); those
   entries become NaN, which TRL's log leaves out (``None`` where nothing is left). An update
   with no token in the loss skips its optimizer step (every gradient set to None, so AdamW leaves
   weights and state alone): with zero gradients AdamW would still move every weight along its
   momentum (the tiny Qwen3.5 on the CPU after one real update: the largest weight change 0.45,
   then 0.17 times the learning rate). A generation batch with no token in any process's loss
   skips its micro-batches' forward and backward too (session 36's factorio-build run spent about
   6 s an update on 12 such updates), except where a backward must synchronise the gradients of
   an earlier micro-batch of the same update, and under DeepSpeed, whose engine takes only a loss
   with a graph. An optimizer that a DeepSpeed config defines is built inside DeepSpeed and
   cannot be hooked: its empty updates step, with a warning.

2. **No reward from metrics alone.** TRL leaves a completion out of the group baseline (advantage 0)
   only when *every* reward function returned ``None``; a completion whose weighted components
   were all unscored but whose weight-0 metrics were scored would get a total of 0 and be trained
   on. ``_calculate_rewards`` marks such rows unscored in every column first.

3. **Row access for rollouts.** TRL's ``rollout_func(prompts, trainer)`` receives only the
   prompts, but an episode is started from its whole dataset row; the rows of the batch being
   generated are exposed as :attr:`EnvGRPOTrainer.rollout_rows` for the duration of the call.

4. **Compiled generation** (``compile_generation``). TRL's plain ``generate`` path runs with
   transformers' dynamic cache, one kernel launch after another: on an H200 a 135M model decodes
   at about 1k tok/s at batch 64, launch-bound. A static cache lets transformers compile the
   decoding step (CUDA graphs) once per shape; TRL switches that compile off in its generation
   config and offers no flag, so this one turns it on. The shapes are the batch (fixed per step;
   the multi-turn rollout pads each round to its full width when compiling) and the prompt
   length, bucketed with TRL's own ``pad_to_multiple_of`` (``packed_gqa.COMPILE_BUCKET`` unless set),
   so a run compiles once per bucket its prompts reach, not per prompt. TRL pads the training
   batches (prompts and completions) to the same multiple, so the loss pass computes a little
   more. A static cache always carries a mask, which makes transformers' SDPA copy every
   key/value head once per query head on each decoding step, and SDPA reads the whole cache, empty
   slots and finished rows included. The decoding step therefore switches to
   :mod:`rlplugs.adapters.trl.span_gqa` on CUDA (a Triton kernel that reads only each live row's
   filled span, each head once) and to :mod:`rlplugs.adapters.trl.packed_gqa` (each head once,
   whole cache) elsewhere; ``packed_gqa.use_decoding_attention`` picks. With fp32
   weights under bf16/fp16 mixed precision it decodes on a half-precision copy of the model
   (:mod:`rlplugs.adapters.trl.generation_copy`). CUDA only: elsewhere the static cache runs
   uncompiled.

5. **Sampler log-probabilities** (``sampling_logprobs``). TRL receives the sampler's own
   log-probability of each drawn token from vLLM only; with plain or compiled ``generate`` it has
   none, so it can neither measure nor mask how far the decoding path strays from the trained
   policy. :mod:`rlplugs.adapters.trl.sampling_logprobs` records them during ``generate``; they
   reach TRL as vLLM's do, and the trainer logs their gap to its own (``sampling/logp_gap/*``).
   With them TRL's ``off_policy_mask_threshold`` sees a top-k/top-p truncation; TRL does not log
   what its mask drops, so the trainer does (``off_policy_mask/*``).

6. **Keep sampling mask** (``keep_sampling_mask``). Under top-k/top-p the sampler records each
   token's kept set and the trainer scores every token over that set alone
   (:mod:`rlplugs.adapters.trl.keep_sampling_mask`): old log-probabilities, loss and off-policy
   mask then see the policy the rollouts came from. The sets travel with the generation batch
   (``sampling_kept``, one tensor per row, split and shuffled with it by TRL) and reach the
   log-probability pass through :attr:`EnvGRPOTrainer._kept_sets` while a pass that needs them runs.

Reward functions with a ``bind`` attribute (:class:`rlplugs.adapters.trl.rewards.EnvRewardFunctions`) are
bound to the trainer so group components know the process layout.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator
from typing import Any

import torch
from accelerate.utils import is_peft_model
from trl import GRPOTrainer

from rlplugs.adapters.trl.generation_copy import NEEDS_WHOLE_WEIGHTS, GenerationCopy
from rlplugs.adapters.trl.keep_sampling_mask import head_scalings, rescored
from rlplugs.adapters.trl.packed_gqa import COMPILE_BUCKET, COMPILED_DECODING, use_decoding_attention
from rlplugs.adapters.trl.sampling_logprobs import RecordedGenerate, truncations, unsupported_warpers

log = logging.getLogger(__name__)

# Two rewards closer than this are "equal": TRL's own zero-std check (torch.isclose) is as strict.
SPREAD_TOLERANCE = 1e-8
#: TRL's metrics that are means over the tokens in the loss, one entry a micro-batch
LOSS_TOKEN_MEANS = ("entropy", "kl", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
                    "cispo_clip_ratio", "vespo/phi_seq_mean")  # fmt: skip
UNHOOKED_OPTIMIZER = (
    "filter_zero_spread_groups: an update left with no token in the loss still steps the optimizer, "
    "which moves the weights along its momentum: the trainer could not hook this optimizer (a DeepSpeed "
    "config that defines its own); define it in TrainingArguments instead to skip such steps"
)
COMPILE_CONFLICT = (
    "compile_generation speeds up plain generate; it does not apply with use_vllm or "
    "use_transformers_continuous_batching: drop one of them"
)


def sampling_logprobs_conflict(args: Any, generation_config: Any = None, model_defaults: Any = None) -> str | None:
    """Why ``sampling_logprobs`` cannot run with these settings (TRL's ``GRPOConfig`` and, once the
    trainer has made them, its generation config over the model's own), or None."""
    if args.use_vllm or args.use_transformers_continuous_batching:
        return ("sampling_logprobs records plain generate's log-probabilities; vLLM returns its own and "
                "continuous batching none: drop sampling_logprobs or the other backend")  # fmt: skip
    generated = unsupported_warpers(generation_config, model_defaults) if generation_config is not None else []
    warpers = unsupported_warpers(args) + generated
    if warpers:
        return (f"sampling_logprobs records temperature, top-k and top-p sampling only, and {', '.join(dict.fromkeys(warpers))} "
                "would reshape the distribution after them: leave those at their defaults or drop sampling_logprobs")  # fmt: skip
    return None


def keep_sampling_mask_conflict(args: Any, sampling_logprobs: bool, episodes: bool, generation_config: Any = None,
                                model_defaults: Any = None) -> str | None:  # fmt: skip
    """Why ``keep_sampling_mask`` cannot run with these settings (TRL's ``GRPOConfig``; whether the
    environment plays episodes; and once the trainer has made it, its generation config over the
    model's own), or None."""
    if not sampling_logprobs:
        return "keep_sampling_mask renormalises over the kept sets the sampler records: turn on sampling_logprobs too"
    truncation = truncations(args) | (truncations(generation_config, model_defaults) if generation_config is not None else {})
    if "top_p" not in truncation and "top_k" not in truncation:
        return "keep_sampling_mask applies to truncated sampling: set top_p below 1 or top_k, or drop keep_sampling_mask"
    if "top_k" not in truncation:
        return "keep_sampling_mask keeps every token's kept set until the update: bound the sets with top_k (for example 512)"
    if getattr(args, "use_liger_kernel", False):
        return "keep_sampling_mask rescores tokens in TRL's own loss, and the Liger loss computes its own: drop one of them"
    if episodes:  # turns are generated by separate calls; their kept sets are not assembled per seat
        return "keep_sampling_mask supports single-turn environments; this one plays episodes: drop keep_sampling_mask"
    return None


def keep_sampling_mask_model_conflict(model_config: Any, sharded: bool) -> str | None:
    """Why ``keep_sampling_mask`` cannot rescore this model (its config; None where it is not known
    yet) or a sharded one (FSDP, DeepSpeed), or None. The launcher asks before any process starts;
    the trainer asks again with the loaded model."""
    if sharded:
        return "keep_sampling_mask reads output-embedding rows outside the forward, which FSDP and DeepSpeed shard: drop one of them"
    scalings = head_scalings(model_config) if model_config is not None else []
    if scalings:
        return f"keep_sampling_mask computes plain logits, and this model scales them ({', '.join(scalings)}): drop keep_sampling_mask"
    return None


def without_unweighted_totals(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``rewards_per_func`` with every value of a row set to NaN when none of its nonzero-weight
    columns was scored: weight-0 columns are metrics, and cannot make a reward on their own."""
    weighted = weights.to(rewards_per_func.device) != 0
    if not weighted.any():
        return rewards_per_func
    no_reward = torch.isnan(rewards_per_func[:, weighted]).all(dim=1)
    out = rewards_per_func.clone()
    out[no_reward] = torch.nan
    return out


def zero_spread_rows(
    rewards_per_func: torch.Tensor, weights: torch.Tensor, group_size: int, per_component: bool = False
) -> torch.Tensor:
    """Boolean mask over the rows of the global batch: True where the row's group has no spread.

    Rows are grouped in contiguous blocks of ``group_size`` (how TRL lays out the global batch).
    With ``per_component`` (TRL's ``normalize_then_sum``) a group has spread if any component
    varies; otherwise the weighted total must vary (``sum_then_normalize``). Unscored values (NaN)
    are ignored; a group with fewer than two scored rows has no spread.
    """
    if per_component:
        values = rewards_per_func.view(-1, group_size, rewards_per_func.size(1))
    else:
        total = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        values = total.view(-1, group_size, 1)
    scored = ~torch.isnan(values)
    high = torch.where(scored, values, -torch.inf).amax(dim=1)
    low = torch.where(scored, values, torch.inf).amin(dim=1)
    enough = scored.sum(dim=1) >= 2
    has_spread = (enough & ((high - low) > SPREAD_TOLERANCE)).any(dim=1)
    return (~has_spread).repeat_interleave(group_size)


def loss_mask(batch: dict[str, Any]) -> torch.Tensor:
    """The tokens of a TRL batch that enter the loss: the completion mask, times the tool mask of
    multi-turn rollouts (tool output is read, not trained on)."""
    mask = batch["completion_mask"]
    return mask if batch.get("tool_mask") is None else mask * batch["tool_mask"]


class EnvGRPOTrainer(GRPOTrainer):
    """GRPOTrainer plus an optional zero-spread filter, compiled generation, sampler
    log-probabilities and row access for rollout functions."""

    def __init__(
        self, *args: Any, filter_zero_spread_groups: bool = False, compile_generation: bool = False,
        sampling_logprobs: bool = False, keep_sampling_mask: bool = False, **kwargs: Any,
    ):  # fmt: skip
        super().__init__(*args, **kwargs)
        self.filter_zero_spread_groups = filter_zero_spread_groups
        self.compile_generation = compile_generation
        self.sampling_logprobs = sampling_logprobs
        self.keep_sampling_mask = keep_sampling_mask
        #: the kept sets of the rows whose log-probabilities are being computed, while that runs
        self._kept_sets: list[torch.Tensor] | None = None
        self._generation_dtype: torch.dtype | None = None  # set when generation decodes on a copy
        self._generation_copy: GenerationCopy | None = None
        if compile_generation:
            self._enable_compiled_generation()
        if sampling_logprobs:
            model_defaults = self.accelerator.unwrap_model(self.model).generation_config
            refused = sampling_logprobs_conflict(self.args, getattr(self, "generation_config", None), model_defaults)
            if refused:
                raise ValueError(refused)
        if keep_sampling_mask:
            self._check_keep_sampling_mask()
        self.rollout_rows: list[dict[str, Any]] | None = None
        self._zero_spread: torch.Tensor | None = None
        self._tokens_since_step = False  # whether this update's micro-batches put any token in the loss
        self._batch_tokens: int | None = None  # tokens in the loss of the generation batch, all processes
        self._token_mean_keys: tuple[str, ...] = ()  # the token means TRL's loss logged last
        self._skip_hooked: torch.optim.Optimizer | None = None  # the optimizer whose steps skip updates without tokens
        self._warned_unhooked = False
        for func in self.reward_funcs:
            bind = getattr(func, "bind", None)
            if bind is not None:
                bind(self)

    def _enable_compiled_generation(self) -> None:
        if self.use_vllm or self.use_transformers_continuous_batching:
            raise ValueError(COMPILE_CONFLICT)
        for key, value in COMPILED_DECODING.items():
            setattr(self.generation_config, key, value)
        if not isinstance(self.pad_to_multiple_of, int):
            self.pad_to_multiple_of = COMPILE_BUCKET
        autocast = torch.bfloat16 if self.args.bf16 else torch.float16 if self.args.fp16 else None
        if autocast is None or self.model.dtype != torch.float32:
            use_decoding_attention(self.model)
            return
        if self.is_fsdp_enabled or self.is_deepspeed_enabled or is_peft_model(self.model):
            raise ValueError(NEEDS_WHOLE_WEIGHTS)
        self._generation_dtype = autocast

    def _check_keep_sampling_mask(self) -> None:
        model = self.accelerator.unwrap_model(self.model)
        refused = keep_sampling_mask_conflict(self.args, self.sampling_logprobs, self.rollout_func is not None,
                                              self.generation_config, model.generation_config)  # fmt: skip
        refused = refused or keep_sampling_mask_model_conflict(model.config, self.is_fsdp_enabled or self.is_deepspeed_enabled)
        if refused:
            raise ValueError(refused)

    def _generate_single_turn(self, *args: Any, **kwargs: Any):
        """TRL's generation, on the half-precision copy when there is one (see ``generation_copy``),
        returning the sampler's log-probabilities with ``sampling_logprobs`` (and with
        ``keep_sampling_mask`` keeping each row's kept sets in :attr:`_kept_sets`)."""
        with self._generating_model() as model:
            if not self.sampling_logprobs:
                return super()._generate_single_turn(*args, **kwargs)
            truncation = truncations(self.generation_config, model.generation_config)
            with RecordedGenerate(model, self.temperature, **truncation, keep_sets=self.keep_sampling_mask) as recorded:
                completion_ids, _ = super()._generate_single_turn(*args, **kwargs)
            if self.keep_sampling_mask:
                kept = [sets[sets[:, 0] < len(ids)] for sets, ids in zip(recorded.recorder.kept, completion_ids)]
                self._kept_sets = (self._kept_sets or []) + kept
            return completion_ids, [lp[: len(ids)] for lp, ids in zip(recorded.logprobs.tolist(), completion_ids)]

    @contextlib.contextmanager
    def _generating_model(self) -> Iterator[torch.nn.Module]:
        """The module TRL's generation calls ``generate`` on: the synced half-precision copy, put in
        ``self.model_wrapped`` (where TRL looks) for the duration, or else the trained model."""
        model = self.accelerator.unwrap_model(self.model)
        if self._generation_dtype is None:
            yield model
            return
        if self._generation_copy is None:
            self._generation_copy = GenerationCopy(model, self._generation_dtype)
        trained, self.model_wrapped = self.model_wrapped, self._generation_copy.sync(model, self.state.global_step)
        try:
            yield self.model_wrapped
        finally:
            self.model_wrapped = trained

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = without_unweighted_totals(
            super()._calculate_rewards(inputs, prompts, completions, completion_ids_list), self.reward_weights
        )
        if self.filter_zero_spread_groups and self.model.training:
            self._zero_spread = zero_spread_rows(
                rewards_per_func,
                self.reward_weights,
                self.num_generations,
                per_component=self.multi_objective_aggregation == "normalize_then_sum",
            )
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        self.rollout_rows = inputs
        self._zero_spread = self._batch_tokens = None
        try:
            output = super()._generate_and_score_completions(inputs)
            if self.keep_sampling_mask:
                output["sampling_kept"] = self._kept_sets
        finally:
            self.rollout_rows = self._kept_sets = None
        if self.sampling_logprobs:
            self._log_sampling_gap(output)
        if self._zero_spread is not None:
            output = self._leave_out_of_loss(output, self._zero_spread)
            self._zero_spread = None
        return output

    def _compute_loss(self, model, inputs):
        if self._nothing_to_train():
            return self._loss_without_forward()
        empty = False
        if self.filter_zero_spread_groups:
            empty = not self._tokens_in_loss(inputs)
            self._tokens_since_step |= self.model.training and not empty
            if empty and self.model.training and self._skip_hooked is None and not self._warned_unhooked:
                self._warned_unhooked = True
                if self.accelerator.is_main_process:  # every rank gets here alike: one line, not one a rank
                    log.warning(UNHOOKED_OPTIMIZER)
        metrics = self._metrics["train" if self.model.training else "eval"]
        logged = {key: len(metrics[key]) for key in LOSS_TOKEN_MEANS if key in metrics} if empty else {}
        self._kept_sets = inputs.get("sampling_kept")
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._kept_sets = None
        if self.model.training:
            self._token_mean_keys = tuple(key for key in LOSS_TOKEN_MEANS if key in metrics)
        if empty:  # this micro-batch's entries of TRL's token means measured no token
            for key in LOSS_TOKEN_MEANS:
                if key in metrics:  # a key may be new since the snapshot: all its entries are this micro-batch's
                    start = logged.get(key, 0)
                    metrics[key][start:] = [math.nan] * (len(metrics[key]) - start)
        return loss

    def _nothing_to_train(self) -> bool:
        """Whether this training micro-batch can skip its forward and backward: its generation
        batch put no token in any process's loss (so every process decides alike and none waits on
        another), the optimizer step is hooked to skip (not a DeepSpeed-defined optimizer), no fp16
        grad scaler expects gradients, no DeepSpeed engine wants a loss with a graph (it refuses
        one without), and no earlier micro-batch of this update left gradients that this one's
        backward must synchronise (an update can span two generation batches). Under DeepSpeed the
        forward runs, and the hooked step still leaves the weights as they are."""
        return (
            self.model.training and self._batch_tokens == 0 and self._skip_hooked is not None
            and self.accelerator.scaler is None and not self.is_deepspeed_enabled
            and not (self._tokens_since_step and self.accelerator.sync_gradients)
        )  # fmt: skip

    def _loss_without_forward(self) -> torch.Tensor:
        """A zero loss with no graph; TRL's token means get unmeasured entries, as an empty
        micro-batch's do."""
        metrics = self._metrics["train"]
        for key in self._token_mean_keys:
            metrics[key].append(math.nan)
        return torch.zeros((), device=self.accelerator.device, requires_grad=True)

    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        # a second train() gets accelerate's wrapper of the first's back: hook the optimizer inside, once.
        # A DeepSpeed config that defines its optimizer gets a placeholder here (accelerate's
        # DummyOptim, no torch optimizer): left unhooked, its updates without tokens are warned about
        inner = getattr(optimizer, "optimizer", optimizer)
        if self.filter_zero_spread_groups and isinstance(inner, torch.optim.Optimizer) and inner is not self._skip_hooked:
            inner.register_step_pre_hook(self._skip_step_without_tokens)
            self._skip_hooked = inner
        return optimizer

    def _skip_step_without_tokens(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """Before each optimizer step: an update that put no token in the loss leaves the weights
        and the optimizer's state as they are."""
        trained, self._tokens_since_step = self._tokens_since_step, False
        if not trained:
            for group in optimizer.param_groups:
                for param in group["params"]:
                    param.grad = None

    def _tokens_in_loss(self, inputs: dict[str, Any]) -> bool:
        """Whether any process's micro-batch has a token in the loss: one collective and one host
        sync per micro-batch, of the kind TRL 1.16's own ``_compute_loss`` makes up to six times
        for its metrics (gather, then ``.item()``); its cost on a GPU is not measured apart."""
        return self.accelerator.reduce(loss_mask(inputs).sum().float(), reduction="sum").item() > 0

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args: Any, **kwargs: Any):
        """TRL's, with each completion token rescored over its kept set while :attr:`_kept_sets` holds
        the rows' sets (entropies stay the whole vocabulary's). TRL's fused head returns its own
        log-probabilities with the entropies; they are computed and left unused."""
        kept = self._kept_sets
        if kept is None:
            return super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        if len(kept) != input_ids.size(0):
            raise RuntimeError(f"keep_sampling_mask: {len(kept)} rows of kept sets for {input_ids.size(0)} rows of tokens")
        lm = self.accelerator.unwrap_model(model)
        lm = lm.get_base_model() if is_peft_model(lm) else lm
        completion = input_ids[:, -logits_to_keep:]
        with rescored(lm.base_model, lm.get_output_embeddings(), completion, kept, self.temperature) as parts:
            _, entropies, aux_loss = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
        return torch.cat(parts), entropies, aux_loss

    def _log_sampling_gap(self, output: dict[str, Any]) -> None:
        """``sampling/logp_gap/{mean,max}``: how far the sampler's log-probabilities of its tokens
        lie from the trainer's, over the tokens in the loss of all processes. Logged where TRL
        computes the trainer's (``old_per_token_logps``: a generation batch that serves several
        updates, or ``num_iterations`` > 1); on-policy steps use the live ones, which TRL keeps to itself."""
        old, sampled = output.get("old_per_token_logps"), output.get("sampling_per_token_logps")
        if old is None or sampled is None:
            return
        mask = loss_mask(output)
        gap = (old - sampled).abs() * mask
        per_process = self.accelerator.gather(torch.stack([gap.sum(), mask.sum().to(gap.dtype), gap.max()]).unsqueeze(0))
        total, count, top = per_process[:, 0].sum(), per_process[:, 1].sum(), per_process[:, 2].max()  # one collective
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["sampling/logp_gap/mean"].append((total / count.clamp(min=1)).item())
        self._metrics[mode]["sampling/logp_gap/max"].append(top.item())

    def get_off_policy_mask(self, advantages, per_token_logps, sampling_per_token_logps, mask, off_policy_threshold):
        """TRL's off-policy sequence mask, logging what it drops (TRL logs nothing of it), pooled over
        the update's micro-batches and processes: ``off_policy_mask/dropped_frac``, the share of the
        update's rollouts left out of the loss, and ``/dropped_of_negative``, the share of those with
        a negative advantage (the only ones it may drop). ``/dropped_of_negative_at_{2,4,8}x`` say
        what 2, 4 and 8 times the threshold would have dropped, from TRL's per-rollout mean gap
        (recomputed here): a run at one threshold then shows where the next should be."""
        keep = GRPOTrainer.get_off_policy_mask(advantages, per_token_logps, sampling_per_token_logps, mask, off_policy_threshold)
        token_gap = torch.nan_to_num(sampling_per_token_logps - per_token_logps.detach(), nan=0.0)
        gap = (token_gap * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1.0)
        flags = [(keep == 0).to(gap.dtype), (advantages.view(-1, 1) < 0).to(gap.dtype), gap]  # keep: (B, 1)
        rows = self.accelerator.gather(torch.cat(flags, 1))
        dropped, negative, gap = rows[:, 0], rows[:, 1].bool(), rows[:, 2]
        metrics = self._metrics["train" if self.model.training else "eval"]
        metrics["off_policy_mask/dropped_frac"].extend(dropped.tolist())  # one entry a rollout: TRL's mean pools them
        if negative.any():
            metrics["off_policy_mask/dropped_of_negative"].extend(dropped[negative].tolist())
            for times in (2, 4, 8):
                wider = gap[negative] > times * off_policy_threshold
                metrics[f"off_policy_mask/dropped_of_negative_at_{times}x"].extend(wider.float().tolist())
        return keep

    def _leave_out_of_loss(self, output: dict[str, Any], global_rows: torch.Tensor) -> dict[str, Any]:
        """Zero the loss masks of this process's zero-spread rows; recount the global tokens."""
        mask = output["completion_mask"]
        start = self.accelerator.process_index * mask.size(0)
        keep = (~global_rows[start : start + mask.size(0)]).to(mask.device, mask.dtype).unsqueeze(1)
        output["completion_mask"] = mask * keep
        if output.get("tool_mask") is not None:
            output["tool_mask"] = output["tool_mask"] * keep
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask(output).sum()).sum()
        self._batch_tokens = int(output["num_items_in_batch"])
        self._metrics["train"]["zero_spread/filtered_frac"].append(global_rows.float().mean().item())
        return output
