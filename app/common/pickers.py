"""What the tabs' data and policy pickers offer: the data files (bundled, uploaded, typed), a data file's questions,
and the policies (oracle, script, LM live/base, one entry per registered adapter)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.common import views
from app.common.handlers import short
from app.common.policies import policy_choices
from app.common.services import Services

__all__ = ["DataInfo", "data_choices", "load_data", "upload_data", "policy_options"]


@dataclass(frozen=True)
class DataInfo:
    path: str
    questions: list[tuple[str, str]]  # (label, question id)
    summary: str  # plain text
    summary_html: str  # the summary as the page shows it (escaped: file and dataset names are anyone's text)


def data_choices(svc: Services) -> list[tuple[str, str]]:
    return svc.data_files()


def load_data(svc: Services, path: str | None) -> DataInfo:
    """Load a data file (any supported format; path typed or picked) and list its questions."""
    rt = svc.runtime(path.strip() if path else None)
    ds = rt.dataset
    questions = [(f"{q.id} · {short(q.question, 90)}", q.id) for q in ds.questions]
    n_pass = sum(len(q.passages) for q in ds.questions)
    if n_pass and rt.fixed_corpus is None and rt.cfg.env.corpus == "pooled":
        # what the agent searches: the file's passages pooled (one copy each) - the demo lists 494, 210 distinct
        n_searched = len(rt.pooled_corpus.passages)
        passages = f"{n_searched} distinct passages searched ({n_pass} listed with the questions)"
    else:
        passages = f"{n_pass} passages"
    summary = f"{ds.name}: {len(ds.questions)} questions, {passages} ({Path(ds.path).name})"
    if n_pass == 0:
        summary += " — this file has no passages, so its questions cannot be searched here"
    return DataInfo(str(Path(ds.path).resolve()), questions, summary, views.message_html(summary, "info"))


def upload_data(svc: Services, uploaded: str) -> DataInfo:
    """Keep an uploaded data file under <home>/uploads/ (Gradio's temp files are short-lived; app/common/uploads.py: a size
    limit, one content-addressed copy) and load it."""
    return load_data(svc, str(svc.add_upload(uploaded)))


def policy_options(svc: Services) -> list[tuple[str, str]]:
    """The policy dropdown: oracle, script, LM live/base, and one entry per registered adapter."""
    store = svc.store_or_none()
    names = [a.name for a in store.list_adapters()] if store is not None else []
    return policy_choices(names)
