"""`OpenAIBackend`: the `PolicyBackend` over an OpenAI-compatible completions server (vLLM, SGLang, llama.cpp's
server), so the policy can run on a GPU box while the agent, the studio and the store stay on a CPU box
(`policy.backend = "openai"`, `policy.base_url`; docs/serving.md).

Everything goes through the legacy `/completions` endpoint (a chat endpoint cannot score a given continuation).
Prompts travel as token ids where the server takes them (vLLM, SGLang, llama.cpp's own server), else as text
(llama-cpp-python's server). How a choice is scored (`score_choices`, `sequence_logprob(s)`) follows from the
server's `protocol`, probed once at start with an echo request over token ids:
- "echo" (token ids, prompt log-probs echoed: vLLM, SGLang): `echo=true, logprobs=1, max_tokens=1` over prompt +
  choice ids, all choices in one request; the choice's log-prob is the sum of the echoed prompt log-probs of its
  tokens (the generated token is ignored; `max_tokens=0` is never sent: llama-cpp-python reads it as "until the
  context is full"). The boundary rule of `base.encode_pair` holds exactly.
- "next-token" (token ids, no echo: llama.cpp's server ignores `echo`): each choice token's log-prob is read, by
  token id, from the whole next-token distribution after the prompt ids and the choice's earlier ids
  (`max_tokens=1, logprobs=<vocabulary size>`; one request per distinct context). The boundary rule holds exactly.
  Its log-probs come in the chat format (`logprobs.content[i].top_logprobs`), read here as well.
- "text": llama-cpp-python 0.3's server echoes prompt log-probs, but it sorts the whole vocabulary in Python for every
  echoed token (~0.2 s per token measured on the 2-core machine: over a minute for one agent prompt), and llama.cpp's
  own server refuses `echo`. So each choice token's log-prob is read from the next-token log-probs after the prompt
  and the choice's earlier tokens (`max_tokens=1, logprobs=_TOP_K`, the whole vocabulary; one request per distinct
  context, the four labels' first tokens share one). A choice with a token missing from the list or a special token
  (rendered as an empty, ambiguous string) falls back to echo (`echo_fallbacks`).
- generation: `max_tokens`, `temperature`, `seed`, `stop`, `logprobs=1`, `top_p=1` (and for the llama.cpp servers,
  whose defaults truncate and penalize, `top_k=0, min_p=0, repeat_penalty=1`: plain softmax sampling); `n` samples
  are n requests with seeds seed, seed+1, ... in flight together (llama-cpp-python ignores `n`, llama.cpp refuses
  n > 1); `ignore_eos` is sent as `min_tokens` (and as `ignore_eos` to llama.cpp's server). A generation's
  `token_ids` are the local tokenizer's encoding of the returned text; when they do not line up with the server's
  token strings, the text is re-scored, so `logprob` is log P(text | prompt) on the server.
The tokenizer is local (`policy.model`: "embedded" = the converted folder under home/models, else a folder or hub
id whose tokenizer files are read): the chat template, the boundary rule and token counts need it.

Adapters (the registry's one activation path: `adapters.registry.activate` flips the row, the running backend's
`AdapterWatcher` calls `load_adapter` then `activate`): `load_adapter` verifies the folder locally, asks the server to
load it (`POST /load_lora_adapter {lora_name, lora_path}`, vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), and proves
it (adapters/served.py); `activate` proves the adapter again at every swap; requests then name it as the model. A
failed proof raises AdapterError and the backend refuses every later call until an adapter (or the base model) is
activated and proved. A server without the load endpoint (llama.cpp's) can serve no adapter: loads are refused.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import httpx

from evorag_core.adapters.files import META_FILE, read_adapter_meta
from evorag_core.adapters.served import ServedAdapter, WeightsHash, prove_served, served_entry
from evorag_core.adapters.weights import read_adapter_config, read_adapter_weights
from evorag_core.config import PolicyConfig, home_dir
from evorag_core.errors import AdapterError, ConfigError, ModelLoadError
from evorag_core.lm.base import chat_prompt, grouped_sequence_logprobs, Generation, encode_pair
from evorag_core.lm.loading import base_model_id, resolve_model

__all__ = ["OpenAIBackend", "ServerError"]

# the llama.cpp servers default to top_k 40, min_p 0.05 (llama-cpp-python also to repeat_penalty 1.1): sampling and
# greedy text would differ from the in-process backend's plain softmax; these make it plain
_PLAIN_SAMPLING = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
_TOP_K = 49152  # text mode: next-token log-probs asked for per scored position (SmolLM2: the whole vocabulary)
_PARALLEL = 8  # requests in flight at once for n samples / a batch (the server batches or queues them)
_RESENDS = 1  # a read the server dropped without answering is sent once more (`_request`)


class ServerError(ModelLoadError):
    """The policy server could not be reached or answered with an error."""


class OpenAIBackend:
    """See the module docstring. `OpenAIBackend(cfg, home)`; `tokenizer` overrides the one `cfg.model` names."""

    def __init__(self, cfg: PolicyConfig | None = None, home: Path | None = None, *, tokenizer: Any = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        cfg = cfg if cfg is not None else PolicyConfig()
        if not cfg.base_url:
            raise ConfigError("policy.backend = 'openai' needs policy.base_url (e.g. http://127.0.0.1:8000/v1)")
        home = home if home is not None else home_dir()
        self.base_url = cfg.base_url.rstrip("/")
        key = os.environ.get(cfg.api_key_env, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=cfg.request_timeout_s,
                                  transport=transport)
        self.tokenizer = tokenizer if tokenizer is not None else _load_tokenizer(cfg.model, home)
        self.model_id = base_model_id(cfg.model, home)  # what adapters record as their base model
        self.requests = 0
        listing = self.models()
        ids = [str(m.get("id")) for m in listing]
        if cfg.served_model and cfg.served_model not in ids:
            raise ConfigError(f"policy.served_model {cfg.served_model!r} is not served at {self.base_url} "
                              f"(it lists {', '.join(ids) or 'nothing'})")
        if not ids:
            raise ServerError(f"{self.base_url}/models lists no model")
        self.served_model = cfg.served_model or ids[0]
        self.device = f"served:{self.base_url}"
        self.dtype = "served"
        self.tokens_generated = 0
        self.prompt_tokens = 0
        self.boundary_merges = 0  # text mode: a server token crossed the prompt/choice boundary
        self.echo_fallbacks = 0  # text mode: choices scored by echo (a token not in the top-K next tokens)
        self.rescored_generations = 0  # generations whose tokens did not line up with the server's
        self.cache_epoch = 0  # +1 at every adapter swap (the agent keys prepared decisions on it)
        self._adapters: dict[str, ServedAdapter] = {}
        self._active: str | None = None
        self._refusal: str | None = None  # set by a failed proof: no call is served until a good activate
        self._hash = WeightsHash()
        self.protocol = self._probe()

    # -- HTTP ------------------------------------------------------------------------------------------------

    def _post(self, path: str, payload: dict[str, Any]) -> httpx.Response:
        return self._request("POST", path, json=payload)

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """One request; a read (`GET`, `/completions`: same answer when sent again) that the server dropped without
        a response is sent once more on a new connection. A server closes a kept-alive connection once it has been
        idle for its keep-alive time (llama.cpp's: 5 s), and a request that left on it just then gets "Server
        disconnected without sending a response" (seen under load between two slow in-process steps). Loads and
        unloads are not re-sent."""
        retries = _RESENDS if method == "GET" or path == "/completions" else 0
        for attempt in range(retries + 1):
            try:
                response = self._http.request(method, path, **kw)
                break
            except httpx.HTTPError as exc:
                if isinstance(exc, httpx.RemoteProtocolError) and attempt < retries:
                    continue
                raise ServerError(f"policy server {self.base_url}{path}: {type(exc).__name__}: {exc}") from None
        self.requests += 1
        return response

    def _completions(self, payload: dict[str, Any]) -> dict[str, Any]:
        self._check_not_refused()
        response = self._post("/completions", {"model": self._model_name(), **payload})
        if response.status_code != 200:
            raise ServerError(f"policy server {self.base_url}/completions answered {response.status_code}: "
                              f"{response.text[:300]}")
        return response.json()

    def models(self) -> list[dict[str, Any]]:
        """The server's `/models` listing (its `data` list)."""
        try:
            response = self._request("GET", "/models")
        except ServerError as exc:
            raise ServerError(f"no policy server answers at {self.base_url} ({exc}); "
                              "start it first (docs/serving.md)") from None
        if response.status_code != 200:
            raise ServerError(f"{self.base_url}/models answered {response.status_code}: {response.text[:300]}")
        return list(response.json().get("data", []))

    def _probe(self) -> str:
        """The server's protocol (module docstring): "echo" where it takes a prompt as token ids and echoes its
        log-probs (vLLM, SGLang), "next-token" where it takes token ids and echoes nothing (llama.cpp's server),
        "text" where it takes text only (llama-cpp-python's server refuses a list with 422)."""
        ids = self.encode("Hello")
        response = self._post("/completions", {"model": self.served_model, "prompt": ids, "max_tokens": 1,
                                               "temperature": 0.0, "echo": True, "logprobs": 1})
        if response.status_code != 200:
            return "text"
        logprobs = response.json()["choices"][0].get("logprobs") or {}
        return "echo" if len(logprobs.get("token_logprobs") or []) >= len(ids) else "next-token"

    @property
    def token_prompts(self) -> bool:
        """Whether prompts travel as token ids (the "echo" and "next-token" protocols)."""
        return self.protocol != "text"

    def _model_name(self) -> str:
        return self._active if self._active is not None else self.served_model

    # -- prompts ---------------------------------------------------------------------------------------------

    def chat_prompt(self, system: str, user: str, examples: Sequence[tuple[str, str]] = ()) -> str:
        return chat_prompt(self.tokenizer, system, user, examples)

    def encode(self, text: str) -> list[int]:
        return encode_pair(self.tokenizer, text, "")[0]

    def _prompt(self, prompt: str, completion: str = "") -> list[int] | str:
        if not self.token_prompts:
            return prompt + completion
        p, c = encode_pair(self.tokenizer, prompt, completion)
        return p + c

    # -- scoring ---------------------------------------------------------------------------------------------

    def token_logprobs(self, prompt: str, completions: Sequence[str]) -> list[list[float]]:
        """Per-token log-probs of each completion after `prompt` (echoed prompt log-probs; see the docstring)."""
        if not prompt:
            raise ValueError("the prompt must not be empty")
        out: list[list[float]] = [[] for _ in completions]
        todo = [i for i, c in enumerate(completions) if c]
        if not todo:
            return out
        echo = {"echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0.0}
        if self.protocol == "next-token":
            return self._next_token_ids(prompt, completions, todo, out)
        if self.protocol == "echo":
            n_prompt = len(self.encode(prompt))
            prompts = [self._prompt(prompt, completions[i]) for i in todo]
            choices = self._completions({"prompt": prompts, **echo})["choices"]
            for choice in choices:
                i, ids = todo[choice["index"]], prompts[choice["index"]]
                lps = choice["logprobs"]["token_logprobs"]
                if len(lps) < len(ids):
                    raise ServerError(f"{self.base_url} echoed {len(lps)} log-probs for a {len(ids)}-token prompt")
                out[i] = [float(x) for x in lps[n_prompt:len(ids)]]
                self.prompt_tokens += len(ids)
            return out
        return self._next_token_logprobs(prompt, completions, todo, out)

    def _next_token_ids(self, prompt: str, completions: Sequence[str], todo: list[int],
                        out: list[list[float]]) -> list[list[float]]:
        """"next-token" protocol: each choice token's log-prob, by token id, from the whole next-token distribution
        after the prompt ids and the choice's earlier ids (one request per distinct context; all first tokens share
        the prompt's)."""
        pairs = {i: encode_pair(self.tokenizer, prompt, completions[i]) for i in todo}
        contexts = sorted({tuple(p + c[:j]) for p, c in pairs.values() for j in range(len(c))})
        tops = dict(zip(contexts, self._parallel(self._top_next_ids, contexts)))
        for i in todo:
            p, c = pairs[i]
            row = [tops[tuple(p + c[:j])].get(tok) for j, tok in enumerate(c)]
            if None in row:
                raise ServerError(f"{self.base_url} gave no log-prob for token {c[row.index(None)]} of a choice "
                                  f"(it returned fewer next-token log-probs than the {len(self.tokenizer)} asked for)")
            out[i] = row
        return out

    def _top_next_ids(self, context: tuple[int, ...]) -> dict[int, float]:
        """Token id -> log-prob of every next token after `context` (llama.cpp's log-probs are those of the model's
        softmax before any sampler, so the greedy request does not bend them)."""
        reply = self._completions({"prompt": list(context), "max_tokens": 1, "temperature": 0.0,
                                   "logprobs": len(self.tokenizer), **_PLAIN_SAMPLING})
        self.prompt_tokens += int(reply.get("usage", {}).get("prompt_tokens", 0))
        content = (reply["choices"][0].get("logprobs") or {}).get("content") or []
        if not content:
            raise ServerError(f"{self.base_url} returned no log-probs for a next-token request")
        return {int(t["id"]): float(t["logprob"]) for t in content[0].get("top_logprobs") or []}

    def _next_token_logprobs(self, prompt: str, completions: Sequence[str], todo: list[int],
                             out: list[list[float]]) -> list[list[float]]:
        """Text mode: each choice token's log-prob read from the `_TOP_K` next-token log-probs after the prompt
        and the choice's earlier tokens (one request per distinct context; all first tokens share the prompt's).
        A token missing from the top-K, or a special token (echoed as an empty string, ambiguous), makes that choice
        fall back to echo scoring (`echo_fallbacks`)."""
        ids = {i: encode_pair(self.tokenizer, "", completions[i])[1] for i in todo}
        contexts = {prompt + self.tokenizer.decode(ids[i][:j]) for i in todo for j in range(len(ids[i]))}
        tops = dict(zip(sorted(contexts), self._parallel(self._top_next, sorted(contexts))))
        specials = set(self.tokenizer.all_special_ids)
        fallback = []
        for i in todo:
            row = []
            for j, tok in enumerate(ids[i]):
                key = self.tokenizer.decode([tok])
                top = tops[prompt + self.tokenizer.decode(ids[i][:j])]
                if tok in specials or not key or key not in top:
                    break
                row.append(float(top[key]))
            if len(row) == len(ids[i]):
                out[i] = row
            else:
                fallback.append(i)
        self.echo_fallbacks += len(fallback)
        return self._echo_text(prompt, completions, fallback, out)

    def _top_next(self, context: str) -> dict[str, float]:
        # min_tokens: an end-of-turn argmax would end the reply before any token, and with it the log-probs
        reply = self._completions({"prompt": context, "max_tokens": 1, "min_tokens": 1, "temperature": 0.0,
                                   "logprobs": _TOP_K, **_PLAIN_SAMPLING})
        self.prompt_tokens += int(reply.get("usage", {}).get("prompt_tokens", 0))
        top = (reply["choices"][0].get("logprobs") or {}).get("top_logprobs") or [None]
        return dict(top[0] or {})

    def _echo_text(self, prompt: str, completions: Sequence[str], todo: list[int],
                   out: list[list[float]]) -> list[list[float]]:
        """Text mode, echo scoring: one request per choice (correct, but llama-cpp-python spends ~1 s per prompt
        token on it: docs/serving.md)."""
        echo = {"echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0.0}
        for i in todo:
            reply = self._completions({"prompt": prompt + completions[i], **echo})
            choice = reply["choices"][0]
            generated = int(reply.get("usage", {}).get("completion_tokens", 0))
            out[i] = self._tail(choice["logprobs"], completions[i], generated)
            self.prompt_tokens += int(reply.get("usage", {}).get("prompt_tokens", 0))
        return out

    def _tail(self, logprobs: dict[str, Any], text: str, generated: int) -> list[float]:
        """Log-probs of the echoed tokens that spell `text` at the end of the prompt (text mode). Special tokens
        (e.g. an end-of-turn mark ending a choice) may be echoed as empty strings, so they are compared without."""
        tokens = logprobs["tokens"][: len(logprobs["tokens"]) - generated]
        values = logprobs["token_logprobs"][: len(tokens)]
        if "".join(tokens).endswith(text) is False:
            for special in self.tokenizer.all_special_tokens:
                text = text.replace(special, "")
        spelled, picked = "", []
        for tok, lp in zip(reversed(tokens), reversed(values)):
            if len(spelled) >= len(text):
                break
            if lp is None:
                raise ServerError(f"{self.base_url} gave no log-prob for a continuation token")
            spelled = tok + spelled
            picked.append(float(lp))
        if spelled != text:
            if not spelled.endswith(text):
                raise ServerError(f"{self.base_url} echoed tokens {spelled[-40:]!r} that do not end with "
                                  f"{text[-40:]!r}")
            self.boundary_merges += 1
        return picked[::-1]

    def score_choices(self, prompt: str, choices: Sequence[str]) -> list[float]:
        return [sum(lps) for lps in self.token_logprobs(prompt, choices)]

    def sequence_logprob(self, prompt: str, completion: str) -> float:
        return self.score_choices(prompt, [completion])[0]

    def sequence_logprobs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        return grouped_sequence_logprobs(self.score_choices, pairs)

    # -- generation ------------------------------------------------------------------------------------------

    def generate(self, prompt: str, max_new_tokens: int, stop: Sequence[str] = (), temperature: float = 0.0,
                 n: int = 1, seed: int | None = None, *, ignore_eos: bool = False) -> list[Generation]:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        return self.generate_batch([prompt] * n, max_new_tokens, stop, temperature, seed, ignore_eos=ignore_eos)

    def generate_batch(self, prompts: Sequence[str], max_new_tokens: int | Sequence[int], stop: Sequence[str] = (),
                       temperature: float = 0.0, seed: int | None = None, *,
                       ignore_eos: bool = False) -> list[Generation]:
        """One continuation per prompt; request i uses seed `seed + i` (all requests in flight together)."""
        limits = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
        if len(limits) != len(prompts):
            raise ValueError("max_new_tokens must be an int or one limit per prompt")
        self._check_not_refused()
        jobs = [(i, p, limit) for i, (p, limit) in enumerate(zip(prompts, limits)) if limit > 0]
        results = [Generation("", (), (), "length") for _ in prompts]

        def one(job: tuple[int, str, int]) -> Generation:
            i, prompt, limit = job
            payload: dict[str, Any] = {"prompt": self._prompt(prompt), "max_tokens": limit,
                                       "temperature": max(temperature, 0.0), "logprobs": 1, "top_p": 1.0}
            if self.protocol != "echo":  # the llama.cpp servers sample with top-k 40, min-p 0.05 by default
                payload.update(_PLAIN_SAMPLING)
            if seed is not None:
                payload["seed"] = seed + i
            if stop:
                payload["stop"] = list(stop)
            if ignore_eos:
                payload["min_tokens"] = limit
                if self.protocol == "next-token":  # llama.cpp's server has no min_tokens
                    payload["ignore_eos"] = True
            reply = self._completions(payload)
            self.prompt_tokens += int(reply.get("usage", {}).get("prompt_tokens", 0))
            return self._generation(prompt, reply["choices"][0], limit)

        done = self._parallel(one, jobs)
        for (i, _, _), generation in zip(jobs, done):
            results[i] = generation
        self.tokens_generated += sum(len(g.token_ids) for g in done)
        return results

    @staticmethod
    def _parallel(fn, items: list) -> list:
        """`[fn(x) for x in items]`, up to `_PARALLEL` requests in flight (the server batches or queues them)."""
        if len(items) <= 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(_PARALLEL, len(items))) as pool:
            return list(pool.map(fn, items))

    def _generation(self, prompt: str, choice: dict[str, Any], limit: int) -> Generation:
        """A `Generation` from a completion choice: local token ids, the server's log-probs where they line up."""
        text = choice.get("text") or ""
        reason = "length" if choice.get("finish_reason") == "length" else "stop"
        ids = encode_pair(self.tokenizer, "", text)[1] if text else []
        if not ids:
            return Generation("", (), (), reason)
        info = choice.get("logprobs") or {}
        tokens, values = info.get("tokens") or [], info.get("token_logprobs") or []
        if "content" in info:  # llama.cpp's server: the chat format
            tokens, values = [t["token"] for t in info["content"]], [t["logprob"] for t in info["content"]]
        kept, spelled = [], ""
        for tok, lp in zip(tokens, values):
            if len(spelled) >= len(text):
                break
            spelled += tok
            kept.append(lp)
        pieces = [self.tokenizer.decode([t]) for t in ids]
        if spelled != text or len(kept) != len(ids) or pieces != list(tokens[: len(ids)]) or None in kept:
            self.rescored_generations += 1
            kept = self.token_logprobs(prompt, [text])[0]
            if len(kept) != len(ids):  # text mode, another tokenization: keep the sum exact on the last token
                kept = [0.0] * (len(ids) - 1) + [sum(kept)]
        return Generation(text, tuple(ids), tuple(float(x) for x in kept), reason)

    # -- adapters --------------------------------------------------------------------------------------------

    def load_adapter(self, name: str, path: Path | str) -> None:
        """Verify adapter folder `path` locally, have the server load it as `name`, and prove that it serves it
        (adapters/served.py). AdapterError if any step fails; the active adapter is kept."""
        if name in self._adapters:
            raise AdapterError(f"an adapter named {name!r} is already loaded; unload it first or pick another name")
        folder = Path(path).expanduser().resolve()
        read_adapter_config(folder)
        read_adapter_weights(folder)
        sha = self._hash(folder)
        recorded = read_adapter_meta(folder).get("sha256") if (folder / META_FILE).is_file() else None
        if recorded is not None and recorded != sha:
            raise AdapterError(f"adapter {name!r} refused: its weights hash to {sha[:12]}…, not the "
                               f"{str(recorded)[:12]}… its {META_FILE} records")
        adapter = ServedAdapter(name, str(folder), sha)
        if served_entry(self.models(), name) is None:
            response = self._post("/load_lora_adapter", {"lora_name": name, "lora_path": str(folder)})
            if response.status_code == 404:
                raise AdapterError(f"adapter {name!r} refused: {self.base_url} has no /load_lora_adapter endpoint, so "
                                   "it cannot load adapters at run time (llama.cpp's server cannot; vLLM needs "
                                   "--enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)")
            if response.status_code != 200:
                raise AdapterError(f"adapter {name!r} refused: the server could not load {folder} "
                                   f"({response.status_code}: {response.text[:300]})")
        prove_served(self.models(), adapter, self._hash(folder))
        self._adapters[name] = adapter

    def unload_adapter(self, name: str) -> None:
        if name not in self._adapters:
            raise AdapterError(f"no adapter named {name!r} is loaded (loaded: {', '.join(self._adapters) or 'none'})")
        response = self._post("/unload_lora_adapter", {"lora_name": name})
        if response.status_code not in (200, 404):
            raise AdapterError(f"the server could not unload {name!r} ({response.status_code}: {response.text[:300]})")
        del self._adapters[name]
        if self._active == name:
            self._active = None

    def list_adapters(self) -> list[str]:
        return sorted(self._adapters)

    def activate(self, name: str | None) -> None:
        """Make `name` (None: the base model) the model every later request names, after proving that the server
        serves it (at every swap, and while a proof has failed). AdapterError: every later call is refused."""
        if name == self._active and self._refusal is None:
            return
        if name is not None and name not in self._adapters:
            raise AdapterError(f"no adapter named {name!r} is loaded (loaded: {', '.join(self._adapters) or 'none'})")
        try:
            listing = self.models()
            if name is None:
                if served_entry(listing, self.served_model) is None:
                    raise AdapterError(f"the server no longer serves the base model {self.served_model!r}")
            else:
                adapter = self._adapters[name]
                prove_served(listing, adapter, self._hash(adapter.path))
        except (AdapterError, ServerError) as exc:
            self._refusal = str(exc)
            raise AdapterError(f"{exc}; refusing to step until a served adapter is proved") from None
        self._refusal = None
        self._active = name
        self.cache_epoch += 1

    @property
    def active_adapter(self) -> str | None:
        return self._active

    def _check_not_refused(self) -> None:
        if self._refusal is not None:
            raise AdapterError(f"refusing to step: {self._refusal}")

    def reset_cache(self) -> None:
        """Nothing is cached client-side (the server keeps its own prefix cache); bumps `cache_epoch`."""
        self.cache_epoch += 1

    def close(self) -> None:
        self._http.close()


def _load_tokenizer(spec: str, home: Path):
    """The tokenizer of `policy.model`: the embedded model's converted folder, or a folder / hub id (tokenizer files
    only, never the weights)."""
    from transformers import AutoTokenizer

    source = resolve_model(spec, home) if spec == "embedded" else spec
    try:
        return AutoTokenizer.from_pretrained(str(source))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"could not load the tokenizer of {spec!r}: {exc}") from exc
