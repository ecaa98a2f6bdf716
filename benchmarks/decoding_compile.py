"""How long compiled decoding takes to compile and then to run, packed vs block (vs span) attention, side by side.

The one GPU figure of the block decoding attention (``block_decoding.py``) is a first GRPO step,
compile included; this separates the two on any device: the first ``generate`` call (which
compiles the decoding step) and later calls, with transformers' auto-compile forced on (on the
CPU it is off by default), counting the graphs dynamo built. On CUDA span GQA (what
``compile_generation`` runs there) is timed too.

    python benchmarks/decoding_compile.py --device cpu --batch 4 --prompt 64 --new 64
"""

from __future__ import annotations

import argparse
import json
import os


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new", type=int, default=64, help="new tokens per call (every row decodes them all)")
    p.add_argument("--calls", type=int, default=3)
    a = p.parse_args()
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"  # compile every time: a warm on-disk cache hides it
    import torch
    import torch._dynamo.utils as dynamo_utils
    from block_decoding import use_block_decoding
    from decode_profile import timed
    from transformers import AutoModelForCausalLM
    from transformers.generation import CompileConfig

    from rlplugs.adapters.trl.packed_gqa import COMPILED_DECODING, use_packed_gqa
    from rlplugs.testing.smollm2 import smollm2_dir

    dtype = torch.bfloat16 if a.device.startswith("cuda") else torch.float32
    compile_config = CompileConfig(fullgraph=True)
    compile_config._compile_all_devices = True  # transformers compiles on CUDA alone unless told
    result = {"device": a.device, "batch": a.batch, "prompt": a.prompt, "new_tokens": a.new, "torch": torch.__version__}
    attentions = ("packed", "blocks", "span") if a.device.startswith("cuda") else ("packed", "blocks")
    for attention in attentions:
        torch._dynamo.reset()
        graphs = dynamo_utils.counters["stats"]["unique_graphs"]
        model = AutoModelForCausalLM.from_pretrained(str(smollm2_dir()), dtype=dtype).to(a.device).eval()
        use_packed_gqa(model)
        if attention == "blocks":
            use_block_decoding(model)
        if attention == "span":
            from rlplugs.adapters.trl.span_gqa import use_span_gqa

            use_span_gqa(model)
        ids = torch.randint(100, 1000, (a.batch, a.prompt), device=a.device)
        decode = lambda: model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,  # noqa: E731
                                        max_new_tokens=a.new, min_new_tokens=a.new, compile_config=compile_config,
                                        **COMPILED_DECODING)  # fmt: skip
        seconds = [round(timed(decode), 2) for _ in range(a.calls)]
        result[attention] = {"call_s": seconds, "graphs": dynamo_utils.counters["stats"]["unique_graphs"] - graphs}
    for other in attentions[1:]:
        result[f"first_call_ratio_{other}_vs_packed"] = round(result[other]["call_s"][0] / result["packed"]["call_s"][0], 2)
        later = min(result[other]["call_s"][1:]) / min(result["packed"]["call_s"][1:])
        result[f"later_call_ratio_{other}_vs_packed"] = round(later, 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
