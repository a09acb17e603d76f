"""The Annotate tab (label the queue, one item at a time, keyboard first) and the Review tab (disagreements and a
reviewer's resolution). Layout and wiring only: handlers in app/tabs/annotate/handlers.py, HTML in app/tabs/annotate/view.py.

Keys (while the Annotate tab is shown and no text box has the focus): 1-9 pick candidates best first (again: unpick),
Shift+1-9 marks the worst, Enter submits the picks (a refusal item: 1 answerable, 2 unanswerable), T tie, S skip,
U undo the last label, Esc clears the picks. The picks live in the page (`KEYS_JS` marks them on the cards); a submit writes one command
("rank|<item>|<picks>[/<worst>]|<nonce>") into a hidden text box, whose change event runs `on_command` on the server, which
checks the session user's role before it stores anything.
"""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from app.common import roles, views
from app.common.services import Services
from app.common.wiring import annotator_name, on, studio_tab
from app.tabs.annotate import handlers as ha

__all__ = ["AnnotateTabs", "build_tabs", "DEFAULT_GUIDELINES", "KEYS_JS"]

DEFAULT_GUIDELINES = """\
**Preference items**: the agent is at the state shown (question, the searches so far and what they found). Rank the
candidate next actions by how much each helps answer the question correctly, with few steps:
a SEARCH that finds a missing fact beats one that repeats what is known; ANSWER is best only when the passages
support the answer; REFUSE only when the question cannot be answered. Read each SEARCH's preview (what it would
retrieve) and, when scored, the branch return.

Press the best candidate's number first, then the next best, …; unpicked ones count as tied below your picks.
**Shift** + a number marks the worst candidate (below all the others), with or without picks.
**T** if no candidate is better than another, **S** to skip an item you cannot judge, **U** to undo your last label.

**Refusal items**: is the evidence enough to answer the question? **1** answerable, **2** unanswerable.
"""

KEYS_JS = """() => {
  if (window.evoAnn) return;
  const st = {item: null, picks: [], worst: null};
  const root = () => document.querySelector('#evo-ann-item .evo-ann-item');
  const shown = () => { const box = document.querySelector('#evo-ann-item'); return !!(box && box.offsetParent); };
  const sync = () => {
    const r = root(); const id = r ? (r.dataset.item || '') : '';
    if (id !== st.item) { st.item = id; st.picks = []; st.worst = null; }
    return r;
  };
  const paint = () => {
    const r = sync(); if (!r) return;
    r.querySelectorAll('.evo-ann-cand').forEach((c) => {
      const i = Number(c.dataset.index); const at = st.picks.indexOf(i);
      c.classList.toggle('evo-picked', at >= 0);
      c.classList.toggle('evo-worst', st.worst === i);
      const badge = c.querySelector('.evo-ann-rank');
      const text = at >= 0 ? '#' + (at + 1) : (st.worst === i ? 'worst' : '');
      if (badge && badge.textContent !== text) badge.textContent = text;  // no write, no mutation: no loop
    });
  };
  const pick = (i) => {
    const r = sync(); if (!r) return;
    if (i >= Number(r.dataset.k || 0)) return;
    const at = st.picks.indexOf(i);
    if (at >= 0) st.picks.splice(at, 1); else st.picks.push(i);
    if (st.worst === i) st.worst = null;
    paint();
  };
  const markWorst = (i) => {
    const r = sync(); if (!r) return;
    if (i >= Number(r.dataset.k || 0)) return;
    st.worst = st.worst === i ? null : i;
    const at = st.picks.indexOf(i); if (at >= 0) st.picks.splice(at, 1);
    paint();
  };
  const send = (verb) => {
    sync();
    const box = document.querySelector('#evo-ann-cmd textarea, #evo-ann-cmd input'); if (!box) return;
    const picks = st.picks.join(',') + (st.worst === null ? '' : '/' + st.worst);
    box.value = [verb, st.item || '', picks, Date.now()].join('|');
    box.dispatchEvent(new Event('input', {bubbles: true}));
  };
  const clear = () => { st.picks = []; st.worst = null; paint(); };
  window.evoAnn = {send, pick, markWorst, clear, picks: () => st.picks.slice(), worst: () => st.worst};
  document.addEventListener('click', (ev) => {
    const card = ev.target.closest && ev.target.closest('#evo-ann-item .evo-ann-cand');
    if (card) pick(Number(card.dataset.index));
  });
  new MutationObserver(paint).observe(document.body, {childList: true, subtree: true});
  document.addEventListener('keydown', (ev) => {
    if (!shown() || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const t = ev.target; const tag = t && t.tagName ? t.tagName.toLowerCase() : '';
    if (tag === 'input' || tag === 'textarea' || tag === 'select' || (t && t.isContentEditable)) return;
    const k = ev.key; const digit = /^(Digit|Numpad)([1-9])$/.exec(ev.code || '');
    if (ev.shiftKey && digit) markWorst(Number(digit[2]) - 1);  // by key position: Shift+1 is '!' on many layouts
    else if (k >= '1' && k <= '9') pick(Number(k) - 1);
    else if (k === 'Enter') send('rank');
    else if (k === 's' || k === 'S') send('skip');
    else if (k === 't' || k === 'T') send('tie');
    else if (k === 'u' || k === 'U') send('undo');
    else if (k === 'Escape') clear();
    else return;
    ev.preventDefault();
  });
}"""


@dataclass(frozen=True)
class AnnotateTabs:
    annotate: gr.Tab
    review: gr.Tab
    first_item: tuple  # (fn, inputs, outputs) that loads the user's first item (the page load, for non-admins)


def build_tabs(svc: Services, annotator: gr.Textbox, demo: gr.Blocks) -> AnnotateTabs:
    """Both tabs, created inside the caller's `gr.Tabs`."""
    with studio_tab("Annotate", id="annotate", elem_id="evo-annotate-tab") as tab:
        with gr.Row(equal_height=True):
            progress = gr.HTML(elem_id="evo-ann-progress")
            gr.HTML('<span class="evo-muted">keys: 1–9 pick best first · Shift+1–9 worst · Enter submit · T tie · '
                    'S skip · U undo · Esc clear</span>')
        with gr.Accordion("Guidelines", open=False, elem_id="evo-ann-guidelines"):
            gr.Markdown(svc.cfg.annotate.guidelines or DEFAULT_GUIDELINES)
        message = gr.HTML(elem_id="evo-ann-msg")
        item = gr.HTML(elem_id="evo-ann-item")
        with gr.Row():
            buttons = {verb: gr.Button(label, elem_id=f"evo-ann-{verb}", variant=variant, scale=0, min_width=150)
                       for verb, label, variant in (("rank", "Submit (Enter)", "primary"), ("tie", "Tie (T)", "secondary"),
                                                    ("skip", "Skip (S)", "secondary"),
                                                    ("undo", "Undo last (U)", "secondary"))}
        command = gr.Textbox(visible="hidden", elem_id="evo-ann-cmd")
    with studio_tab("Review", id="review", elem_id="evo-review-tab") as review_tab:
        agreement = gr.HTML(elem_id="evo-review-agreement-box")
        table = gr.HTML(elem_id="evo-review-list")
        with gr.Row():
            pick = gr.Dropdown(label="Disagreement", choices=[], elem_id="evo-review-pick")
            decision = gr.Dropdown(["rank", "tie", "answerable", "unanswerable"], value="rank", label="Resolution",
                                   elem_id="evo-review-decision")
            ranking = gr.Textbox(label="Ranking, best first (e.g. 2,1)", elem_id="evo-review-ranking")
            resolve = gr.Button("Resolve", variant="primary", elem_id="evo-review-resolve", scale=0, min_width=140)
        review_msg = gr.HTML(elem_id="evo-review-msg")
        detail = gr.HTML(elem_id="evo-review-item")

    shown = [item, progress, message]

    def _who(typed: str | None, request: gr.Request | None) -> str:
        return annotator_name(typed, request, svc.cfg.studio.max_question_chars) or roles.LOCAL_USER

    def on_command(value, typed, request: gr.Request):
        roles.require(svc, request, "label")
        admin = roles.user_role(svc, request) == "admin"
        view = ha.run_command(svc, _who(typed, request), value, admin=admin)
        return view.item, view.progress, view.message

    on(command.change, on_command, [command, annotator], shown, show_progress="hidden", trigger_mode="always_last")
    for verb, button in buttons.items():
        button.click(None, None, None, js=f"() => window.evoAnn && window.evoAnn.send('{verb}')",
                     api_visibility="private")
    def on_open(typed, request: gr.Request):
        return on_command("next", typed, request)

    on(tab.select, on_open, [annotator], shown, show_progress="hidden", api_visibility="private")
    demo.load(None, None, None, js=KEYS_JS, api_visibility="private")

    def listed(request: gr.Request):
        roles.require(svc, request, "review")
        view = ha.review_list(svc)
        return view.agreement, view.table, gr.Dropdown(choices=view.choices, value=None)

    def on_resolve(item_id, dec, text, request: gr.Request):
        roles.require(svc, request, "review")
        msg = ha.resolve(svc, roles.session_user(request) or roles.LOCAL_USER, item_id, dec, text)
        return (views.message_html(msg, "ok"), *listed(request), "")

    def on_pick(item_id, request: gr.Request):
        roles.require(svc, request, "review")
        return ha.review_item(svc, item_id)

    review_out = [agreement, table, pick]
    on(review_tab.select, listed, None, review_out, show_progress="hidden", api_visibility="private")
    on(pick.input, on_pick, pick, detail)
    on(resolve.click, on_resolve, [pick, decision, ranking], [review_msg, *review_out, detail])

    def first(typed, request: gr.Request):
        if roles.user_role(svc, request) == "admin":  # an admin claims an item when they open the tab
            return gr.skip(), gr.skip(), gr.skip()
        return on_command("next", typed, request)

    return AnnotateTabs(tab, review_tab, (first, [annotator], shown))
