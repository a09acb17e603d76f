#!/usr/bin/env bash
# The GPU item of issue #43 on a lent GPU machine, in three calls (bench/gpu_payload.py says why three):
#   bash bench/gpu_session.sh probe   # carry .gpu/w .gpu/c1: wheels in, imports checked, processes per GPU measured
#   bash bench/gpu_session.sh hold    # carry .gpu/c2: the second part only
#   bash bench/gpu_session.sh run     # carry .gpu/c3: unpack, bench.gpu_rounds under a time limit, summary
# Everything it writes for this machine's caller goes to $OUT (at most 8 files come back).
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/site
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# The image holds JAX, which transformers' imports wake: each process would take 75 % of the GPU's memory at start
# (14 workers: CUDA_ERROR_OUT_OF_MEMORY, seen on the H200). Keep JAX on the CPU and torch alone on the GPU.
export JAX_PLATFORMS=cpu XLA_PYTHON_CLIENT_PREALLOCATE=false USE_JAX=0 USE_FLAX=0 USE_TF=0
RUN_S=${RUN_S:-490}
WORKERS_MAX=${WORKERS_MAX:-14}
DEVICE=${DEVICE:-cuda} TRAIN=${TRAIN:-0:100} EVAL=${EVAL:-100:300}  # a CPU rehearsal: DEVICE=cpu TRAIN=0:2 EVAL=2:5

probe() {
  mkdir -p /tmp/gpu && cp -r .gpu/w .gpu/c1 /tmp/gpu/  # kept outside the checkout's copy too
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/probe.txt" 2>&1
  nproc >>"$OUT/probe.txt"
  python3 -m bench.gpu_payload wheels --site /tmp/site >>"$OUT/probe.txt" 2>&1 \
    || echo "WHEELS FAILED" >>"$OUT/probe.txt"
  python3 - >>"$OUT/probe.txt" 2>&1 <<'EOF'
import importlib, importlib.metadata as md
for name in ("torch", "transformers", "peft", "trl", "accelerate", "datasets", "sentence-transformers",
             "sqlalchemy", "alembic", "bm25s", "PyStemmer", "gguf", "numpy", "safetensors", "tokenizers"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "MISSING")
for mod in ("evorag_core.cli.main", "training.worker", "training.ablation.pipeline", "bench.gpu_rounds",
            "evorag_core.retrieval.service", "evorag_core.lm.hf_backend", "training.objectives.dpo.trainer"):
    try:
        importlib.import_module(mod)
        print("import", mod, "ok")
    except Exception as exc:
        print("import", mod, "FAILED", type(exc).__name__, exc)
EOF
  timeout 120 python3 -m bench.gpu_procs --device cuda --procs "$WORKERS_MAX" --levels 1,4,8,"$WORKERS_MAX" \
    --seconds 4 --out "$OUT/procs.json" >/dev/null 2>"$OUT/procs.err"
  timeout 90 python3 -m bench.gpu_procs --device cuda --procs "$WORKERS_MAX" --levels 8,"$WORKERS_MAX" --seconds 4 \
    --mps --out "$OUT/procs_mps.json" >/dev/null 2>>"$OUT/procs.err"
  python3 - "$OUT" <<'EOF'
import json, subprocess, sys
from pathlib import Path
out = Path(sys.argv[1])
def best(path):
    try:
        levels = json.loads(path.read_text())["levels"]
    except Exception:
        return None
    top = max(levels, key=lambda r: r["units_per_s"])
    return top["level"], top["units_per_s"]
plain, mps = best(out / "procs.json"), best(out / "procs_mps.json")
choice = {"workers": plain[0] if plain else 8, "mps": False, "plain": plain, "with_mps": mps}
if mps and (not plain or mps[1] > 1.15 * plain[1]):
    choice.update(workers=mps[0], mps=True)
else:
    try:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        pass
Path("/tmp/choice.json").write_text(json.dumps(choice))
(out / "choice.json").write_text(json.dumps(choice))
print(json.dumps(choice))
EOF
}

hold() {
  mkdir -p /tmp/gpu && cp -r .gpu/c2 /tmp/gpu/
  ls -la .gpu/* >"$OUT/hold.txt" 2>&1
}

run() {
  mkdir -p .gpu && cp -rn /tmp/gpu/* .gpu/ 2>/dev/null  # parts an earlier call left outside the checkout
  date +%s >/tmp/unpack_t.txt
  python3 -m bench.gpu_payload unpack --site /tmp/site --data-dir /tmp/data >"$OUT/unpack.txt" 2>&1 \
    || { cat "$OUT/unpack.txt"; exit 1; }
  workers=$(python3 -c "import json; print(json.load(open('/tmp/choice.json'))['workers'])" 2>/dev/null || echo 8)
  echo "workers $workers" >>"$OUT/unpack.txt"; date +%s >>/tmp/unpack_t.txt
  ( while sleep 20; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done ) \
    >"$OUT/smi.txt" 2>&1 &
  timeout "$RUN_S" python3 -m bench.gpu_rounds --data /tmp/data/hotpotqa_dev300.jsonl --train "$TRAIN" \
    --eval "$EVAL" --seeds 0,1 --workers "$workers" --max-steps 0 --home /tmp/home --out /tmp/run \
    --set policy.device=$DEVICE --set train.dtype=bfloat16 --set train.batch_size=8 \
    --set train.gradient_checkpointing=false --set train.lr=5e-4 >/tmp/run.log 2>&1
  echo "exit $?" >>/tmp/run.log
  kill %1 2>/dev/null
  python3 -m bench.gpu_rounds --summarize /tmp/run --json-out "$OUT/gpu_rounds.json" --brief >/tmp/brief.txt \
    2>>/tmp/run.log
  grep -v "Loading weights\|it/s\]" /tmp/run.log | tail -c 4000000 >"$OUT/run.log"
  cp /tmp/run/state.json "$OUT/" 2>/dev/null
  tar czf "$OUT/evals.tgz" -C /tmp/run eval 2>/dev/null
  grep "gpu_rounds:" /tmp/run.log; tail -c 2500 "$OUT/run.log"; cat /tmp/unpack_t.txt /tmp/brief.txt
}

"$1"
