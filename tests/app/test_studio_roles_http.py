"""#44 item 3: every event of a launched studio checks the caller's role on the server, page loads and timer ticks
included, and uploads need the admin role. Over HTTP, as the page's own requests (POST /login, GET /config, POST
/gradio_api/queue/join + GET /gradio_api/queue/data), against a studio served in this process with a users file.

Before, loads and ticks skipped the check: an annotator's direct queue/join with the Pairs tab's load read every pair
(discarded ones included, with texts), and /gradio_api/upload took the annotator's files."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pytest

from tests.paths import DEMO
from app.common.services import Services
from app.shell.main import launch
from evorag_core.auth.users_file import add_user
from evorag_core.config import load_config
from evorag_core.procs import free_port
from evorag_core.store import NewPair

SECRET = "discarded-secret-Xq7"  # in a discarded pair's texts: no annotator's response may hold it
NO_OP = {"__type__": "update"}  # gr.skip() as the page receives it (6.31 repeats it under "props"): no change
ANNOTATOR_TABS = {"annotate"}


@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory):
    """The base url of a studio with an admin (boss) and an annotator (ann), and one discarded pair holding SECRET."""
    work = tmp_path_factory.mktemp("studio_roles")
    users = work / "users.toml"
    add_user(users, "boss", "boss password")
    add_user(users, "ann", "ann password", role="annotator")
    svc = Services(load_config(), session_home, data_path=DEMO, db_url=f"sqlite:///{work / 'studio.db'}")
    store = svc.store()
    (pid,) = store.add_pairs([NewPair(f"state {SECRET}", f"SEARCH: {SECRET}", "ANSWER: b", source="human")])
    store.discard_pair(pid)
    port = free_port()
    demo = launch(svc, host="127.0.0.1", port=port, auth=str(users), block=False, quiet=True)
    yield f"http://127.0.0.1:{port}"
    demo.close()
    svc.close()


def _login(base: str, user: str, password: str) -> str:
    """The Cookie header of a session logged in as `user`."""
    body = f"username={user}&password={password.replace(' ', '+')}".encode()
    req = urllib.request.Request(base + "/login", data=body, method="POST",
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        cookies = [v.split(";", 1)[0] for k, v in resp.headers.items() if k.lower() == "set-cookie"]
    assert cookies, f"no session cookie for {user}"
    return "; ".join(cookies)


def _get_json(base: str, path: str, cookie: str) -> dict:
    req = urllib.request.Request(base + path, headers={"Cookie": cookie})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def _run_event(base: str, cookie: str, fn_index: int, data: list, trigger_id: int | None) -> dict:
    """The process_completed message of one event joined through the queue, as the page joins it."""
    session = uuid.uuid4().hex[:11]
    body = json.dumps({"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None,
                       "trigger_id": trigger_id}).encode()
    req = urllib.request.Request(base + "/gradio_api/queue/join", data=body, method="POST",
                                 headers={"Cookie": cookie, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        event_id = json.loads(resp.read())["event_id"]
    req = urllib.request.Request(f"{base}/gradio_api/queue/data?session_hash={session}", headers={"Cookie": cookie})
    with urllib.request.urlopen(req, timeout=120) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            message = json.loads(line[5:])
            if message.get("msg") == "process_completed" and message.get("event_id") == event_id:
                return message
    raise AssertionError(f"event {fn_index}: the stream ended without its result")


def _tab_of_components(config: dict) -> tuple[dict[int, str | None], dict[int, str | None]]:
    """(component id -> the id of the outermost tab holding it (None: the page's shell) counting a tab as inside
    itself, the same not counting it): the first for triggers and inputs, the second for outputs (a tab's visibility
    is the shell's to set)."""
    kinds = {c["id"]: c for c in config["components"]}
    inside, outside = {}, {}

    def walk(node: dict, tab: str | None) -> None:
        comp = kinds.get(node["id"], {})
        own = tab
        if comp.get("type") == "tabitem" and tab is None:
            own = comp["props"].get("id")
        inside[node["id"]], outside[node["id"]] = own, tab
        for child in node.get("children", []):
            walk(child, own)

    walk(config["layout"], None)
    return inside, outside


def _no_op(value) -> bool:
    """Whether an output's value leaves the component as it is (an update with no property in it)."""
    return isinstance(value, dict) and value.get("__type__") == "update" and set(value) <= {"__type__", "props"} \
        and value.get("props", NO_OP) == NO_OP


def _events(config: dict) -> list[dict]:
    return [d for d in config["dependencies"] if d.get("backend_fn")]


def _inputs(config: dict, dep: dict) -> list:
    """The inputs' values as the page starts (State values live on the server)."""
    props = {c["id"]: c.get("props", {}) for c in config["components"]}
    return [props.get(i, {}).get("value") for i in dep["inputs"]]


def test_an_annotator_reads_nothing_of_the_admin_tabs_through_any_event(studio):
    """Every event of the page (enumerated from the studio's /config, so a new tab is covered), joined directly
    by the annotator with the page's starting inputs: an event fired by or reading an admin tab's component leaves
    all its outputs as they are; any other event (the page load, the header's timer) leaves those of its outputs
    that lie in an admin tab as they are; no response holds the discarded pair's text."""
    cookie = _login(studio, "ann", "ann password")
    config = _get_json(studio, "/config", cookie)
    inside, outside = _tab_of_components(config)
    states = {c["id"] for c in config["components"] if c.get("type") == "state"}  # kept on the server, never sent
    events = _events(config)
    triggers = {name for dep in events for _, name in dep["targets"]}
    assert {"load", "tick", "click", "select"} <= triggers, triggers  # the page's loads and ticks are among them
    leaks = []
    for dep in events:
        trigger_ids = [t[0] for t in dep["targets"] if t[0] is not None]
        message = _run_event(studio, cookie, dep["id"], _inputs(config, dep), trigger_ids[0] if trigger_ids else None)
        where = (dep["id"], [name for _, name in dep["targets"]])
        if SECRET in json.dumps(message):
            leaks.append((*where, "the discarded pair's text"))
        sources = [inside.get(i) for i in [*trigger_ids, *dep["inputs"]]]
        admin_read = any(tab is not None and tab not in ANNOTATOR_TABS for tab in sources)
        data = (message.get("output") or {}).get("data") or []
        for out_id, value in zip(dep["outputs"], data):
            tab = outside.get(out_id)
            if out_id not in states and (admin_read or (tab is not None and tab not in ANNOTATOR_TABS)):
                if not _no_op(value):
                    leaks.append((*where, out_id, str(value)[:200]))
    assert not leaks, "\n".join(map(str, leaks))
    assert len(events) >= 100


def test_the_admin_still_gets_the_admin_tabs_and_an_annotator_the_page_shell(studio):
    """Control for the test above: the page load the annotator joined gives the admin the policy choices (an
    Episode-tab output) and the annotator the role and the login name in the header's box, and a header of their
    own (#46)."""
    loads = {}
    for user, password in (("boss", "boss password"), ("ann", "ann password")):
        cookie = _login(studio, user, password)
        config = _get_json(studio, "/config", cookie)
        role_box = next(c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == "evo-role")
        load = next(d for d in _events(config) if role_box in d["outputs"])
        message = _run_event(studio, cookie, load["id"], _inputs(config, load), None)
        loads[user] = dict(zip(load["outputs"], message["output"]["data"]))
        loads[user + ".role"] = loads[user][role_box]
        header = next(c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == "evo-header")
        loads[user + ".header"] = json.dumps(loads[user][header])
    assert loads["boss.role"] in ("admin", {"__type__": "update", "value": "admin"})
    assert loads["ann.role"] in ("annotator", {"__type__": "update", "value": "annotator"})
    assert sum(not _no_op(v) for v in loads["boss"].values()) > sum(not _no_op(v) for v in loads["ann"].values())
    # #46: the annotator's header says who they are and their progress, not the admin's live adapter, rounds, worker
    assert "live adapter" in loads["boss.header"] and "worker" in loads["boss.header"]
    assert "<b>ann</b> (annotator)" in loads["ann.header"], loads["ann.header"]
    assert not any(word in loads["ann.header"] for word in ("adapter", "rounds", "worker", "pairs"))


def _upload(base: str, cookie: str) -> int:
    return _upload_reply(base, cookie)[0]


def _upload_reply(base: str, cookie: str) -> tuple[int, str]:
    boundary = "evorag-upload-boundary"
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="mine.jsonl"\r\n'
            f'Content-Type: application/octet-stream\r\n\r\n{{"id": "q1"}}\n\r\n--{boundary}--\r\n').encode()
    req = urllib.request.Request(base + "/gradio_api/upload", data=body, method="POST",
                                 headers={"Cookie": cookie, "Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""


def _download(base: str, cookie: str, path: str) -> int:
    req = urllib.request.Request(base + "/gradio_api/file=" + path, headers={"Cookie": cookie})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def test_uploaded_files_are_read_back_only_by_the_admin(studio):
    """GET /gradio_api/file=<the path an admin's upload got>: 403 for the annotator (who knows the path), 200 for
    the admin."""
    status, body = _upload_reply(studio, _login(studio, "boss", "boss password"))
    assert status == 200
    [path] = json.loads(body)
    assert _download(studio, _login(studio, "ann", "ann password"), path) == 403
    assert _download(studio, _login(studio, "boss", "boss password"), path) == 200


def test_uploads_need_the_admin_role(studio):
    """POST /gradio_api/upload: the annotator's is refused with 403 before its body is read, the admin's is taken."""
    assert _upload(studio, _login(studio, "ann", "ann password")) == 403
    assert _upload(studio, _login(studio, "boss", "boss password")) == 200
