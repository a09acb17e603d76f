"""The Pairs tab's edit panel shows a pair's prompt as its conversation (app/tabs/pairs/view.py), not as the chat
template's text (issue #46 item 7): the agent prompt's system turn and few-shot demonstration folded and labelled, the
state (the last user turn) open, no `<|im_start|>` anywhere."""
from __future__ import annotations

import re

from evorag_core.env.state import AgentView
from evorag_core.pairs.io import join_chatml
from evorag_core.policy.prompts import DEMO, SYSTEM_PROMPT, demo_turns, render_user
from evorag_core.store import NewPair

from app.tabs.pairs import handlers as pairs_handlers
from app.tabs.pairs.view import prompt_html
from tests.app.test_studio_handlers import svc  # noqa: F401 - the Services fixture

QUESTION = "Where was <Ansel> Travine born?"


def agent_prompt() -> str:
    """The agent prompt as the policy's chat template writes it: system, 3 demonstration steps (6 turns), the state."""
    turns = [{"role": "system", "content": SYSTEM_PROMPT}]
    for user, reply in demo_turns(300):
        turns += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
    turns.append({"role": "user", "content": render_user(AgentView(QUESTION, (), (), 1, 20), 300)})
    return join_chatml(turns)


def test_the_agent_prompt_is_shown_as_turns_with_the_demonstration_folded():
    """1 system + 6 demonstration turns (3 example steps) + the state + the assistant's slot = 9 turns shown."""
    html = prompt_html(agent_prompt())
    assert "im_start" not in html and "im_end" not in html
    assert 'data-format="chatml"' in html
    folds = re.findall(r'<details class="evo-fold" data-part="(\w+)"><summary>([^<]*)</summary>', html)
    assert folds == [("system", "System instructions"),
                     ("demo", f"Few-shot demonstration: {len(DEMO)} example steps (6 turns, the same in every prompt)")]
    assert "<details open" not in html  # folded: the instructions and the demonstration are the same in every prompt
    roles = re.findall(r'data-role="(\w+)"', html)
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user", "assistant"]
    state = html.rsplit("</details>", 1)[1]  # after the folds: the state, open, and the assistant's slot
    assert "Where was &lt;Ansel&gt; Travine born?" in state and "Eiffel" not in state
    assert "Eiffel" in html.split("</details>")[1]  # the demonstration is there, folded


def test_a_raw_prompt_is_shown_as_it_is_and_no_pair_gives_a_hint():
    html = prompt_html("Question: <b>x</b>\nYour action:")
    assert 'data-format="raw"' in html and "&lt;b&gt;x&lt;/b&gt;" in html and "<details" not in html
    assert "Pick a pair" in prompt_html("")


def test_pair_fields_gives_the_rendered_prompt_of_a_stored_pair(svc):  # noqa: F811
    pid = svc.store().add_pairs([NewPair(agent_prompt(), "SEARCH: Ansel Travine", "ANSWER: Paris")])[0]
    prompt, chosen, rejected, stage = pairs_handlers.pair_fields(svc, pid)
    assert (chosen, rejected, stage) == ("SEARCH: Ansel Travine", "ANSWER: Paris", "")
    assert prompt == prompt_html(agent_prompt()) and "im_start" not in prompt
    assert "Pick a pair" in pairs_handlers.pair_fields(svc, None)[0]


def test_answer_pairs_are_made_from_a_stored_studio_episode_once(svc):  # noqa: F811
    """The tab's "Make answer pairs" (handlers.answer_pairs): the oracle's finished demo episode is read again at its
    answer state by the embedded model's reader; the pairs are queued with source "answer", progress is reported
    per episode, and a second click adds nothing."""
    from app.tabs.episode import handlers as episode_handlers
    from app.common.session import EpisodeSettings

    view, sess = episode_handlers.start_episode(svc, EpisodeSettings(policy="oracle", question_id="demo-001"))
    for _ in range(3):
        view, sess = episode_handlers.step_episode(sess)
    assert sess.record.steps[-1].action.__class__.__name__ == "Answer"
    calls: list[tuple[int, int]] = []
    msg = pairs_handlers.answer_pairs(svc, "final", lambda done, total: calls.append((done, total)))
    made = svc.store().list_pairs(source="answer", limit=None)
    assert made and msg.startswith(f"Queued {len(made)} answer pair") and calls[-1][0] == calls[-1][1] >= 1
    gold = svc.runtime().dataset.get("demo-001").answers
    assert all(p.status == "queued" and p.metadata["question_id"] == "demo-001" for p in made)
    assert {" ".join(p.chosen.split()).lower() for p in made} <= {a.lower() for a in gold}
    again = pairs_handlers.answer_pairs(svc, "final")
    assert again.startswith("Queued 0 answer pairs from 0 states of 1 episode (1 paired before")
    assert len(svc.store().list_pairs(source="answer", limit=None)) == len(made)
