"""What a locked-out person reads on the login page.

Gradio's login form (6.31, `Login.svelte`) posts to /login and shows "Incorrect Credentials" for a 400, reloads for a
200 and shows nothing for any other status: a 429 from `app.shell.login.LoginGuard` left the page silent, and the right
password then seemed to fail for no reason. Its `auth_message` is static HTML (inserted with innerHTML, so no script
runs from it), and the login page's config carries no `head`. So the studio adds `LOCKOUT_JS` to the HTML of the
page (`app.shell.page_scripts.PageScripts`, under auth): on the login page it watches the form's POST /login and, on
a 429, shows the reply's `detail` under the form's title with a countdown from Retry-After, and hides Gradio's
"Incorrect Credentials" of an earlier try (the password may well be right); the next 400 or 200 undoes both.
`lockout_message` words the detail from the limiter's `Refusal`.
"""
from __future__ import annotations

from evorag_core.auth.limiter import Refusal

__all__ = ["LOCKOUT_JS", "lockout_message", "duration"]

LOCKOUT_JS = """<script id="evo-login-lockout-js">(() => {
  if (!window.gradio_config || !window.gradio_config.auth_required || window.evoLockout) return;
  window.evoLockout = true;
  let timer = null;
  const creds = (shown) => document.querySelectorAll('p.creds')
    .forEach((p) => { p.style.display = shown ? '' : 'none'; });
  const hide = () => {
    clearInterval(timer); creds(true);
    const n = document.getElementById('evo-login-lockout'); if (n) n.remove();
  };
  const clock = (s) => Math.floor(s / 60) + ':' + String(s % 60).padStart(2, '0');
  const show = (text, seconds) => {
    hide();
    const title = document.querySelector('h2'); if (!title) return;
    const note = document.createElement('div');
    note.id = 'evo-login-lockout'; note.setAttribute('role', 'alert');
    note.style.cssText = 'margin:8px 0;padding:10px 12px;border-radius:6px;background:#fdecea;color:#8a1c14;'
      + 'border:1px solid #f5c2bd;font-size:15px;line-height:1.4';
    const line = document.createElement('div'); line.textContent = text; note.appendChild(line);
    const left = document.createElement('div'); left.className = 'evo-lockout-left'; left.style.marginTop = '6px';
    note.appendChild(left);
    const end = Date.now() + 1000 * (seconds || 0);
    const tick = () => {
      const s = Math.max(0, Math.ceil((end - Date.now()) / 1000));
      left.textContent = s > 0 ? 'Try again in ' + clock(s) + '.' : 'You can try again now.';
      if (s === 0) clearInterval(timer);
    };
    tick(); timer = setInterval(tick, 1000);
    title.insertAdjacentElement('afterend', note);
    creds(false);  // Gradio's "Incorrect Credentials" of an earlier try would contradict a right password
  };
  const send = window.fetch;
  window.fetch = async (...args) => {
    const res = await send(...args);
    try {
      const req = args[0]; const opts = args[1] || {};
      const url = new URL(typeof req === 'string' ? req : (req.url || String(req)), location.href);
      const method = String(opts.method || (req && req.method) || 'GET').toUpperCase();
      if (method === 'POST' && /\\/login\\/?$/.test(url.pathname)) {
        if (res.status === 429) {
          const body = await res.clone().json().catch(() => ({}));
          show(body.detail || 'Too many failed logins: wait, then try again.',
               Number(res.headers.get('retry-after')) || Number(body.retry_after_s) || 0);
        } else hide();
      }
    } catch (e) { /* the page's own handling of the reply goes on */ }
    return res;
  };
})();</script>"""

_SCOPES = {
    "pair": "The name \u201c{user}\u201d is locked out from this address",
    "addr": "This address is locked out, for every name,",
    "name": "The name \u201c{user}\u201d is locked out from every address it has not logged in from before",
}


def duration(seconds: float) -> str:
    """4 min 50 s, 45 s, 1 h 5 min."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")


def lockout_message(refusal: Refusal, user: str) -> str:
    """The 429's detail: who is locked out, why, and for how long; the right password is refused until then too."""
    who = _SCOPES[refusal.scope].format(user=user or "(no name)")
    return (f"{who} after too many failed logins, for {duration(refusal.wait_s)} more. Until then every login is "
            "refused, even with the right password.")
