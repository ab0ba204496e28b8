// The web console's page (DESIGN §14): views behind hash routes (#/chat, #/actors,
// #/actor/<id>, #/graph, #/people and #/schedules for owners, #/secrets for members and owners,
// #/approvals for everyone),
// fed by the JSON API and the server-sent events of /api/events, which carry only what is for
// this page's person (DESIGN §13).
// No framework, no build step, no network beyond this server. Untrusted text (messages, files,
// logs) only ever becomes DOM text nodes: nothing here assigns innerHTML.
// The chat box is never rebuilt, so a reconnect or a restart of the world never loses what a
// person typed; its draft is also kept in sessionStorage for a reload of the page.
'use strict';

// ---------------------------------------------------------------------------------------------
// Small helpers.

const $ = (selector, root = document) => root.querySelector(selector);

/** An element with attributes (`class`, `data-*`, properties for the rest) and children
 * (strings become text nodes; null and false are skipped). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key.startsWith('data-') || key.startsWith('aria-') || key === 'role') {
      node.setAttribute(key, String(value));
    } else node[key] = value;
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  return append(node, children);
}

/** Shows `message` in `node`, or hides it when empty. A missing login is not shown here: the
 * banner says it, once for the whole page. */
function showError(node, message) {
  if (message === NOT_LOGGED_IN) message = '';
  node.textContent = message || '';
  node.hidden = !message;
}

function store(kind, key, value) {
  try {
    if (value === undefined) return window[kind].getItem(key);
    window[kind].setItem(key, value);
  } catch {
    // Storage may be off (private windows, policies): the page works without it.
  }
  return null;
}

// ---------------------------------------------------------------------------------------------
// The API: same-origin JSON; every change is a POST with a JSON body (the browser adds Origin).

const NOT_LOGGED_IN = 'not logged in: open the login link `sausage run` printed';

class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

/** Calls the API; answers the parsed JSON (or the text with `asText`), or throws an ApiError
 * with the server's `{"error"}` words. */
async function api(method, path, body, asText = false) {
  const init = { method, credentials: 'same-origin', headers: {} };
  if (method !== 'GET') {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body || {});
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new ApiError('the world cannot be reached; is `sausage run` running?', 0);
  }
  if (response.status === 401) {
    loggedIn(false);
    throw new ApiError(NOT_LOGGED_IN, 401);
  }
  loggedIn(true);
  const text = await response.text();
  if (response.ok && asText) return text;
  let data = null;
  try {
    data = JSON.parse(text);
  } catch {
    // Not JSON: the status says what went wrong.
  }
  if (!response.ok) {
    const why = (data && data.error) || `${response.status} ${response.statusText}`;
    throw new ApiError(why, response.status);
  }
  return data;
}

/** Who is logged in (`/api/me`): the page offers only what their tier may do; the server
 * refuses the rest anyway. */
let me = null;

async function loadMe() {
  try {
    me = await api('GET', '/api/me');
  } catch {
    return;
  }
  document.body.dataset.tier = me.tier;
  const label = $('#me');
  label.textContent = `${me.name || me.person} · ${me.tier}`;
  label.hidden = false;
  $('#nav-people').hidden = me.tier !== 'owner';
  $('#nav-schedules').hidden = me.tier !== 'owner';
  $('#nav-secrets').hidden = me.tier === 'guest';
  if (actorPage.detail) renderActor(actorPage.detail);
  // What waited before the page opened is marked too.
  api('GET', '/api/approvals').then((answer) => {
    if ((answer.approvals || []).length && currentView !== 'approvals') {
      $('#nav-approvals').classList.add('attention');
    }
  }, () => {});
}

/** Whether this person may stop, start or roll back the actor (the table of DESIGN §13). */
function mayChange(detail) {
  if (!me) return false;
  if (me.tier === 'owner') return true;
  return me.tier === 'member' && detail.id !== 'agent' && detail.owner === me.person;
}

function loggedIn(yes) {
  $('#login-banner').hidden = yes;
  if (!yes) setConnection('down', 'not logged in');
}

// ---------------------------------------------------------------------------------------------
// The confirmation dialog (in the page, so it can be styled and driven by tests).

let confirming = null;

/** Asks `question`; resolves true for Yes, false for Cancel or Escape. */
function confirmDialog(question, yes = 'Yes') {
  if (confirming) confirming(false);
  const dialog = $('#confirm');
  $('#confirm-text').textContent = question;
  $('#confirm-yes').textContent = yes;
  dialog.hidden = false;
  $('#confirm-yes').focus();
  return new Promise((resolve) => {
    confirming = (answer) => {
      confirming = null;
      dialog.hidden = true;
      resolve(answer);
    };
  });
}

function setUpDialog() {
  $('#confirm-yes').addEventListener('click', () => confirming && confirming(true));
  $('#confirm-no').addEventListener('click', () => confirming && confirming(false));
  $('#confirm').addEventListener('click', (event) => {
    if (event.target === $('#confirm') && confirming) confirming(false);
  });
  document.addEventListener('keydown', (event) => {
    if (event.key === 'Escape' && confirming) confirming(false);
  });
}

// ---------------------------------------------------------------------------------------------
// Markdown, safely: paragraphs, headings, lists, quotes, fenced code, inline code, bold,
// emphasis and http(s) links, all built as elements with text nodes.

function renderMarkdown(container, text) {
  container.replaceChildren();
  const lines = String(text).replace(/\r\n?/g, '\n').split('\n');
  const isBlockStart = (line) =>
    /^\s*(```|~~~)/.test(line) || /^#{1,6}\s/.test(line) || /^\s*([-*+]|\d+[.)])\s+/.test(line) ||
    /^>/.test(line);
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```+|~~~+)\s*([\w+#.-]*)/);
    if (fence) {
      const code = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) code.push(lines[i++]);
      i++;
      container.append(el('pre', {}, el('code', { 'data-lang': fence[2] || null }, code.join('\n'))));
      continue;
    }
    if (!line.trim()) {
      i++;
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      const level = Math.min(6, heading[1].length + 2);
      container.append(inline(el(`h${level}`), heading[2]));
      i++;
      continue;
    }
    const bullet = /^\s*[-*+]\s+/;
    const numbered = /^\s*\d+[.)]\s+/;
    if (bullet.test(line) || numbered.test(line)) {
      const marker = bullet.test(line) ? bullet : numbered;
      const list = el(marker === bullet ? 'ul' : 'ol');
      while (i < lines.length && marker.test(lines[i])) {
        let item = lines[i++].replace(marker, '');
        while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !marker.test(lines[i])) {
          item += ' ' + lines[i++].trim();
        }
        list.append(inline(el('li'), item));
      }
      container.append(list);
      continue;
    }
    if (/^>/.test(line)) {
      const quote = [];
      while (i < lines.length && /^>/.test(lines[i])) quote.push(lines[i++].replace(/^>\s?/, ''));
      const block = el('blockquote');
      renderMarkdown(block, quote.join('\n'));
      container.append(block);
      continue;
    }
    const paragraph = el('p');
    let first = true;
    while (i < lines.length && lines[i].trim() && (first || !isBlockStart(lines[i]))) {
      if (!first) paragraph.append(el('br'));
      inline(paragraph, lines[i++]);
      first = false;
    }
    container.append(paragraph);
  }
  return container;
}

const INLINE =
  /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\*\*(?=\S)([\s\S]+?)\*\*|\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)|(?<![\w*])[*_](?=\S)([^*_\n]+?)[*_](?![\w*])/g;

function inline(parent, text) {
  let last = 0;
  for (const match of text.matchAll(INLINE)) {
    parent.append(text.slice(last, match.index));
    if (match[1]) parent.append(el('code', {}, match[2].trim() || match[2]));
    else if (match[3]) parent.append(inline(el('strong'), match[3]));
    else if (match[4]) {
      parent.append(el('a', { href: match[5], target: '_blank', rel: 'noopener noreferrer' }, match[4]));
    } else parent.append(inline(el('em'), match[6]));
    last = match.index + match[0].length;
  }
  parent.append(text.slice(last));
  return parent;
}

// ---------------------------------------------------------------------------------------------
// Chat: the conversation with the agent, streamed.

const DRAFT_KEY = 'sausage.chat.draft';
// Open questions and the latest plans are kept in sessionStorage: the conversation the agent
// tells after a reload holds the `ask` and `plan` calls, but not their buttons and cards.
const QUESTIONS_KEY = 'sausage.chat.questions';
const PLANS_KEY = 'sausage.chat.plans';
/** The turns whose plan a reload shows again. */
const PLANS_KEPT = 20;

/** The object kept in sessionStorage under `key`. */
function kept(key) {
  try {
    return JSON.parse(store('sessionStorage', key) || '{}');
  } catch {
    return {};
  }
}

function keep(key, change) {
  const value = kept(key);
  change(value);
  store('sessionStorage', key, JSON.stringify(value));
}

/** turn id → { el, bubble (the answer being streamed), streamed, plan, footer, running } */
const turns = new Map();

const chatLog = () => $('#chat-log');

function nearBottom(node) {
  return node.scrollHeight - node.scrollTop - node.clientHeight < 80;
}

/** Runs `change` on the chat log, keeping it scrolled to the end if it was there. */
function changeLog(change) {
  const log = chatLog();
  const follow = nearBottom(log);
  const result = change();
  $('.chat-empty', log)?.remove();
  if (follow) log.scrollTop = log.scrollHeight;
  return result;
}

/** The block of turn `id`, made (at the end of the log, or in place of `pending`) if new. */
function turnOf(id, pending) {
  let turn = turns.get(id);
  if (!turn) {
    const block = el('div', { class: 'turn', 'data-turn': id, 'data-done': 'false' });
    const footer = el('div', { class: 'turn-footer' });
    block.append(footer);
    turn = { id, el: block, bubble: null, streamed: '', plan: null, footer, running: false };
    turns.set(id, turn);
    if (pending) pending.replaceWith(block);
    else chatLog().append(block);
  }
  if (pending) turn.el.prepend(pending);
  return turn;
}

/** Adds `node` to a turn, before its footer. */
function addToTurn(turn, node) {
  turn.el.insertBefore(node, turn.footer);
  return node;
}

function setRunning(turn, running) {
  turn.running = running;
  turn.el.dataset.done = running ? 'false' : 'true';
  let stop = $('.turn-stop', turn.footer);
  let working = $('.working', turn.footer);
  if (running && !stop) {
    working = el('span', { class: 'working' }, 'working…');
    stop = el('button', { type: 'button', class: 'turn-stop danger' }, 'Stop');
    stop.addEventListener('click', () => stopTurns([turn]));
    turn.footer.prepend(working, stop);
  } else if (!running) {
    stop?.remove();
    working?.remove();
  }
  $('#chat-stop').hidden = ![...turns.values()].some((t) => t.running);
}

/** A finished turn's Rewind button, once; offered only for a turn the agent says it can
 * rewind (`rewindable`: the turn changed an actor or a file, so it has a checkpoint). */
function offerRewind(turn) {
  if ($('.turn-rewind', turn.footer) || turn.el.classList.contains('is-rewound')) return;
  const rewind = el('button', {
    type: 'button', class: 'turn-rewind',
    title: 'Undo what this turn changed: actors, files and this conversation',
  }, 'Rewind');
  rewind.addEventListener('click', () => rewindTurn(turn, rewind));
  turn.footer.append(rewind);
}

// Rewind (DESIGN §21): the agent puts back the actors and files the turn changed and cuts the
// conversation before it; what it cannot recall is listed under the turn.
async function rewindTurn(turn, button) {
  const question = 'Rewind this turn? The actors it upgraded, spawned or removed and the files it ' +
    'wrote go back to how they were before it, and the conversation is cut before it.';
  if (!(await confirmDialog(question, 'Rewind'))) return;
  button.disabled = true;
  button.textContent = 'Rewinding…';
  try {
    const done = await api('POST', '/api/chat/rewind', { turn: turn.id });
    const count = (n, what) => `${n} ${what}${n === 1 ? '' : 's'}`;
    const lines = [`Rewound: ${count((done.actors || []).length, 'actor')} and ` +
      `${count((done.files || []).length, 'file')} put back; ${done.conversation}.`];
    for (const left of done.not_recalled || []) lines.push(`Not recalled: ${left}`);
    addToTurn(turn, el('div', { class: 'note rewound' }, lines.join('\n')));
    turn.el.classList.add('is-rewound');
    button.remove();
  } catch (error) {
    button.disabled = false;
    button.textContent = 'Rewind';
    showError($('#chat-error'), `rewind: ${error.message}`);
  }
}

async function stopTurns(list) {
  for (const turn of list) {
    try {
      await api('POST', '/api/chat/stop', { turn: turn.id });
      const working = $('.working', turn.footer);
      if (working) working.textContent = 'stopping after this step…';
    } catch (error) {
      showError($('#chat-error'), `stop: ${error.message}`);
    }
  }
}

/** Ends the text bubble being streamed in a turn: it becomes Markdown, and no longer the
 * turn's answer (a tool call or a card came after it). */
function closeBubble(turn) {
  if (turn.bubble) {
    turn.bubble.classList.remove('streaming', 'turn-answer');
    renderMarkdown(turn.bubble, turn.streamed);
  }
  turn.bubble = null;
  turn.streamed = '';
}

function progress(turn, text) {
  if (!turn.bubble) {
    turn.bubble = addToTurn(turn, el('div', { class: 'bubble assistant streaming turn-answer' }));
    turn.streamed = '';
  }
  turn.streamed += text;
  turn.bubble.textContent = turn.streamed;
  setRunning(turn, true);
}

function toolLine(turn, body) {
  if (body.state === 'started') {
    closeBubble(turn);
    addToTurn(turn, el('div', { class: 'tool-line', 'data-tool': body.tool, 'data-state': 'started',
      'data-call': body.call || null },
      el('span', { class: 'icon', 'aria-hidden': 'true' }),
      el('span', { class: 'name' }, body.tool),
      el('span', { class: 'preview', title: body.preview || '' }, body.preview || '')));
    setRunning(turn, true);
    return;
  }
  const lines = [...turn.el.querySelectorAll(`.tool-line[data-state="started"]`)]
    .filter((l) => !l.closest('.subagent'));
  // Calls that run together (delegate) name their call; the others end the last one started.
  const line = lines.reverse().find((l) =>
    body.call ? l.dataset.call === body.call : l.dataset.tool === body.tool);
  if (!line) return;
  line.dataset.state = 'finished';
  line.dataset.ok = body.ok ? 'true' : 'false';
  setSeconds(line, `${body.seconds ?? 0} s`);
}

/** A tool line's time, on the line itself, before the sub-agents' work nested under it. */
function setSeconds(line, text) {
  line.querySelector(':scope > .seconds')?.remove();
  line.insertBefore(el('span', { class: 'seconds' }, text), line.querySelector(':scope > .subagent'));
}

/** What a sub-agent does, nested under the `delegate` call that started it (DESIGN §26): its
 * brief, its tool lines and its streamed text; a sub-agent's own sub-agents nest further in. */
function subagentLine(turn, body, within) {
  const host = within || turn.el.querySelector(`.tool-line[data-call="${CSS.escape(body.call || '')}"]`);
  if (!host) return;
  let box = [...host.querySelectorAll(':scope > .subagent')].find((b) => b.dataset.actor === body.actor);
  if (!box) {
    box = el('div', { class: 'subagent', 'data-actor': body.actor },
      el('div', { class: 'subagent-head' }, `${body.actor} (${body.role || '?'})`));
    host.append(box);
  }
  const event = body.event || {};
  switch (event.type) {
    case 'started':
      box.append(el('div', { class: 'subagent-brief' }, event.brief || ''));
      break;
    case 'tool':
      if (event.state === 'started') {
        box.append(el('div', { class: 'tool-line', 'data-tool': event.tool, 'data-state': 'started' },
          el('span', { class: 'icon', 'aria-hidden': 'true' }),
          el('span', { class: 'name' }, event.tool),
          el('span', { class: 'preview', title: event.preview || '' }, event.preview || '')));
      } else {
        const lines = box.querySelectorAll(':scope > .tool-line[data-state="started"]');
        const line = [...lines].reverse().find((l) => l.dataset.tool === event.tool);
        if (line) {
          line.dataset.state = 'finished';
          line.dataset.ok = event.ok ? 'true' : 'false';
        }
      }
      break;
    case 'progress': {
      let text = box.lastElementChild;
      if (!text || !text.classList.contains('subagent-text')) {
        text = box.appendChild(el('div', { class: 'subagent-text' }));
      }
      text.textContent += event.text || '';
      break;
    }
    case 'subagent':
      subagentLine(turn, event, box);
      break;
    default:
      break;
  }
  setRunning(turn, true);
}

/** Shows a turn's to-do card (replacing its earlier one). */
function planCard(turn, items) {
  keep(PLANS_KEY, (plans) => {
    delete plans[turn.id];
    plans[turn.id] = items;
    const turnsKept = Object.keys(plans);
    for (const old of turnsKept.slice(0, Math.max(0, turnsKept.length - PLANS_KEPT))) delete plans[old];
  });
  const card = el('div', { class: 'plan' }, el('h4', {}, 'Plan'),
    el('ul', {}, (items || []).map((item) =>
      el('li', { class: item.done ? 'done' : null }, item.text))));
  if (turn.plan && turn.plan.isConnected) turn.plan.replaceWith(card);
  else {
    closeBubble(turn);
    addToTurn(turn, card);
  }
  turn.plan = card;
}


function questionCard(turn, message) {
  const body = message.body;
  keep(QUESTIONS_KEY, (q) => (q[message.id] = message));
  closeBubble(turn);
  const error = el('p', { class: 'error', hidden: true });
  const input = el('input', { type: 'text', placeholder: 'Or answer in your own words', 'aria-label': 'Your answer' });
  const send = el('button', { type: 'submit' }, 'Answer');
  const choices = el('div', { class: 'choices' }, (body.choices || []).map((choice) =>
    el('button', { type: 'button', class: 'choice', 'data-choice': choice }, choice)));
  const form = el('form', {}, input, send);
  const card = el('div', { class: 'question', 'data-question': message.id },
    el('h4', {}, 'Question'), el('p', {}, body.text), choices, form, error);
  const answer = async (text) => {
    if (!text.trim()) return;
    const controls = card.querySelectorAll('button, input');
    controls.forEach((c) => (c.disabled = true));
    try {
      await api('POST', '/api/chat', { answer: text, question: message.id });
      keep(QUESTIONS_KEY, (q) => delete q[message.id]);
      choices.remove();
      form.replaceWith(el('p', { class: 'answered' }, `You answered: ${text}`));
      showError(error, '');
      card.dataset.answered = 'true';
    } catch (e) {
      controls.forEach((c) => (c.disabled = false));
      showError(error, e.message);
    }
  };
  choices.addEventListener('click', (event) => {
    const button = event.target.closest('button.choice');
    if (button) answer(button.dataset.choice);
  });
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    answer(input.value);
  });
  addToTurn(turn, card);
  setRunning(turn, true);
}

function money(usd) {
  if (usd === null || usd === undefined) return 'cost unknown';
  return `$${usd < 0.01 ? usd.toFixed(4) : usd.toFixed(2)}`;
}

/** A time for people: "850 ms", "2.3 s". */
function duration(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

/** A finished turn's waterfall (DESIGN §22), closed until opened: one row per step (a model
 * request or a tool call; `start_ms` and `ms` count from the turn's start) with its bar on one
 * time axis, and the steps' time and cost in the summary; null when there are no steps. The
 * bars are placed through element.style: the page's policy allows no inline style attribute. */
function waterfall(steps, dropped) {
  if (!Array.isArray(steps) || !steps.length) return null;
  const ms = (n) => (Number.isFinite(n) && n > 0 ? n : 0);
  const total = Math.max(1, ...steps.map((step) => ms(step.start_ms) + ms(step.ms)));
  const models = steps.filter((step) => step.kind === 'model');
  // One model request without a price makes the sum unknown, as it does the turn's cost.
  const cost = models.some((step) => typeof step.cost_usd !== 'number') ? null
    : models.reduce((sum, step) => sum + step.cost_usd, 0);
  const count = `${steps.length} step${steps.length === 1 ? '' : 's'}` +
    (dropped ? ` (and ${dropped} not shown)` : '');
  const rows = steps.map((step) => {
    const model = step.kind === 'model';
    const detail = model
      ? ` ${thousands(step.input_tokens)} in / ${thousands(step.output_tokens)} out · ${money(step.cost_usd)}`
      : ` ${step.preview || ''} · ${duration(ms(step.ms))}${step.ok === false ? ' · failed' : ''}`;
    const label = `${step.name}${detail}`;
    const bar = el('div', {
      class: 'waterfall-bar',
      title: `${label}\nfrom ${duration(ms(step.start_ms))}, for ${duration(ms(step.ms))}`,
    });
    bar.style.left = `${(ms(step.start_ms) / total) * 100}%`;
    bar.style.width = `${(ms(step.ms) / total) * 100}%`;
    return el('div', {
      class: 'waterfall-row', 'data-kind': model ? 'model' : 'tool',
      'data-ok': model ? null : String(step.ok !== false),
    },
    el('span', { class: 'waterfall-label', title: label }, el('span', { class: 'name' }, step.name), detail),
    el('div', { class: 'waterfall-track' }, bar));
  });
  return el('details', { class: 'waterfall' },
    el('summary', {}, `Waterfall: ${count}, ${duration(total)}, ${money(cost)}`),
    el('div', { class: 'waterfall-rows' }, rows));
}

function finalAnswer(turn, body) {
  const text = body.text || '';
  // The answer is the last step's text, which was streamed; anything else (a stop, a budget)
  // is said after what was streamed.
  if (turn.bubble && !text.startsWith(turn.streamed.trim())) closeBubble(turn);
  if (!turn.bubble) turn.bubble = addToTurn(turn, el('div', { class: 'bubble assistant turn-answer' }));
  const bubble = turn.bubble;
  bubble.classList.remove('streaming');
  renderMarkdown(bubble, text);
  $('.waterfall', turn.el)?.remove();
  const steps = waterfall(body.steps, body.steps_dropped);
  if (steps) bubble.after(steps);
  turn.bubble = null;
  turn.streamed = '';
  setRunning(turn, false);
  keep(QUESTIONS_KEY, (q) => {
    for (const [id, question] of Object.entries(q)) {
      if ((question.body.turn || question.reply_to) === turn.id) delete q[id];
    }
  });
  turn.el.querySelectorAll('.question:not([data-answered]) button, .question:not([data-answered]) input')
    .forEach((c) => (c.disabled = true));
  turnEnding(turn, body);
  if (body.rewindable) offerRewind(turn);
}

/** A number of tokens for people: with thousands separators. */
function thousands(n) {
  return Number(n ?? 0).toLocaleString('en-US');
}

/** A finished turn as its answer (live) or its history entry (reloaded) tells it, the same
 * both ways: each tool line's outcome and time from the waterfall's steps, and the cost line
 * (`usage`, `stopped`). */
function turnEnding(turn, ending) {
  // The turn's own tool lines, not those of its sub-agents nested under a delegate line.
  const lines = [...turn.el.querySelectorAll('.tool-line')].filter((l) => !l.closest('.subagent'));
  const tools = (Array.isArray(ending.steps) ? ending.steps : []).filter((step) => step.kind === 'tool');
  tools.forEach((step, i) => {
    const line = lines[i];
    if (!line || line.dataset.tool !== step.name) return;
    line.dataset.state = 'finished';
    line.dataset.ok = step.ok === false ? 'false' : 'true';
    setSeconds(line, `${(Math.max(0, step.ms || 0) / 1000).toFixed(1)} s`);
  });
  if (!ending.usage) return;
  const usage = ending.usage;
  const rewind = $('.turn-rewind', turn.footer);
  const tokens = `${thousands(usage.input_tokens)} in · ${thousands(usage.output_tokens)} out` +
    (usage.cache_read_tokens ? ` · ${thousands(usage.cache_read_tokens)} cached` : '') + ' tokens';
  turn.footer.replaceChildren();
  append(turn.footer, [
    el('span', { class: 'turn-cost', title: tokens }, money(usage.cost_usd)),
    el('span', { class: 'tokens' }, tokens),
    ending.stopped ? el('span', { class: 'stopped' }, `stopped (${ending.stopped})`) : null,
    rewind,
  ]);
}

function note(text, className = 'note', turn = null) {
  const node = el('div', { class: className }, text);
  if (turn) addToTurn(turn, node);
  else chatLog().append(node);
  return node;
}

/** A message from the agent, live. */
/** The conversation the chat shows: '' for the person's private one, else a shared room's id
 * (kept for a reload). Messages of the others are marked on their room's option. */
const ROOM_KEY = 'sausage.chat.room';
let chatRoom = store('sessionStorage', ROOM_KEY) || '';

function onAgentMessage(message) {
  const body = message.body || {};
  if ((body.room || '') !== chatRoom) {
    const option = $(`#chat-room option[value="${CSS.escape(body.room || '')}"]`);
    if (option) option.classList.add('unread');
    return;
  }
  const id = body.turn || message.reply_to;
  changeLog(() => {
    switch (body.type) {
      case 'progress': return progress(turnOf(id), body.text || '');
      case 'tool': return toolLine(turnOf(id), body);
      case 'subagent': return subagentLine(turnOf(id), body);
      case 'plan': return planCard(turnOf(id), body.items);
      case 'question': return questionCard(turnOf(id), message);
      case 'text':
        // A room's answer reaches the members who did not ask without reply_to, by its turn.
        if (message.reply_to || body.turn) return finalAnswer(turnOf(message.reply_to || body.turn), body);
        return renderMarkdown(chatLog().appendChild(el('div', { class: 'bubble assistant' })), body.text || '');
      case 'error': return note(`${body.request || 'error'}: ${body.reason || ''}`, 'note',
        turns.get(id) || null);
      case 'goal_started': return note(`Goal ${body.goal} started.`);
      case 'goal_progress': return note(`Goal ${body.goal}, round ${body.round}: ${body.summary || ''}`);
      case 'goal_done': case 'goal_blocked': case 'goal_stopped':
        return note(`Goal ${body.goal} ${body.type.slice(5)}: ${body.summary || body.reason || ''}`);
      case 'undeliverable': return note(`The agent could not be reached: ${body.reason || ''}`);
      default: return null;
    }
  });
}

/** The conversation as the agent tells it, after a load or a restart. */
async function loadConversation() {
  let entries;
  try {
    const query = chatRoom ? `?room=${encodeURIComponent(chatRoom)}` : '';
    entries = (await api('GET', `/api/conversation${query}`)).entries || [];
    showError($('#chat-error'), '');
  } catch (error) {
    showError($('#chat-error'), error.message);
    return;
  }
  const log = chatLog();
  // What was sent while the history loaded (a message typed as the view opened) and the
  // history does not hold yet stays: its turn's events and answer come to it.
  const known = new Set(entries.map((entry) => entry.id).filter(Boolean));
  const live = [...turns.values()].filter((t) => t.el.dataset.done !== 'true' && !known.has(t.id));
  const pending = [...log.querySelectorAll('.bubble.user.pending')];
  log.replaceChildren();
  turns.clear();
  let current = null;
  for (const entry of entries) {
    switch (entry.role) {
      case 'user': {
        const bubble = el('div', { class: 'bubble user' },
          entry.from && entry.from !== 'web' ? el('span', { class: 'from' }, entry.from) : null,
          entry.text);
        current = turnOf(entry.id || `h${turns.size}`, null);
        current.el.prepend(bubble);
        current.el.dataset.done = 'true';
        if (entry.rewindable) offerRewind(current);
        break;
      }
      case 'assistant': {
        const bubble = el('div', { class: 'bubble assistant' });
        renderMarkdown(bubble, entry.text);
        if (current) addToTurn(current, bubble);
        else log.append(bubble);
        const steps = waterfall(entry.steps);
        if (steps) bubble.after(steps);
        if (current && (entry.usage || entry.steps)) turnEnding(current, entry);
        break;
      }
      case 'tool': {
        const line = el('div', { class: 'tool-line', 'data-tool': entry.name, 'data-state': 'history' },
          el('span', { class: 'icon', 'aria-hidden': 'true' }),
          el('span', { class: 'name' }, entry.name),
          el('span', { class: 'preview', title: entry.preview || '' }, entry.preview || ''));
        if (current) addToTurn(current, line);
        else log.append(line);
        break;
      }
      case 'summary': {
        const details = el('details', { class: 'note summary' },
          el('summary', {}, 'Earlier conversation, summarised'), el('div', {}, entry.text));
        log.append(details);
        current = null;
        break;
      }
      default:
        note(entry.text || '', 'note', current);
    }
  }
  for (const turn of turns.values()) {
    const answers = turn.el.querySelectorAll('.bubble.assistant');
    if (answers.length) answers[answers.length - 1].classList.add('turn-answer');
  }
  for (const turn of live) {
    turns.set(turn.id, turn);
    log.append(turn.el);
  }
  log.append(...pending);
  if (!entries.length && !live.length && !pending.length) {
    log.append(el('p', { class: 'chat-empty' }, 'Ask the agent anything: to build an actor, to look at the world, to explain.'));
  }
  $('#chat-stop').hidden = true;
  for (const [id, items] of Object.entries(kept(PLANS_KEY))) {
    if (turns.has(id)) planCard(turns.get(id), items);
  }
  for (const question of Object.values(kept(QUESTIONS_KEY))) {
    questionCard(turnOf(question.body.turn || question.reply_to), question);
  }
  log.scrollTop = log.scrollHeight;
}

async function sendChat() {
  const input = $('#chat-input');
  const text = input.value;
  if (!text.trim()) return;
  const pending = el('div', { class: 'bubble user pending' }, text);
  changeLog(() => chatLog().append(pending));
  input.value = '';
  store('sessionStorage', DRAFT_KEY, '');
  showError($('#chat-error'), '');
  try {
    const { id } = await api('POST', '/api/chat', chatRoom ? { text, room: chatRoom } : { text });
    pending.classList.remove('pending');
    const turn = turnOf(id, pending);
    if (turn.el.dataset.done !== 'true') setRunning(turn, true);
  } catch (error) {
    pending.remove();
    // Give the text back unless something new was typed meanwhile.
    if (!input.value) {
      input.value = text;
      store('sessionStorage', DRAFT_KEY, text);
    }
    showError($('#chat-error'), error.message);
  }
}

/** The rooms the person is in, offered beside their private conversation. */
async function loadRooms() {
  let rooms;
  try {
    rooms = (await api('GET', '/api/rooms')).rooms || [];
  } catch {
    return;
  }
  const select = $('#chat-room');
  select.replaceChildren(el('option', { value: '' }, 'private'),
    ...rooms.map((r) => el('option', { value: r.room }, `${r.room} (${r.members.join(', ')})`)));
  if (chatRoom && !rooms.some((r) => r.room === chatRoom)) {
    chatRoom = '';
    store('sessionStorage', ROOM_KEY, '');
    loadConversation();
  }
  select.value = chatRoom;
  $('#chat-room-label').hidden = rooms.length === 0;
}

async function showMemory() {
  const card = $('#memory-card');
  if (!card.hidden) {
    card.hidden = true;
    return;
  }
  try {
    const { text } = await api('GET', '/api/memory');
    $('#memory-text').textContent = text || 'Nothing yet. Ask the agent to remember something.';
    $('#memory-forget').hidden = !text;
    card.hidden = false;
    showError($('#chat-error'), '');
  } catch (error) {
    showError($('#chat-error'), error.message);
  }
}

function setUpChat() {
  $('#chat-room').addEventListener('change', (event) => {
    chatRoom = event.target.value;
    store('sessionStorage', ROOM_KEY, chatRoom);
    event.target.selectedOptions[0]?.classList.remove('unread');
    loadConversation();
  });
  $('#memory-button').addEventListener('click', showMemory);
  $('#memory-forget').addEventListener('click', async () => {
    if (!await confirmDialog('Forget everything the agent remembers about you?', 'Forget')) return;
    try {
      await api('POST', '/api/memory/forget');
      $('#memory-card').hidden = true;
    } catch (error) {
      showError($('#chat-error'), error.message);
    }
  });
  const input = $('#chat-input');
  input.value = store('sessionStorage', DRAFT_KEY) || '';
  input.addEventListener('input', () => store('sessionStorage', DRAFT_KEY, input.value));
  input.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      sendChat();
    }
  });
  $('#chat-form').addEventListener('submit', (event) => {
    event.preventDefault();
    sendChat();
  });
  $('#chat-stop').addEventListener('click', () =>
    stopTurns([...turns.values()].filter((t) => t.running)));
}

// ---------------------------------------------------------------------------------------------
// Actors: the table, from `actors` snapshots.

let actors = [];
const HIDE_NATIVE_KEY = 'sausage.actors.hideNative';
const sorting = { key: 'id', descending: false };

function onActors(snapshot) {
  actors = snapshot.actors || [];
  renderActors();
  refreshActorFromTable();
  if (currentView === 'graph') renderGraph();
}

function compare(a, b) {
  const x = a[sorting.key];
  const y = b[sorting.key];
  let order;
  if (x === y) order = 0;
  else if (x === null || x === undefined) order = 1;
  else if (y === null || y === undefined) order = -1;
  else if (typeof x === 'number' && typeof y === 'number') order = x - y;
  else order = String(x).localeCompare(String(y));
  if (order === 0 && sorting.key !== 'id') order = a.id.localeCompare(b.id);
  return sorting.descending ? -order : order;
}

function rate(x) {
  return typeof x === 'number' ? x.toFixed(1) : '';
}

function renderActors() {
  const hide = $('#hide-native').checked;
  const rows = actors.filter((a) => !(hide && a.kind === 'native')).sort(compare);
  // A world spread over several hosts (DESIGN §16) says where each actor runs.
  const hosts = actors.some((a) => a.host);
  $('#actors-table th.host').hidden = !hosts;
  $('#actors-table tbody').replaceChildren(...rows.map((a) =>
    el('tr', { 'data-actor': a.id, class: a.kind === 'native' ? 'native' : null },
      el('td', { class: 'id' }, el('a', { href: `#/actor/${encodeURIComponent(a.id)}` }, a.id)),
      // A sub-agent says whose and in which role: `scout of agent`.
      el('td', { class: 'kind' }, a.subagent ? `${a.subagent.role} of ${a.subagent.parent}` : a.kind),
      ...(hosts ? [el('td', { class: 'host' }, a.host || '—')] : []),
      el('td', {}, el('span', { class: 'state', 'data-state': a.state }, a.state)),
      el('td', { class: 'version num' }, a.version ?? '—'),
      el('td', { class: 'restarts num' }, a.restarts ?? '—'),
      el('td', { class: 'queued num' }, a.queued ?? 0),
      el('td', { class: 'in num' }, rate(a.in_per_sec)),
      el('td', { class: 'out num' }, rate(a.out_per_sec)),
      el('td', { class: 'last-exit' }, a.last_exit || ''))));
  for (const th of document.querySelectorAll('#actors-table th')) {
    th.setAttribute('aria-sort', th.dataset.key === sorting.key
      ? (sorting.descending ? 'descending' : 'ascending') : 'none');
  }
}

async function loadActors() {
  try {
    onActors(await api('GET', '/api/actors'));
    showError($('#actors-error'), '');
  } catch (error) {
    showError($('#actors-error'), error.message);
  }
}

function setUpActors() {
  const hide = $('#hide-native');
  hide.checked = store('localStorage', HIDE_NATIVE_KEY) === 'true';
  hide.addEventListener('change', () => {
    store('localStorage', HIDE_NATIVE_KEY, String(hide.checked));
    renderActors();
  });
  $('#actors-table thead').addEventListener('click', (event) => {
    const th = event.target.closest('th[data-key]');
    if (!th) return;
    if (sorting.key === th.dataset.key) sorting.descending = !sorting.descending;
    else Object.assign(sorting, { key: th.dataset.key, descending: false });
    renderActors();
  });
}

// ---------------------------------------------------------------------------------------------
// An actor's page: status, versions, files, actions, and its stderr.log followed live.

/** How often the page asks for more of the log. */
const LOG_POLL_MS = 1000;
/** The most log text the page keeps; older text is dropped from the top. */
const LOG_KEEP_CHARS = 200000;

const actorPage = { id: null, detail: null, logFrom: null, timer: null, polling: false, loading: null };

function openActor(id) {
  if (actorPage.id !== id) {
    actorPage.id = id;
    actorPage.detail = null;
    actorPage.logFrom = null;
    $('#actor-id').textContent = id;
    $('#actor-log').textContent = '';
    $('#file-view').hidden = true;
    $('#shadow-view').hidden = true;
    for (const part of ['#actor-status', '#versions tbody', '#files-public', '#files-source']) {
      $(part).replaceChildren();
    }
    showError($('#actor-error'), '');
    $('#actor-notice').hidden = true;
    // Nothing of the actor shown before may stay while this one loads, or if it does not exist.
    showActorParts(false);
  }
  loadActor();
  clearInterval(actorPage.timer);
  actorPage.timer = setInterval(pollLog, LOG_POLL_MS);
  pollLog();
}

function closeActor() {
  clearInterval(actorPage.timer);
  actorPage.timer = null;
}

function loadActor() {
  // One load at a time; a load asked for meanwhile runs after it.
  if (actorPage.loading) {
    actorPage.again = true;
    return actorPage.loading;
  }
  const id = actorPage.id;
  actorPage.loading = (async () => {
    try {
      const detail = await api('GET', `/api/actors/${encodeURIComponent(id)}`);
      if (actorPage.id === id) renderActor(detail);
    } catch (error) {
      if (actorPage.id !== id) return;
      if (error.status === 404) {
        clearInterval(actorPage.timer);
        showActorParts(false);
      }
      showError($('#actor-error'), error.message);
    } finally {
      actorPage.loading = null;
      if (actorPage.again) {
        actorPage.again = false;
        loadActor();
      }
    }
  })();
  return actorPage.loading;
}

function fact(name, value) {
  return value === null || value === undefined || value === '' ? [] : [el('dt', {}, name), el('dd', {}, String(value))];
}

/** An actor's HTTP routes, each a link to its URL on the public address. */
function routesFact(routes) {
  if (!routes || !routes.length) return [];
  const list = el('dd', { id: 'actor-routes' });
  routes.forEach((route, i) => {
    if (i) list.append(', ');
    list.append(route.url
      ? el('a', { href: route.url, target: '_blank', rel: 'noopener', class: 'route' }, route.path)
      : el('span', { class: 'route' }, route.path));
  });
  return [el('dt', {}, 'routes'), list];
}

function when(time) {
  const date = time ? new Date(time) : null;
  return date && !Number.isNaN(date.getTime()) ? date.toLocaleString() : (time || '');
}

/** The badge, the buttons and the cards: hidden until an actor's detail comes. */
function showActorParts(shown) {
  for (const part of ['#actor-state', '#actor-actions', '#actor-cards', '#actor-log-card']) $(part).hidden = !shown;
}

function renderActor(detail) {
  actorPage.detail = detail;
  showActorParts(true);
  const status = detail.status || {};
  const state = detail.kind === 'native' ? 'running' : (status.state || 'unknown');
  const badge = $('#actor-state');
  badge.textContent = state;
  badge.dataset.state = state;
  const native = detail.kind === 'native';
  const allowed = mayChange(detail);
  for (const button of ['#actor-stop', '#actor-start', '#actor-rollback']) $(button).hidden = native || !allowed;
  $('#actor-status').replaceChildren(
    ...fact('kind', detail.kind), ...fact('state', state), ...fact('version', status.version),
    ...fact('restarts', status.restarts), ...fact('last exit', status.last_exit),
    ...fact('parked message', status.parked), ...fact('previous version', status.previous_version),
    ...fact('log size', detail.log_size !== undefined ? `${detail.log_size} bytes` : null),
    ...routesFact(detail.routes));
  $('#versions tbody').replaceChildren(...(detail.versions || []).map((v) => {
    let action;
    if (v.current) action = el('span', { class: 'current' }, 'current');
    else if (!allowed) action = '';
    else {
      action = el('button', { type: 'button', class: 'switch', 'data-version': v.version }, 'switch to');
      action.addEventListener('click', () => act('rollback', { version: v.version },
        `Switch ${detail.id} to version ${v.version}? Its /data and /public go back to that version's snapshot.`));
    }
    return el('tr', { 'data-version': v.version, class: v.current ? 'is-current' : null },
      el('td', { class: 'num' }, v.version), el('td', {}, v.built_by || '—'),
      el('td', {}, requester(v)), el('td', {}, when(v.time)), el('td', {}, shadowCell(v)),
      el('td', {}, action));
  }));
  for (const folder of ['public', 'source']) {
    const files = detail[folder] || [];
    $(`#files-${folder}`).replaceChildren(...(files.length ? files.map((path) => {
      const link = el('a', { href: '#', class: 'file', 'data-folder': folder, 'data-path': path }, path);
      link.addEventListener('click', (event) => {
        event.preventDefault();
        showFile(folder, path);
      });
      return el('li', {}, link);
    }) : [el('li', { class: 'empty' }, 'no files')]));
  }
}

// The shadow run that let a version in (DESIGN §21): a summary in its row, and the messages on
// which it answered differently side by side with what the version before it wrote.
function shadowCell(version) {
  const shadow = version.shadow;
  if (!shadow || typeof shadow !== 'object') return '—';
  const different = (shadow.different || []).length;
  const files = (shadow.files || []).length;
  const text = shadow.messages
    ? `${shadow.same} of ${shadow.messages} same` + (different ? `, ${different} different` : '') +
      (files ? `, ${files} files` : '') + (shadow.noisy ? `, ${shadow.noisy} noisy` : '')
    : 'no recent messages';
  if (!shadow.messages) return text;
  const link = el('a', { href: '#', class: 'shadow-report', 'data-version': version.version }, text);
  link.addEventListener('click', (event) => {
    event.preventDefault();
    showShadow(version);
  });
  return link;
}

function json(value) {
  return JSON.stringify(value, null, 2);
}

function showShadow(version) {
  const shadow = version.shadow;
  const before = version.version - 1;
  $('#shadow-name').textContent = `Shadow run of version ${version.version}`;
  $('#shadow-summary').textContent =
    `Both versions read the actor's last ${shadow.messages} messages on a copy of its files: ` +
    `${shadow.same} answered the same, ${(shadow.different || []).length} differently` +
    (shadow.noisy ? `, ${shadow.noisy} were noisy (the old version disagreed with itself)` : '') + '.';
  $('#shadow-old').textContent = `Version ${before} wrote`;
  $('#shadow-new').textContent = `Version ${version.version} wrote`;
  const rows = (shadow.different || []).map((d) => el('tr', { class: 'difference' },
    el('td', {}, el('pre', { class: 'code' }, json(d.message && d.message.body))),
    el('td', {}, el('pre', { class: 'code old' }, json(d.old))),
    el('td', {}, el('pre', { class: 'code new' }, json(d.new)))));
  for (const file of shadow.files || []) {
    const side = (f) => (f ? `${f.size} bytes, sha256 ${String(f.sha256).slice(0, 12)}…` : 'absent');
    rows.push(el('tr', { class: 'file-difference' }, el('td', {}, file.path),
      el('td', {}, side(file.old)), el('td', {}, side(file.new))));
  }
  if (shadow.crashed) {
    rows.push(el('tr', { class: 'crash' },
      el('td', {}, el('pre', { class: 'code' }, json(shadow.crashed.message && shadow.crashed.message.body))),
      el('td', {}, 'handled it'), el('td', {}, `crashed: ${shadow.crashed.exit}`)));
  }
  if (!rows.length) rows.push(el('tr', {}, el('td', { colSpan: 3 }, 'No difference.')));
  $('#shadow-table tbody').replaceChildren(...rows);
  $('#shadow-view').hidden = false;
  $('#shadow-view').scrollIntoView({ block: 'nearest' });
}

async function showFile(folder, path) {
  const id = actorPage.id;
  const url = `/api/actors/${encodeURIComponent(id)}/files/${folder}/` +
    path.split('/').map(encodeURIComponent).join('/');
  $('#file-name').textContent = `${folder}/${path}`;
  $('#file-text').textContent = 'loading…';
  $('#file-view').hidden = false;
  try {
    $('#file-text').textContent = await api('GET', url, null, true);
  } catch (error) {
    $('#file-text').textContent = '';
    showError($('#actor-error'), error.message);
  }
  $('#file-view').scrollIntoView({ block: 'nearest' });
}

async function pollLog() {
  if (actorPage.polling || !actorPage.id) return;
  actorPage.polling = true;
  const id = actorPage.id;
  try {
    const from = actorPage.logFrom === null ? '' : `?from=${actorPage.logFrom}`;
    const chunk = await api('GET', `/api/actors/${encodeURIComponent(id)}/log${from}`);
    if (actorPage.id !== id) return;
    const log = $('#actor-log');
    const follow = nearBottom(log);
    if (chunk.rotated) log.textContent = '';
    if (chunk.text) {
      let text = log.textContent + chunk.text;
      if (text.length > LOG_KEEP_CHARS) text = text.slice(text.length - LOG_KEEP_CHARS);
      log.textContent = text;
    }
    actorPage.logFrom = chunk.to;
    if (follow) log.scrollTop = log.scrollHeight;
  } catch {
    // A poll that fails is tried again in a second; the connection indicator tells why.
  } finally {
    actorPage.polling = false;
  }
}

const ACTIONS = {
  stop: { doing: 'Stopping…', done: (r) => `Stopped ${r.actor || ''}.` },
  start: { doing: 'Starting…', done: (r) => `Started ${r.actor || ''}.` },
  rollback: { doing: 'Switching versions…', done: (r) => `Now on version ${r.to} (was ${r.from}).` },
};

async function act(action, body, question) {
  const id = actorPage.id;
  if (!(await confirmDialog(question))) return;
  const buttons = document.querySelectorAll('#view-actor .actions button, #versions button');
  buttons.forEach((b) => (b.disabled = true));
  showError($('#actor-error'), '');
  const notice = $('#actor-notice');
  notice.textContent = ACTIONS[action].doing;
  notice.hidden = false;
  try {
    const reply = await api('POST', `/api/actors/${encodeURIComponent(id)}/${action}`, body);
    notice.textContent = ACTIONS[action].done(reply);
  } catch (error) {
    notice.hidden = true;
    showError($('#actor-error'), `${action}: ${error.message}`);
  } finally {
    buttons.forEach((b) => (b.disabled = false));
    if (actorPage.id === id) loadActor();
  }
}

/** The table's snapshot changed: the page follows its actor's state and version. */
function refreshActorFromTable() {
  if (currentView !== 'actor' || !actorPage.detail) return;
  const row = actors.find((a) => a.id === actorPage.id);
  if (!row || row.kind === 'native') return;
  const status = actorPage.detail.status || {};
  if (row.state !== status.state || row.version !== status.version || row.restarts !== status.restarts) {
    loadActor();
  }
}

function setUpActor() {
  $('#actor-stop').addEventListener('click', () => act('stop', {},
    `Stop ${actorPage.id}? Its messages wait in its mailbox until it starts again.`));
  $('#actor-start').addEventListener('click', () => act('start', {}, `Start ${actorPage.id}?`));
  $('#actor-rollback').addEventListener('click', () => act('rollback', {},
    `Roll ${actorPage.id} back to its previous version?`));
  $('#file-close').addEventListener('click', () => ($('#file-view').hidden = true));
  $('#shadow-close').addEventListener('click', () => ($('#shadow-view').hidden = true));
}

// ---------------------------------------------------------------------------------------------
// The graph: actors on a circle, an arrow per sender → recipient, as wide as its rate.

let graph = { window_s: 60, edges: [] };
const GRAPH_SIZE = 640;
const NODE_RADIUS = 30;

function onGraph(snapshot) {
  graph = snapshot;
  if (currentView === 'graph') renderGraph();
}

async function loadGraph() {
  try {
    const [snapshot] = await Promise.all([api('GET', '/api/graph'), actors.length ? null : loadActors()]);
    onGraph(snapshot);
  } catch (error) {
    // A missing login is said by the banner.
    $('#graph').replaceChildren(...(error.status === 401 ? [] : [el('p', { class: 'error' }, error.message)]));
  }
}

function renderGraph() {
  $('#graph-window').textContent = graph.window_s ?? 60;
  const edges = graph.edges || [];
  const kinds = new Map(actors.map((a) => [a.id, a.kind]));
  const ids = new Set(actors.filter((a) => a.kind !== 'native').map((a) => a.id));
  for (const edge of edges) {
    ids.add(edge.from);
    ids.add(edge.to);
  }
  const names = [...ids].sort();
  const center = GRAPH_SIZE / 2;
  const ring = names.length > 1 ? center - NODE_RADIUS - 40 : 0;
  const at = new Map(names.map((name, i) => {
    const angle = -Math.PI / 2 + (2 * Math.PI * i) / names.length;
    return [name, { x: center + ring * Math.cos(angle), y: center + ring * Math.sin(angle) }];
  }));
  const picture = svg('svg', {
    viewBox: `0 0 ${GRAPH_SIZE} ${GRAPH_SIZE}`, role: 'img',
    'aria-label': `who sends to whom over the last ${graph.window_s} s`,
  });
  picture.append(svg('defs', {}, svg('marker', {
    id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 3.2, markerHeight: 3.2,
    orient: 'auto-start-reverse', markerUnits: 'strokeWidth',
  }, svg('path', { d: 'M0,0 L10,5 L0,10 z' }))));
  const pairs = new Set(edges.map((e) => `${e.from}\u0000${e.to}`));
  for (const edge of edges) {
    picture.append(edgeShape(edge, at.get(edge.from), at.get(edge.to),
      pairs.has(`${edge.to}\u0000${edge.from}`)));
  }
  for (const name of names) {
    const p = at.get(name);
    picture.append(svg('g', { class: `node${kinds.get(name) === 'native' ? ' native' : ''}`, 'data-id': name },
      svg('circle', { cx: p.x, cy: p.y, r: NODE_RADIUS }),
      svg('text', { x: p.x, y: p.y }, name.length > 9 ? `${name.slice(0, 8)}…` : name),
      svg('title', {}, name)));
  }
  const parts = [picture];
  if (!edges.length) parts.push(el('p', { class: 'graph-empty' }, `No messages in the last ${graph.window_s ?? 60} s.`));
  $('#graph').replaceChildren(...parts);
}

function edgeShape(edge, a, b, twoWay) {
  const width = 2 + Math.min(8, 2 * Math.log2(1 + 4 * edge.per_sec));
  const label = `${edge.per_sec >= 10 ? edge.per_sec.toFixed(0) : edge.per_sec.toFixed(1)}/s`;
  const group = svg('g', { class: 'edge', 'data-from': edge.from, 'data-to': edge.to });
  let d;
  let labelAt;
  if (edge.from === edge.to) {
    const top = { x: a.x, y: a.y - NODE_RADIUS };
    d = `M${top.x - 12},${top.y + 4} C${top.x - 40},${top.y - 50} ${top.x + 40},${top.y - 50} ${top.x + 12},${top.y + 4}`;
    labelAt = { x: top.x, y: top.y - 42 };
  } else {
    // Two-way pairs bend apart; a one-way edge is straight.
    const dx = b.x - a.x;
    const dy = b.y - a.y;
    const length = Math.hypot(dx, dy) || 1;
    const bend = twoWay ? 40 : 0;
    const c = { x: (a.x + b.x) / 2 - (dy / length) * bend, y: (a.y + b.y) / 2 + (dx / length) * bend };
    const towards = (p, q, r) => {
      const l = Math.hypot(q.x - p.x, q.y - p.y) || 1;
      return { x: p.x + ((q.x - p.x) / l) * r, y: p.y + ((q.y - p.y) / l) * r };
    };
    const start = towards(a, c, NODE_RADIUS + 2);
    const end = towards(b, c, NODE_RADIUS + 4);
    d = `M${start.x},${start.y} Q${c.x},${c.y} ${end.x},${end.y}`;
    // The label sits beside the curve's middle, on its outer side (left of the direction).
    const side = twoWay ? 16 : 10;
    labelAt = {
      x: 0.25 * start.x + 0.5 * c.x + 0.25 * end.x - (dy / length) * side,
      y: 0.25 * start.y + 0.5 * c.y + 0.25 * end.y + (dx / length) * side + 4,
    };
  }
  group.append(
    svg('path', { d, 'stroke-width': width.toFixed(2), 'marker-end': 'url(#arrow)' }),
    svg('text', { x: labelAt.x, y: labelAt.y }, label),
    svg('title', {}, `${edge.from} → ${edge.to}: ${edge.count} messages, ${label}`));
  return group;
}

// ---------------------------------------------------------------------------------------------
// Live updates: one EventSource; a new run of the world (or a `reset`) reloads the view's data.

let events = null;
let lastRun = null;
let retryTimer = null;
let reloadTimer = null;
let retryDelay = 1000;

function setConnection(state, label) {
  const conn = $('#conn');
  conn.dataset.state = state;
  $('.label', conn).textContent = label || state;
}

function connect(again = false) {
  clearTimeout(retryTimer);
  if (events) events.close();
  setConnection('connecting', again ? 'reconnecting' : 'connecting');
  const source = new EventSource('/api/events');
  events = source;
  source.addEventListener('open', () => {
    retryDelay = 1000;
    setConnection('live', 'live');
  });
  source.addEventListener('error', () => {
    if (source.readyState === EventSource.CLOSED) {
      // The browser gave up (a refusal such as 401, or the server went away): check why, then
      // try again a little later, as the browser does for a dropped stream.
      setConnection('down', 'offline');
      api('GET', '/api/me').catch(() => {});
      retryTimer = setTimeout(() => connect(true), retryDelay);
      retryDelay = Math.min(retryDelay * 2, 10000);
    } else {
      setConnection('connecting', 'reconnecting');
    }
  });
  source.addEventListener('hello', (event) => {
    const run = JSON.parse(event.data).run;
    setConnection('live', 'live');
    loggedIn(true);
    document.body.dataset.run = run;
    // A new run of the world, or a stream opened anew (nothing replays what it missed).
    if (lastRun !== null && (run !== lastRun || again)) reloadView();
    again = false;
    lastRun = run;
  });
  source.addEventListener('reset', reloadView);
  source.addEventListener('message', (event) => {
    const message = JSON.parse(event.data);
    if (message.from === 'agent') onAgentMessage(message);
    else if (message.from === 'broker' && message.body?.type === 'approval') onApproval();
    else if (message.body?.type === 'undeliverable' && turns.has(message.reply_to)) {
      // The agent is not there: the turn that waited for it ends with the reason.
      const turn = turns.get(message.reply_to);
      changeLog(() => note(`The agent did not get this: ${message.body.reason || ''}`, 'note', turn));
      setRunning(turn, false);
    }
  });
  source.addEventListener('actors', (event) => onActors(JSON.parse(event.data)));
  source.addEventListener('graph', (event) => onGraph(JSON.parse(event.data)));
}

/** Reloads the current view's data (once, however many reasons came together). */
function reloadView() {
  clearTimeout(reloadTimer);
  reloadTimer = setTimeout(() => {
    document.body.dataset.reloads = String(Number(document.body.dataset.reloads || 0) + 1);
    loadView();
  }, 100);
}

// ---------------------------------------------------------------------------------------------
// People (owners): who may use the world, their tiers, and login links.

async function loadPeople() {
  let list;
  try {
    list = (await api('GET', '/api/people')).people || [];
    showError($('#people-error'), '');
  } catch (error) {
    showError($('#people-error'), error.message);
    return;
  }
  $('#people-table tbody').replaceChildren(...list.map((person) => {
    const tier = el('select', { class: 'tier', 'aria-label': `tier of ${person.id}` },
      ...['guest', 'member', 'owner'].map((t) => el('option', { value: t, selected: t === person.tier }, t)));
    tier.addEventListener('change', () => changePerson(person.id, 'tier', { tier: tier.value },
      `Make ${person.id} ${tier.value === 'owner' ? 'an' : 'a'} ${tier.value}?`));
    const link = el('button', { type: 'button', class: 'link-button' }, 'new link');
    link.addEventListener('click', async () => {
      try {
        showLink(person.id, (await api('POST', `/api/people/${encodeURIComponent(person.id)}/link`)).link);
      } catch (error) {
        showError($('#people-error'), error.message);
      }
    });
    const remove = el('button', { type: 'button', class: 'danger remove' }, 'remove');
    remove.addEventListener('click', () => changePerson(person.id, 'remove', {},
      `Remove ${person.id}? Their sessions end at once.`));
    return el('tr', { 'data-person': person.id },
      el('td', { class: 'id' }, person.id), el('td', {}, person.name),
      el('td', {}, tier), el('td', { class: 'actions' }, link, ' ', remove));
  }));
}

async function changePerson(id, action, body, question) {
  if (!await confirmDialog(question)) {
    loadPeople();
    return;
  }
  try {
    await api('POST', `/api/people/${encodeURIComponent(id)}/${action}`, body);
    showError($('#people-error'), '');
  } catch (error) {
    showError($('#people-error'), error.message);
  }
  loadPeople();
}

function showLink(who, link) {
  $('#person-link-who').textContent = who;
  $('#person-link-url').textContent = link;
  $('#person-link').hidden = false;
}

function setUpPeople() {
  $('#person-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const body = { id: $('#person-id').value.trim(), tier: $('#person-tier').value };
    const name = $('#person-name').value.trim();
    if (name) body.name = name;
    try {
      const added = await api('POST', '/api/people', body);
      showLink(added.person.id, added.link);
      $('#person-id').value = '';
      $('#person-name').value = '';
      showError($('#people-error'), '');
    } catch (error) {
      showError($('#people-error'), error.message);
    }
    loadPeople();
  });
}

// ---------------------------------------------------------------------------------------------
// Secrets (members their own, owners all): set, grant, revoke, remove; a value is only typed,
// never shown back.

/** Shows the secrets; a refusal just shown stays unless `clear`. */
async function loadSecrets(clear = true) {
  loadAudit();
  let list;
  try {
    list = (await api('GET', '/api/secrets')).secrets || [];
    if (clear) showError($('#secrets-error'), '');
  } catch (error) {
    showError($('#secrets-error'), error.message);
    return;
  }
  $('#secrets-table tbody').replaceChildren(...list.map((secret) => {
    const grants = el('td', { class: 'grants' }, ...secret.grants.flatMap((grant) => {
      const revoke = el('button', { type: 'button', class: 'link-button', 'aria-label': `revoke from ${grant.actor}` }, '×');
      revoke.addEventListener('click', () => changeSecret(secret.name, 'revoke', { actor: grant.actor },
        `Take ${secret.name} back from ${grant.actor}?`));
      return [el('span', { class: 'grant' }, grant.actor, ' ', revoke), ' '];
    }));
    const actor = el('input', { class: 'grant-actor', placeholder: 'actor', 'aria-label': `grant ${secret.name} to` });
    const grant = el('button', { type: 'button', class: 'link-button grant-button' }, 'grant');
    grant.addEventListener('click', () => changeSecret(secret.name, 'grant', { actor: actor.value.trim() }));
    grants.append(actor, ' ', grant);
    const remove = el('button', { type: 'button', class: 'danger remove' }, 'remove');
    remove.addEventListener('click', () => changeSecret(secret.name, 'remove', {},
      `Remove ${secret.name} and all its grants?`));
    const use = secret.last_use
      ? `${secret.last_use.at} by ${secret.last_use.actor} (${secret.last_use.status})` : 'never';
    return el('tr', { 'data-secret': secret.name },
      el('td', { class: 'id' }, secret.name), el('td', {}, secret.url), el('td', {}, secret.header),
      el('td', {}, secret.set_by), grants, el('td', {}, use), el('td', { class: 'actions' }, remove));
  }));
}

/** The audit log, for owners: each line's time, event, who, and the rest of its fields. */
async function loadAudit() {
  $('#audit').hidden = me?.tier !== 'owner';
  if (me?.tier !== 'owner') return;
  let lines;
  try {
    lines = (await api('GET', '/api/audit')).audit || [];
  } catch (error) {
    showError($('#secrets-error'), error.message);
    return;
  }
  $('#audit-table tbody').replaceChildren(...lines.map((line) => {
    const { at, event, by, ...rest } = line;
    const details = Object.entries(rest).filter(([, v]) => v !== null && v !== undefined)
      .map(([k, v]) => `${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`).join(' · ');
    return el('tr', { 'data-event': event || '' },
      el('td', {}, at || ''), el('td', { class: 'event' }, event || ''), el('td', {}, by || ''),
      el('td', { class: 'details' }, details));
  }));
}

async function changeSecret(name, action, body, question) {
  if (question && !await confirmDialog(question)) return;
  try {
    await api('POST', `/api/secrets/${encodeURIComponent(name)}/${action}`, body);
    loadSecrets();
  } catch (error) {
    showError($('#secrets-error'), error.message);
    loadSecrets(false);
  }
}

function setUpSecrets() {
  $('#secret-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const body = {
      name: $('#secret-name').value.trim(),
      url: $('#secret-url').value.trim(),
      header: $('#secret-header').value.trim(),
      format: $('#secret-format').value,
      value: $('#secret-value').value,
    };
    // The value leaves the page with this request and is not kept in it.
    $('#secret-value').value = '';
    try {
      await api('POST', '/api/secrets', body);
      $('#secret-name').value = '';
      loadSecrets();
    } catch (error) {
      showError($('#secrets-error'), error.message);
      loadSecrets(false);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Approvals (everyone): what waits for a decision. Who may decide is the broker's to check; a
// requested secret's value is typed into a password field and sent with the approval only.

/** Shows what waits; a refusal just shown stays unless `clear`. */
async function loadApprovals(clear = true) {
  let list;
  try {
    list = (await api('GET', '/api/approvals')).approvals || [];
    if (clear) showError($('#approvals-error'), '');
  } catch (error) {
    showError($('#approvals-error'), error.message);
    return;
  }
  $('#nav-approvals').classList.remove('attention');
  $('#approvals-empty').hidden = list.length > 0;
  $('#approvals-table tbody').replaceChildren(...list.map((held) => {
    const asker = held.actor ? `${held.asked_by} via ${held.actor}` : held.asked_by;
    const decides = held.for || `an ${held.approver}`;
    const actions = el('td', { class: 'actions' });
    let value = null;
    if (held.action === 'secret') {
      value = el('input', { type: 'password', class: 'approval-value', autocomplete: 'new-password',
        placeholder: 'value', 'aria-label': `value for ${held.id}` });
      actions.append(value);
    }
    const approve = el('button', { type: 'button', class: 'primary approve' },
      held.action === 'secret' ? 'Set and approve' : 'Approve');
    approve.addEventListener('click', () => decideApproval(held.id, 'approve', value));
    const deny = el('button', { type: 'button', class: 'danger deny' }, 'Deny');
    deny.addEventListener('click', () => decideApproval(held.id, 'deny', null));
    actions.append(approve, deny);
    return el('tr', { 'data-approval': held.id },
      el('td', { class: 'id' }, held.id), el('td', {}, asker), el('td', { class: 'what' }, held.what),
      el('td', {}, held.why || ''), el('td', {}, decides),
      el('td', {}, new Date(held.expires * 1000).toLocaleString()), actions);
  }));
}

async function decideApproval(id, action, valueInput) {
  const body = valueInput && valueInput.value ? { value: valueInput.value } : {};
  if (valueInput) valueInput.value = '';
  try {
    await api('POST', `/api/approvals/${encodeURIComponent(id)}/${action}`, body);
    loadApprovals();
  } catch (error) {
    showError($('#approvals-error'), error.message);
    loadApprovals(false);
  }
}

/** The broker said something waits for a decision: shown at once, or marked in the menu. */
function onApproval() {
  if (currentView === 'approvals') reloadView();
  else $('#nav-approvals').classList.add('attention');
}

// ---------------------------------------------------------------------------------------------
// Schedules (owners): what the scheduler will send, and to end one.

/** When a schedule fires, in words: its cron pattern and zone, its period, or its time. */
function scheduleWhen(schedule) {
  if (schedule.cron) return `cron ${schedule.cron} (${schedule.tz || 'UTC'})`;
  if (schedule.every) return `every ${schedule.every} s`;
  return `at ${schedule.at}`;
}

async function loadSchedules() {
  let list;
  try {
    list = (await api('GET', '/api/schedules')).schedules || [];
    showError($('#schedules-error'), '');
  } catch (error) {
    showError($('#schedules-error'), error.message);
    return;
  }
  $('#schedules-empty').hidden = list.length > 0;
  $('#schedules-table tbody').replaceChildren(...list.map((schedule) => {
    const end = el('button', { type: 'button', class: 'danger remove' }, 'end');
    end.addEventListener('click', () => endSchedule(schedule.id));
    return el('tr', { 'data-schedule': schedule.id },
      el('td', { class: 'id' }, schedule.id),
      el('td', {}, `${schedule.creator} (${schedule.creator_kind})`),
      el('td', {}, schedule.to),
      el('td', {}, scheduleWhen(schedule)),
      el('td', {}, schedule.next),
      el('td', {}, schedule.last || 'never'),
      el('td', { class: 'body' }, el('code', {}, JSON.stringify(schedule.body))),
      el('td', { class: 'actions' }, end));
  }));
}

async function endSchedule(id) {
  if (!await confirmDialog(`End schedule ${id}? It will not fire again.`)) return;
  try {
    await api('POST', `/api/schedules/${encodeURIComponent(id)}/unschedule`);
    showError($('#schedules-error'), '');
  } catch (error) {
    showError($('#schedules-error'), error.message);
  }
  loadSchedules();
}

// ---------------------------------------------------------------------------------------------
// Views and routing.

let currentView = null;

function parseRoute() {
  const [view, ...rest] = (location.hash || '#/chat').replace(/^#\/?/, '').split('/');
  if (view === 'actor' && rest.length) return { view: 'actor', id: decodeURIComponent(rest.join('/')) };
  return { view: ['chat', 'actors', 'graph', 'people', 'schedules', 'secrets', 'approvals'].includes(view) ? view : 'chat' };
}

function route() {
  const { view, id } = parseRoute();
  if (currentView === 'actor' && view !== 'actor') closeActor();
  currentView = view;
  for (const section of document.querySelectorAll('.view')) section.hidden = section.id !== `view-${view}`;
  for (const link of document.querySelectorAll('#nav a')) {
    const active = link.dataset.view === (view === 'actor' ? 'actors' : view);
    link.classList.toggle('active', active);
    if (active) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  $('#side').classList.remove('open');
  $('#nav-toggle').setAttribute('aria-expanded', 'false');
  document.title = `${view === 'actor' ? id : view[0].toUpperCase() + view.slice(1)} · Sausage`;
  if (view === 'actor') openActor(id);
  else loadView();
  if (view === 'chat') $('#chat-input').focus();
}

function loadView() {
  switch (currentView) {
    case 'chat': loadRooms(); return loadConversation();
    case 'actors': return loadActors();
    case 'actor': loadActors(); return loadActor();
    case 'graph': return loadGraph();
    case 'people': return loadPeople();
    case 'schedules': return loadSchedules();
    case 'secrets': return loadSecrets();
    case 'approvals': return loadApprovals();
    default: return null;
  }
}

function setUpNav() {
  $('#nav-toggle').addEventListener('click', () => {
    const open = $('#side').classList.toggle('open');
    $('#nav-toggle').setAttribute('aria-expanded', String(open));
  });
}

function main() {
  setUpDialog();
  setUpNav();
  setUpChat();
  setUpActors();
  setUpActor();
  setUpPeople();
  setUpSecrets();
  loadMe();
  window.addEventListener('hashchange', route);
  route();
  connect();
}

// Who asked for a version, and for whom when that was someone else (`web` for ann).
function requester(version) {
  const by = version.requested_by || '—';
  return version.requested_for && version.requested_for !== by
    ? `${by} for ${version.requested_for}` : by;
}

main();
