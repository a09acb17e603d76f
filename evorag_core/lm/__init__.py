"""Language-model backends: loading the embedded or any HF model, the transformers backend (KV cache, cascade, half decode) and vLLM."""
