"""A Hugging Face transformers policy that answers many conversations per ``generate`` call.

Evaluation, guidance (best-of-N, beam search) and Monte-Carlo PRM labelling all need "the
model's next turn for these conversations, ``n`` samples each". :class:`HFPolicy` renders each
conversation with the tokenizer's chat template (``enable_thinking`` passed through, so Qwen3.5's
thinking switch works), left-pads a batch so every prompt ends at the same position, samples,
and decodes only the new tokens. It is both a :class:`~rlplugs.episode.Policy` (one
conversation, one reply) and a :class:`~rlplugs.episode.BatchPolicy`.

``compile_generation=True`` decodes as the GRPO trainer's ``compile_generation`` does (a static
cache, the compiled decoding step, ``packed_gqa.use_decoding_attention``'s attention, prompts
padded to a length bucket): on an H200 several times the tokens per second of plain ``generate``
for long completions, after a one-time compile per batch size and bucket, so it pays for large
evaluations (keep ``batch_size`` a divisor of the number of completions, or the last, smaller
batch compiles again). Off CUDA the static cache runs uncompiled.

Replies are returned as the model wrote them (a thinking model's ``<think>…</think>`` block
included): parsing an answer out of a reply is the environment's job, as it is in training. Each
reply is a :class:`Reply`: the text, which also says how many tokens it took and whether
``max_new_tokens`` cut it off, so an evaluation can tell a truncated reply from a wrong one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlplugs.config import validate_options
from rlplugs.envspec import Sampling
from rlplugs.episode import Message
from rlplugs.errors import InvalidOptionsError, UsageError


class Reply(str):
    """A reply's text that also carries ``tokens`` (generated, the stop token not counted) and
    ``at_cap`` (``max_new_tokens`` ran out before the model stopped). It is a ``str`` everywhere a
    reply is read; evaluation reports the share at the cap beside the scores (training logs the same
    figure as TRL's ``completions/clipped_ratio``)."""

    tokens: int
    at_cap: bool

    def __new__(cls, text: str, tokens: int, at_cap: bool) -> Reply:
        reply = super().__new__(cls, text)
        reply.tokens, reply.at_cap = tokens, at_cap
        return reply

    def __getnewargs__(self) -> tuple[str, int, bool]:  # pickled into a sandbox worker and back
        return str(self), self.tokens, self.at_cap


class HFPolicy:
    """Sample replies from a causal LM. ``model`` is a path or a loaded model; ``tokenizer``
    a path, a loaded tokenizer, or ``None`` for the model's own. ``device="auto"`` puts a model
    loaded from a path on the GPU when there is one (a loaded model is left where it is);
    ``dtype`` is the one it is loaded in ("auto": as saved; a checkpoint trained in mixed
    precision is saved in fp32, and decodes faster in "bfloat16")."""

    def __init__(
        self,
        model: str | Path | Any,
        tokenizer: str | Path | Any | None = None,
        temperature: float = 0.6,
        top_p: float = 1.0,
        max_new_tokens: int = 256,
        enable_thinking: bool = False,
        seed: int | None = 0,
        batch_size: int = 8,
        device: str | None = "auto",
        compile_generation: bool = False,
        dtype: str = "auto",
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed

        # before the model loads; every command's sampling flags end here (generate raised on some only
        # at the first call, and took a negative temperature as greedy without a word)
        if batch_size < 1:
            raise InvalidOptionsError(f"batch size {batch_size}: give at least 1 conversation per generate() call")
        validate_options(Sampling, {"temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens}, "sampling")
        loaded_here = isinstance(model, (str, Path))
        if loaded_here:
            self.name = str(model)
            model = AutoModelForCausalLM.from_pretrained(str(model), dtype=dtype)
        else:
            self.name = getattr(getattr(model, "config", None), "name_or_path", type(model).__name__)
        if tokenizer is None:
            tokenizer = getattr(model, "name_or_path", None) or self.name
        if isinstance(tokenizer, (str, Path)):
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        if device == "auto":  # a checkpoint loaded here goes to the accelerator; a given model stays put
            device = ("cuda" if torch.cuda.is_available() else "cpu") if loaded_here else None
        self.model = model.to(device) if device else model
        self.model.eval()
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.temperature = temperature
        self.top_p = top_p
        self.max_new_tokens = max_new_tokens
        self.enable_thinking = enable_thinking
        self.batch_size = batch_size
        self.decoding: dict[str, Any] = {}
        self.pad_to_multiple_of: int | None = None
        if compile_generation:
            from rlplugs.adapters.trl.packed_gqa import COMPILE_BUCKET, COMPILED_DECODING, use_decoding_attention

            use_decoding_attention(self.model)
            self.decoding, self.pad_to_multiple_of = COMPILED_DECODING, COMPILE_BUCKET
        if seed is not None:
            set_seed(seed)

    @property
    def decoding_settings(self) -> dict[str, Any]:
        """How replies are decoded, read off the loaded model (reports record it: the same
        checkpoint can score differently in another dtype or attention)."""
        return {"dtype": str(self.model.dtype).removeprefix("torch."), "compiled": bool(self.decoding),
                "attention": self.model.config._attn_implementation}  # fmt: skip

    def render(self, messages: list[Message]) -> str:
        """The prompt text the model continues: chat template plus the assistant header."""
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, enable_thinking=self.enable_thinking
        )

    def __call__(self, messages: list[Message]) -> str:
        return self.generate([messages], n=1)[0][0]

    def generate(self, conversations: list[list[Message]], n: int = 1) -> list[list[str]]:
        """``n`` sampled replies for each conversation (greedy when ``temperature == 0``)."""
        prompts = [self.render(c) for c in conversations for _ in range(n)]
        replies: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            replies += self._generate_batch(prompts[start : start + self.batch_size])
        return [replies[i * n : (i + 1) * n] for i in range(len(conversations))]

    @torch.no_grad()
    def _generate_batch(self, prompts: list[str]) -> list[str]:
        enc = self.tokenizer(
            prompts, return_tensors="pt", padding=True, pad_to_multiple_of=self.pad_to_multiple_of, add_special_tokens=False
        ).to(self.model.device)
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p}
            if self.temperature > 0
            else {"do_sample": False}
        )
        out = self.model.generate(
            **enc,
            max_new_tokens=self.max_new_tokens,
            pad_token_id=self.tokenizer.pad_token_id,
            **sampling,
            **self.decoding,
        )
        new_tokens = out[:, enc["input_ids"].shape[1] :]
        texts = self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        stops = torch.isin(new_tokens, torch.tensor(self._stop_ids(), dtype=new_tokens.dtype, device=new_tokens.device))
        stopped = stops.any(dim=1)
        lengths = torch.where(stopped, stops.int().argmax(dim=1), new_tokens.shape[1])
        cut = new_tokens.shape[1] >= self.max_new_tokens
        return [Reply(t, n, cut and not s) for t, n, s in zip(texts, lengths.tolist(), stopped.tolist())]

    def _stop_ids(self) -> list[int]:
        """The end-of-sequence ids ``generate`` stops a row on: the generation config's (one or several)."""
        configured = self.model.generation_config.eos_token_id
        return configured if isinstance(configured, list) else [] if configured is None else [configured]


def load_policy(model: str, flag: str = "--model", **options: Any) -> HFPolicy:
    """:class:`HFPolicy` for a command's ``flag``: a sampling number out of range is refused as it
    is, and a checkpoint that does not load (a hub id neither cached nor reachable, a config
    transformers does not know) is one line naming the flag, not a traceback."""
    try:
        return HFPolicy(model, **options)
    except UsageError:
        raise
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"{flag} {model}: cannot load it ({first})") from exc
