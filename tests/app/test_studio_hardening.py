"""The studio's data handling under hostile input, through its handler layer (no browser): data paths are read only
under the allowed folders (symlinks and `..` resolved first) and a refusal shows none of the file's content; names
from data files are escaped where the page shows them; typed questions have a length limit."""
from __future__ import annotations

import json

import pytest

from tests.paths import DEMO
from app.common import pickers
from app.common.services import BUNDLED_DATA_DIR, Services
from app.common.session import EpisodeSettings
from app.tabs.episode import handlers as episode_handlers
from evorag_core.config import apply_overrides, load_config
from evorag_core.errors import ConfigError, DataAccessError

SECRET = "s3cret-line-Zq9"  # content of a file outside the allowed folders; no refusal may show it


def _record(qid: str, dataset: str = "mine") -> str:
    return json.dumps({
        "id": qid, "dataset": dataset, "question": f"What is {qid}?", "answers": ["x"],
        "passages": [{"pid": f"{dataset}:{qid}:0", "title": "T", "text": f"{qid} is x.", "gold": True}],
    }) + "\n"


@pytest.fixture()
def folders(tmp_path):
    """(allowed root, outside folder): the root holds mine.jsonl and a symlink to a file outside it."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "mine.jsonl").write_text(_record("m1"), encoding="utf-8")
    # a file that loads as Bamboogle CSV (it would join the pickers) and whose header a format error would echo
    (outside / "secret.csv").write_text(f"Question,Answer\n{SECRET}?,{SECRET}\n", encoding="utf-8")
    (outside / "secret.jsonl").write_text(_record(SECRET), encoding="utf-8")
    (root / "link.csv").symlink_to(outside / "secret.csv")
    return root, outside


@pytest.fixture()
def svc(session_home, tmp_path, folders):
    root, _ = folders
    cfg = apply_overrides(load_config(), {"studio.data_roots": [str(root)]})
    services = Services(cfg, session_home, data_path=DEMO, db_url=f"sqlite:///{tmp_path / 'studio.db'}")
    yield services
    services.close()


def _refusal(svc: Services, path: str) -> str:
    with pytest.raises(DataAccessError) as info:
        pickers.load_data(svc, path)
    return str(info.value)


def test_paths_outside_the_data_folders_are_refused_without_their_content(svc, folders):
    """/etc/passwd, a `..` walk out of the bundled data/ and of a data root, a symlink inside a data root that points
    outside: each is refused before it is read, and the message holds none of the file's lines."""
    root, outside = folders
    cases = {
        "/etc/passwd": "root:",
        f"{BUNDLED_DATA_DIR}{'/..' * 30}/etc/passwd": "root:",
        f"{root}/../outside/secret.csv": SECRET,
        str(root / "link.csv"): SECRET,
        str(outside / "secret.jsonl"): SECRET,
    }
    for path, content in cases.items():
        msg = _refusal(svc, path)
        assert content not in msg and "CSV header" not in msg, msg
        assert "not a data file the studio may read" in msg and str(root) in msg
    assert not any(SECRET in label for label, _ in pickers.data_choices(svc))  # nothing joined the pickers
    # every handler that takes a data path goes through the same check
    with pytest.raises(DataAccessError):
        episode_handlers.start_episode(svc, EpisodeSettings(data_path=str(root / "link.csv"), policy="oracle"))


def test_a_refusal_does_not_say_whether_the_file_exists(svc, folders):
    _, outside = folders
    there, missing = str(outside / "secret.csv"), str(outside / "missing.csv")
    assert _refusal(svc, there).replace(there, "PATH") == _refusal(svc, missing).replace(missing, "PATH")


def test_files_inside_the_data_roots_the_bundled_data_and_uploads_load(svc, folders, tmp_path):
    root, _ = folders
    info = pickers.load_data(svc, str(root / "mine.jsonl"))
    assert [qid for _, qid in info.questions] == ["m1"] and info.path == str((root / "mine.jsonl").resolve())
    assert pickers.load_data(svc, f"{root}/sub/../mine.jsonl").path == info.path  # `..` that stays inside is fine
    assert pickers.load_data(svc, str(DEMO)).questions[0][1] == "demo-001"
    upload = tmp_path / "up.jsonl"
    upload.write_text(_record("u1", "up"), encoding="utf-8")
    assert pickers.upload_data(svc, str(upload)).questions[0][1] == "u1"


def test_data_roots_setting_takes_a_list_of_strings():
    cfg = apply_overrides(load_config(), {"studio.data_roots": ["/a", "/b"]})
    assert cfg.studio.data_roots == ("/a", "/b")
    assert apply_overrides(load_config(), {"studio.data_roots": "/a:/b"}).studio.data_roots == ("/a", "/b")
    assert load_config().studio.data_roots == () and load_config().studio.max_question_chars == 2000
    with pytest.raises(ConfigError, match="studio.data_roots"):
        apply_overrides(load_config(), {"studio.data_roots": [1, 2]})


def test_html_in_a_dataset_or_file_name_is_escaped_in_the_data_summary(svc, tmp_path):
    """The summary names the data set and the file; both are anyone's text (an uploaded file)."""
    evil = tmp_path / "<img src=x onerror=alert(1)>.jsonl"
    evil.write_text(_record("e1", "<img src=y onerror=alert(2)>"), encoding="utf-8")
    info = pickers.upload_data(svc, str(evil))
    assert "<img" not in info.summary_html
    assert "&lt;img src=y onerror=alert(2)&gt;" in info.summary_html
    assert "&lt;img src=x onerror=alert(1)&gt;.jsonl" in info.summary_html


def test_typed_questions_longer_than_the_limit_are_refused(svc):
    """max_question_chars = 2000: 2,000 characters are taken, 2,001 refused with the limit in the message."""
    limit = svc.cfg.studio.max_question_chars
    ok = ("Where is Mirrow? " * 200)[:limit]
    view, sess = episode_handlers.start_episode(svc, EpisodeSettings(free_question=ok, policy="oracle"))
    assert sess.question.question == " ".join(ok.split())
    with pytest.raises(ValueError, match="at most 2,000 characters") as info:
        episode_handlers.start_episode(svc, EpisodeSettings(free_question="x" * 30_000, policy="oracle"))
    assert "30,000" in str(info.value)
