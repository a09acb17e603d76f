"""Uploaded data files (app/common/uploads.py through the studio's upload handler): a size limit with a readable refusal,
one copy on disk (Gradio's temporary file is moved, not copied), content-addressed so that another file under the
same name shows its own questions, and deleted by age when the studio starts."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from app.common import pickers
from app.common.services import Services
from evorag_core.config import apply_overrides, load_config
from evorag_core.errors import ConfigError, DataAccessError
from tests.paths import DEMO


def _records(*qids: str) -> str:
    return "".join(json.dumps({
        "id": q, "dataset": "mine", "question": f"What is {q}?", "answers": ["x"],
        "passages": [{"pid": f"mine:{q}:0", "title": "T", "text": f"{q} is x.", "gold": True}],
    }) + "\n" for q in qids)


@pytest.fixture()
def gradio_tmp(tmp_path, monkeypatch) -> Path:
    """Gradio's upload folder for this test: files the upload button hands to the handler live here."""
    folder = tmp_path / "gradio"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(folder))
    return folder


def _studio(tmp_path: Path, **settings) -> Services:
    cfg = apply_overrides(load_config(), {f"studio.{k}": v for k, v in settings.items()})
    return Services(cfg, tmp_path / "home", data_path=DEMO, db_url=f"sqlite:///{tmp_path / 'studio.db'}")


def _gradio_upload(gradio_tmp: Path, name: str, text: str) -> Path:
    """A file as Gradio stores an upload: <upload folder>/<a hash folder>/<the client's file name>."""
    path = gradio_tmp / f"h{time.monotonic_ns()}" / name
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    return path


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_an_upload_over_the_limit_is_refused_with_the_limit_in_the_message(tmp_path, gradio_tmp):
    """max_upload_mb = 0.001 (1,048 bytes): a 2,000-byte file is refused - the message gives its size, the limit and
    the setting - and no copy of it is left (Gradio's temporary file is deleted, nothing under uploads/); a file
    under the limit is taken."""
    svc = _studio(tmp_path, max_upload_mb=0.001)
    try:
        big = _gradio_upload(gradio_tmp, "big.jsonl", _records("b1") + " " * (2000 - len(_records("b1"))))
        with pytest.raises(DataAccessError) as info:
            pickers.upload_data(svc, str(big))
        assert "'big.jsonl' is 2,000 bytes: the studio takes uploads of at most 0.001 MB (studio.max_upload_mb)" \
            in str(info.value)
        assert _files(gradio_tmp) == [] and _files(svc.uploads_dir) == []
        assert not any("big.jsonl" in label for label, _ in pickers.data_choices(svc))
        small = _gradio_upload(gradio_tmp, "small.jsonl", _records("s1"))
        assert [q for _, q in pickers.upload_data(svc, str(small)).questions] == ["s1"]
    finally:
        svc.close()
    with pytest.raises(ConfigError, match="studio.max_upload_mb"):
        apply_overrides(load_config(), {"studio.max_upload_mb": 0})


def test_a_reupload_under_the_same_name_shows_the_new_questions_and_keeps_one_copy(tmp_path, gradio_tmp):
    """mine.jsonl with q1, q2, then another mine.jsonl with q3: the second upload lists q3 (not the cached q1, q2)
    and the pickers offer one mine.jsonl, the new one. Each upload leaves exactly one copy on disk: Gradio's
    temporary file is moved into uploads/<content hash>/; the same content uploaded again is the same file. A file
    that does not load is not kept."""
    svc = _studio(tmp_path)
    try:
        first = pickers.upload_data(svc, str(_gradio_upload(gradio_tmp, "mine.jsonl", _records("q1", "q2"))))
        assert [q for _, q in first.questions] == ["q1", "q2"]
        second = pickers.upload_data(svc, str(_gradio_upload(gradio_tmp, "mine.jsonl", _records("q3"))))
        assert [q for _, q in second.questions] == ["q3"] and second.path != first.path
        assert [path for label, path in pickers.data_choices(svc) if label == "mine.jsonl"] == [second.path]
        again = pickers.upload_data(svc, str(_gradio_upload(gradio_tmp, "mine.jsonl", _records("q3"))))
        assert again.path == second.path
        assert _files(gradio_tmp) == []
        assert _files(svc.uploads_dir) == sorted([Path(first.path), Path(second.path)])
        assert Path(second.path).read_text(encoding="utf-8") == _records("q3")
        with pytest.raises(Exception, match="bad.jsonl"):
            pickers.upload_data(svc, str(_gradio_upload(gradio_tmp, "bad.jsonl", '{"id": 1}\n')))
        assert len(_files(svc.uploads_dir)) == 2 and _files(gradio_tmp) == []
    finally:
        svc.close()


def test_uploads_unused_for_the_max_age_are_deleted_when_the_studio_starts(tmp_path, gradio_tmp):
    """upload_max_age_hours = 1: of two uploads, the one last used two hours ago is deleted (with its folder) by the
    next studio's start; the one used now is kept, and loading it again counts as a use."""
    svc = _studio(tmp_path, upload_max_age_hours=1)
    try:
        old = Path(pickers.upload_data(svc, str(_gradio_upload(gradio_tmp, "old.jsonl", _records("o1")))).path)
        new = Path(pickers.upload_data(svc, str(_gradio_upload(gradio_tmp, "new.jsonl", _records("n1")))).path)
    finally:
        svc.close()
    two_hours_ago = time.time() - 2 * 3600
    os.utime(old, (two_hours_ago, two_hours_ago))
    os.utime(new, (two_hours_ago, two_hours_ago))
    restarted = _studio(tmp_path, upload_max_age_hours=1)
    try:
        pickers.load_data(restarted, str(new))  # used now
        assert restarted.clean_uploads() == [old]
        assert _files(restarted.uploads_dir) == [new] and not old.parent.exists()
    finally:
        restarted.close()


def test_a_launched_studio_stops_an_upload_over_the_limit_while_it_streams(tmp_path, gradio_tmp):
    """Gradio's upload route of a studio served in this process with max_upload_mb = 0.01 (10,485 bytes): a
    20,000-byte file is answered 413 with the limit in bytes, before any handler runs (nothing reaches uploads/); a
    5,000-byte file is taken."""
    import socket
    import urllib.error
    import urllib.request

    from app.shell.main import launch

    svc = _studio(tmp_path, max_upload_mb=0.01)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = launch(svc, host="127.0.0.1", port=port, block=False, quiet=True)

    def post(size: int) -> tuple[int, str]:
        boundary = "evorag-upload-test"
        head = (f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="f.jsonl"\r\n'
                f"Content-Type: application/octet-stream\r\n\r\n")
        body = head.encode() + b"x" * size + f"\r\n--{boundary}--\r\n".encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/gradio_api/upload", data=body, method="POST",
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    try:
        status, text = post(20_000)
        assert status == 413 and "maximum allowed size of 10485 bytes" in text, text
        status, text = post(5_000)
        assert status == 200 and "f.jsonl" in text, text
        assert _files(svc.uploads_dir) == []
    finally:
        demo.close()
        svc.close()
