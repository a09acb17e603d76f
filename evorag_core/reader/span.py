"""Grounded short answers: the reader's answer is a span of its passages, `yes` / `no`, or a refusal.

`SpanReader(backend, cfg).read(question, passages)` -> `SpanAnswer`:

- no passages -> refusal, reason "no_passages" (counted in `SpanReader.refusals`);
- a yes/no question (`is_yes_no`: it opens with an auxiliary verb - "Are both ...", "Did ..." - and offers no
  "A or B" choice) -> `yes` or `no`: with `answer.yes_no = "evidence"` (the default) read from the passages about the
  question's entities (`reader/yes_no.py`: "both American", "the same country", "located in Michigan"), scored
  +-`EVIDENCE_LOGIT`; when they give nothing (and with `"model"`), by the labels' log-probabilities under the reader
  prompt, each label followed by the end-of-turn token, with the calibration of `AnswerConfig.yes_no_calibration`
  (below);
- otherwise candidate spans extracted from the passages as the reader sees them (cut to `passage_chars`): titles,
  quoted strings, dates, numbers, runs of capitalised words; a candidate whose words all occur in the question is
  dropped (the answer to a bridge question is not named in it); a category question ("what type of sport", "what
  profession ... in common", "what century") adds the passages' lower-case content words; a question that offers "A or B" keeps just those
  two when both occur in the passages; a "yes" / "no" span is never a candidate; with `answer.answer_types` (the
  default) only the candidates of the question's expected type are kept when there are any (`reader/answer_type.py`:
  a full date for "when ... born", a year for "what year", a number for "how many", a name for "who" / "where"),
  without it a numeric question ("how many", "what year", "when", ...) keeps the candidates with a digit when there
  are any. Every candidate is scored as log P(span + end-of-turn | reader prompt)
  in one batched pass over the cached prompt (`backend.score_choices`: the shared-prefix block forward), divided by
  (tokens ** `length_alpha`). With `answer.ranker = "learned"` (the default) that score is one feature of the
  answer ranker (`reader/ranker.py`: where the span sits, how near the question's words it is, whether its type
  fits the question, the "A or B" date/number comparison), which ranks the candidates; with `"lm"` the LM score
  alone ranks them. The best one is the answer, in its surface form in the passage. No candidate -> refusal,
  reason "no_candidates". Each span answer carries its `confidence`: its probability under the softmax of the
  ranking scores over the question's candidates (with the learned ranker, a conditional logit, that is the model's
  probability that it is the right one of them). With `answer.min_confidence` > 0 a span below it is not given:
  refusal, reason "low_confidence" (the best candidate kept in `withheld`). Yes/no answers are never refused on
  confidence (the yes/no model is near chance: its probability is near 0.5 for every question).

Sampling (`read(..., temperature > 0)`) draws from softmax(score / temperature) over the same candidates (or labels).

Calibration of yes/no ("contextual calibration", Zhao et al. 2021): "none" compares the raw log-probs; "content_free"
subtracts each label's log-prob under the reader prompt with a content-free question and passage ("N/A"), computed
once per backend; `yes_bias` is then added to log P(yes) - log P(no). With the learned ranker the decision is its
fitted logistic model over the raw and the content-free margins (plus `yes_bias`) instead.

The measured figures below are those of the LM-only ranking (`ranker = "lm"`); the learned ranker's held-out
figures are in docs/answers.md ("The answer ranker").

Chosen on the tuning questions only (HotpotQA dev 0:60 and 2Wiki dev 0:30, 90 questions, pooled corpus, the top-5
hybrid hits of the question as fixed-k reads them; `bench/answers.py`, docs/answers.md), EM / F1 / s per answer:
- free generation (`mode = "free"`, the old reader): 0.022 / 0.145 / 2.34 s (HotpotQA 0.033 / 0.125);
- span, summed log-prob, no demos: 0.200 / 0.245 / 1.56 s (HotpotQA 0.183 / 0.223; comparison 0.290 / 0.323);
- length-normalised: log P / (tokens + 1) ** 0.5: 0.189 / 0.228; ** 1.0: 0.211 / 0.273;
- 600-character passages: 0.211 / 0.269 at 1.84 s (+18 %);
- two short-answer demonstrations (a span, a "yes") as earlier chat turns: 0.222 / 0.277 / 1.53 s - KEPT (defaults:
  sum, 300 characters, demos on; the differences between span variants are 1-3 questions of 90, within noise);
- yes/no (12 detected, 12 gold, 7 of them "yes"): raw 6 of 12 right (said "yes" once), content-free calibration 7 of
  12 (said "yes" 4 times) - kept; on HotpotQA's 10 the calibrated margin does not separate yes from no (5 of 10 either way), so no
  fitted bias (`yes_bias` 0);
- the best candidate in the set is EM-correct on 48 % of the HotpotQA tuning questions (50 % on 2Wiki): the ranking
  is the limit, as the issue found; the "A or B" and category rules raised that from 38 %.
Not measured: a token-trie constrained decode over the passages' token sequences (the candidate scorer was kept for
its one-forward cost), and combinations of the single-knob variants.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from evorag_core.reader.answer_type import by_type, is_numeric_question, is_yes_no_span, name_facts
from evorag_core.reader.prompt import ANSWER_SYSTEM_CTX, render_passages
from evorag_core.reader.ranker import candidate_features, load_ranker
from evorag_core.reader.yes_no import decide_yes_no
from evorag_core.metrics import normalize_answer
from evorag_core.types import Passage

if TYPE_CHECKING:
    from evorag_core.config import AnswerConfig
    from evorag_core.lm.base import PolicyBackend

__all__ = ["SpanAnswer", "SpanReader", "extract_candidates", "is_yes_no", "either_or", "is_numeric_question",
           "span_prompt", "span_in_passages", "SHORT_ANSWER_DEMOS"]

_AUX = frozenset("is are was were do does did can could has have had will would should shall may might".split())
_MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|December|"
           "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec")
_DATE = re.compile(rf"\b(?:\d{{1,2}}\s+)?(?:{_MONTHS})\.?(?:\s+\d{{1,2}})?,?\s+\d{{3,4}}\b|\b(?:{_MONTHS})\s+\d{{1,2}}\b")
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:\s+(?:million|billion|thousand|hundred|percent|km|miles|"
                     r"years|people|seats|metres|meters|feet|episodes|floors|acres|inhabitants))?")
_QUOTED = re.compile(r"[\"“]([^\"“”\n]{2,80})[\"”]")
_CONNECT = r"(?:of|the|de|du|des|la|le|von|van|der|den|da|di|del|y|&)"
_WORD = r"[A-Z0-9][\w'’\-.]*[\w]|[A-Z]"
_CAPS = re.compile(rf"(?:{_WORD})(?:(?:\s+{_CONNECT})*\s+(?:{_WORD}))*")
_OPENERS = frozenset(("the a an in on at he she it his her its they their this that these those after before "
                      "during from by as with for when while since however although but and or also both "
                      "there then").split())
_CATEGORY_Q = re.compile(r"\b(what|which) (type|kind|sort|profession|occupation|sport|genre|century|nationality|"
                         r"instrument|position|job)s?\b|\bin common\b", re.I)
_LOWER_WORD = re.compile(r"(?<![\w'’-])[a-z][a-z-]{3,}(?![\w'’-])")
_STOP = frozenset(("also with from that this which were have been being their there about after before into "
                   "over under than then when where while known born most more such other only well some many "
                   "during between since until through would could should first later became become part "
                   "each both either neither").split())
_CONTENT_FREE = "N/A"
EVIDENCE_LOGIT = 4.0  # the yes/no score of a decision read from the evidence (reader/yes_no.py): P = sigmoid(4) = 0.98

SHORT_ANSWER_DEMOS: tuple[tuple[str, str], ...] = (
    ("[1] Mirrow: Mirrow is a mill town on the Sable River in Velmark Province, founded in 1402.\n"
     "[2] Ansel Travine: Ansel Travine (1821-1893) was an Ostrevian chemist born in Mirrow.\n\n"
     "Question: On which river is the birthplace of the chemist Ansel Travine?\nAnswer:", "Sable River"),
    ("[1] Lantry: Lantry is a port town in Ostrevia.\n[2] Harwick: Harwick is a city in Ostrevia.\n\n"
     "Question: Are Lantry and Harwick both in Ostrevia?\nAnswer:", "yes"),
)


@dataclass(frozen=True)
class SpanAnswer:
    """The reader's answer: `text` ("" for a refusal), `kind` ("span" | "yes_no" | "refusal"; `answers.Reader`
    in free mode: "free"), the refusal `reason` ("no_passages" | "no_candidates" | "low_confidence"), the passage
    the span was taken from (`source`: its 0-based index in the passages read; `source_pid`: its pid; None for
    yes/no, refusals and free answers), its score, how many candidates were scored, its `confidence` (spans and
    yes/no: the pick's probability under the softmax of the scores; None otherwise) and, for a low-confidence
    refusal, the span it `withheld`."""

    text: str
    kind: str
    reason: str | None = None
    source: int | None = None
    score: float = 0.0
    candidates: int = 0
    source_pid: str | None = None
    confidence: float | None = None
    withheld: str | None = None


def _norm_words(text: str) -> list[str]:
    return normalize_answer(text).split()


def _strip_opener(span: str) -> str:
    """`span` without leading function words ("The", "In", "He") or trailing connectors; inner text untouched."""
    while (m := re.match(r"(\S+)\s+", span)) and m.group(1).lower() in _OPENERS:
        span = span[m.end():]
    while (m := re.search(r"\s+(\S+)$", span)) and m.group(1).lower() in _OPENERS | {"of", "de", "von", "van", "&"}:
        span = span[:m.start()]
    if span.lower() in _OPENERS:
        return ""
    return span.strip(" ,.;:'’\"")


def _whole_words(text: str, chars: int) -> str:
    """`text` cut to `chars` characters, without a word the cut splits ("... Paige Ma" -> "... Paige"): a cut word is
    no answer (measured: the agent answered "Paige Ma" and "Tr" on held-out HotpotQA)."""
    cut = text[:chars]
    if len(text) > chars and cut[-1:].isalnum() and text[chars].isalnum():
        cut = cut[:cut.rfind(" ")] if " " in cut else ""
    return cut


def _raw_candidates(passages: Sequence[Passage], chars: int, words: bool = False) -> list[tuple[str, int]]:
    """(surface span, passage index) in passage order: title, then dates, numbers, quotes, capitalised runs (and,
    with `words`, single lower-case content words: "musician", "tennis", "nineteenth")."""
    out: list[tuple[str, int]] = []
    for i, p in enumerate(passages):
        text = _whole_words(p.text, chars)
        found: list[str] = [p.title]
        found += [m.group(0) for m in _DATE.finditer(text)]
        found += [m.group(0).rstrip(",") for m in _NUMBER.finditer(text)]
        found += [m.group(1) for m in _QUOTED.finditer(text)]
        for m in _CAPS.finditer(text):
            run = _strip_opener(m.group(0))
            if run:
                found.append(run)
                parts = re.split(rf"\s+{_CONNECT}\s+", run)  # "Alfie Allen of England" -> also "Alfie Allen"
                if len(parts) > 1:
                    found += [_strip_opener(x) for x in parts]
        if words:
            found += [m.group(0) for m in _LOWER_WORD.finditer(text) if m.group(0) not in _STOP]
        out += [(s.strip(), i) for s in found if s and s.strip()]
    return out


def _question_options(question: str) -> list[str]:
    """The two sides of " or " in the question's last clause: "Which came first, A or B?" -> [A, B] (text only)."""
    q = " ".join(question.strip().rstrip("?").split())
    if " or " not in q:
        return []
    left, _, right = q.rpartition(" or ")
    left = re.split(r",\s*|:\s*|\bbetween\s+|\b(?:is|was|are|were|did|does|do)\s+", left)[-1]
    right = re.split(r",\s*|\s+(?:is|was|are|were|has|have|had|did|does)\b", right)[0]
    return [x.strip(" \"'“”") for x in (left, right) if x.strip(" \"'“”")]


def _locate(text: str, passages: Sequence[Passage], chars: int) -> str | None:
    """`text` as it is written in a passage's title or first `chars` characters (case folded), or None."""
    pattern = re.compile(r"\s+".join(re.escape(w) for w in text.split()), re.I)
    for p in passages:
        for field in (p.title, p.text[:chars]):
            if (m := pattern.search(field)) is not None:
                return m.group(0)
    return None


def either_or(question: str, spans: Sequence[str], passages: Sequence[Passage] = (), chars: int = 300) -> list[str]:
    """The options of an "A or B" question that occur in the passages, in their passages' surface form: the longest
    of `spans` ending just before / starting just after " or " in the question, else the question's own text on
    each side of " or " located in `passages`; [] when the question offers no such choice."""
    q = " ".join(question.lower().replace("?", " ").split())
    if " or " not in q:
        return []
    left, right = [], []
    for s in spans:
        low = " ".join(s.lower().split())
        if len(low) < 2:
            continue
        if f"{low} or " in q:
            left.append(s)
        if f" or {low}" in q:
            right.append(s)
    found = [max(left, key=len) if left else None, max(right, key=len) if right else None]
    sides = _question_options(question)
    if len(sides) == 2:
        for k in (0, 1):
            located = _locate(sides[k], passages, chars) if passages else None
            if located and (found[k] is None or len(located) > len(found[k])):
                found[k] = located
    opts = [f for f in found if f]
    if len(opts) == 2 and normalize_answer(opts[0]) == normalize_answer(opts[1]):
        return []
    # both sides in the passages; or one, when the question's text names two options (the other is not readable)
    return opts if len(opts) == 2 or (opts and len(sides) == 2 and passages) else []


def _source(span: str, passages: Sequence[Passage], chars: int) -> int:
    key = " ".join(span.lower().split())
    return next((i for i, p in enumerate(passages)
                 if key in " ".join(p.title.lower().split()) or key in " ".join(p.text[:chars].lower().split())), 0)


def is_yes_no(question: str, options: Sequence[str] = ()) -> bool:
    """An auxiliary-verb question ("Are both ...?", "Did ...?") that offers no "A or B" choice: no `options` found
    in the passages, and no two sides of " or " in its text ("Is Baiyin or Xinghua a county-level city?" asks which).
    A question opening with a wh-word ("Which ...", "Who ...") is never yes/no."""
    words = question.strip().split()
    return bool(words) and words[0].lower() in _AUX and not options and len(_question_options(question)) != 2


def extract_candidates(question: str, passages: Sequence[Passage], chars: int, max_words: int = 8,
                       limit: int = 64, types: bool = True) -> list[tuple[str, int]]:
    """Candidate answer spans (surface form, passage index), deduplicated by normalised form, in passage order; see
    the module docstring for the rules. Every span is a substring of a passage's title or its first `chars`
    characters. Never a "yes" / "no" span (a question that reaches the candidates is not yes/no); with `types`, only
    the spans of the question's expected answer type when there are any (`answer_type.by_type`), else (the rule
    before) the spans with a digit for a numeric question."""
    raw = _raw_candidates(passages, chars, words=bool(_CATEGORY_Q.search(question)))
    options = either_or(question, [s for s, _ in raw], passages, chars)
    if options:
        raw = [(o, _source(o, passages, chars)) for o in options]
    else:
        q_words = set(_norm_words(question))
        raw = [(s, i) for s, i in raw if (w := _norm_words(s)) and len(w) <= max_words and not set(w) <= q_words
               and not is_yes_no_span(s)]
        if types:
            raw = by_type(question, raw, facts=name_facts(passages))
        elif is_numeric_question(question):
            numeric = [(s, i) for s, i in raw if any(ch.isdigit() for ch in s)]
            raw = numeric or raw
    seen: set[str] = set()
    out: list[tuple[str, int]] = []
    for s, i in raw:
        key = normalize_answer(s)
        if len(key) < 2 and not key.isdigit():
            continue
        if key and key not in seen:
            seen.add(key)
            out.append((s, i))
    return out[:limit]


def span_prompt(backend: PolicyBackend, question: str, passages: Sequence[Passage], chars: int, demos: bool,
                order: str = "retrieval") -> str:
    """The reader prompt (`reader.prompt.reader_prompt`'s system turn and layout), with the short-answer demonstrations
    as earlier chat turns when `demos`; `order` "reversed" (`answer.passage_order`) lists the passages last to first,
    the first-ranked one nearest the question. Candidates keep their source index in `passages`' own order."""
    shown = list(passages)[::-1] if order == "reversed" else passages
    user = f"{render_passages(shown, chars)}\n\nQuestion: {question}\nAnswer:"
    return backend.chat_prompt(ANSWER_SYSTEM_CTX, user, SHORT_ANSWER_DEMOS if demos else ())


class SpanReader:
    """See the module docstring. `cfg` is an `AnswerConfig`; `chars` the passages' cut when cfg.passage_chars is
    0. `refusals` counts refusal reasons, `kinds` the answers' kinds, over the reader's life."""

    def __init__(self, backend: PolicyBackend, cfg: AnswerConfig, chars: int = 300) -> None:
        self.backend, self.cfg = backend, cfg
        self.chars = cfg.passage_chars or chars
        self.refusals: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()
        self._cf_bias: tuple[Any, float] | None = None  # (backend cache epoch, bias) of the content-free prompt
        self.last_scores: dict[str, float] = {}  # candidate -> score of the last read (for inspection and tests)
        # the learned ranker (reader/ranker.py) or None (rank by the LM score alone); a bad weight file fails here
        self.ranker = load_ranker(cfg.ranker_path) if cfg.ranker == "learned" else None

    # -- scoring -------------------------------------------------------------------------------------------------
    def prompt(self, question: str, passages: Sequence[Passage]) -> str:
        """The prompt every span and yes/no score of this reader is read under (`span_prompt` with its settings)."""
        return span_prompt(self.backend, question, passages, self.chars, self.cfg.demos, self.cfg.passage_order)

    def _end(self) -> str:
        tok = getattr(self.backend, "tokenizer", None)
        return getattr(tok, "eos_token", None) or "\n"

    def _n_tokens(self, text: str) -> int:
        tok = getattr(self.backend, "tokenizer", None)
        if tok is None:
            return max(1, len(text.split()))
        return max(1, len(tok(text, add_special_tokens=False)["input_ids"]))

    def _label_margin(self, prompt: str) -> float:
        """log P(yes) - log P(no) (each "yes"/"Yes" summed, followed by end-of-turn) under `prompt`."""
        end = self._end()
        ys, yc, ns, nc = self.backend.score_choices(prompt, [f"yes{end}", f"Yes{end}", f"no{end}", f"No{end}"])
        import torch  # here, not at the top: this module is imported by every CLI command and the studio at start

        return float(torch.logaddexp(torch.tensor(ys), torch.tensor(yc)) - torch.logaddexp(torch.tensor(ns),
                                                                                          torch.tensor(nc)))

    def _content_free_margin(self) -> float:
        epoch = (getattr(self.backend, "active_adapter", None), getattr(self.backend, "cache_epoch", None))
        if self._cf_bias is None or self._cf_bias[0] != epoch:
            cf = [Passage("", _CONTENT_FREE, _CONTENT_FREE)]
            self._cf_bias = (epoch, self._label_margin(self.prompt(_CONTENT_FREE, cf)))
        return self._cf_bias[1]

    def yes_no_margin(self, question: str, passages: Sequence[Passage]) -> float:
        """The yes/no decision score (> 0: yes): with the learned ranker, its yes/no model's logit over the raw and
        the content-free margins; otherwise the calibrated log P(yes) - log P(no) under the reader prompt. Plus
        `yes_bias`."""
        margin = self._label_margin(self.prompt(question, passages))
        if self.ranker is not None:
            margin = self.ranker.yes_logit(margin, self._content_free_margin())
        elif self.cfg.yes_no_calibration == "content_free":
            margin -= self._content_free_margin()
        return margin + self.cfg.yes_bias

    def span_scores(self, question: str, passages: Sequence[Passage], spans: Sequence[str]) -> list[float]:
        """Each span's log P(span + end | reader prompt) / tokens ** length_alpha."""
        prompt = self.prompt(question, passages)
        end = self._end()
        raw = self.backend.score_choices(prompt, [f"{s}{end}" for s in spans])
        alpha = self.cfg.length_alpha
        return [r / (self._n_tokens(s) + 1) ** alpha if alpha else r for r, s in zip(raw, spans)]

    def span_scores_raw(self, question: str, passages: Sequence[Passage], cands: Sequence[tuple[str, int]]
                        ) -> list[float]:
        prompt = self.prompt(question, passages)
        return self.backend.score_choices(prompt, [f"{s}{self._end()}" for s, _ in cands])

    # -- reading -------------------------------------------------------------------------------------------------
    def read(self, question: str, passages: Sequence[Passage], *, temperature: float = 0.0, n: int = 1,
             seed: int | None = None) -> list[SpanAnswer]:
        """`n` answers: the best (temperature <= 0, all the same) or draws at `temperature`."""
        answers = self._read(question, list(passages), temperature, n, seed)
        for a in answers:
            self.kinds[a.kind] += 1
            if a.reason:
                self.refusals[a.reason] += 1
        return answers

    def answer(self, question: str, passages: Sequence[Passage]) -> SpanAnswer:
        return self.read(question, passages)[0]

    def _read(self, question, passages, temperature, n, seed) -> list[SpanAnswer]:
        if not passages:
            return [SpanAnswer("", "refusal", "no_passages")] * n
        cands = extract_candidates(question, passages, self.chars, self.cfg.max_words, self.cfg.max_candidates,
                                   self.cfg.answer_types)
        options = either_or(question, [s for s, _ in _raw_candidates(passages, self.chars)], passages, self.chars)
        if is_yes_no(question, options):
            evidence = decide_yes_no(question, passages) if self.cfg.yes_no == "evidence" else None
            margin = (EVIDENCE_LOGIT if evidence.answer == "yes" else -EVIDENCE_LOGIT) if evidence else \
                self.yes_no_margin(question, passages)
            self.last_scores = {"yes": margin, "no": 0.0}
            picks = _pick([margin, 0.0], temperature, n, seed)
            probs = _probabilities([margin, 0.0])
            return [SpanAnswer(("yes", "no")[k], "yes_no", score=(margin, -margin)[k], candidates=2,
                               confidence=probs[k]) for k in picks]
        if not cands:
            return [SpanAnswer("", "refusal", "no_candidates")] * n
        scores = self.span_scores(question, passages, [s for s, _ in cands])
        if self.ranker is not None:  # raw log-probs (length_alpha does not apply) -> the ranker's features
            raw = scores if not self.cfg.length_alpha else self.span_scores_raw(question, passages, cands)
            feats = candidate_features(question, passages, self.chars, cands, raw,
                                       [self._n_tokens(c) for c, _ in cands], options)
            scores = self.ranker.scores(feats)
        self.last_scores = {s: sc for (s, _), sc in zip(cands, scores)}
        probs = _probabilities(scores)
        return [self._span_answer(cands[k][0], cands[k][1], scores[k], len(cands), passages[cands[k][1]].pid, probs[k])
                for k in _pick(scores, temperature, n, seed)]

    def _span_answer(self, text: str, source: int, score: float, n: int, pid: str, confidence: float) -> SpanAnswer:
        if confidence < self.cfg.min_confidence:
            return SpanAnswer("", "refusal", "low_confidence", score=score, candidates=n, confidence=confidence,
                              withheld=text)
        return SpanAnswer(text, "span", None, source, score, n, pid, confidence)


def _probabilities(scores: Sequence[float]) -> list[float]:
    """softmax(scores): each candidate's probability under the ranking."""
    import torch

    return torch.softmax(torch.tensor(scores, dtype=torch.float64), dim=0).tolist()


def _pick(scores: Sequence[float], temperature: float, n: int, seed: int | None) -> list[int]:
    if temperature <= 0 or len(scores) == 1:
        best = max(range(len(scores)), key=scores.__getitem__)
        return [best] * n
    import torch

    t = torch.tensor(scores, dtype=torch.float64) / temperature
    probs = torch.softmax(t - t.max(), dim=0)
    rng = torch.Generator().manual_seed(seed if seed is not None else 0)
    return torch.multinomial(probs, n, replacement=True, generator=rng).tolist()


def span_in_passages(span: str, passages: Sequence[Passage], chars: int) -> bool:
    """Whether `span` occurs (case and whitespace folded) in a passage's title or first `chars` characters."""
    key = " ".join(span.lower().split())
    return any(key in " ".join(f"{p.title} {p.text[:chars]}".lower().split()) for p in passages) if key else False

