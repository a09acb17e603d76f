"""R²AG: rewards (hand-computed), the lenient parser, the tree (scripted steering on the demo data, real hybrid
retriever), pruning, JSON round trip, the eval method and retrieval report, the LM steering and GRPO on a tiny
Llama. The studio's tree view is tested in tests/app/test_r2ag_view.py.

Reward arithmetic used below (α = 0.2, β = 0.3, γ = 0.2, ℓ = 1.25, ω·R_f ≤ 0.02):
gold g = {g1, g2, g3}, prior = {g1}; base queries retrieve [g1], [x], [g2], [g2]; predicted [g3], [y].
R_MH = |{g2}| + 1.25·|{g3}| = 2.25.  R_AP^b (t = 4) = (1/3)(1/1 + 2/3 + 3/4) = 0.805556;  R_AP^p (t = 2) = (1/3)(1/1)
= 0.333333;  R_AP = 1.138889.  R_f = 6 x 0.01 = 0.06 -> capped 0.02.
Without stop: R = 0.2·2.25 + 0.2·1.138889 + 0.02 = 0.697778.  With stop (all gold retrieved): + 0.3 = 0.997778.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import pytest

from tests.paths import DEMO
from evorag_core.config import AnswerConfig, R2agConfig, load_config
from evorag_core.data.datasets import load_dataset
from evorag_core.methods.r2ag import (
    RewardWeights,
    ScriptedSteering,
    SteerRequest,
    Tree,
    TreeSettings,
    expand_once,
    expansion_reward,
    frontier,
    grow,
    new_tree,
    parse_expansion,
    prune,
    pruned_context,
)
from evorag_core.methods.r2ag.rewards import average_precision, format_reward, joint_hit, multi_hit
from evorag_core.methods.r2ag.scripted import entities, focus_words
from evorag_core.lm.base import Generation
from evorag_core.runtime import Runtime
from evorag_core.types import Passage

G = frozenset({"g1", "g2", "g3"})
BASE = [["g1"], ["x"], ["g2"], ["g2"]]
PRED = [["g3"], ["y"]]


# -- rewards ---------------------------------------------------------------------------------------------------

def test_reward_terms_hand_computed():
    """See the module docstring for the arithmetic."""
    assert multi_hit(BASE, PRED, frozenset({"g1"}), G) == pytest.approx(2.25)
    # g2 reached by a base and a predicted query counts once, as a base hit: 1 + 1.25 * |{g3}| = 2.25
    assert multi_hit([["g2"]], [["g2"], ["g3"]], frozenset(), G) == pytest.approx(2.25)
    assert average_precision(BASE, G, 4) == pytest.approx((1 + 2 / 3 + 3 / 4) / 3)
    assert average_precision(PRED, G, 2) == pytest.approx(1 / 3)
    assert average_precision(BASE, frozenset(), 4) == 0.0
    assert joint_hit(frozenset({"g1", "g2", "g3", "x"}), G, True) == 1.0
    assert joint_hit(frozenset({"g1", "g2"}), G, True) == 0.0 and joint_hit(frozenset(G), G, False) == 0.0
    assert format_reward(True, 3) == pytest.approx(0.03) and format_reward(False, 3) == 0.0


def test_total_reward_and_zero_rules():
    """0.697778 without stop, 0.997778 with stop; zero without think, on an early stop (g4 missing) and when the
    reply was cut by the token limit."""
    prior = frozenset({"g1"})
    kw = dict(has_think=True, well_formed=6)
    r = expansion_reward(BASE, PRED, prior, G, stop=False, **kw)
    assert (r.multi_hit, r.joint_hit, r.format) == (pytest.approx(2.25), 0.0, pytest.approx(0.06))
    assert r.average_precision == pytest.approx(1.138889, abs=1e-6)
    assert r.total == pytest.approx(0.697778, abs=1e-6) and r.zeroed == ""
    assert expansion_reward(BASE, PRED, prior, G, stop=True, **kw).total == pytest.approx(0.997778, abs=1e-6)
    g4 = G | {"g4"}
    early = expansion_reward(BASE, PRED, prior, g4, stop=True, **kw)
    assert early.total == 0.0 and early.zeroed == "early_stop" and early.multi_hit == pytest.approx(2.25)
    none = expansion_reward(BASE, PRED, prior, G, stop=False, has_think=False, well_formed=6)
    assert none.total == 0.0 and none.zeroed == "no_think"
    cut = expansion_reward(BASE, PRED, prior, G, stop=False, truncated=True, **kw)
    assert cut.total == 0.0 and cut.zeroed == "truncated"


def test_top_t_cuts_average_precision_but_not_multi_hit():
    """Five base queries, only the 5th hits new gold g2 (t_base = 4): R_AP^b = 0; R_MH = 1; R_f = 0.05 -> 0.02.
    R = 0.2·1 + 0 + 0.2·0 + 0.02 = 0.22. With t_base = 5: R_AP^b = (1/3)(1/5) -> R = 0.22 + 0.2/15 = 0.233333."""
    base = [["x"], ["y"], ["z"], ["w"], ["g2"]]
    r = expansion_reward(base, [], frozenset(), G, stop=False, has_think=True, well_formed=5)
    assert r.average_precision == 0.0 and r.multi_hit == 1.0 and r.total == pytest.approx(0.22)
    wide = RewardWeights(top_t_base=5)
    r5 = expansion_reward(base, [], frozenset(), G, stop=False, has_think=True, well_formed=5, weights=wide)
    assert r5.total == pytest.approx(0.22 + 0.2 / 15)
    assert RewardWeights.from_config(R2agConfig()) == RewardWeights()


# -- parser ----------------------------------------------------------------------------------------------------

def test_parse_well_formed_reply():
    text = ("<think>Travine was born in Mirrow; find its river.</think>\n<base-Q>Which river is Mirrow on?</base-Q>\n"
            "<base-Q> Where was Ansel Travine born? </base-Q>\n<predicted-Q>How long is that river?</predicted-Q>")
    e = parse_expansion(text)
    assert e.think == "Travine was born in Mirrow; find its river."
    assert e.base == ("Which river is Mirrow on?", "Where was Ansel Travine born?")
    assert e.predicted == ("How long is that river?",) and not e.stop
    assert (e.well_formed, e.malformed) == (3, 0)
    assert e.queries[0] == ("base", "Which river is Mirrow on?") and e.queries[-1][0] == "predicted"


@pytest.mark.parametrize("text, base, predicted, stop, well_formed, malformed", [
    ("", (), (), False, 0, 0),
    ("no tags at all, just prose", (), (), False, 0, 0),
    ("<think>done</think><base-Q>stop retrieval</base-Q><predicted-Q>none</predicted-Q>", (), (), True, 2, 0),
    ("<think>x</think><base-Q>Stop Retrieval.</base-Q>", (), (), True, 1, 0),
    # unclosed base segment runs to the next tag; untagged stop phrase; stray </think> gives the reasoning
    ("why</think><base-Q>q1<base-Q>q2</base-Q> stop retrieval", ("q1", "q2"), (), True, 1, 3),
    # variant tag spellings, unclosed predicted at the end, no think block
    ("<base_q> a </BASE-Q><predicted q>b", ("a",), ("b",), False, 0, 1),
    # empty segment, duplicate query (dropped), queries before the think block are not format-rewarded
    ("<base-Q>a</base-Q><think>t</think><base-Q></base-Q><base-Q>A</base-Q><base-Q>b</base-Q>", ("a", "b"), (),
     False, 2, 1),
    ("<think>unclosed reasoning <base-Q>q</base-Q>", ("q",), (), False, 0, 1),
    ("<<<>>></base-Q></predicted-Q><think></think>", (), (), False, 0, 2),
])
def test_parser_is_lenient(text, base, predicted, stop, well_formed, malformed):
    e = parse_expansion(text)
    assert (e.base, e.predicted, e.stop, e.well_formed, e.malformed) == (base, predicted, stop, well_formed, malformed)


def test_parser_caps_queries_and_never_raises_on_junk():
    text = "<think>t</think>" + "".join(f"<base-Q>q{i}</base-Q>" for i in range(5)) + "<base-Q>q1</base-Q>"
    e = parse_expansion(text, max_queries=3)
    assert e.base == ("q0", "q1", "q2") and e.dropped == 2 and e.duplicates == 1 and e.well_formed == 6
    same = parse_expansion("<think>t</think><base-Q>Who is X?</base-Q><predicted-Q>who is x?</predicted-Q>")
    assert same.base == ("Who is X?",) and same.predicted == () and same.duplicates == 1
    for junk in ("<think>", "</think>", "<base-Q>", "\x00<predicted-Q>\n", "<think><think></think></think>", "ü" * 50):
        parse_expansion(junk)
    assert parse_expansion(None).base == ()  # type: ignore[arg-type]
    assert type(e).from_dict(e.to_dict()) == e


# -- scripted steering -----------------------------------------------------------------------------------------

def test_entities_and_focus_words():
    q = "On which river is the birthplace of the chemist Ansel Travine?"
    assert entities(q) == ["Ansel Travine"]
    assert focus_words(q) == ["river", "birthplace", "chemist"]
    assert entities("The Bay of Ilvane lies near Mirrow and Ostby.") == ["Bay of Ilvane", "Mirrow and Ostby"]


def test_scripted_steering_follows_new_entities_and_stops():
    """Root: the question and its entity. On the Ansel Travine passage: its entities not yet on the branch, in order
    of the focus words their sentence shares (all in one sentence here -> order of appearance); predicted queries add
    the focus words. With two passages covering >= half of the focus words: stop retrieval."""
    steer = ScriptedSteering()
    q = "On which river is the birthplace of the chemist Ansel Travine?"
    root = parse_expansion(steer.reply(SteerRequest(q, ())))
    assert root.base == (q, "Ansel Travine") and root.has_think
    travine = Passage("a", "Ansel Travine", "Ansel Travine was an Ostrevian chemist born in Mirrow.")
    e = parse_expansion(steer.reply(SteerRequest(q, (travine,))))
    assert e.base == ("Ostrevian", "Mirrow") and e.predicted == ("Ostrevian river birthplace chemist",
                                                                  "Mirrow river birthplace chemist")
    mirrow = Passage("b", "Mirrow", "Mirrow is a mill town on the Sable River.")
    assert parse_expansion(steer.reply(SteerRequest(q, (travine, mirrow)))).stop


# -- the tree on the demo data with the real hybrid retriever ---------------------------------------------------

@pytest.fixture(scope="module")
def demo_rt(session_home) -> Runtime:
    return Runtime(load_config(), session_home, load_dataset(DEMO))


class CountingRetriever:
    """The real retriever, counting calls: an iteration must retrieve all its queries in one batch."""

    def __init__(self, inner):
        self.inner, self.batches, self.singles = inner, [], 0

    def search(self, query, k):
        self.singles += 1
        return self.inner.search(query, k)

    def search_batch(self, queries, k):
        self.batches.append(len(queries))
        return self.inner.search_batch(queries, k)


def _demo(rt: Runtime, qid: str):
    corpus = rt.pooled_corpus
    question = rt.dataset.get(qid)
    return question, corpus.gold_for(question), CountingRetriever(rt.retrieval.retriever_for(corpus)), \
        {p.pid: p for p in corpus.passages}


def test_first_expansion_on_a_comparison_question(demo_rt):
    """demo-002 "Which is longer, the Sable River or the Caddock River?": the root's three base queries (question,
    Sable River, Caddock River) retrieve Caddock River, Sable River, Caddock River (top-1 each) in one batch.
    New gold: 2 -> R_MH = 2; R_AP^b = (1/2)(1/1 + 2/2 + 3/3) = 1.5; R_f = 4 x 0.01 -> 0.02 (cap).
    R = 0.2·2 + 0.2·1.5 + 0.02 = 0.72."""
    q, gold, retriever, passages = _demo(demo_rt, "demo-002")
    tree = expand_once(new_tree(q.question, gold, q.id), ScriptedSteering(), retriever, passages, TreeSettings())
    assert retriever.batches == [3] and retriever.singles == 0
    kids = tree.nodes[1:]
    assert [n.query for n in kids] == [q.question, "Sable River", "Caddock River"]
    assert [n.titles for n in kids] == [("Caddock River",), ("Sable River",), ("Caddock River",)]
    assert [n.new_gold for n in kids] == [1, 1, 0] and all(n.gold_hit for n in kids)
    assert [n.selected for n in kids] == [True, True, True] and kids[2].new_pids == ()
    assert tree.expansions[0].reward.total == pytest.approx(0.72)
    assert [n.id for n in frontier(tree, TreeSettings())] == [1, 2]  # node 3 brought nothing new


def test_grow_prune_and_round_trip(demo_rt):
    """Growing to the end: every iteration is one retrieval batch; iterations <= L_max; pruning keeps the root and
    exactly the nodes that first retrieved a gold passage (and their ancestors); the pruned context is the gold
    found; the tree survives JSON unchanged."""
    q, gold, retriever, passages = _demo(demo_rt, "demo-001")
    settings = TreeSettings(max_iterations=3)
    tree = grow(new_tree(q.question, gold, q.id), ScriptedSteering(), retriever, passages, settings)
    assert tree.done and tree.iterations <= 3 and len(retriever.batches) == tree.iterations
    assert retriever.singles == 0 and tree.stop_reason in ("stop", "exhausted", "max_iterations")
    assert len(tree.retrieved()) == len(set(tree.retrieved()))
    pruned = prune(tree)
    kept = [n for n in pruned.nodes if not n.pruned]
    gold_nodes = {n.id for n in tree.nodes if n.new_gold}
    ancestors = {a.id for g in gold_nodes for a in tree.path(g)}
    assert {n.id for n in kept} == ancestors | {0}
    assert set(pruned_context(tree)) == gold & set(tree.retrieved())
    again = Tree.from_dict(json.loads(json.dumps(pruned.to_dict())))
    assert again == pruned
    assert prune(pruned) == pruned


def test_top_t_and_frontier_bounds(demo_rt):
    """t_base = 1 keeps only the first base child of the root selectable; max_frontier = 1 expands one branch per
    iteration; max_iterations = 1 ends the tree after one expansion with stop_reason max_iterations."""
    q, gold, retriever, passages = _demo(demo_rt, "demo-002")
    narrow = TreeSettings(top_t_base=1, max_frontier=1, max_iterations=2)
    tree = expand_once(new_tree(q.question, gold), ScriptedSteering(), retriever, passages, narrow)
    assert [n.selected for n in tree.nodes[1:]] == [True, False, False]
    tree = grow(tree, ScriptedSteering(), retriever, passages, narrow)
    assert all(len([e for e in tree.expansions if e.iteration == i]) <= 1 for i in (1, 2))
    one = grow(new_tree(q.question, gold), ScriptedSteering(), retriever, passages, TreeSettings(max_iterations=1))
    assert one.iterations == 1 and one.stop_reason == "max_iterations"
    from evorag_core.errors import ConfigError

    with pytest.raises(ConfigError, match="max_frontier"):
        TreeSettings(max_frontier=0)


# -- the eval method and the retrieval report --------------------------------------------------------------------

class TitleAnswerer:
    """A stand-in answer generator: replies with the title of the first numbered passage of the prompt (the real
    prompt and answer cleaning of `methods.baselines` run around it)."""

    model_id = "title-answerer"

    def __init__(self):
        self.prompts: list[str] = []

    def chat_prompt(self, system: str, user: str, examples: Sequence[tuple[str, str]] = ()) -> str:
        return f"{system}\n{user}"

    def generate(self, prompt, max_new_tokens, stop=(), temperature=0.0, n=1, seed=None):
        self.prompts.append(prompt)
        line = next((l for l in prompt.splitlines() if l.startswith("[1] ")), "[1] unknown: ")
        return [Generation(f"Answer: {line[4:].split(':', 1)[0]}.", (), (), "stop")]


def test_eval_method_end_to_end_with_scripted_steering(demo_rt, tmp_path):
    """`r2ag` over demo-001/-002 through the shared evaluator: the answer prompt numbers the tree's passages in
    order of retrieval (at most answer_docs); 'Answer: Caddock River.' is cleaned to 'Caddock River' (not demo-002's
    gold 'Sable River': EM 0); the per-question metrics are averaged into the summary; the tree is in the extras."""
    from evorag_core.evaluation.runner import evaluate
    from evorag_core.methods.r2ag.method import R2agMethod, TreeBuilder

    cfg = replace(R2agConfig(), steering="scripted", answer_docs=3)
    builder = TreeBuilder(ScriptedSteering(), cfg, demo_rt.corpus_for, demo_rt.retrieval.retriever_for)
    answerer = TitleAnswerer()
    method = R2agMethod(builder, answerer, answer_cfg=AnswerConfig(mode="free"))  # the stand-in generates text
    qs = [demo_rt.dataset.get("demo-001"), demo_rt.dataset.get("demo-002")]
    summary, results = evaluate(method, qs, out_path=tmp_path / "r2ag.jsonl")
    r = results[1]
    assert r.prediction == "Caddock River" and r.em == 0.0 and r.support_recall == 1.0
    assert r.extras["answer_context"] == list(r.passages[:3]) and "[3] " in answerer.prompts[1]
    assert "[4] " not in answerer.prompts[1]
    tree = Tree.from_dict(r.extras["tree"])
    assert tree.retrieved() == r.passages and r.steps == tree.iterations == len({t["t"] for t in r.trace})
    assert summary["r2ag_recall"] == pytest.approx(sum(x.extras["metrics"]["r2ag_recall"] for x in results) / 2)
    assert summary["n"] == 2 and method.label == "R2AG[scripted]"
    assert len((tmp_path / "r2ag.jsonl").read_text().splitlines()) == 2


def test_retrieval_report_beside_single_step(demo_rt):
    """The report has the tree's row and SR@5 / SR@10 rows over the same (gold-bearing) questions; SR@K retrieves
    exactly K documents; recall@5 of the tree is at most its recall; AP is within [0, 1]."""
    from evorag_core.methods.r2ag.metrics import average_precision_at, retrieval_report
    from evorag_core.methods.r2ag.method import TreeBuilder

    builder = TreeBuilder(ScriptedSteering(), R2agConfig(), demo_rt.corpus_for, demo_rt.retrieval.retriever_for)
    qs = demo_rt.dataset.questions[:4]
    report = retrieval_report(qs, demo_rt.corpus_for, builder.grow, demo_rt.retrieval.retriever_for)
    assert set(report) == {"r2ag", "sr@5", "sr@10"}
    n = sum(1 for q in qs if q.gold_pids)
    assert report["r2ag"]["questions"] == report["sr@5"]["questions"] == n
    assert report["sr@5"]["docs"] == 5 and report["sr@10"]["docs"] == 10
    assert report["r2ag"]["recall@5"] <= report["r2ag"]["recall"] <= 1 and 0 <= report["r2ag"]["map"] <= 1
    assert report["r2ag"]["iterations"] >= 1
    # AP over [x, g1, y, g2] with g = {g1, g2}: (1/2)(1/2 + 2/4) = 0.5
    assert average_precision_at(["x", "g1", "y", "g2", "g1"], frozenset({"g1", "g2"})) == pytest.approx(0.5)


def test_retrieval_eval_command_scripted(session_home, capsys):
    """`evorag retrieval-eval --method r2ag --set r2ag.steering=scripted --limit 3 --json` on the demo data."""
    from evorag_core.cli.main import main

    code = main(["retrieval-eval", "--method", "r2ag", "--set", "r2ag.steering=scripted", "--limit", "3", "--json",
                 "--home", str(session_home), "--data", str(DEMO)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and set(out) == {"r2ag[scripted]", "sr@5", "sr@10"} and out["sr@5"]["questions"] == 3


# -- GRPO on a tiny Llama ---------------------------------------------------------------------------------------

WARMUP_STEPS = 120
QID = "demo-001"  # "On which river is the birthplace of the chemist Ansel Travine?"
GOOD = "<think>Find the chemist first.</think>\n<base-Q>Ansel Travine</base-Q>\n<predicted-Q>none</predicted-Q>"
REPLIES = [GOOD,
           "<think>The chemist.</think>\n<base-Q>chemist Ansel Travine</base-Q>\n<predicted-Q>none</predicted-Q>",
           "<base-Q>Ansel Travine</base-Q>",  # no think block: reward 0
           "<think>Enough.</think>\n<base-Q>stop retrieval</base-Q>"]  # stops before any gold: reward 0


@pytest.fixture()
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def warm_tiny(tmp_path_factory, demo_rt) -> Path:
    """A 2-layer random Llama (tests.tiny_model) warmed up for WARMUP_STEPS = 120 supervised steps on REPLIES after the root prompt of
    demo-001, so that its samples differ in reward (GRPO needs spread inside a group)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evorag_core.methods.r2ag.prompt import SYSTEM_PROMPT, render_user
    from evorag_core.methods.r2ag.steering import LMSteering
    from evorag_core.lm.hf_backend import TransformersBackend
    from tests.tiny_model import build_tiny_model

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    q = demo_rt.dataset.get(QID)
    folder = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model",
                              [render_user(q.question, ()), SYSTEM_PROMPT, *REPLIES])
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    steer = LMSteering(TransformersBackend.from_model(model, tokenizer, model_id="tiny"), demo=False)
    prompt_ids = tokenizer(steer.prompt(SteerRequest(q.question, ())), add_special_tokens=False)["input_ids"]
    rows = [torch.tensor([prompt_ids + tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]])
            for r in REPLIES]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(WARMUP_STEPS):
        for ids in rows:
            labels = ids.clone()
            labels[:, : len(prompt_ids)] = -100
            (model(input_ids=ids, labels=labels).loss / len(rows)).backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(folder)
    torch.set_num_threads(before)
    return folder


@pytest.mark.slow  # ~20 s with the warm-up on 2 idle cores
def test_r2ag_grpo_steps_change_the_adapter_and_follow_the_reward(warm_tiny, demo_rt, one_thread):
    """2 passes of the progressive loop over demo-001, G = 8, asymmetric clip 0.2 / 0.28, k3 with kl_coef 0.04.
    The step-1 group is re-sampled here with the trainer's seed (train.seed + 0) from the starting policy: its
    rewards spread, so the update runs; the LoRA B matrices leave zero; the GRPO surrogate of that group,
    sum_i A_i * mean_t log pi(o_i,t), goes up; the log-prob margin of the best reply over a zero-reward one (no
    think block) grows. Pass 2 starts from the pruned trees of pass 1: their contexts are gold passages only."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evorag_core.config import TrainConfig
    from evorag_core.methods.r2ag.steering import LMSteering
    from evorag_core.lm.hf_backend import TransformersBackend
    from training.objectives.grpo.completions import encode_group
    from training.lora import attach_lora
    from training.objectives.r2ag_grpo.config import R2agGrpoConfig
    from training.objectives.r2ag_grpo.round import TreeState, sample_group, train_r2ag_grpo
    from training.seqlogp import completion_token_logps, encode

    tokenizer = AutoTokenizer.from_pretrained(warm_tiny)
    model = AutoModelForCausalLM.from_pretrained(warm_tiny)
    train = replace(TrainConfig(), lr=5e-3, kl="k3", kl_coef=0.04, lora_dropout=0.0, seed=3)
    cfg = R2agGrpoConfig(group_size=8, questions=1, states_per_step=1, iterations=2, max_states=2,
                         max_new_tokens=40, demo=False, micro_batch=3, temperature=0.7)
    policy = attach_lora(model, train)
    corpus = demo_rt.pooled_corpus
    retriever = demo_rt.retrieval.retriever_for(corpus)
    passages = {p.pid: p for p in corpus.passages}
    q = demo_rt.dataset.get(QID)
    steer = LMSteering(TransformersBackend.from_model(model, tokenizer, model_id="tiny"), max_new_tokens=40,
                       demo=False)
    group = sample_group(steer, retriever, passages, TreeState(q, corpus.gold_for(q), ()), cfg, train.seed)
    assert not group.flat, [(o.text[:60], r.total, r.zeroed) for o, r in zip(group.outputs, group.rewards)]
    batch = encode_group(tokenizer, group)
    prompt = group.outputs[0].prompt
    pair = encode(tokenizer, [prompt, prompt], [GOOD, REPLIES[2]], 512)

    def surrogate() -> float:
        with torch.no_grad():
            logps = completion_token_logps(policy, batch)[0]
        per_reply = (logps * batch.completion_mask).sum(-1) / batch.completion_mask.sum(-1)
        return float((torch.tensor(group.advantages) * per_reply).sum())

    def margin() -> float:
        with torch.no_grad():
            logps = (completion_token_logps(policy, pair)[0] * pair.completion_mask).sum(-1)
        return float(logps[0] - logps[1])

    before, margin_before = surrogate(), margin()
    events: list[dict] = []
    log, samples = train_r2ag_grpo(policy, tokenizer, [q], corpus.gold_for, retriever, passages, train, cfg,
                                   events.append, model_id="tiny")
    history = log.history
    assert history[0]["updated"] == 1.0 and history[0]["reward"] == pytest.approx(
        sum(r.total for r in group.rewards) / 8)
    assert events[0] == {"phase": "train"}  # reported as training starts, then one report per step
    assert len(events) - 1 == len(history) >= 2 and {h["iteration"] for h in history} == {1.0, 2.0}
    lora_b = [p.detach() for n, p in policy.named_parameters() if "lora_B" in n]
    assert any(float(p.abs().max()) > 0 for p in lora_b)
    assert surrogate() > before
    assert margin() > margin_before
    gold = corpus.gold_for(q)
    assert all(set(s["context"]) <= gold for s in samples if s["iteration"] == 2)
    assert any(s["iteration"] == 2 for s in samples)


def test_r2ag_grpo_job_config_and_round_registration():
    """The objective is registered for the worker, and a typo in the job's r2ag object fails loudly."""
    from evorag_core.errors import ConfigError
    from training.job import OBJECTIVES, RoundJob
    from training.objectives.r2ag_grpo.config import R2agGrpoConfig, r2ag_config_from_job
    from training.rounds import ROUND_MODULES

    assert ROUND_MODULES["r2ag-grpo"] == "training.objectives.r2ag_grpo.round" and "r2ag-grpo" in OBJECTIVES
    cfg = load_config()
    job = RoundJob.from_config(1, "r2ag-grpo", {"r2ag": {"group_size": 4}, "data": str(DEMO)}, cfg, Path("/tmp"))
    assert r2ag_config_from_job(job) == R2agGrpoConfig(group_size=4)
    bad = RoundJob.from_config(1, "r2ag-grpo", {"r2ag": {"group_sise": 4}}, cfg, Path("/tmp"))
    with pytest.raises(ConfigError, match="group_sise"):
        r2ag_config_from_job(bad)
    with pytest.raises(ConfigError, match="group_size"):
        R2agGrpoConfig(group_size=1)


@pytest.mark.slow  # ~10 s: a demo index in a fresh home and one step of G = 4
def test_r2ag_grpo_worker_round_registers_adapter(warm_tiny, one_thread, tmp_path):
    """`evorag train --objective r2ag-grpo` as the worker runs it: one step over demo-001 (a data file holding the
    demo set, offset 0, one question), the adapter registered as r<id>-r2ag-grpo with the clip range recorded."""
    from evorag_core.config import apply_overrides
    from evorag_core.store import open_store
    from training.job import RoundJob, job_config
    from evorag_core.adapters.files import read_adapter_meta
    from training.rounds import run_round

    cfg = apply_overrides(load_config(), {"policy.model": str(warm_tiny), "policy.device": "cpu", "train.lr": 5e-3})
    raw = job_config("r2ag-grpo", data=str(DEMO), max_steps=1,
                     r2ag={"group_size": 4, "questions": 1, "states_per_step": 1, "iterations": 1,
                           "max_new_tokens": 32, "demo": False, "temperature": 0.7})
    with open_store(f"sqlite:///{tmp_path / 'evorag.db'}") as store:
        rid = store.enqueue_round("r2ag-grpo", raw)
        store.claim_round("w", 60)
        ref = run_round(RoundJob.from_config(rid, "r2ag-grpo", raw, cfg, tmp_path), store)
        row = store.get_adapter(ref.name)
    assert ref.name == f"r{rid}-r2ag-grpo" and row.objective == "r2ag-grpo"
    meta = read_adapter_meta(ref.path)["metrics"]
    assert meta["steps"] == 1 and meta["clip_high"] == 0.28 and meta["clip_low"] == 0.2
    assert meta["question_ids"] == ["demo-001"]


@pytest.mark.slow  # two worker launches (1 and 2 processes), each building the demo index in its home
def test_r2ag_grpo_round_on_two_processes_equals_one(warm_tiny, tmp_path):
    """Issue 28: the same r2ag-grpo round by `python -m training.worker --drain` and by a 2-process `accelerate launch`
    (gloo, tests/training/test_multi_process.py's harness) over demo-001, G = 8, 2 passes, 2 states per step. Pass 1
    has one state (its group sampled with seed train.seed + 0 = 3 spreads in reward: the test above), so on 2
    processes the second has no group that step and only joins the gradient sum; pass 2 starts from up to 2 pruned
    trees, one group per process. The groups are gathered (one next forest, the rewards), the gradients summed.
    Loss and adapter agree within 1e-4."""
    from tests.training.test_multi_process import TOLERANCE, _assert_equal, _both
    from training.job import job_config

    raw = job_config("r2ag-grpo", data=str(DEMO), reference="base",
                     r2ag={"group_size": 8, "questions": 1, "states_per_step": 2, "iterations": 2, "max_states": 2,
                           "max_new_tokens": 40, "demo": False, "temperature": 0.7})
    runs = _both(tmp_path, warm_tiny, lambda store: [store.enqueue_round("r2ag-grpo", raw)])
    [rid] = runs[1]
    (m1, _), (m2, _) = runs[1][rid], runs[2][rid]
    assert m1["steps"] == m2["steps"] and m1["question_ids"] == m2["question_ids"] == ["demo-001"]
    assert abs(m1["first_reward"] - m2["first_reward"]) <= TOLERANCE
    assert [row[3] for row in m1["reward_history"]] == [row[3] for row in m2["reward_history"]]  # forest sizes
    loss_diff, weight_diff = _assert_equal(runs[1][rid], runs[2][rid])
    print(f"r2ag-grpo: loss diff {loss_diff:.3g}, adapter diff {weight_diff:.3g}; (step, pass, reward, forest): "
          f"{m2['reward_history']}, groups updated: {[h.get('updated') for h in m2['step_history']]}")


# -- the LM steering on the embedded SmolLM2-135M ----------------------------------------------------------------

@pytest.mark.slow  # loads SmolLM2-135M (converted once per session) and decodes 3 x 16 tokens
def test_lm_steering_smoke(demo_rt, session_home, one_thread):
    """The paper's prompt (Appendix G) with the worked example turn; a frontier of two branches decoded as one
    batch (greedy), then a sampled group of two for one state: every reply is parsed without error, replies cut at
    16 tokens are flagged truncated, and a reply's log-prob equals the backend's score of (prompt, reply)."""
    from evorag_core.config import apply_overrides
    from evorag_core.methods.r2ag.prompt import DEMO_TURN, SYSTEM_PROMPT
    from evorag_core.methods.r2ag.steering import LMSteering
    from evorag_core.lm.hf_backend import TransformersBackend

    cfg = apply_overrides(load_config(), {"policy.device": "cpu"})
    backend = TransformersBackend(cfg.policy, session_home)
    steer = LMSteering(backend, max_new_tokens=16)
    q = demo_rt.dataset.get(QID)
    travine = next(p for p in demo_rt.pooled_corpus.passages if p.title == "Ansel Travine")
    props = steer.propose([SteerRequest(q.question, ()), SteerRequest(q.question, (travine,))])
    assert len(props) == 2 and SYSTEM_PROMPT[:40] in props[0].prompt and DEMO_TURN[1][:30] in props[0].prompt
    assert "[1] Ansel Travine: " in props[1].prompt and "Evidences: none" in props[0].prompt.split(DEMO_TURN[1])[1]
    for p in props:
        assert 0 < p.tokens <= 16 and p.truncated == (p.finish_reason == "length")
        assert p.expansion == parse_expansion(p.text, 6)
    group = steer.sample(SteerRequest(q.question, ()), 2, 1.0, seed=0)
    assert len(group) == 2
    # decode steps read fp16 weight copies (half_decode.py: ~1e-4 per token); a wrong prompt would be off by nats
    assert backend.sequence_logprob(group[0].prompt, group[0].text) == pytest.approx(group[0].logprob, abs=2e-2)
