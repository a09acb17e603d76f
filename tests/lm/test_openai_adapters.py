"""The served backend's adapter proof (lm/openai_backend.py, adapters/served.py) against an HTTP server that speaks
vLLM's documented LoRA protocol: `POST /v1/load_lora_adapter {lora_name, lora_path}`, `/v1/unload_lora_adapter`, and
`GET /v1/models` listing a loaded adapter as `{"id": lora_name, "root": lora_path, "parent": base}`.

No vLLM runs here (no GPU); the server below is a real HTTP server on the loopback, written to behave like vLLM
when the load works and like the reported failures when it does not: a load that answers 200 and serves nothing
(verl #7495), an older adapter kept under the same name, weights replaced after the load. Each must be refused
before a step; a good adapter must be named as the model of the next request. tests/lm/test_openai_backend.py runs
the backend against a live llama.cpp server.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evorag_core.config import PolicyConfig
from evorag_core.errors import AdapterError
from evorag_core.lm.openai_backend import OpenAIBackend, ServerError
from tests.lora_adapters import random_adapter


class VLLMLike:
    """State of the protocol server: the base model, the loaded adapters (name -> root) and how loads behave."""

    def __init__(self) -> None:
        self.loras: dict[str, str] = {}
        self.mode = "honest"  # honest | silent (200, nothing loaded) | stale (keeps another folder under the name)
        self.models_asked: list[str] = []
        self.drops = 0  # the next completion requests closed without an answer (a dropped kept-alive connection)
        self.dropped = 0

    def handler(self):
        state = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def _send(self, code: int, body) -> None:
                data = json.dumps(body).encode() if not isinstance(body, str) else body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path != "/v1/models":
                    return self._send(404, {"detail": "Not Found"})
                cards = [{"id": "base", "object": "model", "root": "/srv/base"}]
                cards += [{"id": n, "object": "model", "root": r, "parent": "base"} for n, r in state.loras.items()]
                self._send(200, {"object": "list", "data": cards})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/v1/completions" and state.drops:
                    state.drops -= 1
                    state.dropped += 1
                    self.close_connection = True  # closed with no status line: "Server disconnected ..."
                    return
                if self.path == "/v1/completions":
                    state.models_asked.append(body["model"])
                    if body["model"] not in {"base", *state.loras}:
                        return self._send(404, {"error": f"model {body['model']} does not exist"})
                    prompts = body["prompt"] if isinstance(body["prompt"][0], list) else [body["prompt"]]
                    echo = body.get("echo", False)  # every token gets log-prob -0.5, the first prompt token none
                    choices = [{"index": i, "text": "", "finish_reason": "length",
                                "logprobs": {"tokens": [], "token_logprobs": ([None] + [-0.5] * len(ids)) if echo
                                             else [-0.5]}} for i, ids in enumerate(prompts)]
                    return self._send(200, {"choices": choices, "usage": {"completion_tokens": 1}})
                if self.path == "/v1/load_lora_adapter":
                    name, path = body["lora_name"], body["lora_path"]
                    if name in state.loras:
                        return self._send(400, {"error": f"The lora adapter '{name}' has already been loaded."})
                    if state.mode == "honest":
                        state.loras[name] = path
                    elif state.mode == "stale":
                        state.loras[name] = "/srv/older/" + name
                    return self._send(200, f"Success: LoRA adapter '{name}' added successfully.")
                if self.path == "/v1/unload_lora_adapter":
                    state.loras.pop(body["lora_name"], None)
                    return self._send(200, "Success")
                self._send(404, {"detail": "Not Found"})

        return Handler


@pytest.fixture()
def server():
    state = VLLMLike()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), state.handler())
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def make_adapter(tiny: Path, folder: Path, seed: int) -> Path:
    return random_adapter(tiny, folder, seed)


def served(url: str, tiny: Path) -> OpenAIBackend:
    return OpenAIBackend(PolicyConfig(backend="openai", base_url=url, model=str(tiny)), tiny.parent)


def test_a_proved_adapter_is_named_by_the_next_request_and_changed_weights_are_refused(server, tiny, tmp_path):
    """Honest load: listed as (name, folder) -> activate, the next request names the adapter. Then the weights at
    the folder change (sha256 differs from the one verified at load): the next swap is refused and no step runs."""
    state, url = server
    backend = served(url, tiny)
    assert backend.protocol == "echo" and backend.token_prompts and backend.served_model == "base"
    folder = make_adapter(tiny, tmp_path / "round-1", seed=1)
    backend.load_adapter("round-1", folder)
    assert state.loras == {"round-1": str(folder.resolve())}
    backend.activate("round-1")
    backend.score_choices("Question: x", ["SEARCH:"])
    assert state.models_asked[-1] == "round-1"
    backend.activate(None)
    (folder / "adapter_model.safetensors").write_bytes(b"other weights")
    with pytest.raises(AdapterError, match="not the .* verified when the server loaded it"):
        backend.activate("round-1")
    asked = len(state.models_asked)
    with pytest.raises(AdapterError, match="refusing to step"):
        backend.score_choices("Question: x", ["SEARCH:"])
    with pytest.raises(AdapterError, match="refusing to step"):
        backend.generate("Question: x", 4)
    assert len(state.models_asked) == asked  # nothing reached the server
    backend.activate(None)  # the base model is proved again: steps are served
    backend.score_choices("Question: x", ["SEARCH:"])
    assert state.models_asked[-1] == "base"


@pytest.mark.parametrize("mode, message", [("silent", "does not serve it"), ("stale", "another adapter under the same")])
def test_a_load_that_did_not_reach_the_engine_is_refused(server, tiny, tmp_path, mode, message):
    """A 200 that loaded nothing (silent) and a name held by other weights (stale) are both refused at load."""
    state, url = server
    state.mode = mode
    backend = served(url, tiny)
    with pytest.raises(AdapterError, match=message):
        backend.load_adapter("round-1", make_adapter(tiny, tmp_path / "round-1", seed=1))
    assert backend.list_adapters() == [] and backend.active_adapter is None
    with pytest.raises(AdapterError, match="no adapter named 'round-1' is loaded"):
        backend.activate("round-1")


def test_the_watcher_refuses_an_unproved_adapter_and_keeps_the_base_model(server, tiny, tmp_path):
    """The one activation path: the registry activates a verified adapter (its folder is intact), the running served
    backend's watcher follows the row, the server's load is silent -> refused, the base model stays live."""
    from evorag_core.adapters.registry import activate
    from evorag_core.adapters.watcher import AdapterWatcher
    from evorag_core.store import open_store

    state, url = server
    state.mode = "silent"
    backend = served(url, tiny)
    folder = make_adapter(tiny, tmp_path / "round-1", seed=1)
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    checksum = json.loads((folder / "evorag_adapter.json").read_text())["sha256"]
    store.register_adapter("round-1", str(folder), base_model=str(tiny), objective="dpo", checksum=checksum)
    activate(store, "round-1", backend.model_id)
    watcher = AdapterWatcher(store, backend)
    assert watcher.poll(force=True) is None
    assert "does not serve it" in next(iter(watcher.refused.values()))
    state.mode = "honest"  # a new row (the same adapter re-registered under another name) loads and is proved
    store.register_adapter("round-1b", str(folder), base_model=str(tiny), objective="dpo", checksum=checksum)
    activate(store, "round-1b", backend.model_id)
    assert watcher.poll(force=True) == "round-1b" and backend.active_adapter == "round-1b"
    store.close()


def test_a_read_the_server_dropped_is_sent_again_once_then_the_error_is_clear(server, tiny):
    """A completion the server closed without answering (what a kept-alive connection closed by the server's idle
    timeout gives) is sent once more on a new connection and scores as usual; dropped twice, the caller gets a
    ServerError naming the server and the cause."""
    state, url = server
    backend = served(url, tiny)
    state.drops = 1
    assert backend.score_choices("Question: x", ["SEARCH:"]) == [-0.5 * len(backend.encode("SEARCH:"))]
    assert state.dropped == 1 and state.drops == 0
    state.drops = 2
    with pytest.raises(ServerError, match="completions: RemoteProtocolError: Server disconnected"):
        backend.score_choices("Question: y", ["SEARCH:"])
    assert state.dropped == 3
