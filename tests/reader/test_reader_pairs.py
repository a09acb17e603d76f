"""Answer pairs (`evorag_core/pairs/reader_pairs.py`) with the tiny random model and hand-made passages: the chosen
answer is the best-scoring candidate by `ans`, each rejected one a reader candidate scoring at least the gap less,
both spans of the passages (or yes / no), under the reader's prompt; nothing when no candidate is right; a stored
episode's states give one set of pairs per distinct passage list, ready for the store."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from evorag_core.config import AnswerConfig
from evorag_core.env.signals import answer_score
from evorag_core.env.state import AgentView, Hop
from evorag_core.pairs.reader_pairs import READER_PAIR, episode_reader_pairs, reader_pairs
from evorag_core.policy.agent import reader_passages
from evorag_core.reader.span import SpanReader, span_in_passages, span_prompt
from evorag_core.store import open_store
from evorag_core.store.records import Episode
from tests.reader.texts import MIRROW, PASSAGES, QUESTIONS, TRAVINE


def _reader(backend, ranker: str = "lm") -> SpanReader:
    return SpanReader(backend, AnswerConfig(ranker=ranker))


def test_the_best_candidate_is_preferred_over_the_readers_wrong_picks(tiny_backend):
    reader = _reader(tiny_backend)
    pairs = reader_pairs(reader, QUESTIONS[0], PASSAGES, ["Sable River"], max_pairs=3)
    assert 1 <= len(pairs) <= 3
    prompt = span_prompt(tiny_backend, QUESTIONS[0], PASSAGES, reader.chars, reader.cfg.demos)
    ranked = sorted(reader.last_scores, key=lambda c: -reader.last_scores[c])
    for p in pairs:
        assert p.prompt == prompt
        assert " ".join(p.chosen.split()) == "Sable River" and p.chosen_score == 1.0
        assert span_in_passages(p.rejected, PASSAGES, reader.chars)
        assert p.rejected_score == answer_score(p.rejected, ["Sable River"]) <= 0.5
        assert ranked[p.rejected_rank] == p.rejected and ranked[p.chosen_rank] == p.chosen
    # the rejected ones are the reader's highest-ranked wrong candidates, in its order
    wrong = [c for c in ranked if answer_score(c, ["Sable River"]) <= 0.5]
    assert [p.rejected for p in pairs] == wrong[: len(pairs)]


def test_random_pairs_draw_among_all_wrong_candidates_the_same_way_each_time(tiny_backend):
    """`against="random"`: the rejected spans are wrong candidates drawn from the whole candidate list (not only its
    head), listed in the reader's order, and the draw is seeded by the question: a rerun builds the same pairs."""
    reader = _reader(tiny_backend)
    top = reader_pairs(reader, QUESTIONS[0], PASSAGES, ["Sable River"], max_pairs=50)
    wrong = [p.rejected for p in top]  # every wrong candidate, in the reader's order
    assert len(wrong) >= 4
    drawn = reader_pairs(reader, QUESTIONS[0], PASSAGES, ["Sable River"], max_pairs=2, against="random")
    assert len(drawn) == 2 and all(" ".join(p.chosen.split()) == "Sable River" for p in drawn)
    assert [p.rejected for p in drawn] == [w for w in wrong if w in {p.rejected for p in drawn}]
    assert [p.rejected_rank for p in drawn] == sorted(p.rejected_rank for p in drawn)
    assert drawn == reader_pairs(reader, QUESTIONS[0], PASSAGES, ["Sable River"], max_pairs=2, against="random")
    # over the questions, the draw does not always take the reader's two top wrong picks
    heads = []
    for question in QUESTIONS:
        every = [p.rejected for p in reader_pairs(reader, question, PASSAGES, ["Sable River"], max_pairs=50)]
        got = [p.rejected for p in reader_pairs(reader, question, PASSAGES, ["Sable River"], max_pairs=2,
                                                against="random")]
        if len(every) > 2:
            heads.append(got == every[:2])
    assert heads and not all(heads)
    with pytest.raises(ValueError, match="hardest"):
        reader_pairs(reader, QUESTIONS[0], PASSAGES, ["Sable River"], against="hardest")


def test_yes_no_pairs_prefer_the_gold_label(tiny_backend):
    question = "Was Ansel Travine born in Mirrow?"
    (pair,) = reader_pairs(_reader(tiny_backend), question, PASSAGES, ["yes"])
    assert (pair.chosen, pair.rejected, pair.chosen_score, pair.rejected_score) == ("yes", "no", 1.0, 0.0)
    (pair,) = reader_pairs(_reader(tiny_backend), question, PASSAGES, ["no"])
    assert (pair.chosen, pair.rejected) == ("no", "yes")


def test_no_pairs_without_a_right_candidate_passages_or_gold(tiny_backend):
    reader = _reader(tiny_backend)
    assert reader_pairs(reader, QUESTIONS[0], PASSAGES, ["Danube"]) == []  # nothing right among the candidates
    assert reader_pairs(reader, QUESTIONS[0], [], ["Sable River"]) == []
    assert reader_pairs(reader, QUESTIONS[0], PASSAGES, []) == []


def test_an_episodes_states_give_storable_pairs_once_per_passage_list(tiny_backend, tmp_path):
    reader = _reader(tiny_backend, ranker="learned")
    one = AgentView(QUESTIONS[0], (Hop("Ansel Travine", (TRAVINE,)),), (), 2, 5)
    two = AgentView(QUESTIONS[0], (Hop("Ansel Travine", (TRAVINE,)), Hop("Mirrow", (MIRROW,))), (), 3, 5)
    empty = AgentView(QUESTIONS[0], (), (), 1, 5)
    now = datetime.now(timezone.utc)
    episode = Episode(7, "q-1", "demo", QUESTIONS[0], "lm", "refinement", "time-dynamic", {}, "finished", 0.0, now, now)
    views = [(1, empty), (2, one), (3, two), (4, two)]
    pairs = episode_reader_pairs(episode, views, reader, ["Sable River"], lambda v: reader_passages(v, 5))
    # the first state reads nothing and the second holds no right candidate (the river is in Mirrow's passage);
    # the last repeats the third's passages
    assert pairs and {p.metadata["t"] for p in pairs} == {3}
    for p in pairs:
        assert p.metadata["kind"] == READER_PAIR and p.metadata["question_id"] == "q-1"
        # the reader reads the chain: Mirrow's page, linked from the named page (Ansel Travine), first
        assert p.metadata["passages"] == [MIRROW.pid, TRAVINE.pid] and p.stage == "refinement"
        assert p.margin == p.metadata["score_chosen"] - p.metadata["score_rejected"] >= 0.5
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        ids = store.add_pairs(pairs)
        stored = [store.get_pair(i) for i in ids]
    assert [(s.prompt, s.chosen, s.rejected) for s in stored] == [(p.prompt, p.chosen, p.rejected) for p in pairs]


def test_dumped_states_give_pairs_leaving_out_the_evaluation_slice(tiny_backend, tmp_path, benchmarks):
    """bench/learning.py `--reader-dumps`: answer pairs at dumped reader states; a question of the evaluation slice
    gives none, a held-out question's pairs are discarded (held out), one with nothing right is not read."""
    import argparse
    import json

    from bench.learning import DATA, _dump_pairs
    from evorag_core.data.datasets import load_dataset

    evaluated = load_dataset(DATA).questions[100].id
    passages = [{"pid": p.pid, "title": p.title, "text": p.text} for p in PASSAGES]
    right = [{"text": "Sable River", "source": 0}, {"text": "Mirrow", "source": 0}]

    def row(qid, answers, candidates):
        return {"set": "hotpot", "id": qid, "question": QUESTIONS[0], "answers": answers, "passages": passages,
                "yes_no": {"is": False}, "candidates": candidates}

    dump = tmp_path / "fixedk.jsonl"
    dump.write_text("\n".join(json.dumps(r) for r in [
        row(evaluated, ["Sable River"], right), row("q-held", ["Sable River"], right),
        row("q-train", ["Sable River"], right), row("q-none", ["Danube"], right)]) + "\n")
    args = argparse.Namespace(eval="100:200", reader_dumps=str(dump), dump_max_pairs=1, stage="refinement",
                              pair_against="top")
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        out = _dump_pairs(args, _reader(tiny_backend), {"q-held"}, store)["fixedk.jsonl"]
        assert (out["rows"], out["left_out_eval"], out["read"]) == (4, 1, 2)
        assert out["train_pairs"] == out["heldout_pairs"] == 1 and out["train_questions"] == 1
        train, held = store.get_pair(out["train_ids"][0]), store.get_pair(out["heldout_ids"][0])
        assert (train.status, held.status) == ("queued", "discarded")
        assert train.metadata["question_id"] == "q-train" and train.metadata["dump"] == "fixedk.jsonl"
        assert " ".join(train.chosen.split()) == "Sable River" and train.stage == "refinement"
        assert {p.metadata["question_id"] for p in store.list_pairs(limit=None)} == {"q-train", "q-held"}


def test_the_reader_alone_answers_the_evaluation_questions_from_dumped_passages(tiny_folder, tmp_path, monkeypatch):
    """bench/learning.py phase 6: the base model and an adapter (random LoRA B) each answer, in a child process, the
    dumped questions of the evaluation slice from the dumped passages - a training question's row is not read; every
    answer is a span of the passages or yes/no; the adapter is compared with the base per dump; a rerun reads
    nothing again."""
    import json
    import sys

    import torch
    from transformers import AutoModelForCausalLM

    from bench.learning import DATA, parse_args, phase_reader_eval
    from evorag_core.config import TrainConfig
    from evorag_core.data.datasets import load_dataset
    from training.lora import attach_lora, save_adapter

    questions = load_dataset(DATA).questions
    passages = [{"pid": p.pid, "title": p.title, "text": p.text} for p in PASSAGES]
    dump = tmp_path / "fixedk.jsonl"
    rows = [(questions[100].id, QUESTIONS[0], ["Sable River"]), (questions[101].id, QUESTIONS[1], ["1402"]),
            (questions[0].id, QUESTIONS[3], ["Travine lamp"])]  # the last: a training question
    dump.write_text("".join(json.dumps({"set": "hotpot", "id": qid, "question": q, "answers": gold,
                                        "passages": passages}) + "\n" for qid, q, gold in rows))
    model = attach_lora(AutoModelForCausalLM.from_pretrained(tiny_folder), TrainConfig(seed=0))
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    adapter = tmp_path / "adapter"
    save_adapter(model, adapter, {"round_id": None, "objective": "dpo", "base_model_id": str(tiny_folder), "metrics": {}})

    argv = ["--train", "0:64", "--eval", "100:200", "--model", str(tiny_folder), "--home", str(tmp_path / "home"),
            "--reader-dumps", str(dump), "--threads", "1", "--ranker", "lm", "--answer-chars", "300"]
    monkeypatch.setattr(sys, "argv", ["learning.py", *argv])  # the child processes are started with these
    args = parse_args(argv)
    rounds = {"dpo": {"status": "succeeded", "adapter_path": str(adapter)}}
    out = phase_reader_eval(args, rounds)["fixedk.jsonl"]
    assert out["n"] == 2 and out["dpo"]["n"] == 2
    read = {name: [json.loads(x) for x in (args.home / f"learning_reader_{name}.jsonl").read_text().splitlines()]
            for name in ("base", "dpo")}
    for name, got in read.items():
        assert sorted(r["question_id"] for r in got) == sorted([questions[100].id, questions[101].id])
        for r in got:
            assert r["kind"] in ("span", "yes_no") and (r["prediction"] in ("yes", "no")
                                                        or span_in_passages(r["prediction"], PASSAGES, 300))
    base = {r["question_id"]: r for r in read["base"]}
    assert out["dpo"]["changed"] == sum(r["prediction"] != base[r["question_id"]]["prediction"] for r in read["dpo"])
    assert out["base"]["f1"] == sum(r["f1"] for r in read["base"]) / 2
    assert set(out["dpo"]["vs_base"]) == {"em", "f1"}
    before = {name: (args.home / f"learning_reader_{name}.jsonl").read_text() for name in read}
    assert phase_reader_eval(args, rounds)["fixedk.jsonl"] == out
    assert {name: (args.home / f"learning_reader_{name}.jsonl").read_text() for name in read} == before


def test_a_reader_only_run_trains_on_dumped_answer_pairs_without_rollouts(tiny_folder, tmp_path, monkeypatch):
    """bench/learning.py `--no-rollouts --no-agent-eval`: no episode is rolled out and none evaluated; the DPO round
    trains on the dumps' answer pairs of the training questions (random wrong candidates rejected), the held-out
    question's pair is scored in phase 4, and the reader alone answers the evaluation question with base and
    adapter. `--no-rollouts` without answer pairs from dumps is refused."""
    import json
    import sys

    from bench.learning import DATA, main, parse_args
    from evorag_core.data.datasets import load_dataset
    from evorag_core.store import open_store

    with pytest.raises(SystemExit):
        parse_args(["--no-rollouts", "--pair-filter", "reader", "--objectives", "dpo", "--home", str(tmp_path)])
    questions = load_dataset(DATA).questions
    passages = [{"pid": p.pid, "title": p.title, "text": p.text} for p in PASSAGES]
    candidates = [{"text": "Sable River", "source": 0}, {"text": "Mirrow", "source": 0}]
    dump = tmp_path / "fixedk.jsonl"
    rows = [(questions[i].id, QUESTIONS[0], ["Sable River"]) for i in (0, 1, 2, 3, 100)]  # 3 train, 1 held, 1 eval
    dump.write_text("".join(json.dumps({"set": "hotpot", "id": qid, "question": q, "answers": gold,
                                        "passages": passages, "yes_no": {"is": False}, "candidates": candidates})
                            + "\n" for qid, q, gold in rows))
    home = tmp_path / "home"
    argv = ["--train", "0:4", "--eval", "100:101", "--model", str(tiny_folder), "--home", str(home),
            "--pair-filter", "reader", "--reader-dumps", str(dump), "--dump-max-pairs", "1", "--pair-against", "random",
            "--no-rollouts", "--no-agent-eval", "--objectives", "dpo", "--max-steps", "1", "--batch", "2",
            "--max-length", "384", "--threads", "1", "--workers", "1", "--ranker", "lm", "--answer-chars", "300",
            "--out", str(tmp_path / "out.json")]
    monkeypatch.setattr(sys, "argv", ["learning.py", *argv])  # the child processes are started with these
    main(argv)
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["rollouts"]["skipped"] == "--no-rollouts" and out["rollouts"]["episodes"] == 0
    dumped = out["reader_pairs"]["dumps"]["fixedk.jsonl"]
    assert (dumped["left_out_eval"], dumped["train_pairs"], dumped["heldout_pairs"]) == (1, 3, 1)
    assert out["rounds"]["dpo"]["status"] == "succeeded" and out["rounds"]["dpo"]["queued_pairs"] == 3
    assert out["pair_accuracy"]["pairs"] == 1 and out["pair_accuracy"]["dpo"]["n"] == 1
    assert "eval" not in out and out["reader_eval"]["fixedk.jsonl"]["dpo"]["n"] == 1
    assert set(out["targets"]["reader_f1_above_base_p<0.05"]["fixedk.jsonl"]) == {"dpo"}
    with open_store(f"sqlite:///{home / 'bench_learning.db'}") as store:
        assert store.list_episodes(limit=None) == []
        pairs = store.list_pairs(limit=None)
    assert {p.metadata["against"] for p in pairs} == {"random"}
    assert {p.metadata["question_id"] for p in pairs} == {questions[i].id for i in (0, 1, 2, 3)}
