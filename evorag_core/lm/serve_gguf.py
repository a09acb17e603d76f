"""llama.cpp's own C++ server over a GGUF, from the prebuilt `xllamacpp` wheel (the `[served]` extra: nothing is
compiled). Serves until SIGTERM or SIGINT:

    python -m evorag_core.lm.serve_gguf MODEL.gguf --port 8000 [--alias policy] [--threads 1] [--n-ctx 4096]

One slot by default (`--parallel 1`): requests queue instead of being batched together, so a context's log-probs do
not depend on what else is in flight. What the served backend gets from this server: docs/serving.md.
"""
from __future__ import annotations

import argparse
import os
import signal


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m evorag_core.lm.serve_gguf", description=__doc__.split("\n")[0])
    parser.add_argument("model", help="the GGUF file")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--alias", default="policy", help="the model's id in /v1/models and in requests")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--parallel", type=int, default=1, help="server slots (requests decoded together)")
    args = parser.parse_args(argv)

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.n_ctx
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    # the server's threads inherit the mask, so the stop signal reaches sigwait below and nothing else
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    server = xllamacpp.Server(params)
    print(f"serving {args.model} as {args.alias!r} at {server.listening_address}/v1", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    os._exit(0)  # the native server holds threads that a normal interpreter exit would wait on


if __name__ == "__main__":
    main()
