"""ARENA handler: one question answered by ARENA's citing generator (`evorag_core.reader.arena`) with the studio's
policy model, the base model and then (optionally) an adapter of the registry, each reply rendered by
`app.common.arena_view.render_arena_answer` with its four rewards.

- A question of the data file: the references are its own passages in the data set's order and the gold reference
  ids come from its gold passages, as `ArenaMethod` uses them in the per-question setting.
- A typed question: asked over the references of the picked question, with no gold answer and no gold references;
  only the format reward is scored, the page says the others need gold.
- `arena_generate` yields an `ArenaStatus` every `poll` seconds while a reply is generated (the page's status
  line). Closing the generator (the page's Stop) stops it at that point: the reply in progress stops before its
  next token (`evorag_core.lm.base.interruptible`; a backend without it finishes the reply in its thread) and is
  thrown away, the next side never starts; nothing is stored, so a cancelled run leaves nothing behind. Each reply
  passes the test hold point `arena:base` / `arena:adapter` once it holds the model (`evorag_core.test_hooks`: off
  unless a test names it).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from evorag_core.lm.base import interruptible
from evorag_core.methods.arena.rewards import ArenaReward, arena_reward, format_reward, gold_reference_ids
from evorag_core.reader.arena.generator import ArenaGenerator, ArenaOutput
from evorag_core.reader.arena.prompt import ArenaConfig
from evorag_core.types import Passage
from evorag_core import test_hooks

from app.common import views
from app.common.arena_view import render_arena_answer
from app.common.handlers import adapter_lookup, check_typed, in_thread
from app.common.policies import BASE, LIVE
from app.common.services import Services

__all__ = ["ArenaRequest", "ArenaTask", "ArenaStatus", "MAX_TOKENS_LIMIT", "NO_ADAPTER", "adapter_choices",
           "prepare_task", "task_rewards", "side_html", "empty_side", "arena_generate"]

MAX_TOKENS_LIMIT = 2048  # the reply budget the page allows
NO_ADAPTER = ""  # the adapter picker's "none": the base model only

@dataclass(frozen=True)
class ArenaRequest:
    data_path: str = ""
    question_id: str = ""
    typed_question: str = ""  # when set, asked instead of the question, over the picked question's references
    adapter: str = NO_ADAPTER  # "lm:<name>" (the B column), or "" for the base model only
    max_new_tokens: int = ArenaConfig().max_new_tokens
    demo: bool = False  # ArenaConfig.demo: one demonstration exchange before the question


@dataclass(frozen=True)
class ArenaTask:
    """What both sides answer: the question, its numbered references and the gold (none for a typed question)."""

    question: str
    question_id: str  # the picked question (its references), also for a typed question
    references: tuple[Passage, ...]
    gold_ids: tuple[int, ...]
    gold_answers: tuple[str, ...]
    typed: bool
    cfg: ArenaConfig


@dataclass(frozen=True)
class ArenaStatus:
    status: str  # HTML: what runs now, or what ran
    base: str | None  # HTML of the base model's column; None: leave it as it is
    adapter: str | None  # HTML of the adapter's column; None: leave it as it is


def adapter_choices(svc: Services) -> list[tuple[str, str]]:
    """The B column's picker: none (base only) and every registered adapter."""
    store = svc.store_or_none()
    names = [a.name for a in store.list_adapters()] if store is not None else []
    return [("none (base model only)", NO_ADAPTER), *((f"adapter {n}", f"lm:{n}") for n in names)]


def prepare_task(svc: Services, request: ArenaRequest) -> ArenaTask:
    """The question and references `request` asks for (ValueError / KeyError with a readable message)."""
    typed = check_typed(" ".join((request.typed_question or "").split()), svc.cfg.studio.max_question_chars,
                        "typed question")
    tokens = int(request.max_new_tokens or 0)
    if not 1 <= tokens <= MAX_TOKENS_LIMIT:
        raise ValueError(f"the reply budget must be 1 to {MAX_TOKENS_LIMIT} tokens, got {tokens}")
    rt = svc.runtime(request.data_path or None)
    if not request.question_id:
        raise ValueError("pick a question of the data file (a typed question is asked over its references)")
    question = rt.dataset.get(request.question_id)
    if not question.passages:
        raise ValueError(f"question {question.id} has no passages of its own: ARENA answers from a question's "
                         "references (pick a question of a file with passages)")
    cfg = ArenaConfig(max_new_tokens=tokens, passage_chars=svc.cfg.policy.passage_chars, demo=bool(request.demo))
    refs = tuple(question.passages)
    if typed:
        return ArenaTask(typed, question.id, refs, (), (), True, cfg)
    gold_ids = gold_reference_ids([p.pid for p in refs], question.gold_pids)
    return ArenaTask(question.question, question.id, refs, gold_ids, tuple(question.answers), False, cfg)


def task_rewards(task: ArenaTask, output: ArenaOutput) -> ArenaReward | None:
    """The four rewards as `ArenaMethod` computes them; None for a typed question (no gold to score against)."""
    if task.typed:
        return None
    return arena_reward(output.parsed, task.gold_answers, task.gold_ids, accuracy=task.cfg.accuracy,
                        bonus=task.cfg.bonus)


def empty_side(text: str) -> str:
    return f'<div class="evo-empty">{views.esc(text)}</div>'


def side_html(task: ArenaTask, label: str, output: ArenaOutput, seconds: float, anchor: str) -> str:
    """One column: who answered, how long and how many tokens, then the rendered reply (rewards included)."""
    reward = task_rewards(task, output)
    cut = " — cut at the token budget" if output.finish_reason == "length" else ""
    asked = "typed question" if task.typed else task.question_id
    head = (f'<div class="arena-side-head" style="margin-bottom: 0.3em"><strong>{views.esc(label)}</strong> · '
            f"{output.tokens} tokens in {seconds:.1f} s{views.esc(cut)}<br><small>{views.esc(asked)}: "
            f"{views.esc(task.question)}</small></div>")
    note = ""
    if task.typed:
        note = ('<p class="arena-typed-note" style="color: #7a4b00">Rewards: format <strong>'
                f"{format_reward(output.parsed):g}</strong>; accuracy, relevance and bonus need a gold answer and "
                "gold references, and a typed question has none (not scored).</p>")
    body = render_arena_answer(task.references, output.text, gold_ids=task.gold_ids, reward=reward,
                               gold_answers=task.gold_answers, anchor=anchor)
    return f'<div class="arena-side" data-tokens="{output.tokens}">{head}{note}{body}</div>'


def _model_label(name: str) -> str:
    """A local model folder by its folder name (a hub id or "SmolLM2-135M-Instruct" as it is)."""
    path = Path(name)
    return path.name if path.is_absolute() and path.is_dir() else name


def arena_generate(svc: Services, request: ArenaRequest, poll: float = 0.5) -> Iterator[ArenaStatus]:
    """Generate with the base model, then with `request.adapter` (when one is picked); see the module docstring.
    An unknown adapter is refused before anything runs."""
    task = prepare_task(svc, request)
    lookup = adapter_lookup(svc)
    sides = [("base", BASE)]
    if request.adapter:
        if not request.adapter.startswith("lm:") or request.adapter in (BASE, LIVE):
            raise ValueError(f"pick an adapter of the registry for the second column, not {request.adapter!r}")
        lookup(request.adapter[3:])  # KeyError "no adapter named ..." before the base model runs
        sides.append(("adapter", request.adapter))
    provider = svc.policies
    model = _model_label(provider.model_name())
    cancelled = threading.Event()
    pending_b = empty_side("Generated after the base model's reply.") if request.adapter else empty_side(
        "Pick an adapter to compare it with the base model.")
    yield ArenaStatus(views.message_html("Starting…", "info"), empty_side("Generating…"), pending_b)
    total = 0.0
    try:
        for column, choice in sides:
            label = f"{model} (base)" if choice == BASE else f"{model} + adapter {choice[3:]}"
            loading = provider.pending_load(choice, lookup)

            writing = threading.Event()  # set once this side holds the model and writes

            def run(choice: str = choice, writing: threading.Event = writing, column: str = column
                    ) -> tuple[ArenaOutput, float] | None:
                backend, name = provider.backend_for(choice, lookup)
                with provider.lock:
                    if cancelled.is_set():
                        return None
                    provider.use(name)
                    writing.set()
                    test_hooks.hold(f"arena:{column}", cancelled)
                    start = time.perf_counter()
                    with interruptible(backend, cancelled):  # Stop ends the decode before its next token
                        out = ArenaGenerator(backend, task.cfg).generate(task.question, task.references)
                    return out, time.perf_counter() - start

            done, box = in_thread(run, "arena-generate")
            began: float | None = None  # when this side was first seen writing
            while not done.wait(poll):
                if writing.is_set():
                    began = began if began is not None else time.perf_counter()
                    msg = (f"{label}: generating… {time.perf_counter() - began:.0f} s "
                           f"(a reply of up to {task.cfg.max_new_tokens} tokens)")
                else:  # loading, or another reply (e.g. a stopped one) still holds the model
                    msg = f"{label}: {loading or 'waiting for the model (another reply is finishing)…'}"
                yield ArenaStatus(views.message_html(msg, "info"), None, None)
            if "error" in box:
                raise box["error"]
            out, seconds = box["value"]
            total += seconds
            html = side_html(task, label, out, seconds, f"arena-{column}")
            yield ArenaStatus(views.message_html(f"{label}: done in {seconds:.1f} s", "info"),
                              html if column == "base" else None, html if column == "adapter" else None)
    finally:
        cancelled.set()  # closed early (Stop): a side still waiting for the model never starts
    what = "both replies" if len(sides) == 2 else "the base model's reply"
    yield ArenaStatus(views.message_html(f"Generated {what} in {total:.1f} s.", "ok"), None, None)
