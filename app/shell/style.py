"""The studio's stylesheet (passed to `launch(css=...)`): tables, passages, badges, cards, progress bars."""
from __future__ import annotations

__all__ = ["CSS"]

CSS = """
.gradio-container { width: 100% !important; max-width: 1680px !important; margin: 0 auto !important; }
#evo-title h1 { margin: 0; font-size: 1.5rem; }
.evo-header-status { font-size: 0.9rem; padding: 6px 0; color: var(--body-text-color-subdued); }
.evo-table { border-collapse: collapse; width: 100%; font-size: 0.85rem; margin: 4px 0 10px; }
.evo-scroll { overflow-x: auto; max-width: 100%; }
.evo-table caption { text-align: left; font-size: 0.9rem; padding: 4px 0; }
.evo-table th { background: var(--background-fill-secondary); font-weight: 600; text-align: left;
  padding: 4px 6px; border-bottom: 2px solid var(--border-color-primary); white-space: nowrap; }
.evo-table td { padding: 3px 6px; border-bottom: 1px solid var(--border-color-primary); vertical-align: top; }
.evo-table td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.evo-table tr.evo-change-better td { background: rgba(44, 160, 44, 0.08); }  /* a promotion report's changed answers */
.evo-table tr.evo-change-worse td { background: rgba(214, 39, 40, 0.08); }
.evo-live-why { color: var(--body-text-color-subdued); }
.evo-table td.pos { color: #127a2e; }
.evo-table td.neg { color: #b3261e; }
.evo-table td.zero { color: #999; }
.evo-table td.strong { font-weight: 600; }
.evo-table td.arg { max-width: 320px; overflow-wrap: anywhere; }
.evo-table tr.current td { background: rgba(255, 213, 79, 0.18); }
.evo-table tr.cmp-diff td { background: rgba(255, 138, 101, 0.14); }
.evo-table td.cmp-none { color: #90a4ae; text-align: center; }
.evo-compare-q { margin: 4px 0 6px 0; }
.evo-compare-verdict { margin: 4px 0 8px 0; font-weight: 600; }
#evo-compare .evo-table { margin-bottom: 10px; }
.evo-empty { color: var(--body-text-color-subdued); font-style: italic; padding: 8px 2px; }
.evo-h { font-weight: 600; margin: 4px 0; }
.evo-msg { padding: 6px 10px; border-radius: 6px; margin: 4px 0; font-size: 0.9rem; }
.evo-msg-ok, .evo-msg-info { background: rgba(46, 125, 50, 0.09); border-left: 4px solid #2e7d32; }
.evo-msg-warn { background: rgba(237, 108, 2, 0.10); border-left: 4px solid #ed6c02; }
.evo-msg-error { background: rgba(211, 47, 47, 0.10); border-left: 4px solid #d32f2f; }
.evo-status .evo-q { font-size: 1.05rem; font-weight: 600; margin-bottom: 2px; }
.evo-status .evo-meta { font-size: 0.85rem; color: var(--body-text-color-subdued); margin: 2px 0; }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 0.75rem; font-weight: 600;
  margin-left: 4px; vertical-align: middle; }
.badge.gold { background: #ffd54f; color: #5d4300; }
.badge.human { background: #e1bee7; color: #4a148c; }
.badge.plan { background: #e3f2fd; color: #0d47a1; font-weight: 500; }
.badge.answerable { background: #c8e6c9; color: #1b5e20; }
.badge.unanswerable { background: #ffcdd2; color: #b71c1c; }
.badge.done { background: #cfd8dc; color: #263238; }
.badge.running { background: #bbdefb; color: #0d47a1; }
.badge.grade { font-size: 0.8rem; padding: 1px 8px; margin-left: 8px; }
.badge.grade.correct { background: #c8e6c9; color: #1b5e20; border: 1px solid #66bb6a; }
.badge.grade.partial { background: #ffe0b2; color: #8a4b00; border: 1px solid #ffa726; }
.badge.grade.wrong { background: #ffcdd2; color: #b71c1c; border: 1px solid #ef5350; }
.badge.source { background: #b3e5fc; color: #01579b; }
.evo-grade-why, .evo-src-ref { font-size: 0.85rem; color: var(--body-text-color-subdued); }
.act { font-family: var(--font-mono); font-size: 0.8rem; font-weight: 600; }
.act-search { color: #1565c0; } .act-answer { color: #2e7d32; } .act-refuse { color: #6a1b9a; }
.act-backtrack { color: #c62828; }
.evo-passages { margin: 0; padding-left: 0; list-style: none; max-height: 420px; overflow-y: auto; }
.evo-passages li { border: 1px solid var(--border-color-primary); border-radius: 6px; padding: 6px 8px;
  margin-bottom: 6px; }
.evo-passages li.gold { border-color: #f9a825; background: rgba(255, 213, 79, 0.10); }
.evo-passages li.source { border: 2px solid #0288d1; }
.evo-passages mark { background: #fff176; color: inherit; padding: 0 2px; border-radius: 3px; }
.evo-passages .ptitle { font-weight: 600; font-size: 0.9rem; }
.evo-passages .pid { float: right; font-family: var(--font-mono); font-size: 0.7rem; color: #999; }
.evo-passages .ptext { font-size: 0.85rem; white-space: pre-wrap; overflow-wrap: anywhere; }
.evo-cards { display: flex; flex-wrap: wrap; gap: 8px; }
.evo-card { flex: 1 1 200px; border: 1px solid var(--border-color-primary); border-radius: 8px; padding: 8px;
  min-width: 200px; }
.evo-card-h { font-weight: 600; }
.evo-card .arg { font-size: 0.9rem; margin: 4px 0; overflow-wrap: anywhere; }
.evo-card-f { font-size: 0.8rem; color: var(--body-text-color-subdued); }
.evo-counts { font-size: 0.85rem; margin: 3px 0; }
.chip { display: inline-block; background: var(--background-fill-secondary); border-radius: 10px;
  padding: 1px 8px; margin: 1px 2px; }
.chip.warn { background: #ffe0b2; }
.evo-progress { margin: 6px 0; }
.evo-progress-label { font-size: 0.9rem; margin-bottom: 3px; }
.evo-bar { height: 14px; background: var(--background-fill-secondary); border-radius: 7px; overflow: hidden; }
.evo-fill { height: 100%; background: #1e88e5; transition: width 0.4s; }
.evo-fill.succeeded { background: #43a047; } .evo-fill.failed { background: #e53935; }
.evo-fill.cancelled { background: #9e9e9e; }
.evo-log-head { font-size: 0.85rem; color: var(--body-text-color-subdued); margin: 4px 0; }
.evo-log-lines { max-height: 320px; overflow-y: auto; font-family: var(--font-mono); font-size: 0.75rem;
  line-height: 1.35; background: var(--background-fill-secondary); border: 1px solid var(--border-color-primary);
  border-radius: 6px; padding: 6px 8px; }
.evo-log-line { display: flex; gap: 8px; align-items: baseline; }
.evo-log-time { color: var(--body-text-color-subdued); flex: none; }
.evo-log-level { flex: none; width: 4.6em; color: var(--body-text-color-subdued); }
.evo-log-msg { white-space: pre-wrap; overflow-wrap: anywhere; min-width: 0; }
.evo-log-line.warning .evo-log-level, .evo-log-line.warning .evo-log-msg { color: #b26a00; }
.evo-log-line.error .evo-log-level, .evo-log-line.error .evo-log-msg,
.evo-log-line.critical .evo-log-level, .evo-log-line.critical .evo-log-msg { color: #c62828; }
.evo-log-gap, .evo-log-empty { color: var(--body-text-color-subdued); font-style: italic; }
.dk-badge { display: inline-block; padding: 1px 8px; border-radius: 8px; font-size: 0.8rem; font-weight: 600; }
.dk-uniform { background: #fff3e0; color: #8a4b00; border: 1px solid #ffa726; }
.dk-learned { background: #e3f2fd; color: #0d47a1; border: 1px solid #64b5f6; }
.dk-missing { background: #ffebee; color: #b71c1c; border: 1px solid #e57373; }
.dk-controller { font-size: 0.9rem; margin: 4px 0; }
.dk-kv th { width: 9.5em; white-space: nowrap; }
.dk-kv td { overflow-wrap: anywhere; }
.dk-doc-meta { font-size: 0.75rem; color: var(--body-text-color-subdued); }
.dk-ops tr.invalid td { color: #6b6b6b; background: rgba(0, 0, 0, 0.035); }
.dk-ops tr.chosen td { background: rgba(21, 101, 192, 0.10); font-weight: 600; }
.dk-ops tr.chosen td.act { color: #1565c0; }
.dk-final .evo-q { font-size: 1.05rem; margin-bottom: 4px; }
.evo-muted { color: var(--body-text-color-subdued); font-size: 0.85rem; }
.evo-ann-item { display: block; }
.evo-ann-meta { font-size: 0.8rem; color: var(--body-text-color-subdued); }
.evo-ann-question { font-size: 1.15rem; font-weight: 600; margin: 4px 0 8px; }
.evo-ann-item h4 { margin: 10px 0 4px; }
.evo-ann-step summary { cursor: pointer; font-size: 0.9rem; }
.evo-ann-passage { font-size: 0.82rem; margin: 3px 0 3px 12px; overflow-wrap: anywhere; }
.evo-ann-evidence { max-height: 260px; overflow-y: auto; }
.evo-ann-cands { display: grid; grid-template-columns: repeat(auto-fit, minmax(230px, 1fr)); gap: 10px; }
.evo-ann-cand { border: 2px solid var(--border-color-primary); border-radius: 8px; padding: 8px; cursor: pointer;
  display: flex; flex-direction: column; min-width: 0; }
.evo-ann-cand.evo-picked { border-color: #1e88e5; background: rgba(30, 136, 229, 0.07); }
.evo-ann-cand.evo-worst { border-color: #c62828; border-style: dashed; background: rgba(198, 40, 40, 0.05); }
.evo-ann-cand.evo-worst .evo-ann-rank { color: #c62828; }
.evo-ann-cand-head { display: flex; gap: 6px; align-items: baseline; margin-bottom: 4px; }
.evo-ann-cand-head code { overflow-wrap: anywhere; font-weight: 600; }
.evo-ann-key { flex: none; border: 1px solid var(--border-color-primary); border-radius: 4px; padding: 0 6px;
  font-family: var(--font-mono); font-size: 0.8rem; }
.evo-ann-rank { flex: none; color: #1e88e5; font-weight: 700; }
.evo-ann-preview { font-size: 0.75rem; white-space: pre-wrap; overflow-wrap: anywhere; max-height: 220px;
  overflow-y: auto; margin: 0; flex: 1; }
.evo-ann-foot { font-size: 0.8rem; color: var(--body-text-color-subdued); margin-top: 4px; }
.evo-ann-empty { padding: 16px; color: var(--body-text-color-subdued); }
.evo-last-error-box { min-height: 0 !important; padding: 0 !important; }
.evo-last-error-box:not(:has(.evo-last-error)) { display: none !important; }  /* no gap while there is none */
.evo-last-error { padding: 6px 10px; border-radius: 6px; margin: 2px 0 6px; font-size: 0.9rem;
  background: rgba(211, 47, 47, 0.10); border-left: 4px solid #d32f2f; overflow-wrap: anywhere; }
.evo-turn { border-left: 3px solid var(--border-color-primary); padding: 4px 8px; margin: 4px 0; }
.evo-turn-user { border-left-color: #1e88e5; }
.evo-turn-assistant { border-left-color: #2e7d32; }
.evo-turn-system { border-left-color: #8e8e8e; }
.evo-turn-role { font-size: 0.75rem; font-weight: 700; text-transform: uppercase; color: var(--body-text-color-subdued); }
.evo-turn-text { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 0.85rem; max-height: 360px; overflow-y: auto; }
.evo-fold { margin: 4px 0; }
.evo-fold summary { cursor: pointer; font-size: 0.85rem; color: var(--body-text-color-subdued); }
.evo-review-table, .evo-ann-labels { font-size: 0.85rem; border-collapse: collapse; }
.evo-review-table td, .evo-review-table th, .evo-ann-labels td, .evo-ann-labels th { padding: 2px 8px;
  border-bottom: 1px solid var(--border-color-primary); text-align: left; }
"""
