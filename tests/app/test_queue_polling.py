"""#46: an idle studio server costs ~0 CPU. Gradio's queue polls for new events every 1 ms and for progress every 10 ms
while it has nothing to do (6-8 % of a core with no page open, measured with py-spy: the uvicorn thread in
Queue.start_processing's sleep loop). `quiet_queue_polling` slows both; the queue still runs events, progress included.
bench/studio_idle.py measures the CPU it saves."""
from __future__ import annotations

import inspect
import json
import socket
import urllib.request
import uuid

import gradio as gr
from gradio import queueing

from app.shell.main import PROGRESS_IDLE_POLL_S, QUEUE_IDLE_POLL_S, quiet_queue_polling


def test_gradio_queue_still_polls_with_the_settings_we_change():
    # a Gradio that renamed them would make quiet_queue_polling a silent no-op: this fails first
    assert "self.sleep_when_free" in inspect.getsource(queueing.Queue.start_processing)
    assert "self.progress_update_sleep_when_free" in inspect.getsource(queueing.Queue.start_progress_updates)


def test_a_quiet_queue_still_runs_events_and_reports_progress():
    def slow_double(x, progress=gr.Progress()):
        for i in progress.tqdm(range(3)):
            pass
        return 2 * int(x)

    with gr.Blocks() as demo:
        inp, out = gr.Number(), gr.Number()
        gr.Button("go").click(slow_double, inp, out, api_name="double")
    demo.queue()
    quiet_queue_polling(demo)
    assert demo._queue.sleep_when_free == QUEUE_IDLE_POLL_S
    assert demo._queue.progress_update_sleep_when_free == PROGRESS_IDLE_POLL_S
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, _frontend=False,
                ssr_mode=False)
    try:
        base, session = f"http://127.0.0.1:{port}", uuid.uuid4().hex[:11]
        body = json.dumps({"data": [21], "fn_index": 0, "session_hash": session, "trigger_id": None}).encode()
        req = urllib.request.Request(base + "/gradio_api/queue/join", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30):
            pass
        messages = []
        with urllib.request.urlopen(f"{base}/gradio_api/queue/data?session_hash={session}", timeout=60) as resp:
            for line in resp:
                if line.startswith(b"data:"):
                    messages.append(json.loads(line[5:]))
                    if messages[-1]["msg"] == "process_completed":
                        break
        assert messages[-1]["success"] and messages[-1]["output"]["data"] == [42]
        assert "process_starts" in {m["msg"] for m in messages}
    finally:
        demo.close()
