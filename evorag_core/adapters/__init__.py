"""Trained LoRA adapters, the one home of their lifecycle: folder files and checks, the registry and activation,
per-request weights for the transformers backend, the hot-swap watcher, and resolving an adapter argument."""
