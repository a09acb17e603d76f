"""Serving the embedded GGUF (or any GGUF) with an OpenAI-compatible llama.cpp server, the CPU serving path of
`policy.backend = "openai"` (docs/serving.md). Two engines:
- "llama.cpp" (default): llama.cpp's own C++ server from the prebuilt `xllamacpp` wheel (extra `[served]`), run by
  `python -m evorag_core.lm.serve_gguf`;
- "llama-cpp-python": `python -m llama_cpp.server` (extra `[served-python]`; PyPI has only its source, pip compiles
  llama.cpp), with `logits_all` on: that server needs every position's logits to echo prompt log-probs.

`LlamaServer(gguf, threads=1, engine=...).start()` runs the engine on a free loopback port as a child process and
returns once `/v1/models` answers (polled while the process lives; it raises with the server's log tail if the
process exits or the deadline passes). `stop()` terminates it (and kills it if it does not exit). Also a context
manager.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from evorag_core.errors import ModelLoadError
from evorag_core.procs import free_port

__all__ = ["ENGINES", "LlamaServer", "engine_available"]

# engine -> (the modules it needs, the extra that installs them)
ENGINES = {"llama.cpp": (("xllamacpp",), "served"), "llama-cpp-python": (("llama_cpp", "uvicorn"), "served-python")}


def engine_available(engine: str = "llama.cpp") -> bool:
    """Whether `engine`'s server is installed (its extra: `ENGINES`)."""
    return all(importlib.util.find_spec(module) is not None for module in ENGINES[engine][0])


class LlamaServer:
    def __init__(self, gguf: Path | str, *, threads: int = 1, n_ctx: int = 4096, alias: str = "policy",
                 timeout_s: float = 300.0, engine: str = "llama.cpp") -> None:
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r} (one of {', '.join(ENGINES)})")
        self.gguf, self.threads, self.n_ctx, self.alias, self.timeout_s = Path(gguf), threads, n_ctx, alias, timeout_s
        self.engine = engine
        self.port = 0
        self.process: subprocess.Popen | None = None
        self._log = tempfile.TemporaryFile()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        if self.engine == "llama.cpp":
            return [sys.executable, "-m", "evorag_core.lm.serve_gguf", str(self.gguf), "--alias", self.alias,
                    "--port", str(self.port), "--n-ctx", str(self.n_ctx), "--threads", str(self.threads)]
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(self.gguf), "--model_alias", self.alias,
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads), "--logits_all", "true"]

    def start(self) -> "LlamaServer":
        if not engine_available(self.engine):
            extra = ENGINES[self.engine][1]
            raise ModelLoadError(f"the {self.engine} server needs the [{extra}] extra: "
                                 f"pip install 'evorag-studio[{extra}]'")
        self.port = free_port()
        self.process = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            try:  # wait on the process itself: returns at once if it died, else after 0.25 s
                self.process.wait(timeout=0.25)
            except subprocess.TimeoutExpired:
                continue
            raise ModelLoadError(f"the {self.engine} server exited with {self.process.returncode}: {self.log_tail()}")
        self.stop()
        raise ModelLoadError(f"the {self.engine} server did not answer within {self.timeout_s:.0f} s: "
                             f"{self.log_tail()}")

    def log_tail(self, chars: int = 2000) -> str:
        self._log.seek(0)
        return self._log.read().decode("utf-8", errors="replace")[-chars:]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        self._log.close()
