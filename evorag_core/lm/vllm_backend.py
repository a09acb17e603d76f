"""`VLLMBackend`: the `PolicyBackend` on vLLM, for users with a CUDA GPU (optional `[gpu]` extra).

NOT TESTED in this repository's CI (no GPU, vllm not installed): it is written against vLLM's offline `LLM` API
(`LLM(model, enable_lora=True, enable_prefix_caching=True)`, `generate(TokensPrompt-dicts, SamplingParams,
lora_request=...)`, `prompt_logprobs`) and imports vllm lazily, only when the class is instantiated.

Same contracts as `TransformersBackend`: token boundary rule of `base.encode_pair`; a stop string or end token is
never part of a `Generation` (the token that introduced it is dropped, so `text == decode(token_ids)`); log-probs
are vLLM's returned log-probs (for the raw model distribution in current vLLM's default `logprobs_mode`). Prefix
reuse is vLLM's automatic prefix caching. LoRA adapters are validated like the transformers backend's (config,
weight file), registered under a name, and sent with each request as a `LoRARequest`; `activate` just changes which.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from evorag_core.config import PolicyConfig, home_dir
from evorag_core.errors import AdapterError, ModelLoadError
from evorag_core.lm.base import chat_prompt, Generation, encode_pair
from evorag_core.lm.loading import resolve_model
from evorag_core.adapters.weights import read_adapter_config, read_adapter_weights

__all__ = ["VLLMBackend"]


class VLLMBackend:
    def __init__(self, cfg: PolicyConfig | None = None, home: Path | None = None, *, max_lora_rank: int = 64,
                 gpu_memory_utilization: float = 0.85) -> None:
        try:
            from vllm import LLM
        except ImportError as exc:
            raise ModelLoadError("the vLLM backend needs the [gpu] extra: pip install 'evorag-studio[gpu]'") from exc
        cfg = cfg if cfg is not None else PolicyConfig()
        folder = resolve_model(cfg.model, home if home is not None else home_dir())
        dtype = "auto" if cfg.dtype == "float32" else cfg.dtype
        self.llm = LLM(str(folder), dtype=dtype, seed=cfg.seed, enable_lora=True, max_lora_rank=max_lora_rank,
                       enable_prefix_caching=True, gpu_memory_utilization=gpu_memory_utilization)
        self.tokenizer = self.llm.get_tokenizer()
        self.model_id = cfg.model if cfg.model != "embedded" else f"embedded:{folder.name}"
        self.device = "cuda"
        self.dtype = str(self.llm.llm_engine.model_config.dtype).removeprefix("torch.")
        self.tokens_generated = 0
        self.prompt_tokens = 0
        self._adapters: dict[str, object] = {}  # name -> LoRARequest
        self._active: str | None = None
        self._end_ids = frozenset(self.tokenizer.all_special_ids) | {self.tokenizer.eos_token_id}

    def chat_prompt(self, system: str, user: str, examples: Sequence[tuple[str, str]] = ()) -> str:
        return chat_prompt(self.tokenizer, system, user, examples)

    def _lora(self):
        return self._adapters[self._active] if self._active is not None else None

    def score_choices(self, prompt: str, choices: Sequence[str]) -> list[float]:
        from vllm import SamplingParams

        prompt_ids = encode_pair(self.tokenizer, prompt, "")[0]
        conts = [encode_pair(self.tokenizer, "", c)[1] for c in choices]
        requests = [{"prompt_token_ids": prompt_ids + c} for c in conts if c]
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0)
        outputs = iter(self.llm.generate(requests, params, use_tqdm=False, lora_request=self._lora()))
        scores = []
        for c in conts:
            if not c:
                scores.append(0.0)
                continue
            per_position = next(outputs).prompt_logprobs
            scores.append(sum(per_position[len(prompt_ids) + j][tok].logprob for j, tok in enumerate(c)))
        self.prompt_tokens += len(requests) * len(prompt_ids)
        return scores

    def sequence_logprob(self, prompt: str, completion: str) -> float:
        return self.score_choices(prompt, [completion])[0]

    def sequence_logprobs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        return [self.sequence_logprob(p, c) for p, c in pairs]

    def generate(self, prompt: str, max_new_tokens: int, stop: Sequence[str] = (), temperature: float = 0.0,
                 n: int = 1, seed: int | None = None, *, ignore_eos: bool = False) -> list[Generation]:
        from vllm import SamplingParams

        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if max_new_tokens <= 0:
            return [Generation("", (), (), "length") for _ in range(n)]
        prompt_ids = encode_pair(self.tokenizer, prompt, "")[0]
        params = SamplingParams(n=n, temperature=max(temperature, 0.0), max_tokens=max_new_tokens, seed=seed,
                                stop=list(stop) or None, logprobs=0, ignore_eos=ignore_eos)
        out = self.llm.generate([{"prompt_token_ids": prompt_ids}], params, use_tqdm=False,
                                lora_request=self._lora())[0]
        results = [self._trim(c.token_ids, c.logprobs, stop, ignore_eos, max_new_tokens) for c in out.outputs]
        self.prompt_tokens += len(prompt_ids)
        self.tokens_generated += sum(len(g.token_ids) for g in results)
        return results

    def generate_batch(self, prompts: Sequence[str], max_new_tokens: int | Sequence[int], stop: Sequence[str] = (),
                       temperature: float = 0.0, seed: int | None = None, *,
                       ignore_eos: bool = False) -> list[Generation]:
        from vllm import SamplingParams

        limits = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
        requests, params, slots = [], [], []
        for i, (prompt, limit) in enumerate(zip(prompts, limits)):
            if limit > 0:
                slots.append(i)
                requests.append({"prompt_token_ids": encode_pair(self.tokenizer, prompt, "")[0]})
                params.append(SamplingParams(temperature=max(temperature, 0.0), max_tokens=limit,
                                             seed=None if seed is None else seed + i, stop=list(stop) or None,
                                             logprobs=0, ignore_eos=ignore_eos))
        results = [Generation("", (), (), "length") for _ in prompts]
        if requests:
            outs = self.llm.generate(requests, params, use_tqdm=False, lora_request=self._lora())
            for i, out in zip(slots, outs):
                c = out.outputs[0]
                results[i] = self._trim(c.token_ids, c.logprobs, stop, ignore_eos, limits[i])
                self.prompt_tokens += len(requests[slots.index(i)]["prompt_token_ids"])
        self.tokens_generated += sum(len(g.token_ids) for g in results)
        return results

    def _trim(self, token_ids, logprobs, stop, ignore_eos, max_new_tokens) -> Generation:
        """Cut before an end token or before the token whose text completes a stop string."""
        kept: list[int] = []
        kept_lp: list[float] = []
        for tok, lp in zip(token_ids, logprobs or [{}] * len(token_ids)):
            if (tok in self._end_ids and not ignore_eos) or (
                    stop and any(s in self.tokenizer.decode(kept + [tok]) for s in stop)):
                return Generation(self.tokenizer.decode(kept), tuple(kept), tuple(kept_lp), "stop")
            kept.append(tok)
            kept_lp.append(lp[tok].logprob if tok in lp else float("nan"))
        reason = "length" if len(kept) >= max_new_tokens else "stop"
        return Generation(self.tokenizer.decode(kept), tuple(kept), tuple(kept_lp), reason)

    def load_adapter(self, name: str, path: Path | str) -> None:
        from vllm.lora.request import LoRARequest

        if name in self._adapters:
            raise AdapterError(f"an adapter named {name!r} is already loaded; pick another name")
        path = Path(path)
        read_adapter_config(path)
        read_adapter_weights(path)  # validate before vLLM loads it lazily at the first request
        self._adapters[name] = LoRARequest(name, len(self._adapters) + 1, str(path))

    def list_adapters(self) -> list[str]:
        return sorted(self._adapters)

    def activate(self, name: str | None) -> None:
        if name is not None and name not in self._adapters:
            raise AdapterError(f"no adapter named {name!r} is loaded (loaded: {', '.join(self._adapters) or 'none'})")
        self._active = name

    @property
    def active_adapter(self) -> str | None:
        return self._active
