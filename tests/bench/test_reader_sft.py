"""bench/reader_sft.py on the demo data with a tiny random Llama: the examples are the reader's own right candidates
under its own prompt (never a yes/no question), training lowers the loss, and the adapter folder it writes is a reader
adapter (`answer.adapter`) under which the trained span is more likely than under the base weights."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.reader_sft import examples, main, parse_sets
from evorag_core.config import AnswerConfig, PolicyConfig
from evorag_core.data.datasets import load_dataset
from evorag_core.env.signals import answer_score
from evorag_core.reader.span import is_yes_no
from tests.paths import DEMO


def test_parse_sets_takes_set_names_and_files(tmp_path):
    [(label, path, a, b)] = parse_sets(f"{DEMO}:0:8")
    assert (label, path, a, b) == (f"{DEMO}:0:8", DEMO, 0, 8)
    with pytest.raises(SystemExit, match="neither a set"):
        parse_sets(f"{tmp_path / 'missing.jsonl'}:0:8")


def test_examples_are_right_candidates_under_the_reader_prompt():
    questions = load_dataset(DEMO).questions[:12]
    shim = SimpleNamespace(chat_prompt=lambda system, user, ex=(): f"<{system}|{len(ex)}>{user}")
    rows, skipped = examples(questions, shim, AnswerConfig(), 300, 2, seed=0)
    assert rows and sum(skipped.values()) + len(rows) == 2 * len(questions)
    by_prompt = {q.question: q for q in questions}
    for prompt, target in rows:
        q = next(q for text, q in by_prompt.items() if f"Question: {text}\nAnswer:" in prompt)
        assert not is_yes_no(q.question) and answer_score(target, q.answers) >= 0.5
        assert target in prompt  # a span of the prompt's passages (or their titles)
        assert prompt.startswith("<Answer the question") and "|2>" in prompt  # system turn, two demonstrations


@pytest.mark.slow
def test_training_writes_a_reader_adapter_that_raises_the_right_span(tiny, tmp_path):
    from evorag_core.lm.hf_backend import TransformersBackend
    from evorag_core.reader.answers import Reader

    adapter, out = tmp_path / "adapter", tmp_path / "sft.json"
    assert main(["--train", f"{DEMO}:0:10", "--model", str(tiny), "--adapter", str(adapter), "--epochs", "3",
                 "--lr", "5e-3", "--batch", "2", "--max-length", "384", "--top-layers", "1", "--threads", "1",
                 "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    losses = result["loss_per_epoch"]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert result["n_examples"] > 0 and Path(result["adapter"]) == adapter

    backend = TransformersBackend(PolicyConfig(model=str(tiny), device="cpu", threads=1), tmp_path / "home")
    reader = Reader(backend, AnswerConfig(adapter=str(adapter)), 300)
    shim = SimpleNamespace(chat_prompt=backend.chat_prompt)
    rows, _ = examples(load_dataset(DEMO).questions[:10], shim, AnswerConfig(), 300, 2, seed=0)
    prompt, target = rows[0]
    end = backend.tokenizer.eos_token
    base = backend.score_choices(prompt, [f"{target}{end}"])[0]
    backend.activate(reader.adapter)
    tuned = backend.score_choices(prompt, [f"{target}{end}"])[0]
    backend.activate(None)
    assert tuned > base
    q = load_dataset(DEMO).questions[0]
    assert reader.read(q.question, q.passages[:3])[0].kind in {"span", "yes_no", "refusal"}
