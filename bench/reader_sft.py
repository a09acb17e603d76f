"""Supervised fine-tuning of the span reader: a LoRA adapter trained to raise log P(right span | reader prompt), the
LM score the span reader ranks candidates by (issue 42: the reader's F1 when every gold passage was read).

    python -m bench.reader_sft --train hotpot:0:100,2wiki:0:50,musique:0:146 --adapter DIR [--model embedded]
                               [--distractors 3] [--epochs 1] [--lr 2e-4] [--batch 4] [--max-length 768]
                               [--threads 2] [--seed 0] [--limit N] [--out bench/results/reader_sft_train.json]

Examples. For each training question that is not a yes/no question (those are decided by the evidence rules,
`reader/yes_no.py`), two reader prompts (`reader.span.span_prompt`, the demonstrations included, passages cut as the
reader cuts them): its gold passages in file order, and its gold passages with `--distractors` of its own distractor
paragraphs in a seeded random order (what a retrieving method's reader sees). The target is the reader's own
candidate (`extract_candidates`, answer types on) that scores best against the gold (`answer_score` >= 0.5); a
prompt whose candidates hold no such span is skipped, so the adapter is only taught answers the reader can give.
The completion is the span followed by the end-of-turn token, exactly what the reader scores.

Training: a fresh LoRA (the `[train]` rank, alpha, targets) on the top `--top-layers` decoder layers (default 8 of
SmolLM2's 30: a step's backward pass stops there), AdamW, the mean token negative log-likelihood of the completion
(`training.seqlogp.completion_token_logps`), `--epochs` passes in a seeded order, gradients clipped at 1. The adapter
is written as an adapter folder (`training.lora.save_adapter`, checksum and metadata), usable as the reader's own
weights: `--set answer.adapter=DIR` (bench/reader_types.py, bench/agent.py, `evorag eval`). The JSON records the
settings, the examples (counts by set, skipped), the loss per epoch and minutes.
"""
from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "benchmarks"
FILES = {"hotpot": "hotpotqa_dev300.jsonl", "2wiki": "2wiki_dev182.jsonl", "musique": "musique_dev146.jsonl"}


def parse_sets(text: str, data_dir: Path = BENCH) -> list[tuple[str, Path, int, int]]:
    """`hotpot:0:100,data/x.jsonl:0:8` -> [("hotpot:0:100", <shared hotpot file>, 0, 100), ("data/x.jsonl:0:8",
    Path("data/x.jsonl"), 0, 8)]: a set name (hotpot, 2wiki, musique) or a data file, then START:STOP."""
    out = []
    for part in text.split(","):
        name, a, b = part.rsplit(":", 2)
        path = data_dir / FILES[name] if name in FILES else Path(name)
        if not path.is_file():
            raise SystemExit(f"{name!r} is neither a set ({', '.join(FILES)}) nor a data file")
        out.append((part, path, int(a), int(b)))
    return out


def examples(questions: Sequence[Any], backend: Any, answer: Any, chars: int, distractors: int, seed: int
             ) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """(prompt, target span) rows and the counts of what was skipped (see the module docstring)."""
    from evorag_core.env.signals import answer_score
    from evorag_core.reader.span import _raw_candidates, either_or, extract_candidates, is_yes_no, span_prompt

    rows: list[tuple[str, str]] = []
    skipped = {"yes_no": 0, "no_right_candidate": 0}
    for q in questions:
        gold = [p for p in q.passages if p.pid in q.gold_pids]
        rest = [p for p in q.passages if p.pid not in q.gold_pids]
        rng = random.Random(f"{seed}:{q.id}")
        mixed = gold + rng.sample(rest, min(distractors, len(rest)))
        rng.shuffle(mixed)
        for passages in (gold, mixed):
            options = either_or(q.question, [s for s, _ in _raw_candidates(passages, chars)], passages, chars)
            if is_yes_no(q.question, options):
                skipped["yes_no"] += 1
                continue
            cands = extract_candidates(q.question, passages, chars, answer.max_words, answer.max_candidates,
                                       answer.answer_types)
            scored = sorted(((answer_score(s, q.answers), s) for s, _ in cands), key=lambda t: -t[0])
            if not scored or scored[0][0] < 0.5:
                skipped["no_right_candidate"] += 1
                continue
            rows.append((span_prompt(backend, q.question, passages, chars, answer.demos, answer.passage_order),
                         scored[0][1]))
    return rows, skipped


def train(rows: list[tuple[str, str]], model: Any, tokenizer: Any, args: argparse.Namespace) -> list[float]:
    """The LoRA on `model` trained on the rows; the mean loss of each epoch."""
    import torch

    from training.seqlogp import completion_token_logps, encode
    from tqdm import tqdm

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    end = tokenizer.eos_token
    losses = []
    model.train()
    for epoch in range(args.epochs):
        order = list(range(len(rows)))
        random.Random(args.seed + epoch).shuffle(order)
        total, n = 0.0, 0
        bar = tqdm(range(0, len(order), args.batch), desc=f"epoch {epoch + 1}", unit="batch")
        for start in bar:
            chunk = [rows[i] for i in order[start:start + args.batch]]
            batch = encode(tokenizer, [p for p, _ in chunk], [f"{s}{end}" for _, s in chunk], args.max_length)
            logps, _ = completion_token_logps(model, batch)
            loss = -(logps.sum(dim=1) / batch.completion_mask.sum(dim=1)).mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            if not torch.isfinite(loss):
                raise SystemExit(f"non-finite loss at epoch {epoch + 1}, batch {start // args.batch}")
            total += float(loss.detach()) * len(chunk)
            n += len(chunk)
            bar.set_postfix(loss=f"{total / n:.3f}")
        losses.append(total / max(n, 1))
    model.eval()
    return losses


def attach_top_lora(model: Any, train_cfg: Any, top: int) -> Any:
    """The `[train]` LoRA on the top `top` decoder layers only (0: all): backpropagation then stops at the lowest
    adapted layer, so a step costs about a forward pass plus the top layers' backward."""
    import torch
    from peft import get_peft_model

    from training.lora import lora_config

    config = lora_config(train_cfg)
    n = model.config.num_hidden_layers
    if top:
        config.layers_to_transform = list(range(max(n - top, 0), n))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(train_cfg.seed)
        return get_peft_model(model, config)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", required=True, help="SET:START:STOP,... (a set: hotpot, 2wiki, musique; or a file)")
    ap.add_argument("--adapter", type=Path, required=True, help="the adapter folder to write")
    ap.add_argument("--distractors", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=768)
    ap.add_argument("--top-layers", type=int, default=8, help="LoRA on the top N decoder layers only (0: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=0, help="at most this many examples (0: all; for a quick check)")
    ap.add_argument("--model", default="embedded", help="the base model (policy.model)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--data-dir", type=Path, default=BENCH)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "reader_sft_train.json")
    args = ap.parse_args(argv)

    import torch

    from evorag_core.config import apply_overrides, home_dir, load_config
    from evorag_core.data.datasets import load_dataset
    from evorag_core.lm.base import chat_prompt
    from evorag_core.lm.loading import base_model_id, load_model
    from bench.record import settings, write_json
    from training.lora import save_adapter

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = apply_overrides(load_config(), {"policy.model": args.model, **dict(o.split("=", 1) for o in args.overrides)})
    home = home_dir()
    model, tokenizer, _ = load_model(cfg.policy.model, home, device="cpu", dtype="float32")
    shim = SimpleNamespace(chat_prompt=lambda system, user, ex=(): chat_prompt(tokenizer, system, user, ex))
    chars = cfg.answer.passage_chars or cfg.policy.passage_chars
    rows: list[tuple[str, str]] = []
    counts: dict[str, Any] = {}
    for label, path, a, b in parse_sets(args.train, args.data_dir):
        qs = load_dataset(path).questions[a:b]
        got, skipped = examples(qs, shim, cfg.answer, chars, args.distractors, args.seed)
        rows += got
        counts[label] = {"questions": len(qs), "examples": len(got), **skipped}
    if args.limit:
        rows = rows[:args.limit]
    if not rows:
        raise SystemExit("no training example: no question's candidates hold a right span")
    print(f"{len(rows)} examples: {counts}")
    model = attach_top_lora(model, cfg.train, args.top_layers)
    started = time.perf_counter()
    losses = train(rows, model, tokenizer, args)
    minutes = (time.perf_counter() - started) / 60
    meta = {"round_id": 0, "objective": "sft-reader", "base_model_id": base_model_id(cfg.policy.model, home),
            "metrics": {"loss": losses[-1], "examples": len(rows)}}
    checksum = save_adapter(model, args.adapter, meta, overwrite=True)
    result = {"settings": settings(args),
              "examples": counts, "n_examples": len(rows), "loss_per_epoch": losses, "minutes": round(minutes, 2),
              "adapter": str(args.adapter), "sha256": checksum}
    write_json(args.out, result)
    print(f"loss per epoch {[round(x, 3) for x in losses]}; {minutes:.1f} min; adapter {args.adapter}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
