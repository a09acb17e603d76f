"""Links into the studio's page: the URL's query parameters, the page's own address, and `?data=FILE&question=ID`
(a question of a data file, opened in the Episode tab)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.common.pickers import load_data
from app.common.services import Services

if TYPE_CHECKING:
    import gradio as gr

__all__ = ["url_params", "link_base", "data_path_for_link", "question_link"]


def url_params(request: gr.Request | None) -> dict[str, str]:
    """The page URL's query parameters of a Gradio request ({} without one)."""
    params = getattr(request, "query_params", None) if request is not None else None
    return {str(k): str(v) for k, v in dict(params or {}).items()}


def link_base(request: gr.Request | None) -> str:
    """The page's address without its query (from the Referer header), for links to copy; '' when unknown."""
    headers = dict(getattr(request, "headers", None) or {}) if request is not None else {}
    ref = headers.get("referer") or headers.get("Referer") or ""
    if ref.startswith(("http://", "https://")):
        return ref.split("?", 1)[0].split("#", 1)[0]
    host = headers.get("host")
    return f"http://{host}/" if host else ""


def data_path_for_link(svc: Services, data: str) -> str:
    """A `?data=` value as a path the studio may read (a path, or a label of the data pickers)."""
    for label, path in svc.data_files():
        if data in (label, path, Path(path).name):
            return path
    return str(svc.allowed_data_path(data))


def question_link(svc: Services, data: str | None, question_id: str | None) -> tuple[Any, str | None]:
    """`?data=FILE&question=ID`: the data file loaded (a DataInfo) and the question id to select (None: the
    file's first). ValueError / DataAccessError / KeyError with a readable message for a bad link."""
    if not data:
        raise ValueError("the link names a question but no data file; links look like ?data=FILE&question=ID")
    info = load_data(svc, data_path_for_link(svc, data))
    if question_id and question_id not in {qid for _, qid in info.questions}:
        raise KeyError(f"the link's question {question_id!r} is not in {Path(info.path).name}")
    return info, question_id or (info.questions[0][1] if info.questions else None)
