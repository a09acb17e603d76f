"""The answer ranker: which of the span reader's candidates is the answer, from the LM's score and what a reader of
extractive QA looks at (where the span sits, how close it is to the question's words, whether its type fits the
question), as a linear model over named features; and yes / no from the calibrated label margins.

`answer.ranker = "learned"` (the default) ranks the candidates of `reader.span.extract_candidates` by
`CandidateRanker.scores`; `"lm"` keeps ranking by the LM score alone (log P(span + end | reader prompt), the ranking
before the ranker). The weights are a JSON file (`answer.ranker_path`; empty: the packaged `ranker.json`), fitted by
`reader.ranker_fit.fit_ranker` as a conditional logit (a softmax over one question's candidates) on what
`bench/answer_dump.py` recorded - the fitting command, the data it was fitted on and the held-out figures are in
docs/answers.md. A user with another model or domain refits it: `python -m bench.answer_ranker fit ...`.

Every feature is a pure function of the question, the reader's passages (as the reader sees them: title and the
first `chars` characters) and the candidate's LM score; `FEATURES` names them in a fixed order. A weight file that
lacks a feature gives it weight 0; one that names a feature this code does not compute is refused (a stale file).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Mapping, Sequence

from evorag_core.errors import ConfigError
from evorag_core.metrics import normalize_answer
from evorag_core.reader.answer_type import C_TYPES, Q_TYPES, candidate_type, question_type
from evorag_core.types import Passage

__all__ = ["FEATURES", "CandidateRanker", "YesNoModel", "RankerWeights", "candidate_features", "question_type",
           "candidate_type", "load_ranker", "DEFAULT_RANKER"]

DEFAULT_RANKER = "ranker.json"

_Q_STOP = frozenset(("what which who whom whose when where why how is are was were do does did the a an of in on at "
                     "to for by with and or from as that this these those it its his her their be been being has "
                     "have had than then name named also both same one".split()))
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")
_NUM = re.compile(r"\d[\d,]*(?:\.\d+)?")
_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"“(])")
_EARLIER = re.compile(r"\b(first|earlier|earliest|older|oldest|before|sooner|preceded)\b", re.I)
_LATER = re.compile(r"\b(later|latest|younger|youngest|newer|newest|most recent(ly)?|last|after)\b", re.I)
_MORE = re.compile(r"\b(more|most|larger|largest|bigger|biggest|higher|highest|taller|tallest|longer|longest|"
                   r"greater|greatest)\b", re.I)
_LESS = re.compile(r"\b(fewer|fewest|less|least|smaller|smallest|lower|lowest|shorter|shortest)\b", re.I)
_WINDOW = 60


def _words(text: str) -> list[str]:
    return normalize_answer(text).split()


def _q_content(question: str) -> set[str]:
    return {w for w in _words(question) if w not in _Q_STOP and len(w) > 1}


def _sentences(text: str) -> list[str]:
    return [s for s in _SENT.split(text) if s.strip()]


def _find(key: str, field: str) -> list[int]:
    """Start offsets of `key` (lower-cased, whitespace-folded) in `field` (already folded)."""
    out, start = [], field.find(key)
    while start >= 0:
        out.append(start)
        start = field.find(key, start + 1)
    return out


def _fold(text: str) -> str:
    return " ".join(text.lower().split())


def _frac(words: Sequence[str], target: set[str]) -> float:
    return sum(1 for w in target if w in words) / len(target) if target else 0.0


def _years(text: str) -> list[int]:
    return [int(y) for y in _YEAR.findall(text)]


def _max_number(text: str) -> float | None:
    vals = []
    for m in _NUM.finditer(text):
        try:
            vals.append(float(m.group(0).replace(",", "")))
        except ValueError:
            continue
    return max(vals) if vals else None


def _base_names() -> list[str]:
    names = ["lm", "lm_margin", "lm_norm", "lm_norm_margin", "lm_top", "log_tokens", "words",
             "src_rank", "n_passages", "count", "is_title", "title_of_src", "offset",
             "q_overlap", "sent_q", "psg_q", "near_q", "psg_q_best", "src_title_in_q",
             "opt_first", "opt_earlier", "opt_later", "opt_more", "opt_less", "bias_either_or"]
    names += [f"c_{c}" for c in C_TYPES]
    names += [f"q_{q}:c_{c}" for q in Q_TYPES if q != "either_or" for c in C_TYPES]
    return names


FEATURES: tuple[str, ...] = tuple(_base_names())


def candidate_features(question: str, passages: Sequence[Passage], chars: int, spans: Sequence[tuple[str, int]],
                       lm: Sequence[float], tokens: Sequence[int], options: Sequence[str] = ()
                       ) -> list[dict[str, float]]:
    """One {feature: value} per candidate (`spans`: surface text and source passage index, as
    `extract_candidates` gives them; `lm`: their raw log P(span + end | reader prompt); `tokens`: their token
    counts). Features absent from a candidate's dict are 0."""
    if not spans:
        return []
    q_words = _q_content(question)
    qtype = question_type(question, options)
    folded = [(_fold(p.title), _fold(p.text[:chars])) for p in passages]
    texts = [p.text[:chars] for p in passages]
    titles = {_fold(p.title) for p in passages}
    psg_q = [_frac(_words(f"{p.title} {t}"), q_words) for p, t in zip(passages, texts)]
    best_psg = max(psg_q) if psg_q else 0.0
    norm = [s / (n + 1) for s, n in zip(lm, tokens)]
    top, top_norm = max(lm), max(norm)
    order = sorted(range(len(lm)), key=lambda k: -lm[k])
    rank = {k: r for r, k in enumerate(order)}
    # either-or: the options' years and largest numbers, from each option's source passage
    opt_years: dict[int, int] = {}
    opt_nums: dict[int, float] = {}
    if qtype == "either_or":
        for k, (s, src) in enumerate(spans):
            text = f"{passages[src].title} {texts[src]}" if 0 <= src < len(passages) else ""
            if ys := _years(text):
                opt_years[k] = min(ys)
            if (num := _max_number(texts[src] if 0 <= src < len(passages) else "")) is not None:
                opt_nums[k] = num
    earlier, later = bool(_EARLIER.search(question)), bool(_LATER.search(question))
    more, less = bool(_MORE.search(question)), bool(_LESS.search(question))
    q_fold = _fold(question)
    out: list[dict[str, float]] = []
    for k, (span, src) in enumerate(spans):
        key = _fold(span)
        f: dict[str, float] = {
            "lm": lm[k], "lm_margin": lm[k] - top, "lm_norm": norm[k], "lm_norm_margin": norm[k] - top_norm,
            "lm_top": 1.0 / (1 + rank[k]), "log_tokens": math.log(max(1, tokens[k])),
            "words": min(len(span.split()), 5) / 5.0,
        }
        hits = [i for i, (t, x) in enumerate(folded) if key in t or key in x]
        first = hits[0] if hits else max(0, src)
        f["src_rank"] = 1.0 / (1 + first)
        f["n_passages"] = math.log1p(len(hits))
        f["count"] = math.log1p(sum(len(_find(key, t)) + len(_find(key, x)) for t, x in folded))
        f["is_title"] = float(key in titles)
        f["title_of_src"] = float(0 <= src < len(folded) and key == folded[src][0])
        body = folded[first][1] if first < len(folded) else ""
        offs = _find(key, body)
        f["offset"] = offs[0] / max(1, len(body)) if offs else 0.0
        c_words = _words(span)
        f["q_overlap"] = sum(1 for w in c_words if w in q_words) / len(c_words) if c_words else 0.0
        sent_best = near_best = 0.0
        for i in hits:
            body_i = folded[i][1]
            for sent in _sentences(texts[i]):
                if key in _fold(sent):
                    sent_best = max(sent_best, _frac(_words(sent), q_words - set(c_words)))
            for o in _find(key, body_i):
                window = body_i[max(0, o - _WINDOW):o + len(key) + _WINDOW]
                near_best = max(near_best, _frac(_words(window), q_words - set(c_words)))
        f["sent_q"], f["near_q"] = sent_best, near_best
        f["psg_q"] = psg_q[first] if first < len(psg_q) else 0.0
        f["psg_q_best"] = float(first < len(psg_q) and psg_q[first] >= best_psg)
        if first < len(passages):  # the source passage is about an entity the question names (a first hop)
            t_words = [w for w in _words(passages[first].title) if w not in _Q_STOP]
            f["src_title_in_q"] = sum(1 for w in t_words if w in q_words) / len(t_words) if t_words else 0.0
        ctype = candidate_type(span)
        f[f"c_{ctype}"] = 1.0
        if qtype == "either_or":
            f["bias_either_or"] = 1.0
            pos = q_fold.find(key)
            others = [q_fold.find(_fold(s)) for j, (s, _) in enumerate(spans) if j != k]
            f["opt_first"] = float(pos >= 0 and all(o < 0 or pos < o for o in others))
            if k in opt_years and len(opt_years) >= 2:
                lo, hi = min(opt_years.values()), max(opt_years.values())
                if lo != hi:
                    f["opt_earlier"] = float(opt_years[k] == lo) * earlier - float(opt_years[k] == hi) * earlier
                    f["opt_later"] = float(opt_years[k] == hi) * later - float(opt_years[k] == lo) * later
            if k in opt_nums and len(opt_nums) >= 2:
                lo, hi = min(opt_nums.values()), max(opt_nums.values())
                if lo != hi:
                    f["opt_more"] = float(opt_nums[k] == hi) * more - float(opt_nums[k] == lo) * more
                    f["opt_less"] = float(opt_nums[k] == lo) * less - float(opt_nums[k] == hi) * less
        else:
            f[f"q_{qtype}:c_{ctype}"] = 1.0
        out.append(f)
    return out


@dataclass(frozen=True)
class YesNoModel:
    """P(yes) = sigmoid(w_raw * raw margin + w_cf * content-free margin + bias), where raw margin = log P(yes) -
    log P(no) under the reader prompt and the content-free margin is the same under the "N/A" prompt."""

    w_raw: float = 1.0
    w_cf: float = -1.0
    bias: float = 0.0

    def logit(self, raw: float, content_free: float) -> float:
        return self.w_raw * raw + self.w_cf * content_free + self.bias


@dataclass(frozen=True)
class RankerWeights:
    """A fitted ranker: feature weights (absent: 0), the yes/no model, and where they came from (`meta`)."""

    weights: Mapping[str, float]
    yes_no: YesNoModel = field(default_factory=YesNoModel)
    meta: Mapping[str, object] = field(default_factory=dict)

    def to_json(self) -> str:
        yes_no = {"w_raw": self.yes_no.w_raw, "w_cf": self.yes_no.w_cf, "bias": self.yes_no.bias}
        return json.dumps({"features": {k: round(v, 6) for k, v in self.weights.items()},
                           "yes_no": {k: round(v, 6) for k, v in yes_no.items()}, "meta": dict(self.meta)},
                          indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, origin: str = "ranker weights") -> "RankerWeights":
        try:
            raw = json.loads(text)
            weights = {str(k): float(v) for k, v in raw["features"].items()}
            yn = raw.get("yes_no", {})
            yes_no = YesNoModel(float(yn.get("w_raw", 1.0)), float(yn.get("w_cf", -1.0)), float(yn.get("bias", 0.0)))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"{origin}: not a ranker weight file ({exc})") from exc
        unknown = sorted(set(weights) - set(FEATURES))
        if unknown:
            raise ConfigError(f"{origin}: features this reader does not compute: {', '.join(unknown[:5])} "
                              "(a weight file from another version: refit it)")
        if not all(math.isfinite(v) for v in (*weights.values(), yes_no.w_raw, yes_no.w_cf, yes_no.bias)):
            raise ConfigError(f"{origin}: non-finite weight")
        return cls(weights, yes_no, raw.get("meta", {}))


class CandidateRanker:
    """Scores candidates with fitted `RankerWeights` (see the module docstring)."""

    def __init__(self, weights: RankerWeights) -> None:
        self.weights = weights

    def scores(self, features: Sequence[Mapping[str, float]]) -> list[float]:
        w = self.weights.weights
        return [sum(w.get(name, 0.0) * value for name, value in f.items()) for f in features]

    def yes_logit(self, raw: float, content_free: float) -> float:
        return self.weights.yes_no.logit(raw, content_free)


@lru_cache(maxsize=8)
def _load(path: str) -> RankerWeights:
    if not path:
        text = resources.files("evorag_core.reader").joinpath(DEFAULT_RANKER).read_text()
        return RankerWeights.from_json(text, f"packaged {DEFAULT_RANKER}")
    p = Path(path).expanduser()
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"answer.ranker_path {p}: cannot read ({exc.strerror})") from exc
    return RankerWeights.from_json(text, f"answer.ranker_path {p}")


def load_ranker(path: str | Path | None = None) -> CandidateRanker:
    """The ranker of `path` (None / "": the packaged weights); a missing or malformed file raises ConfigError."""
    return CandidateRanker(_load(str(path or "")))
