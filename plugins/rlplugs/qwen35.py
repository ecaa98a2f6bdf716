"""Facts about the Qwen3.5 architecture that environments recommend to trainers.

Qwen3.5 mixes Gated DeltaNet (linear attention) and full-attention layers, so a LoRA on the usual
attention projections alone leaves the DeltaNet layers untrained; the list below covers both
kinds of layer and the MLP. The tiny test model (:mod:`rlplugs.testing.tiny_models`) has the same module
names.
"""

#: LoRA target modules for every Qwen3.5 layer kind: full attention, Gated DeltaNet, MLP.
QWEN35_LORA_TARGETS = [
    "q_proj", "k_proj", "v_proj", "o_proj",
    "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj",
    "gate_proj", "up_proj", "down_proj",
]  # fmt: skip
