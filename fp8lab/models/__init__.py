"""Real models end to end (issue 21): MiniLM (a BERT encoder) and SmolLM2 (a llama decoder) in
JAX over fp8lab's quantized weights and KV cache, with their loaders and tokenizers.

Optional: needs the `models` extra (`pip install fp8lab[models]`, for `gguf`) and the files
that `python -m fp8lab.models.fetch` puts in the cache; nothing here is imported by fp8lab.
"""
