"""ARENA: prompt, strict parser, rewards (hand-computed), the eval method, the agent answerer, the studio view and
one GRPO round on a tiny Llama.

The fast tests need no language model: a scripted backend returns fixed replies. Slow tests run the real
embedded SmolLM2-135M-Instruct (two questions) and train a 2-layer Llama built here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pytest

from evorag_core.config import AnswerConfig, ArenaSettings, apply_overrides, load_config
from evorag_core.errors import AdapterError, ConfigError
from evorag_core.evaluation.runner import compare_results, evaluate, summarize
from evorag_core.methods.arena.method import METRIC_KEYS, ArenaMethod, span_reader
from evorag_core.reader.arena.generator import ArenaGenerator, arena_answer
from evorag_core.adapters.resolve import AdapterSource, resolve_adapter
from evorag_core.reader.arena.parse import find_citations, lenient_answer, parse_arena, parse_id_list
from evorag_core.reader.arena.prompt import SYSTEM_PROMPT, ArenaConfig, build_prompt, render_reference, render_user
from evorag_core.methods.arena.rewards import (
    accuracy_reward,
    arena_reward,
    bonus_reward,
    format_reward,
    gold_reference_ids,
    relevance_reward,
)
from evorag_core.lm.base import Generation
from evorag_core.types import Passage, Question

P = (
    Passage("q1:0", "Gustave Eiffel", "Gustave Eiffel was born in Dijon."),
    Passage("q1:1", "Big Ben", "Big Ben is a bell in London."),
    Passage("q1:2", "Eiffel Tower", "The Eiffel Tower was built by the company of Gustave Eiffel."),
)
Q = Question("q1", "demo", "Where was the engineer who built the Eiffel Tower born?", ("Dijon",),
             passages=P, gold_pids=frozenset({"q1:0", "q1:2"}))
GOOD = ("<relevance>[1,3]</relevance>\n<analysis>The tower was built by Eiffel's company [3]; "
        "he was born in Dijon [1].</analysis>\n<answer>Dijon</answer>")


# -- prompt --------------------------------------------------------------------------------------------------

class TemplateOnly:
    """A chat template that shows its three inputs plainly."""

    def chat_prompt(self, system: str, user: str, examples: Sequence[tuple[str, str]] = ()) -> str:
        shots = "".join(f"U:{u}\nA:{a}\n" for u, a in examples)
        return f"S:{system}\n{shots}U:{user}\nA:"


def test_prompt_numbers_references_in_order_and_cuts_text():
    """References [1]..[3] in data order; `passage_chars=20` cuts 'Gustave Eiffel was born in Dijon.' (33 chars)
    to its first 20 characters 'Gustave Eiffel was b', back to the last space -> 'Gustave Eiffel was...'."""
    user = render_user(Q.question, P)
    assert user.splitlines() == [
        f"<question>{Q.question}</question>", "<references>", "[1] Gustave Eiffel: Gustave Eiffel was born in Dijon.",
        "[2] Big Ben: Big Ben is a bell in London.",
        "[3] Eiffel Tower: The Eiffel Tower was built by the company of Gustave Eiffel.", "</references>"]
    assert render_reference(1, P[0], 20) == "[1] Gustave Eiffel: Gustave Eiffel was..."
    prompt = build_prompt(TemplateOnly(), Q.question, P, ArenaConfig())
    assert prompt.startswith("S:" + SYSTEM_PROMPT) and "EXACTLY three sections" in prompt and "U:<question>" in prompt
    with_demo = build_prompt(TemplateOnly(), Q.question, P, ArenaConfig(demo=True))
    assert with_demo.count("U:<question>") == 2 and "A:<relevance>[1,3]</relevance>" in with_demo
    assert "<references>\n\n</references>" in build_prompt(TemplateOnly(), Q.question, (), ArenaConfig())


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="accuracy"):
        ArenaConfig(accuracy="judge")
    with pytest.raises(ValueError, match="passage_chars"):
        ArenaConfig(passage_chars=-1)


# -- strict parser -------------------------------------------------------------------------------------------

def test_parse_well_formed_reply():
    """GOOD: relevance (1, 3), citations [3] then [1] -> (3, 1), answer 'Dijon', no failure."""
    p = parse_arena(GOOD, 3)
    assert p.ok and p.failure is None
    assert p.relevance == (1, 3) and p.citations == (3, 1) and p.answer == "Dijon"
    assert p.analysis.startswith("The tower was built")
    assert parse_arena("  \n" + GOOD.replace("\n", "") + "\n ", 3).ok  # surrounding / no white space is fine


@pytest.mark.parametrize(
    "text, part, reason",
    [
        ("<analysis>x [1]</analysis><answer>Dijon</answer>", "relevance", "missing"),
        ("<relevance>[1]</relevance><answer>Dijon</answer>", "analysis", "missing"),
        ("<relevance>[1]</relevance><analysis>x</analysis><answer>Dijon", "answer", "not closed"),
        ("<relevance>[1]</relevance><answer>Dijon</answer><analysis>x</analysis>", "order", "after"),
        ("Sure! <relevance>[1]</relevance><analysis>x</analysis><answer>Dijon</answer>", "outside", "Sure!"),
        ("<relevance>[1]</relevance><analysis>x</analysis><answer>Dijon</answer> Hope this helps", "outside", "Hope"),
        ("<relevance>[1]</relevance><analysis>x</analysis><answer>a</answer><answer>b</answer>", "answer", "2 times"),
        ("<relevance>1 and 3</relevance><analysis>x</analysis><answer>Dijon</answer>", "relevance", "like [1,3]"),
        ("<relevance>[1,4]</relevance><analysis>x</analysis><answer>Dijon</answer>", "relevance", "no reference 4"),
        ("<relevance>[1]</relevance><analysis> </analysis><answer>Dijon</answer>", "analysis", "empty"),
        ("<relevance>[1]</relevance><analysis>x</analysis><answer></answer>", "answer", "empty"),
        ("<relevance>[1]</relevance><analysis>x <b>y</b></analysis><answer>Dijon</answer>", "analysis", "<b>"),
    ],
)
def test_parse_reports_the_failing_part(text, part, reason):
    p = parse_arena(text, 3)
    assert not p.ok and p.failure.part == part and reason in p.failure.reason


def test_parts_are_extracted_from_malformed_replies():
    """Leading chatter breaks the format, but relevance (2, 3) and the answer 'London' are still read."""
    p = parse_arena("Here: <relevance>[2, 3, 2]</relevance><analysis>[2]</analysis><answer> London </answer>", 3)
    assert p.failure.part == "outside" and p.relevance == (2, 3) and p.answer == "London" and p.citations == (2,)


def test_id_lists_and_citations():
    assert parse_id_list("[1, 5]") == (1, 5) and parse_id_list(" [] ") == () and parse_id_list("[3,3,1]") == (3, 1)
    assert parse_id_list("1,5") is None and parse_id_list("[a]") is None and parse_id_list("[1,]") is None
    assert find_citations("see [2] and [4, 1]; again [2]") == (2, 4, 1)


def test_lenient_answer_extraction():
    assert lenient_answer(GOOD) == ("Dijon", False)
    assert lenient_answer("<analysis>x</analysis><answer>Paris\nmore text") == ("Paris", True)
    assert lenient_answer("I think so.\nAnswer: Dijon, France") == ("Dijon, France", True)
    assert lenient_answer("no idea") == (None, True)


# -- rewards -------------------------------------------------------------------------------------------------

def test_relevance_reward_full_partial_none():
    """gold {1,3}: {3,1} -> 1 (same set); {1} -> 0.5; {1,2,3} -> 0.5 (overlap, not equal); {2} -> 0; None -> 0."""
    assert relevance_reward((3, 1), (1, 3)) == 1.0
    assert relevance_reward((1,), (1, 3)) == 0.5
    assert relevance_reward((1, 2, 3), (1, 3)) == 0.5
    assert relevance_reward((2,), (1, 3)) == 0.0
    assert relevance_reward(None, (1, 3)) == 0.0
    assert relevance_reward((), ()) == 1.0  # no gold and nothing selected: the same (empty) set


def test_accuracy_reward_em_and_f1():
    """'the Dijon.' normalizes to 'dijon' -> EM 1. 'Dijon France' vs 'Dijon': P = 1/2, R = 1 -> F1 = 2/3, EM 0."""
    assert accuracy_reward("the Dijon.", ["Dijon"]) == 1.0
    assert accuracy_reward("Dijon France", ["Dijon"]) == 0.0
    assert accuracy_reward("Dijon France", ["Dijon"], "f1") == pytest.approx(2 / 3)
    assert accuracy_reward(None, ["Dijon"]) == 0.0
    with pytest.raises(ValueError):
        accuracy_reward("x", ["x"], "judge")


def test_total_reward_hand_computed():
    """GOOD vs gold ids (1,3), answer Dijon: 1 + 1 + 1 + 10 = 13.
    Relevance [1] only: 1 + 1 + 0.5 + 0 = 2.5.  Chatter before GOOD: 0 + 1 + 1 + 0 = 2 (no bonus without format).
    F1 ablation, answer 'Dijon France': 1 + 2/3 + 1 + 0.  No-bonus ablation on GOOD: 3."""
    good = arena_reward(parse_arena(GOOD, 3), ["Dijon"], (1, 3))
    assert (good.format, good.accuracy, good.relevance, good.bonus, good.total) == (1, 1, 1, 10, 13)
    partial = arena_reward(parse_arena(GOOD.replace("[1,3]", "[1]"), 3), ["Dijon"], (1, 3))
    assert partial.total == 2.5 and partial.bonus == 0
    chatter = arena_reward(parse_arena("OK. " + GOOD, 3), ["Dijon"], (1, 3))
    assert (chatter.format, chatter.total) == (0, 2)
    f1 = arena_reward(parse_arena(GOOD.replace(">Dijon<", ">Dijon France<"), 3), ["Dijon"], (1, 3), accuracy="f1")
    assert f1.total == pytest.approx(1 + 2 / 3 + 1) and f1.bonus == 0
    assert arena_reward(parse_arena(GOOD, 3), ["Dijon"], (1, 3), bonus=0.0).total == 3
    assert format_reward(parse_arena(GOOD, 3)) == 1.0 and bonus_reward(1, 1, 0.5) == 0.0
    assert good.to_dict()["total"] == 13


def test_gold_reference_ids():
    assert gold_reference_ids(["a", "b", "c", "d"], {"d", "b"}) == (2, 4)


# -- generator, eval method, answerer with a scripted backend ------------------------------------------------

@dataclass
class ScriptedBackend(TemplateOnly):
    """Returns the given replies in turn (a PolicyBackend stand-in: chat_prompt + generate)."""

    replies: list[str]
    model_id: str = "scripted"

    def generate(self, prompt, max_new_tokens, stop=(), temperature=0.0, n=1, seed=None):
        out = []
        for _ in range(n):
            text = self.replies.pop(0)
            out.append(Generation(text, tuple(range(len(text.split()))), (-0.5,) * len(text.split()), "stop"))
        return out


def test_generator_and_answerer():
    """The answerer returns the selected references' pids (relevance [1,3] -> q1:0, q1:2); without a readable
    relevance list it falls back to the analysis citations ([2] -> q1:1)."""
    out = ArenaGenerator(ScriptedBackend([GOOD])).generate(Q.question, P)
    assert out.parsed.ok and out.answer == "Dijon" and not out.fallback
    assert out.tokens == len(GOOD.split()) == 16 and out.logprob == pytest.approx(-0.5 * 16)
    assert [p.pid for p in out.selected] == ["q1:0", "q1:2"] and [p.pid for p in out.cited] == ["q1:2", "q1:0"]
    answer, pids, _ = arena_answer(ScriptedBackend([GOOD]), Q.question, P)
    assert (answer, pids) == ("Dijon", ("q1:0", "q1:2"))
    answer, pids, out = arena_answer(ScriptedBackend(["<analysis>Big Ben [2]</analysis><answer>London"]), Q.question, P)
    assert (answer, pids, out.fallback) == ("London", ("q1:1",), True)
    empty = "<relevance>[]</relevance><analysis>No references.</analysis><answer>unknown</answer>"
    answer, pids, out = arena_answer(ScriptedBackend([empty]), Q.question, ())
    assert (answer, pids, out.parsed.ok) == ("unknown", (), True)


def test_eval_method_summary_and_compare(tmp_path):
    """Two questions: GOOD (13 = 1+1+1+10) and a malformed reply whose lenient answer 'Paris' is wrong and whose
    relevance [2] misses gold {1,3} (0+0+0+0). Means: EM 0.5, format 0.5, relevance 0.5, reward 6.5."""
    q2 = Question("q2", "demo", Q.question, ("Dijon",), passages=P, gold_pids=Q.gold_pids)
    method = ArenaMethod(ArenaGenerator(ScriptedBackend([GOOD, "<relevance>[2]</relevance>\nAnswer: Paris"])))
    summary, results = evaluate(method, [Q, q2], out_path=tmp_path / "arena.jsonl")
    assert summary["em"] == 0.5 and summary["format_score"] == 0.5 and summary["relevance_score"] == 0.5
    assert summary["reward"] == 6.5 and summary["bonus_score"] == 5.0 and summary["format_valid"] == 0.5
    assert set(METRIC_KEYS) <= set(summary)
    first = results[0]
    assert first.passages == ("q1:0", "q1:2") and first.support_recall == 1.0
    assert first.extras["arena"]["gold_ids"] == [1, 3] and first.extras["arena"]["failure"] is None
    assert results[1].prediction == "Paris" and results[1].fallback == 1
    assert results[1].extras["arena"]["failure"]["part"] == "analysis"
    lines = [json.loads(l) for l in (tmp_path / "arena.jsonl").read_text().splitlines()]
    assert lines[0]["extras"]["metrics"]["reward"] == 13.0
    cmp = compare_results(results, results, resamples=200)
    assert cmp["format_score"]["diff"] == 0.0 and cmp["em"]["p_value"] == 1.0
    assert summarize(results)["relevance_score"] == 0.5


# -- arena.answer_span: the span reader answers over the selected references ------------------------------------

@pytest.fixture(scope="module")
def tiny_reader_folder(tmp_path_factory) -> Path:
    """A random 2-layer Llama (tests.tiny_model) saved as a model folder; 1 torch thread."""
    import torch

    from tests.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    return build_tiny_model(tmp_path_factory.mktemp("tiny-reader") / "model",
                            [Q.question, *(f"{p.title}: {p.text}" for p in P)], vocab_size=1024)


@pytest.fixture(scope="module")
def tiny_reader_backend(tiny_reader_folder, tmp_path_factory):
    """The tiny Llama as the span reader's scorer."""
    from evorag_core.lm.hf_backend import TransformersBackend
    from evorag_core.config import PolicyConfig

    return TransformersBackend(PolicyConfig(model=str(tiny_reader_folder), device="cpu"),
                               tmp_path_factory.mktemp("home"))


class ScriptedReplies:
    """The tiny model for scoring and its chat template, with ARENA's replies scripted (generate pops them)."""

    def __init__(self, backend, replies: list[str]) -> None:
        self._backend, self._replies = backend, list(replies)

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def generate(self, prompt, max_new_tokens, stop=(), temperature=0.0, n=1, seed=None):
        return ScriptedBackend(self._replies).generate(prompt, max_new_tokens, stop, temperature, n, seed)


def _in_passages(text: str, passages) -> bool:
    return any(text in p.title or text in p.text for p in passages)


def test_answer_span_reads_a_span_of_the_selected_references(tiny_reader_backend):
    """A sentence-long <answer> over relevance [1,3]: with answer_span off the answer is that text; on, it is the
    span reader's answer over references 1 and 3 only (a substring of them, not of Big Ben's), the sentence kept
    in extras. A yes/no question gets yes or no; a reply naming no reference is read over all three."""
    sentence = ("<relevance>[1,3]</relevance>\n<analysis>Eiffel was born in Dijon [1].</analysis>\n"
                "<answer>He was born in the French city of Dijon</answer>")
    off = ArenaMethod(ArenaGenerator(ScriptedReplies(tiny_reader_backend, [sentence]))).run_question(Q)
    assert off.prediction == "He was born in the French city of Dijon" and "generated_answer" not in off.extras["arena"]
    assert off.em == 0.0 and 0 < off.f1 < 1

    cfg = ArenaConfig(passage_chars=300)
    reader = span_reader(tiny_reader_backend, None, cfg)
    on = ArenaMethod(ArenaGenerator(ScriptedReplies(tiny_reader_backend, [sentence]), cfg), reader=reader)
    res = on.run_question(Q)
    selected = (P[0], P[2])
    assert res.prediction and res.prediction != off.prediction and _in_passages(res.prediction, selected)
    assert res.prediction == reader.answer(Q.question, selected)  # the reader over the selected references
    arena = res.extras["arena"]
    assert arena["generated_answer"] == off.prediction and arena["generated_f1"] == off.f1
    assert arena["span_evidence"] == ["q1:0", "q1:2"] and arena["span_evidence_from"] == "relevance"
    assert res.em == (1.0 if res.prediction == "Dijon" else 0.0) and not res.refused
    assert res.extras["metrics"] == off.extras["metrics"]  # ARENA's rewards are the reply's, unchanged
    assert reader.span is not None  # span mode even when [answer] says free
    assert span_reader(tiny_reader_backend, AnswerConfig(mode="free"), cfg).span is not None

    yes_no = Question("q3", "demo", "Was Gustave Eiffel born in Dijon?", ("yes",), passages=P)
    bare = "<answer>Gustave Eiffel was indeed born there</answer>"
    res = ArenaMethod(ArenaGenerator(ScriptedReplies(tiny_reader_backend, [bare]), cfg), reader=reader).run_question(
        yes_no)
    assert res.prediction in ("yes", "no") and res.extras["arena"]["generated_answer"] == bare[8:-9]
    assert res.extras["arena"]["span_evidence_from"] == "all" and res.extras["arena"]["span_evidence"] == [
        p.pid for p in P]


def test_eval_builder_reads_answer_span(tiny_reader_folder, tmp_path):
    """`evorag eval --method arena` builds the method from the config: no reader by default, the span reader (and
    a label saying so) with `--set arena.answer_span=true`."""
    from types import SimpleNamespace

    from evorag_core.methods.base import MethodOptions

    from evorag_core.methods.arena.method import build_arena_method

    def build(answer_span: bool) -> ArenaMethod:
        cfg = apply_overrides(load_config(), {"policy.model": str(tiny_reader_folder), "policy.device": "cpu",
                                              "arena.answer_span": answer_span})
        rt = SimpleNamespace(cfg=cfg, home=tmp_path, dataset=SimpleNamespace(questions=[Q]))
        return build_arena_method(MethodOptions(), rt)

    plain, span = build(False), build(True)
    assert plain.reader is None and not plain.label.endswith("span answers")
    assert span.reader is not None and span.reader.span is not None and span.label.endswith(", span answers")
    assert span.reader.span.chars == 300  # policy.passage_chars, as ARENA cuts its references


def test_answer_span_setting_has_a_rule_and_defaults_off():
    assert load_config().arena.answer_span is False
    assert apply_overrides(load_config(), {"arena.answer_span": "true"}).arena.answer_span is True
    with pytest.raises(ConfigError, match="arena.answer_span"):
        ArenaSettings(answer_span="yes")


def test_eval_method_needs_passages():
    with pytest.raises(ConfigError, match="own passages"):
        ArenaMethod(ArenaGenerator(ScriptedBackend([GOOD]))).run_question(Question("b", "bamboogle", "q?", ("a",)))


def test_resolve_adapter(tmp_path, monkeypatch):
    """A folder resolves to itself (name from the folder); an unknown name with no database is an AdapterError."""
    monkeypatch.delenv("EVORAG_DB_URL", raising=False)
    folder = tmp_path / "round 3"
    folder.mkdir()
    assert resolve_adapter(str(folder), tmp_path) == AdapterSource("round-3", folder, None)
    with pytest.raises(AdapterError, match="no database"):
        resolve_adapter("nope", tmp_path)


# -- studio view ---------------------------------------------------------------------------------------------

def test_view_links_citations_marks_relevance_and_escapes():
    """[3] and [1] in the analysis link to #a-ref-3 / #a-ref-1; [9] does not exist (no link); relevance [1,2] vs
    gold {1,3}: 1 hit, 2 extra, 3 missed; the reward row shows 1, 1, 0.5, 0, 2.5; passage markup is escaped."""
    from app.common.arena_view import render_arena_answer

    refs = P[:2] + (Passage("q1:2", "Eiffel <Tower>", "built by <script>alert(1)</script> Eiffel & Co"),)
    text = ("<relevance>[1,2]</relevance><analysis>Built by Eiffel [3], born in Dijon [1]; see [9] & more."
            "</analysis><answer>Dijon</answer>")
    reward = arena_reward(parse_arena(text, 3), ["Dijon"], (1, 3))
    page = render_arena_answer(refs, text, gold_ids=(1, 3), reward=reward, gold_answers=["Dijon"], anchor="a")
    assert '<a class="arena-cite" href="#a-ref-3">3</a>' in page and 'href="#a-ref-1"' in page
    assert 'href="#a-ref-9"' not in page and 'title="no such reference">9<' in page
    assert 'id="a-ref-3"' in page and 'class="arena-ref selected gold cited" id="a-ref-1"' in page
    assert 'class="arena-id hit" title="hit">1<' in page and 'class="arena-id extra" title="extra">2<' in page
    assert 'class="arena-id missed" title="missed">3<' in page
    assert "<td>1</td><td>1</td><td>0.5</td><td>0</td><td>2.5</td>" in page
    assert "<script>" not in page and "&lt;script&gt;" in page and "Eiffel &lt;Tower&gt;" in page
    assert "&amp; more" in page and "well-formed" in page


def test_view_of_a_malformed_reply():
    from app.common.arena_view import render_arena_answer

    page = render_arena_answer(P, "I don't know <b>", gold_ids=(1,))
    assert "format fails (&lt;relevance&gt;): missing" in page and "no readable relevance list" in page
    assert "no &lt;answer&gt; part" in page and "<pre>I don&#x27;t know &lt;b&gt;</pre>" in page


# -- GRPO on a tiny Llama ------------------------------------------------------------------------------------

WARMUP_STEPS = 80
REPLIES = [GOOD, GOOD.replace(">Dijon<", ">London<"), GOOD.replace("[1,3]", "[2]"), "<answer>Dijon</answer>"]


@pytest.fixture()
def one_thread():
    """The tiny model runs fastest on one thread (and two threads crawl on a busy machine); restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def warm_tiny(tmp_path_factory) -> Path:
    """A 2-layer random Llama (tests.tiny_model) warmed up for 80 supervised steps on four replies to Q, saved as a
    model folder. Its samples then differ in reward (GOOD 13, wrong answer 2, wrong relevance 2, bare answer 1):
    GRPO needs reward differences inside a group to have a policy gradient at all."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evorag_core.lm.hf_backend import TransformersBackend
    from tests.tiny_model import build_tiny_model

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model",
                              [render_user(Q.question, P), SYSTEM_PROMPT, *REPLIES])
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    prompt = ArenaGenerator(TransformersBackend.from_model(model, tokenizer, model_id="tiny")).prompt(Q.question, P)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    start = len(prompt_ids)  # prompt and reply are encoded apart, as the backend does (policy.base.encode_pair)
    rows = [torch.tensor([prompt_ids + tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]])
            for r in REPLIES]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(WARMUP_STEPS):  # each step sees all four replies, so none of them dominates
        for ids in rows:
            labels = ids.clone()
            labels[:, :start] = -100
            (model(input_ids=ids, labels=labels).loss / len(rows)).backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(folder)
    torch.set_num_threads(before)
    return folder


@pytest.mark.slow  # ~15 s on 2 idle CPU cores, with the warm-up
def test_arena_grpo_round_on_tiny_llama(warm_tiny, one_thread):
    """3 steps, 1 question x G = 8 sampled replies each, k2 optimised, kl_coef 0.04. The LoRA B matrices leave zero;
    both KL estimates are logged every step (exactly 0 at step 1, where policy = reference; > 0 afterwards); the
    loss moves; and the GRPO surrogate of the step-1 group, sum_i A_i * mean_t log pi(o_i,t), goes up (the group is
    re-sampled here with the trainer's seed for step 1, train.seed + 0, from the same starting policy)."""
    import dataclasses

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evorag_core.config import TrainConfig
    from evorag_core.lm.hf_backend import TransformersBackend
    from training.objectives.arena_grpo.config import ArenaGrpoConfig
    from training.objectives.arena_grpo.round import sample_group, train_arena_grpo
    from training.objectives.grpo.completions import encode_group
    from training.lora import attach_lora
    from training.seqlogp import completion_token_logps

    tokenizer = AutoTokenizer.from_pretrained(warm_tiny)
    model = AutoModelForCausalLM.from_pretrained(warm_tiny)
    train = dataclasses.replace(TrainConfig(), lr=5e-3, kl="k2", kl_coef=0.04, lora_dropout=0.0, seed=3, epochs=3)
    cfg = ArenaGrpoConfig(group_size=8, questions=1, questions_per_step=1, max_new_tokens=48, passage_chars=0)
    policy = attach_lora(model, train)
    generator = ArenaGenerator(TransformersBackend.from_model(model, tokenizer, model_id="tiny"), cfg.arena())
    group = sample_group(generator, Q, cfg.group_size, train.seed)
    assert len(set(group.advantages)) > 1, [r.total for r in group.rewards]
    batch = encode_group(tokenizer, group)

    def surrogate() -> float:
        with torch.no_grad():
            logps = completion_token_logps(policy, batch)[0]
        per_reply = (logps * batch.completion_mask).sum(-1) / batch.completion_mask.sum(-1)
        return float((torch.tensor(group.advantages) * per_reply).sum())

    before = surrogate()
    events: list[dict] = []
    log, samples = train_arena_grpo(policy, tokenizer, [Q], train, cfg, events.append, model_id="tiny")
    history = log.history
    assert events[0] == {"phase": "train"}  # reported as training starts, then one report per step
    assert [h["step"] for h in history] == [1, 2, 3] and len(events) == 1 + 3 and len(samples) == 3
    for h in history:
        assert {"kl_k2", "kl_k3", "kl", "loss", "reward", "format", "accuracy", "relevance", "bonus"} <= set(h)
        assert h["kl"] == pytest.approx(h["kl_k2"])  # the optimised estimator is k2
    assert history[0]["kl_k2"] == 0.0 and history[0]["kl_k3"] == 0.0
    assert history[-1]["kl_k2"] > 0 and history[-1]["kl_k3"] > 0
    assert history[0]["reward"] == pytest.approx(sum(r.total for r in group.rewards) / 8)  # the same group
    assert len({round(h["loss"], 9) for h in history}) > 1
    lora_b = [p.detach() for n, p in policy.named_parameters() if "lora_B" in n]
    assert lora_b and any(float(p.abs().max()) > 0 for p in lora_b)
    assert surrogate() > before


@pytest.mark.slow  # ~10 s on 2 idle CPU cores
def test_arena_grpo_worker_round_registers_adapter(warm_tiny, one_thread, tmp_path):
    """`evorag train --objective arena-grpo` as the worker runs it: a queued round over a data file holding Q,
    2 steps of G = 4 with the k3 ablation named in the job; the adapter is saved, registered under r<id>-arena-grpo
    with the estimator recorded, and its metadata keeps the per-step KL under both estimators."""
    from evorag_core.config import apply_overrides, load_config
    from evorag_core.data.datasets import write_jsonl
    from evorag_core.store import open_store
    from evorag_core.types import Dataset
    from training.job import RoundJob, job_config
    from evorag_core.adapters.files import read_adapter_meta
    from training.rounds import run_round

    data = tmp_path / "q.jsonl"
    write_jsonl(Dataset("demo", str(data), (Q,)), data)
    cfg = apply_overrides(load_config(), {"policy.model": str(warm_tiny), "policy.device": "cpu", "train.lr": 5e-3,
                                          "train.seed": 3, "train.epochs": 2})
    raw = job_config("arena-grpo", data=str(data), kl="k3",
                     arena={"group_size": 4, "questions": 1, "questions_per_step": 1, "max_new_tokens": 40})
    with open_store(f"sqlite:///{tmp_path / 'evorag.db'}") as store:
        rid = store.enqueue_round("arena-grpo", raw)
        store.claim_round("w", 60)
        ref = run_round(RoundJob.from_config(rid, "arena-grpo", raw, cfg, tmp_path), store)
        row = store.get_adapter(ref.name)
    assert ref.name == f"r{rid}-arena-grpo" and row.objective == "arena-grpo" and row.metrics["kl_estimator"] == "k3"
    meta = read_adapter_meta(ref.path)["metrics"]
    assert meta["steps"] == 2 and [row["step"] for row in meta["kl_history"]] == [1, 2]
    first = meta["kl_history"][0]
    assert (first["kl_k2"], first["kl_k3"]) == (0.0, 0.0) and first["kl"] == first["kl_k3"]  # this job optimises k3
    assert meta["question_ids"] == ["q1"]
    bad = job_config("arena-grpo", data=str(data), arena={"group_sise": 4})
    with pytest.raises(ConfigError, match="group_sise"):
        from training.objectives.arena_grpo.config import arena_config_from_job

        arena_config_from_job(RoundJob.from_config(rid, "arena-grpo", bad, cfg, tmp_path))


# -- the real embedded model -----------------------------------------------------------------------------------

@pytest.mark.slow  # loads SmolLM2-135M twice and decodes a few tokens (~20 s on 2 idle cores; conversion once)
def test_eval_builder_with_real_model_and_adapter(session_home, benchmarks, one_thread, tmp_path):
    """`evorag eval --method arena` as built from the CLI: the embedded model answers the first HotpotQA question
    (12 new tokens here); the reply's log-prob equals the backend's score of (prompt, reply) (boundary rule); with
    `--adapter FOLDER` (a LoRA whose B matrices were set to 0.01) the adapter is loaded, active and changes the reply
    scores."""
    import dataclasses
    from evorag_core.methods.base import MethodOptions

    import torch

    from evorag_core.config import apply_overrides, load_config
    from evorag_core.data.datasets import load_dataset
    from evorag_core.methods.arena.method import build_arena_method
    from evorag_core.lm.loading import load_model
    from evorag_core.runtime import Runtime
    from training.lora import attach_lora, save_adapter
    from evorag_core.lm.loading import base_model_id

    cfg = apply_overrides(load_config(), {"policy.device": "cpu"})
    rt = Runtime(cfg, session_home, load_dataset(benchmarks / "hotpotqa_dev300.jsonl"))
    method = build_arena_method(MethodOptions(), rt)
    method.generator.cfg = dataclasses.replace(method.generator.cfg, max_new_tokens=12)
    question = rt.dataset.questions[0]
    result = method.run_question(question)
    assert result.steps == 1 and set(METRIC_KEYS) == set(result.extras["metrics"])
    assert result.extras["arena"]["gold_ids"] == [i for i, p in enumerate(question.passages, 1) if p.pid in question.gold_pids]
    out = method.generator.generate(question.question, question.passages)
    assert out.tokens == 12 and out.finish_reason == "length"
    scored = method.generator.backend.sequence_logprob(out.prompt, out.text)
    # decode steps read fp16 weight copies (half_decode.py: ~1e-4 per token); a wrong prompt would be off by nats
    assert scored == pytest.approx(out.logprob, abs=2e-2)

    model, _, _ = load_model("embedded", session_home, device="cpu")
    peft_model = attach_lora(model, cfg.train)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.fill_(0.01)
    folder = tmp_path / "my adapter"
    save_adapter(peft_model, folder, {"round_id": None, "objective": "arena-grpo",
                                      "base_model_id": base_model_id("embedded", session_home), "metrics": {}})
    tuned = build_arena_method(MethodOptions(adapter=str(folder)), rt)
    assert tuned.label.endswith("+ adapter my-adapter") and tuned.generator.backend.active_adapter == "my-adapter"
    assert tuned.generator.backend.sequence_logprob(out.prompt, out.text) != pytest.approx(scored, abs=1e-3)


@pytest.mark.slow  # a few seconds on the warmed tiny model
def test_micro_batches_accumulate_the_group_gradient(warm_tiny, one_thread):
    """One group of 4 replies: backpropagating each reply with weight 1/4 gives the same LoRA gradient as the
    whole group at once (the loss is a mean over replies), with KL terms included (LoRA B set to 0.01 first so
    that policy != reference)."""
    import dataclasses

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evorag_core.config import TrainConfig
    from evorag_core.lm.hf_backend import TransformersBackend
    from training.objectives.arena_grpo.config import ArenaGrpoConfig
    from training.objectives.arena_grpo.round import sample_group
    from training.objectives.grpo.completions import encode_group, micro_step, rows
    from training.lora import attach_lora

    tokenizer = AutoTokenizer.from_pretrained(warm_tiny)
    model = AutoModelForCausalLM.from_pretrained(warm_tiny)
    train = dataclasses.replace(TrainConfig(), kl="k2", kl_coef=0.5, lora_dropout=0.0, seed=1)
    policy = attach_lora(model, train)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.fill_(0.01)
    cfg = ArenaGrpoConfig(group_size=4, max_new_tokens=40, passage_chars=0)
    generator = ArenaGenerator(TransformersBackend.from_model(model, tokenizer, model_id="tiny"), cfg.arena())
    group = sample_group(generator, Q, 4, seed=5)
    full = encode_group(tokenizer, group)
    params = [p for n, p in policy.named_parameters() if p.requires_grad]

    def grads(micro: int) -> list[torch.Tensor]:
        for p in params:
            p.grad = None
        for start in range(0, 4, micro):
            micro_step(policy, rows(full, start, start + micro), group.advantages[start : start + micro], train,
                        None, micro / 4)
        return [p.grad.clone() for p in params]

    whole, single = grads(4), grads(1)
    assert any(float(g.abs().max()) > 0 for g in whole)
    for a, b in zip(whole, single):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
