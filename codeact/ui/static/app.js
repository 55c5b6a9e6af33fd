// codeact web UI: renders the agent's event stream (server-sent events) as a conversation.
//
// Everything in an event may come from the sandbox and is hostile: text is only ever set
// with textContent, HTML outputs go through DOMPurify (no scripts, styles, forms or frames)
// and are inserted as a DOM fragment, images are <img> elements (an SVG in an <img> runs no
// script). The server's Content-Security-Policy forbids inline script as a second line.
'use strict';

(() => {
  const TOKEN = document.querySelector('meta[name="codeact-token"]').content;
  const TOKEN_HEADER = document.querySelector('meta[name="codeact-token-header"]').content;
  const LIVE_OUTPUT_CHARS = 300000; // characters of live output one step shows on the page
  const $ = (id) => document.getElementById(id);

  // Numbers a benchmark or a test can read; nothing depends on them.
  // events: handled; handleMs/flushMs: main-thread time spent on them; last: when each type last arrived.
  const stats = window.codeactStats = { events: 0, handleMs: 0, maxHandleMs: 0, flushMs: 0, maxFlushMs: 0, last: {} };

  const follow = { on: true, programmatic: false };
  window.addEventListener('scroll', () => {
    if (follow.programmatic) { follow.programmatic = false; return; }
    const s = document.scrollingElement;
    follow.on = s.scrollHeight - s.scrollTop - s.clientHeight < 120;
  }, { passive: true });

  const state = {
    settings: {},
    sessions: new Map(), // id -> {id, title, busy, view, el, lastSeq}
    current: null,
    source: null,
    historyRun: null,
    viewedRun: null, // the History run on screen: the Files panel shows its files, not the session's
    mode: 'message', // the composer: a message to the agent, or code of the analyst's own
  };

  // --------------------------------------------------------------------------- small helpers

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function fmtBytes(n) {
    if (n === null || n === undefined) return '';
    if (n < 1024) return `${n} B`;
    const units = ['kB', 'MB', 'GB'];
    let v = n / 1024, i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
    return `${v.toFixed(1)} ${units[i]}`;
  }

  function fmtSeconds(s) {
    if (s === null || s === undefined) return '';
    if (s < 1) return `${Math.round(s * 1000)} ms`;
    if (s < 60) return `${s.toFixed(1)} s`;
    return `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, '0')}s`;
  }

  function fmtTime(t) {
    if (!t) return '';
    const d = new Date(t * 1000);
    return d.toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
  }

  function encodePath(path) {
    return String(path).split('/').map(encodeURIComponent).join('/');
  }

  async function api(path, { method = 'GET', json, body, headers = {} } = {}) {
    const init = { method, headers: { [TOKEN_HEADER]: TOKEN, ...headers }, credentials: 'same-origin' };
    if (json !== undefined) {
      init.body = JSON.stringify(json);
      init.headers['Content-Type'] = 'application/json';
    } else if (body !== undefined) {
      init.body = body;
    }
    const response = await fetch(path, init);
    const type = response.headers.get('content-type') || '';
    const data = type.includes('application/json') ? await response.json() : await response.text();
    if (!response.ok) {
      const message = (data && data.error) || (typeof data === 'string' ? data : `HTTP ${response.status}`);
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    return data;
  }

  let bannerTimer = null;
  function banner(message, kind = 'error') {
    const b = $('banner');
    b.textContent = message;
    b.className = `banner ${kind}`;
    b.hidden = false;
    clearTimeout(bannerTimer);
    bannerTimer = setTimeout(() => { b.hidden = true; }, kind === 'error' ? 12000 : 5000);
  }

  const PURIFY = {
    FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'option', 'iframe', 'frame',
      'frameset', 'object', 'embed', 'link', 'meta', 'base', 'svg', 'math', 'dialog', 'template'],
    FORBID_ATTR: ['style', 'srcset', 'action', 'formaction', 'background', 'ping'],
    ALLOW_DATA_ATTR: false,
    RETURN_DOM_FRAGMENT: true,
  };
  let purifyReady = false;
  function sanitizedFragment(html) {
    if (!window.DOMPurify || !window.DOMPurify.isSupported) return null; // never insert unsanitised HTML
    if (!purifyReady) {
      window.DOMPurify.addHook('afterSanitizeAttributes', (node) => {
        if (node.tagName === 'A') {
          node.setAttribute('target', '_blank');
          node.setAttribute('rel', 'noopener noreferrer');
        }
      });
      purifyReady = true;
    }
    return window.DOMPurify.sanitize(String(html), PURIFY);
  }

  function highlight(codeEl) {
    if (window.Prism && window.Prism.languages && window.Prism.languages.python) {
      window.Prism.highlightElement(codeEl);
    }
  }

  // Split streamed model text into prose and fenced code (an open fence runs to the end).
  function segments(text) {
    const parts = [];
    const fence = /^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*$/gm;
    let pos = 0, open = null, m;
    while ((m = fence.exec(text)) !== null) {
      if (open === null) {
        if (m.index > pos) parts.push({ kind: 'prose', text: text.slice(pos, m.index) });
        open = { ticks: m[1], lang: (m[2] || '').toLowerCase(), start: m.index + m[0].length + 1 };
      } else if (m[1].startsWith(open.ticks[0]) && m[1].length >= open.ticks.length && !m[2]) {
        parts.push({ kind: 'code', lang: open.lang, text: text.slice(open.start, m.index).replace(/\n$/, '') });
        pos = m.index + m[0].length + 1;
        open = null;
      }
    }
    if (open !== null) parts.push({ kind: 'code', lang: open.lang, text: text.slice(open.start) });
    else if (pos < text.length) parts.push({ kind: 'prose', text: text.slice(pos) });
    return parts;
  }

  function codeBlock(code, lang = 'python') {
    const pre = el('pre', 'code');
    const c = el('code', `language-${['python', 'py', 'python3', 'ipython', ''].includes(lang) ? 'python' : 'none'}`);
    c.textContent = code;
    pre.appendChild(c);
    highlight(c);
    return pre;
  }

  // A skill save to approve: its whole code and the diff against the skill it replaces, as text (scrollable).
  function skillBox(skill) {
    const box = el('div', 'skill');
    box.appendChild(el('div', 'skill-title',
      `${skill.replaces ? 'Replace' : 'Save'} skill ${skill.name}${skill.signature} in ${skill.store}`));
    if (skill.docstring) box.appendChild(el('pre', 'skill-doc', skill.docstring));
    box.appendChild(el('div', 'label', 'Code'));
    const code = codeBlock(skill.code);
    code.classList.add('skill-code');
    box.appendChild(code);
    if (skill.diff) {
      box.appendChild(el('div', 'label', 'Changes from the saved skill'));
      const diff = el('pre', 'skill-diff');
      for (const line of String(skill.diff).split('\n')) {
        const cls = line.startsWith('+') && !line.startsWith('+++') ? 'add'
          : line.startsWith('-') && !line.startsWith('---') ? 'del' : line.startsWith('@@') ? 'hunk' : null;
        diff.appendChild(el('span', cls, `${line}\n`));
      }
      box.appendChild(diff);
    }
    return box;
  }

  // --------------------------------------------------------------------------- a conversation view

  class View {
    constructor(root, { readOnly = false, sessionId = null } = {}) {
      this.root = root;
      this.readOnly = readOnly;
      this.sessionId = sessionId;
      this.turns = new Map();
      this.approvals = new Map();
      this.dirty = new Set();
      this.frame = null;
      this.lastTurn = null;
    }

    clear() {
      this.root.textContent = '';
      this.turns.clear();
      this.approvals.clear();
      this.dirty.clear();
      this.lastTurn = null;
    }

    // The page follows new output while the reader is at the bottom; scrolling up stops that.
    nearBottom() { return follow.on; }

    scrollDown() {
      if (this.root.offsetParent === null) return; // hidden (another tab)
      follow.programmatic = true;
      document.scrollingElement.scrollTop = document.scrollingElement.scrollHeight;
    }

    turn(runId) {
      let t = this.turns.get(runId);
      if (!t) {
        const node = el('article', 'turn');
        node.dataset.run = runId || '';
        this.root.appendChild(node);
        t = { el: node, steps: new Map(), runId };
        this.turns.set(runId, t);
      }
      this.lastTurn = t;
      return t;
    }

    step(ev) {
      const t = this.turn(ev.run_id);
      let s = t.steps.get(ev.step);
      if (!s) {
        const node = el('section', 'step');
        node.dataset.step = ev.step;
        const head = el('div', 'step-head');
        head.appendChild(el('span', 'step-label', t.user ? 'Your code' : `Step ${ev.step}`));
        s = { el: node, head, meta: el('span', 'step-meta'), raw: '', model: null, streaming: null,
          code: null, tools: null, output: null, outputChars: 0, outputCut: false, pending: [],
          sawLive: false, prose: null };
        head.appendChild(s.meta);
        node.appendChild(head);
        const answer = t.el.querySelector(':scope > .answer, :scope > .run-status');
        t.el.insertBefore(node, answer);
        t.steps.set(ev.step, s);
      }
      return s;
    }

    part(s, key, tag, cls) {
      if (!s[key]) {
        s[key] = el(tag, cls);
        s.el.appendChild(s[key]);
      }
      return s[key];
    }

    schedule(s) {
      this.dirty.add(s);
      if (this.frame === null) this.frame = requestAnimationFrame(() => this.flush());
    }

    // Streamed text and live output are applied once per frame, however many events arrived.
    flush() {
      const started = performance.now();
      const stick = this.nearBottom();
      this.frame = null;
      for (const s of this.dirty) {
        if (s.streaming !== null) this.renderStreaming(s);
        if (s.pending.length) this.appendOutput(s);
      }
      this.dirty.clear();
      if (stick) this.scrollDown();
      const spent = performance.now() - started;
      stats.flushMs += spent;
      stats.maxFlushMs = Math.max(stats.maxFlushMs, spent);
    }

    renderStreaming(s) {
      const box = s.streaming;
      box.textContent = '';
      for (const part of segments(s.raw)) {
        if (part.kind === 'prose') {
          if (part.text.trim()) box.appendChild(el('div', 'prose', part.text.trim()));
        } else {
          box.appendChild(codeBlock(part.text, part.lang));
        }
      }
    }

    appendOutput(s) {
      const pre = this.part(s, 'output', 'pre', 'live-output');
      for (const [stream, text] of s.pending) {
        if (s.outputCut) break;
        let chunk = text;
        if (s.outputChars + chunk.length > LIVE_OUTPUT_CHARS) {
          chunk = chunk.slice(0, Math.max(0, LIVE_OUTPUT_CHARS - s.outputChars));
          s.outputCut = true;
        }
        s.outputChars += chunk.length;
        const last = pre.lastChild;
        if (last && last.dataset && last.dataset.stream === stream) {
          last.firstChild.appendData(chunk);
        } else {
          const span = el('span', stream, chunk);
          span.dataset.stream = stream;
          pre.appendChild(span);
        }
      }
      if (s.outputCut && !s.el.querySelector('.output-cut')) {
        s.el.insertBefore(el('div', 'note output-cut',
          `Output shown up to ${LIVE_OUTPUT_CHARS.toLocaleString()} characters; "What the model saw" keeps its head and tail.`),
        pre.nextSibling);
      }
      s.pending = [];
    }

    handle(ev) {
      const started = performance.now();
      const stick = this.nearBottom();
      const method = this[`on${ev.type}`];
      if (method) method.call(this, ev);
      if (stick) this.scrollDown();
      const spent = performance.now() - started;
      stats.events += 1;
      stats.last[ev.type] = started;
      stats.handleMs += spent;
      stats.maxHandleMs = Math.max(stats.maxHandleMs, spent);
    }

    note(text, cls = 'note') {
      const target = this.lastTurn ? this.lastTurn.el : this.root;
      target.appendChild(el('div', cls, text));
    }

    // --- agent events

    onRunStarted(ev) {
      const t = this.turn(ev.run_id);
      if (ev.agent === 'user') { // the analyst's own code: the step below shows it
        t.user = true;
        t.el.classList.add('user-run');
        const user = el('div', 'user-msg user-code');
        user.appendChild(el('div', 'who', 'You ran code in the session'));
        user.appendChild(el('div', 'hint', 'The model is told what you ran and what it showed with your next message.'));
        t.el.appendChild(user);
        t.el.appendChild(el('div', 'turn-meta', `your code · ${ev.backend} · run ${ev.run_id}`));
      } else {
        const user = el('div', 'user-msg');
        user.appendChild(el('div', 'who', 'You'));
        user.appendChild(el('div', 'text', ev.task));
        if (ev.files && ev.files.length) user.appendChild(el('div', 'files-note', `Files: ${ev.files.join(', ')}`));
        t.el.appendChild(user);
        t.el.appendChild(el('div', 'turn-meta', `${ev.model} · ${ev.backend} · run ${ev.run_id}`));
      }
      if (!this.readOnly) setBusy(this.sessionId, true);
    }

    onTextDelta(ev) {
      const s = this.step(ev);
      if (s.streaming === null) {
        s.model = this.part(s, 'model', 'div', 'model');
        s.streaming = el('div', 'streaming');
        s.model.appendChild(s.streaming);
      }
      s.raw += ev.text;
      this.schedule(s);
    }

    onModelOutput(ev) {
      const s = this.step(ev);
      const model = this.part(s, 'model', 'div', 'model');
      model.textContent = '';
      s.streaming = null;
      s.raw = ev.text;
      if (ev.prose && ev.prose.trim()) {
        s.prose = el('div', 'prose', ev.prose.trim());
        model.appendChild(s.prose);
      }
      const tokens = ev.output_tokens ? ` · ${ev.input_tokens} in / ${ev.output_tokens} out tokens` : '';
      s.meta.textContent = `model ${fmtSeconds(ev.duration)}${tokens}`;
    }

    onCodeAction(ev) {
      const s = this.step(ev);
      if (s.code) s.code.remove();
      s.code = codeBlock(ev.code);
      s.code.classList.add('action', 'running');
      s.el.appendChild(s.code);
    }

    onCodeOutput(ev) {
      const s = this.step(ev);
      s.sawLive = true;
      s.pending.push([ev.stream, ev.text]);
      this.schedule(s);
    }

    toolCard(ev) {
      const card = el('div', 'tool-call');
      const call = el('div', 'call');
      call.appendChild(el('span', 'tool-name', ev.tool || ev.name));
      const args = Object.entries(ev.arguments || {}).map(([k, v]) => `${k}=${v}`).join(', ');
      call.appendChild(el('span', 'tool-args', `(${args})`));
      card.appendChild(call);
      if (ev.skill) card.appendChild(skillBox(ev.skill));
      return card;
    }

    onToolCall(ev) {
      const s = this.step(ev);
      const box = this.part(s, 'tools', 'div', 'tools');
      const card = this.toolCard(ev);
      if (ev.error) {
        card.classList.add('failed');
        card.appendChild(el('div', 'tool-error', `✗ ${ev.error}`));
      } else {
        card.appendChild(el('div', 'tool-result', `→ ${ev.result}`));
      }
      card.appendChild(el('span', 'duration', fmtSeconds(ev.duration)));
      if (ev.child_run_id) {
        // An agent called as a tool: its run is a block of its own, folded (`codeact logs show <id>`).
        const child = el('details', 'child-run');
        child.appendChild(el('summary', null, `child run ${ev.child_run_id} (${ev.name}): ${ev.child_status}`));
        child.appendChild(card);
        box.appendChild(child);
        return;
      }
      box.appendChild(card);
    }

    onNetworkRequest(ev) {
      // A request the code made through the sandbox's network allow-list (its proxy on the host).
      const s = this.step(ev);
      const box = this.part(s, 'tools', 'div', 'tools');
      const card = el('div', 'tool-call network');
      const call = el('div', 'call');
      call.appendChild(el('span', 'tool-name', `${ev.method} ${ev.host}:${ev.port ?? ''}`));
      card.appendChild(call);
      if (ev.allowed) {
        card.appendChild(el('div', 'tool-result', `→ ${ev.status ?? 'no answer'}`));
      } else {
        card.classList.add('failed');
        card.appendChild(el('div', 'tool-error', `✗ refused: ${ev.reason || ev.status}`));
      }
      if (ev.duration != null) card.appendChild(el('span', 'duration', fmtSeconds(ev.duration)));
      box.appendChild(card);
    }

    // An approval's card goes in its run's step; an agent called as a tool (a child run, with no turn of its own
    // on the page) asks in the step of the running turn that called it, not in a turn of its own.
    approvalStep(ev) {
      const steps = !this.turns.has(ev.run_id) && this.lastTurn ? [...this.lastTurn.steps.values()] : [];
      return steps.length ? steps[steps.length - 1] : this.step(ev);
    }

    onApprovalRequested(ev) {
      const s = this.approvalStep(ev);
      const box = this.part(s, 'tools', 'div', 'tools');
      const card = this.toolCard(ev);
      card.classList.add('approval', 'pending');
      card.dataset.approval = ev.id;
      const asker = ev.agent ? ` (asked by the agent ${ev.agent})` : '';
      card.insertBefore(el('div', 'approval-title', `This tool call needs your approval${asker}`), card.firstChild);
      const buttons = el('div', 'approval-buttons');
      const yes = el('button', 'approve primary', 'Approve');
      const no = el('button', 'deny danger', 'Deny');
      yes.type = no.type = 'button';
      const decide = async (allow) => {
        yes.disabled = no.disabled = true;
        try {
          await api(`/api/sessions/${this.sessionId}/approvals/${encodeURIComponent(ev.id)}`,
            { method: 'POST', json: { allow } });
        } catch (err) {
          banner(err.message);
        }
      };
      yes.addEventListener('click', () => decide(true));
      no.addEventListener('click', () => decide(false));
      buttons.append(yes, no);
      if (this.readOnly) buttons.hidden = true;
      card.appendChild(buttons);
      box.appendChild(card);
      this.approvals.set(ev.id, card);
    }

    onApprovalResolved(ev) {
      let card = this.approvals.get(ev.id);
      if (!card) {
        const s = this.approvalStep(ev);
        card = this.toolCard(ev);
        card.classList.add('approval');
        this.part(s, 'tools', 'div', 'tools').appendChild(card);
      }
      card.classList.remove('pending');
      card.classList.add(ev.allowed ? 'approved' : 'denied');
      const buttons = card.querySelector('.approval-buttons');
      if (buttons) buttons.remove();
      const title = card.querySelector('.approval-title');
      if (title) title.remove();
      card.appendChild(el('div', 'approval-result', ev.allowed ? `✓ ${ev.reason}` : `✗ ${ev.reason}`));
    }

    onObservation(ev) {
      const s = this.step(ev);
      if (s.pending.length) this.appendOutput(s);
      if (s.code) s.code.classList.remove('running');
      if (!s.sawLive && (ev.stdout || ev.stderr)) {
        if (ev.stdout) s.pending.push(['stdout', ev.stdout]);
        if (ev.stderr) s.pending.push(['stderr', ev.stderr]);
        this.appendOutput(s);
      }
      const outputs = ev.outputs || [];
      if (outputs.length) {
        const box = el('div', 'outputs');
        for (const item of outputs) box.appendChild(this.richOutput(item));
        s.el.appendChild(box);
      }
      if (ev.error) {
        const details = el('details', 'error');
        details.appendChild(el('summary', null, ev.error));
        if (ev.traceback) details.appendChild(el('pre', 'traceback', ev.traceback));
        s.el.appendChild(details);
      }
      if (ev.artifacts && ev.artifacts.length) {
        const list = el('div', 'artifacts');
        list.appendChild(el('span', 'label', 'Saved: '));
        for (const name of ev.artifacts) {
          const a = el('a', 'artifact', name);
          a.href = `/api/runs/${encodeURIComponent(ev.run_id)}/artifacts/${encodePath(name)}`;
          a.setAttribute('download', '');
          list.appendChild(a);
        }
        s.el.appendChild(list);
      }
      if (!this.readOnly) refreshVariables();
      const seen = el('details', 'observation');
      seen.appendChild(el('summary', null, `${this.turn(ev.run_id).user ? 'What the model will be told' : 'What the model saw'} (${ev.text.length.toLocaleString()} characters${ev.truncated ? ', cut' : ''}) · ran ${fmtSeconds(ev.duration)}`));
      seen.appendChild(el('pre', null, ev.text));
      s.el.appendChild(seen);
    }

    richOutput(item) {
      if (item.kind === 'image') {
        const fig = el('figure', 'figure');
        const img = el('img', item.mime === 'image/svg+xml' ? 'plot svg' : 'plot');
        img.alt = item.alt || 'plot';
        img.decoding = 'async';
        img.addEventListener('load', () => { if (follow.on && !this.readOnly) this.scrollDown(); });
        // Bytes the browser cannot decode (a broken image from the sandbox): say so instead of a broken icon.
        img.addEventListener('error', () => {
          fig.replaceChildren(el('div', 'note image-unshown', `${item.mime} not shown: the browser could not load or decode it`));
        });
        img.src = item.src;
        fig.appendChild(img);
        return fig;
      }
      if (item.kind === 'unshown') return el('div', 'note image-unshown', item.reason);
      if (item.kind === 'html') {
        const box = el('div', 'html-output');
        const fragment = sanitizedFragment(item.html);
        if (fragment) {
          box.appendChild(fragment);
        } else {
          box.appendChild(el('pre', null, item.text || item.html));
        }
        return box;
      }
      return el('pre', 'text-output', item.text);
    }

    onFinalAnswer(ev) {
      const t = this.turn(ev.run_id);
      const box = el('div', 'answer');
      const answer = ev.answer || {};
      let who = ev.status === 'success' ? 'Answer' : 'Best answer (step limit reached)';
      if (typeof answer.json === 'string') {
        who = ev.status === 'success' ? `Answer (JSON, valid against ${answer.schema})`
          : `Last answer (${ev.status}: does NOT match ${answer.schema})`;
      }
      box.appendChild(el('div', 'who', who));
      const fragment = answer.html ? sanitizedFragment(answer.html) : null;
      if (typeof answer.json === 'string') {
        box.appendChild(el('pre', 'json-answer', answer.json)); // text, never markup
      } else if (fragment) {
        const table = el('div', 'html-output');
        table.appendChild(fragment);
        box.appendChild(table);
      } else {
        box.appendChild(el('div', 'text', answer.text));
      }
      // A reply without code is the answer itself: do not show it twice.
      const last = [...t.steps.values()].pop();
      if (last && !last.code && !last.tools && last.prose && last.prose.textContent === (answer.text || '').trim()) {
        last.el.remove();
      }
      t.el.appendChild(box);
    }

    onErrorEvent(ev) {
      const target = ev.step ? this.step(ev).el : this.turn(ev.run_id).el;
      const box = el('div', ev.fatal ? 'error-event fatal' : 'error-event', ev.message);
      target.appendChild(box);
    }

    onCompacted(ev) {
      const target = this.turn(ev.run_id).el;
      target.appendChild(el('div', 'compacted', ev.text || 'earlier turns condensed'));
    }

    onRunFinished(ev) {
      const t = this.turn(ev.run_id);
      for (const s of t.steps.values()) if (s.code) s.code.classList.remove('running');
      const line = el('div', `run-status ${ev.status}`);
      const icon = { success: '✔', max_steps: '●', cancelled: '■', error: '✘' }[ev.status] || '…';
      const tokens = ev.output_tokens ? ` · ${ev.input_tokens} in / ${ev.output_tokens} out tokens` : '';
      const steps = t.user ? 'your code' : `${ev.steps} step${ev.steps === 1 ? '' : 's'}`;
      line.appendChild(el('span', null, `${icon} ${ev.status} · ${steps} · ${fmtSeconds(ev.duration)}${tokens}`));
      if (ev.error && ev.status !== 'success') line.appendChild(el('span', 'run-error', ` — ${ev.error}`));
      if (state.settings.history && ev.run_id && !this.readOnly) {
        const open = el('button', 'link', 'Open in History');
        open.type = 'button';
        open.addEventListener('click', () => openRun(ev.run_id));
        line.appendChild(open);
      }
      t.el.appendChild(line);
    }

    // --- UI events

    onIdle() {
      if (!this.readOnly) {
        setBusy(this.sessionId, false);
        refreshFiles();
        refreshVariables();
      }
    }

    onKernelRestarted(ev) {
      this.note(ev.message, 'note warning restart');
      if (!this.readOnly) refreshVariables();
    }

    onNotice(ev) { this.note(ev.message); }

    onFileUploaded(ev) {
      this.note(`Uploaded ${ev.name} (${fmtBytes(ev.size)}) to ${ev.path}`, 'note upload');
      refreshFiles();
    }

    onSandboxFreed(ev) { this.note(ev.message, 'note warning'); refreshFiles(); refreshVariables(); }

    onSessionClosed(ev) { this.note(`Session closed: ${ev.message}`, 'note warning'); }

    onGap(ev) { this.root.insertBefore(el('div', 'note warning', ev.message), this.root.firstChild); }
  }

  // --------------------------------------------------------------------------- sessions and the stream

  function setBusy(sid, busy) {
    const s = state.sessions.get(sid);
    if (s) s.busy = busy;
    if (sid === state.current) {
      $('send').disabled = busy;
      $('run-cell').disabled = busy;
      $('restart-kernel').disabled = busy;
      $('stop').disabled = !busy;
    }
    renderTabs();
  }

  function renderTabs() {
    const tabs = $('tabs');
    tabs.textContent = '';
    for (const s of state.sessions.values()) {
      const tab = el('div', `tab${s.id === state.current ? ' active' : ''}${s.busy ? ' busy' : ''}`);
      tab.setAttribute('role', 'tab');
      tab.dataset.session = s.id;
      const label = el('button', 'tab-label', s.title);
      label.type = 'button';
      label.addEventListener('click', () => selectSession(s.id));
      const close = el('button', 'tab-close', '×');
      close.type = 'button';
      close.title = 'Close this session (frees its sandbox)';
      close.addEventListener('click', (e) => { e.stopPropagation(); closeSession(s.id); });
      tab.append(label, close);
      tabs.appendChild(tab);
    }
  }

  function ensureLocal(summary) {
    let s = state.sessions.get(summary.id);
    if (!s) {
      const root = el('div', 'conversation');
      root.dataset.session = summary.id;
      root.hidden = true;
      $('conversations').appendChild(root);
      s = { id: summary.id, title: summary.title, busy: summary.busy, el: root, lastSeq: 0 };
      s.view = new View(root, { sessionId: summary.id });
      state.sessions.set(summary.id, s);
    } else {
      s.title = summary.title;
      s.busy = summary.busy;
    }
    return s;
  }

  async function loadSessions() {
    const data = await api('/api/sessions');
    const seen = new Set();
    for (const summary of data.sessions) {
      ensureLocal(summary);
      seen.add(summary.id);
    }
    for (const [id, s] of state.sessions) {
      if (!seen.has(id)) {
        s.el.remove();
        state.sessions.delete(id);
      }
    }
    renderTabs();
    return data.sessions;
  }

  function connect(s) {
    if (state.source) state.source.close();
    const source = new EventSource(`/api/sessions/${s.id}/events?after=${s.lastSeq}`);
    state.source = source;
    const indicator = $('connection');
    source.onopen = () => { indicator.textContent = ''; indicator.className = 'connection'; };
    source.onmessage = (message) => {
      let ev;
      try { ev = JSON.parse(message.data); } catch (err) { return; }
      if (typeof ev.seq === 'number') {
        if (ev.seq <= s.lastSeq) return; // already shown (a replay after reconnecting)
        s.lastSeq = ev.seq;
      }
      s.view.handle(ev);
    };
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        indicator.textContent = 'disconnected';
        indicator.className = 'connection lost';
        setTimeout(() => { if (state.source === source) reconnect(); }, 2000);
      } else {
        indicator.textContent = 'reconnecting…';
        indicator.className = 'connection lost';
      }
    };
  }

  async function reconnect() {
    try {
      await loadSessions();
    } catch (err) {
      setTimeout(reconnect, 3000);
      return;
    }
    if (state.current && state.sessions.has(state.current)) {
      connect(state.sessions.get(state.current));
    } else {
      await pickSession();
    }
  }

  function selectSession(sid) {
    const s = state.sessions.get(sid);
    if (!s) return;
    showHistoryView(false);
    for (const other of state.sessions.values()) other.el.hidden = other.id !== sid;
    state.current = sid;
    if (location.hash !== `#${sid}`) history.replaceState(null, '', `#${sid}`);
    $('send').disabled = s.busy;
    $('run-cell').disabled = s.busy;
    $('restart-kernel').disabled = s.busy;
    $('stop').disabled = !s.busy;
    renderTabs();
    connect(s);
    refreshFiles();
    refreshVariables();
    sessionChosen();
  }

  async function createSession() {
    try {
      const summary = await api('/api/sessions', { method: 'POST' });
      ensureLocal(summary);
      selectSession(summary.id);
      $('message').focus();
    } catch (err) {
      banner(err.message);
    }
  }

  async function closeSession(sid) {
    try {
      await api(`/api/sessions/${sid}`, { method: 'DELETE' });
    } catch (err) {
      banner(err.message);
    }
    const s = state.sessions.get(sid);
    if (s) {
      s.el.remove();
      state.sessions.delete(sid);
    }
    if (state.current === sid) {
      if (state.source) state.source.close();
      state.current = null;
      await pickSession();
    } else {
      renderTabs();
    }
  }

  async function pickSession() {
    const sessions = await loadSessions();
    const wanted = location.hash.slice(1);
    if (wanted && state.sessions.has(wanted)) return selectSession(wanted);
    if (sessions.length) return selectSession(sessions[0].id);
    return createSession();
  }

  // A message sent while the page is still starting (no session chosen yet) waits for the session
  // instead of being dropped; its events are replayed from the start of the session's stream.
  let sessionChosen;
  const sessionReady = new Promise((resolve) => { sessionChosen = resolve; });
  let sending = false;

  async function send() {
    const box = $('message');
    const text = box.value;
    if (!text.trim() || sending) return;
    sending = true;
    $('send').disabled = true;
    try {
      if (!state.current) await sessionReady;
      const sid = state.current;
      $('send').disabled = true; // choosing the session enabled it again
      const schema = $('output-schema').value.trim(); // while the box holds a schema, every answer is typed
      await api(`/api/sessions/${sid}/messages`, { method: 'POST', json: schema ? { text, output_schema: schema } : { text } });
      // Busy comes from the stream (RunStarted, then Idle): a short turn may be over already.
      if (box.value === text) box.value = '';
      loadSessions().catch(() => {});
    } catch (err) {
      banner(err.message);
      $('send').disabled = false;
    } finally {
      sending = false;
    }
  }

  // The analyst's own code: run in the session's kernel like a code action (same limits, output, Stop).
  let running = false;
  async function runCell() {
    const box = $('cell');
    const code = box.value;
    if (!code.trim() || running) return;
    running = true;
    $('run-cell').disabled = true;
    try {
      if (!state.current) await sessionReady;
      const sid = state.current;
      $('run-cell').disabled = true;
      await api(`/api/sessions/${sid}/run`, { method: 'POST', json: { code } });
      loadSessions().catch(() => {}); // the code stays in the cell, as in a notebook
    } catch (err) {
      banner(err.message);
      $('run-cell').disabled = false;
    } finally {
      running = false;
    }
  }

  function setMode(mode) {
    state.mode = mode;
    const code = mode === 'code';
    $('message').hidden = code;
    $('send').hidden = code;
    $('cell').hidden = !code;
    $('run-cell').hidden = !code;
    $('schema-box').hidden = code; // the analyst's code has no answer to type
    for (const [id, on] of [['mode-message', !code], ['mode-code', code]]) {
      $(id).classList.toggle('active', on);
      $(id).setAttribute('aria-selected', String(on));
    }
    $(code ? 'cell' : 'message').focus();
  }

  async function restartKernel() {
    const sid = state.current;
    $('restart-dialog').close();
    if (!sid) return;
    $('restart-kernel').disabled = true;
    try {
      const data = await api(`/api/sessions/${sid}/restart`, { method: 'POST', json: {} });
      if (!data.restarted) banner('This session has no kernel yet: it starts with the first message or code.', 'info');
    } catch (err) {
      banner(err.message);
    } finally {
      const s = state.sessions.get(sid);
      if (sid === state.current) $('restart-kernel').disabled = Boolean(s && s.busy);
      refreshVariables();
    }
  }

  // --------------------------------------------------------------------------- variables

  // Names, types and reprs come from the kernel (hostile): bounded by the server, set here as text only.
  let variablesRequest = 0;
  let variablesTimer = null;
  function refreshVariables() {
    if (variablesTimer !== null) return; // many steps in a burst (a replay): one request
    variablesTimer = setTimeout(() => { variablesTimer = null; loadVariables(); }, 50);
  }

  async function loadVariables() {
    const sid = state.current;
    if (!sid) return;
    const mine = ++variablesRequest;
    let data;
    try {
      data = await api(`/api/sessions/${sid}/variables`);
    } catch (err) {
      return;
    }
    if (mine !== variablesRequest || sid !== state.current) return;
    const table = $('variables-table');
    table.textContent = '';
    const vars = data.variables || [];
    if (vars.length) {
      const head = el('tr');
      for (const h of ['Name', 'Type', 'Value']) head.appendChild(el('th', null, h));
      table.appendChild(head);
    }
    for (const v of vars) {
      const row = el('tr', 'variable');
      const value = el('td', 'var-repr', v.repr);
      value.title = v.repr;
      row.append(el('td', 'var-name', v.name), el('td', 'var-type', v.type), value);
      table.appendChild(row);
    }
    const note = $('variables-note');
    if (data.error) note.textContent = data.error;
    else if (!data.sandbox_open) note.textContent = 'No kernel yet: it starts with the first message or code.';
    else if (!vars.length) note.textContent = 'No variables.';
    else if (data.total > vars.length) note.textContent = `Showing ${vars.length} of ${data.total}.`;
    else note.textContent = '';
    note.hidden = !note.textContent;
  }

  async function stop() {
    if (!state.current) return;
    try {
      await api(`/api/sessions/${state.current}/stop`, { method: 'POST' });
    } catch (err) {
      banner(err.message);
    }
  }

  // --------------------------------------------------------------------------- files

  let filesRequest = 0;
  async function refreshFiles() {
    if (state.viewedRun) return refreshRunFiles(state.viewedRun);
    const sid = state.current;
    if (!sid) return;
    const mine = ++filesRequest;
    let data;
    try {
      data = await api(`/api/sessions/${sid}/files`);
    } catch (err) {
      return;
    }
    if (mine !== filesRequest || sid !== state.current || state.viewedRun) return;
    $('files-title').textContent = 'Files';
    $('files-run-note').hidden = true;
    $('session-files').hidden = false;
    const ws = $('workspace-files');
    ws.textContent = '';
    for (const f of data.workspace) {
      ws.appendChild(fileItem(f.path, f.size, `/api/sessions/${sid}/files/${encodePath(f.path)}`));
    }
    for (const name of data.pending) {
      const li = el('li', 'pending', name);
      li.title = 'Copied into the sandbox with the first message';
      ws.appendChild(li);
    }
    const note = $('workspace-note');
    note.hidden = !(data.stale || (!data.workspace.length && !data.pending.length));
    note.textContent = data.stale ? 'Code is running: this list is from before the turn.'
      : 'Empty. Drop files here, or the sandbox opens with the first message.';
    const art = $('artifact-files');
    art.textContent = '';
    for (const f of data.artifacts) {
      art.appendChild(fileItem(f.path, f.size,
        `/api/runs/${encodeURIComponent(f.run_id)}/artifacts/${encodePath(f.path)}`, f.run_id));
    }
    if (!data.artifacts.length) art.appendChild(el('li', 'hint', 'None yet.'));
  }

  // A History run on screen: its own artifacts (the session's workspace is not that run's).
  async function refreshRunFiles(runId) {
    const mine = ++filesRequest;
    let data;
    try {
      data = await api(`/api/runs/${encodeURIComponent(runId)}/files`);
    } catch (err) {
      data = { artifacts: [] };
    }
    if (mine !== filesRequest || state.viewedRun !== runId) return;
    $('files-title').textContent = `Files of run ${runId}`;
    const note = $('files-run-note');
    note.textContent = 'The run you are viewing in History. Its sandbox\'s working directory is not kept; these are the files it saved.';
    note.hidden = false;
    $('session-files').hidden = true;
    const art = $('artifact-files');
    art.textContent = '';
    for (const f of data.artifacts) {
      art.appendChild(fileItem(f.path, f.size,
        `/api/runs/${encodeURIComponent(f.run_id)}/artifacts/${encodePath(f.path)}`, f.run_id));
    }
    if (!data.artifacts.length) art.appendChild(el('li', 'hint', 'This run saved no files.'));
  }

  function fileItem(path, size, href, runId) {
    const li = el('li');
    const a = el('a', 'download', path);
    a.href = href;
    a.setAttribute('download', '');
    a.title = runId ? `Run ${runId}` : 'Download';
    li.append(a, el('span', 'size', fmtBytes(size)));
    return li;
  }

  async function upload(files) {
    const sid = state.current;
    if (!sid) return;
    const limit = state.settings.upload_limit || Infinity;
    for (const file of files) {
      if (file.size > limit) {
        banner(`${file.name} is ${fmtBytes(file.size)}; the upload limit is ${fmtBytes(limit)}.`);
        continue;
      }
      banner(`Uploading ${file.name}…`, 'info');
      try {
        await api(`/api/sessions/${sid}/files/${encodeURIComponent(file.name)}`,
          { method: 'PUT', body: file, headers: { 'Content-Type': 'application/octet-stream' } });
        $('banner').hidden = true;
      } catch (err) {
        banner(err.message);
      }
    }
    refreshFiles();
  }

  function setUpDrop() {
    const overlay = $('drop-overlay');
    let depth = 0;
    const hasFiles = (e) => e.dataTransfer && [...e.dataTransfer.types].includes('Files');
    window.addEventListener('dragenter', (e) => {
      if (!hasFiles(e)) return;
      e.preventDefault();
      depth += 1;
      overlay.hidden = false;
    });
    window.addEventListener('dragover', (e) => { if (hasFiles(e)) e.preventDefault(); });
    window.addEventListener('dragleave', () => {
      depth = Math.max(0, depth - 1);
      if (!depth) overlay.hidden = true;
    });
    window.addEventListener('drop', (e) => {
      if (!hasFiles(e)) return;
      e.preventDefault();
      depth = 0;
      overlay.hidden = true;
      upload([...e.dataTransfer.files]);
    });
    $('file-input').addEventListener('change', (e) => {
      upload([...e.target.files]);
      e.target.value = '';
    });
  }

  // --------------------------------------------------------------------------- history and settings

  function showHistoryView(show) {
    $('history-view').hidden = !show;
    $('conversations').hidden = show;
    $('composer').hidden = show;
    $('variables-panel').hidden = show; // the live session's kernel, not the viewed run's
    if (!show && state.viewedRun) {
      state.viewedRun = null;
      refreshFiles();
    }
  }

  async function openHistory() {
    const dialog = $('history-dialog');
    const table = $('history-list');
    table.textContent = '';
    let data;
    try {
      data = await api('/api/runs');
    } catch (err) {
      banner(err.message);
      return;
    }
    const empty = $('history-empty');
    empty.hidden = data.enabled && data.runs.length > 0;
    empty.textContent = data.enabled ? 'No runs recorded yet.' : 'The run log is off (--no-log): there is no history.';
    const head = el('tr');
    for (const h of ['Started', 'Task', 'Status', 'Steps', 'Model']) head.appendChild(el('th', null, h));
    if (data.runs.length) table.appendChild(head);
    for (const run of data.runs) {
      const row = el('tr', `run ${run.status}${run.parent_run_id ? ' child' : ''}`);
      row.dataset.run = run.id;
      // An agent called as a tool: its run is listed under the run that called it.
      const task = run.parent_run_id ? `↳ ${run.agent} for run ${run.parent_run_id}: ${run.task}` : run.task;
      row.append(el('td', null, fmtTime(run.started)),
        el('td', 'task', run.agent === 'user' ? `Your code: ${run.task}` : task),
        el('td', 'status', run.resumable ? `${run.status} · saved` : run.status),
        el('td', null, run.steps), el('td', null, run.model || ''));
      row.addEventListener('click', () => { dialog.close(); openRun(run.id); });
      table.appendChild(row);
    }
    dialog.showModal();
  }

  async function openRun(runId) {
    let data;
    try {
      data = await api(`/api/runs/${encodeURIComponent(runId)}`);
    } catch (err) {
      banner(err.message);
      return;
    }
    state.historyRun = data.run.id;
    state.viewedRun = data.run.id;
    refreshFiles();
    const root = $('history-events');
    const view = new View(root, { readOnly: true });
    view.clear();
    $('history-title').textContent = `Run ${data.run.id} · ${data.run.status} · read-only`;
    $('history-notebook').href = `/api/runs/${encodeURIComponent(data.run.id)}/notebook`;
    $('history-script').href = `/api/runs/${encodeURIComponent(data.run.id)}/script?download=1`;
    $('history-resume').hidden = !data.run.resumable; // a saved session holds this run
    showHistoryView(true);
    for (const ev of data.events) view.handle(ev);
    view.flush();
    document.scrollingElement.scrollTop = 0;
  }

  // History's Resume: a new session restored from the saved session this run belongs to.
  async function resumeRun() {
    if (!state.historyRun) return;
    const button = $('history-resume');
    button.disabled = true;
    button.textContent = 'Restoring…';
    try {
      const summary = await api(`/api/runs/${encodeURIComponent(state.historyRun)}/resume`, { method: 'POST' });
      ensureLocal(summary);
      selectSession(summary.id);
      $('message').focus();
    } catch (err) {
      banner(err.message);
    } finally {
      button.disabled = false;
      button.textContent = 'Resume';
    }
  }

  async function copyRunCode() {
    if (!state.historyRun) return;
    try {
      const text = await api(`/api/runs/${encodeURIComponent(state.historyRun)}/script`);
      await navigator.clipboard.writeText(text);
      banner('The run\'s code is on the clipboard.', 'info');
    } catch (err) {
      banner(`Could not copy: ${err.message}. Use "Download .py" instead.`);
    }
  }

  async function openSettings() {
    const s = state.settings;
    const table = $('settings-table');
    table.textContent = '';
    const row = (key, value) => {
      const tr = el('tr');
      tr.append(el('th', null, key), el('td', null, value));
      table.appendChild(tr);
    };
    row('Model', s.model || '?');
    row('Endpoint', s.base_url || '—');
    row('Sandbox backend', s.backend || '?');
    row('Sandbox network', s.network && s.network.length ? `only ${s.network.join(', ')} (through a proxy on the host)` : 'none');
    const tools = (s.tools || []).map((t) => `${t.name}${t.requires_approval ? ' (asks for approval)' : ''}`);
    row('Tools', tools.length ? tools.join(', ') : 'none');
    const mcp = s.mcp_servers || [];
    row('MCP servers', mcp.length ? mcp.join(', ') : 'none');
    row('Max steps per turn', s.max_steps ?? '');
    row('Time limit per code action', s.timeout ? `${s.timeout} s` : '');
    row('Approvals', s.auto_approve ? 'every call approved automatically (--yes)' : 'asked on the page');
    row('Upload limit', fmtBytes(s.upload_limit));
    row('Sessions at once', s.max_sessions ?? '');
    row('Idle timeout', s.idle_timeout ? `${(s.idle_timeout / 60).toFixed(0)} min (then the sandbox is ${s.history ? 'saved and ' : ''}freed)` : '');
    row('Run log', s.db || 'off');
    row('Artifacts', s.output_dir || '');
    $('settings-dialog').showModal();
  }

  // --------------------------------------------------------------------------- start

  async function start() {
    for (const d of document.querySelectorAll('dialog')) {
      d.addEventListener('click', (e) => { if (e.target.matches('[data-close]')) d.close(); });
    }
    $('send').addEventListener('click', send);
    $('run-cell').addEventListener('click', runCell);
    $('mode-message').addEventListener('click', () => setMode('message'));
    $('mode-code').addEventListener('click', () => setMode('code'));
    $('restart-kernel').addEventListener('click', () => $('restart-dialog').showModal());
    $('restart-confirm').addEventListener('click', restartKernel);
    $('cell').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.shiftKey || e.ctrlKey || e.metaKey) && !e.isComposing) {
        e.preventDefault();
        if (!$('run-cell').disabled) runCell();
      }
    });
    $('stop').addEventListener('click', stop);
    $('new-session').addEventListener('click', createSession);
    $('show-history').addEventListener('click', openHistory);
    $('show-settings').addEventListener('click', openSettings);
    $('refresh-files').addEventListener('click', refreshFiles);
    $('history-back').addEventListener('click', () => showHistoryView(false));
    $('history-copy').addEventListener('click', copyRunCode);
    $('history-resume').addEventListener('click', resumeRun);
    $('output-schema').addEventListener('input', () => {
      $('schema-box').classList.toggle('active', $('output-schema').value.trim() !== '');
    });
    $('message').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        if (!$('send').disabled) send();
      }
    });
    setUpDrop();
    try {
      state.settings = await api('/api/settings');
    } catch (err) {
      banner(err.message);
    }
    $('upload-hint').textContent =
      `Drop files anywhere on the page to upload them to /workspace (at most ${fmtBytes(state.settings.upload_limit)} each).`;
    try {
      await pickSession();
    } catch (err) {
      banner(err.message);
    }
    document.body.dataset.ready = 'true';
  }

  start();
})();
