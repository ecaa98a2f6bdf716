"""A stand-in for TRL's ``VLLMGeneration`` (vLLM cannot be installed on these machines).

Like a vLLM engine it holds its own copy of the weights, refreshed only by ``sync_weights``, and
answers token-id prompts with token ids and their sampling logprobs (from the real model, sampled
at the trainer's temperature). In ``server`` mode it keeps TRL's server-mode contract with real
collectives: every rank's prompts are gathered to rank 0, which generates them all, and each rank
takes back the slice ``[rank * n, (rank + 1) * n)`` of its own ``n`` prompts, so ranks passing
different numbers of prompts, or making different numbers of calls, get wrong answers or hang,
as they would with a real vLLM server. Every call is recorded.
"""

from __future__ import annotations

import copy

import torch


class StandInVLLM:
    """Records calls; generates from its own weight copy, which only ``sync_weights`` updates."""

    def __init__(self, trainer, server: bool = False):
        self.trainer = trainer
        self.server = server
        self.model = copy.deepcopy(trainer.accelerator.unwrap_model(trainer.model)).eval()
        self.syncs: list[tuple[int, float]] = []  # (global step, weight checksum) per sync
        self.calls: list[tuple[int, list[list[int]]]] = []  # (global step, prompts) per generate call

    def sync_weights(self) -> None:
        self.model.load_state_dict(self.trainer.accelerator.unwrap_model(self.trainer.model).state_dict())
        self.syncs.append((self.trainer.state.global_step, sum(p.double().sum().item() for p in self.model.parameters())))

    def generate(self, prompts, images, num_generations, profiler=None):
        t = self.trainer
        self.calls.append((t.state.global_step, [list(p) for p in prompts]))
        if not self.server:
            return (prompts, *self._generate(prompts), None)
        from accelerate.utils import broadcast_object_list, gather_object

        everyone = gather_object([list(p) for p in prompts])
        answer = [self._generate(everyone) if t.accelerator.is_main_process else None]
        broadcast_object_list(answer, from_process=0)
        mine = slice(t.accelerator.process_index * len(prompts), (t.accelerator.process_index + 1) * len(prompts))
        return prompts, answer[0][0][mine], answer[0][1][mine], None

    def _generate(self, prompts):
        t = self.trainer
        max_tokens = (t.args.generation_kwargs or {}).get("max_tokens", t.max_completion_length)
        completions, logprobs = [], []
        for prompt in prompts:
            out = self.model.generate(
                torch.tensor([prompt]), do_sample=True, temperature=t.temperature, top_k=0, top_p=1.0,
                max_new_tokens=max_tokens, output_logits=True, return_dict_in_generate=True,
                pad_token_id=t.processing_class.pad_token_id,
            )  # fmt: skip
            ids = out.sequences[0, len(prompt) :].tolist()
            logps = torch.stack(out.logits, dim=1)[0].div(t.temperature).log_softmax(-1)
            chosen = logps.gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1).tolist()
            end = next((k + 1 for k, tok in enumerate(ids) if tok in t.eos_token_ids), len(ids))
            completions.append(ids[:end])
            logprobs.append([[lp] for lp in chosen[:end]])  # vLLM's shape: top-1 logprob per token
        return completions, logprobs
