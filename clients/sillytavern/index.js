// MultiLLM context paging for SillyTavern.
//
// The edge stores old exchanges of a long chat byte-exactly and hands the model a
// `multillm_context_retrieve` tool. This extension makes a stock SillyTavern a client
// of that contract, without touching ST's files:
// - CHAT_COMPLETION_SETTINGS_READY: requests of the Custom source aimed at the edge get
//   the chat's roleplay session header, the key and `capabilities` through the Custom
//   source's own "include headers / include body" fields, which ST's server merges into
//   the upstream request; with the sliding window on, the oldest exchanges are left out
//   of `messages` once the session's pages near their allowance (window.js);
// - ToolManager: the retrieve tool's action fetches one exchange of a page (a page may
//   hold a block of several, larger than the model's window) and returns its exact
//   bytes; the search tool's action returns the edge's hits as compact text, each naming
//   its page and exchange;
// - ST's server drops response headers, so the page count and the session's figures are
//   read from the response ST relays to the page (`context_pages` / `context_session`,
//   or the stream's leading SSE comments, read whole: stream.js);
// - recall (setting "Bring back relevant moments automatically"): the request declares
//   `multillm_context_recall`, the edge quotes the stored exchanges most related to the
//   latest message right before it, and says which (`context_recall` / the stream's
//   `: multillm-context-recall` comment); the indicator counts them, the panel lists them;
// - prompt cache (setting "Keep the provider's prompt cache warm"): the request declares
//   `multillm_context_prompt_cache`, so the edge moves the paged boundary in steps and the
//   prompt starts as the last one did; the sliding window cuts in steps too (window.js);
// - cache use: the provider's usage on the edge's answer (a stream's final usage event,
//   which the extension asks for with `stream_options.include_usage`) says how much of the
//   input its prompt cache served; the indicator and the panel show it (usage.js);
// - spending (docs/design.md §4.1): the panel shows the key's usage today and its budget
//   (`GET /v1/roleplay/usage`, read after each answer), and a 429 is a toast naming the
//   limit the edge's `error.code` names and when it frees (spending.js);
// - the "Stored context" panel: the player searches the stored exchanges and opens the
//   one a hit quotes, or one of the moments recalled for the latest message;
// - sessions, pages and search are called from the page: through SillyTavern's CORS
//   proxy, or directly when the edge lists SillyTavern's origin in CORS_ALLOWED_ORIGINS.
import { yaml } from '../../../../lib.js';
import { slideWindow, windowBudget, windowNeeded, windowStep } from './window.js';
import { figures, leadingComments, recallList } from './stream.js';
import { StreamUsage, askForUsage, cacheUsage, usageText } from './usage.js';
import { LIMIT_CODES, limitToast, retryAfterSeconds, spendingText, spentLimit } from './spending.js';

const NAME = 'multillm_paging';
const TOOL = 'multillm_context_retrieve';
const SEARCH_TOOL = 'multillm_context_search';
const CAPABILITIES = ['multillm_context_retrieve', 'multillm_context_search'];
const RECALL_CAPABILITY = 'multillm_context_recall';
const PROMPT_CACHE_CAPABILITY = 'multillm_context_prompt_cache';
// What the window assumes when a 413 names no allowance (the edge's default, 1 MiB).
const DEFAULT_ALLOWANCE = 1024 * 1024;
const GENERATE_URL = '/api/backends/chat-completions/generate';
// ST's Connect / status check: its server calls `{Custom Endpoint}/models`.
const STATUS_URL = '/api/backends/chat-completions/status';
// Page ids are opaque; anything else the model names never reaches a URL.
const PAGE_ID = /^cp_[A-Za-z0-9_-]{1,128}$/;
// Recall is on by default: it needs no tool call (many models call tools rarely), it only
// acts on requests the edge pages, the edge bounds its share of the window and its
// relevance, and an edge without it ignores the capability.
// The prompt cache is on by default (README, Playing in SillyTavern): the player pays for
// every token resent; a cached prefix costs a tenth to a half, and the price is a window a
// few percent shorter on average. An edge without it ignores the capability.
const DEFAULTS = { enabled: true, edgeUrl: '', key: '', viaProxy: true, sessions: {},
    slidingWindow: true, windowPercent: 75, recall: true, promptCache: true };
const SETTINGS_HTML = new URL('./settings.html', import.meta.url);

const ctx = () => SillyTavern.getContext();

function settings() {
    const all = ctx().extensionSettings;
    all[NAME] = Object.assign({}, DEFAULTS, all[NAME]);
    return all[NAME];
}

const edgeBase = () => settings().edgeUrl.trim().replace(/\/+$/, '');

function chatState() {
    const meta = ctx().chatMetadata;
    if (!meta) return null;
    meta[NAME] ??= {};
    return meta[NAME];
}

/** True when this Chat Completion request goes to the configured edge. */
function targetsEdge(data) {
    const s = settings();
    const base = edgeBase();
    if (!s.enabled || !s.key || !base || data?.chat_completion_source !== 'custom') return false;
    const url = String(data.custom_url || '').trim().replace(/\/+$/, '');
    return url === base || url.startsWith(base + '/');
}

// ---------------------------------------------------------------- edge calls

class EdgeError extends Error {
    constructor(status, code, message, details = {}, retryAfter = null) {
        super(message);
        this.status = status;
        this.code = code;
        this.details = details;     // the edge's error object (`param`, figures)
        this.retryAfter = retryAfter;   // seconds, from a 429's Retry-After
    }
}

/**
 * One call to the edge's public API with the roleplay key. Through ST's CORS proxy the
 * path and query travel inside one URL-encoded path segment (the proxy forwards only
 * the path) and a 401 arrives as 400, so errors are told apart by the edge's `code`.
 */
async function edgeFetch(method, pathAndQuery, { json, headers: extra } = {}) {
    const s = settings();
    const target = edgeBase() + pathAndQuery;
    const url = s.viaProxy ? '/proxy/' + encodeURIComponent(target) : target;
    // ST's proxy forwards the method and the headers (its own taken out) and re-sends the
    // body it parsed as JSON: compact JSON arrives byte for byte.
    const headers = s.viaProxy ? ctx().getRequestHeaders() : {};
    Object.assign(headers, extra || {});
    headers.Authorization = `Bearer ${s.key}`;
    const init = { method, headers, cache: 'no-store' };
    if (json !== undefined) {
        headers['Content-Type'] = 'application/json';
        init.body = JSON.stringify(json);
    }
    let response;
    try {
        response = await fetch(url, init);
    } catch {
        // Called directly, a refused CORS preflight looks the same as an edge that is down.
        const hint = s.viaProxy ? '' : ' If it is up, list this page\'s origin in the edge\'s CORS_ALLOWED_ORIGINS, or reach it through SillyTavern\'s CORS proxy.';
        throw new EdgeError(0, 'edge_unreachable', `The MultiLLM edge at ${edgeBase()} cannot be reached.${hint}`);
    }
    const text = await response.text();
    let body = null;
    try { body = JSON.parse(text); } catch { /* not JSON: the proxy's own failure */ }
    if (response.ok && body) return body;
    const err = body?.error;
    const retry = retryAfterSeconds(response.headers.get('retry-after'));
    if (err?.code) throw new EdgeError(response.status, err.code, err.message || err.code, err, retry);
    throw new EdgeError(response.status, 'edge_unreachable', `The MultiLLM edge at ${edgeBase()} cannot be reached (HTTP ${response.status}).`);
}

const AUTH_CODES = new Set(['invalid_api_key', 'chat_not_granted', 'retention_zero']);

function toastEdgeError(err, title = 'MultiLLM edge') {
    if (LIMIT_CODES[err.code]) return toastLimit(err.code, err.retryAfter, err.details);
    const hint = AUTH_CODES.has(err.code) ? ' Check the roleplay key in the MultiLLM settings.' : '';
    toastr.error(`${err.message}${hint}`, title);
}

// ------------------------------------------------------------------ spending

/** The key's usage (`GET /v1/roleplay/usage`, today only), kept for the panel. */
let spending = null;

async function refreshSpending() {
    if (!settings().enabled || !settings().key || !edgeBase()) return null;
    try {
        spending = await edgeFetch('GET', '/v1/roleplay/usage?days=1');
    } catch {
        spending = null;       // an edge without the route, or unreachable: no line
    }
    renderSpending();
    return spending;
}

function renderSpending() {
    const line = document.getElementById('multillm_spending');
    if (!line) return;
    const text = settings().enabled ? spendingText(spending) : null;
    line.textContent = text ? `Usage ${text}.` : '';
}

/** A 429's toast: the limit (the edge's code, else the one the usage shows spent) and
 * when it frees; the figure from the error, else from the last usage read. */
function toastLimit(code, retryAfter, details = {}) {
    const what = LIMIT_CODES[code]?.what;
    const limit = details?.limit ?? (what ? spending?.limits?.[what] : null);
    const toast = limitToast(code, retryAfter ?? retryAfterSeconds(details?.retry_after), limit);
    if (toast) toastr.warning(toast.message, toast.title);
    return toast;
}

// The edge records a turn's usage just after its answer (docs/design.md §4.1): the panel
// reads it a moment later.
const SPENDING_DELAY_MS = 1000;

/** After an answer: the usage line again; a 429 (ST may keep only its status text) toasted. */
async function reportLimit(err) {
    if (!err || (err.code !== 'too_many_requests' && !LIMIT_CODES[err.code])) {
        setTimeout(refreshSpending, SPENDING_DELAY_MS);
        return;
    }
    const doc = await refreshSpending();
    const code = LIMIT_CODES[err.code] ? err.code : spentLimit(doc);
    if (code) toastLimit(code, err.retry_after ?? null, err);
    else toastr.warning(`The edge refused the request: ${err.message || 'too many requests'}. Try again later.`,
        'MultiLLM: a limit of this key was reached');
}

// ------------------------------------------------------------------ sessions

async function createSession() {
    const doc = await edgeFetch('POST', '/v1/roleplay/sessions');
    const state = chatState();
    state.session_id = doc.session_id;
    state.pages = 0;
    state.figures = null;
    state.recall = [];
    const chatId = ctx().getCurrentChatId();
    if (chatId) settings().sessions[chatId] = doc.session_id;
    ctx().saveSettingsDebounced();
    await ctx().saveMetadata();
    return doc.session_id;
}

async function sessionForChat() {
    return chatState()?.session_id || createSession();
}

async function endSession(chatId) {
    const sessions = settings().sessions;
    const sid = sessions[chatId];
    if (!sid) return;
    delete sessions[chatId];
    ctx().saveSettingsDebounced();
    try {
        await edgeFetch('DELETE', `/v1/roleplay/sessions/${encodeURIComponent(sid)}`);
    } catch (err) {
        if (err.code !== 'session_not_found') toastEdgeError(err, 'MultiLLM: could not end the session');
    }
}

// ------------------------------------------------------ request adjustments

/** A YAML include field as one object, read the way ST's server merges it. */
function yamlObject(text) {
    if (!text || !String(text).trim()) return {};
    try {
        const parsed = yaml.parse(String(text));
        if (Array.isArray(parsed)) return Object.assign({}, ...parsed.filter(x => x && typeof x === 'object' && !Array.isArray(x)));
        return parsed && typeof parsed === 'object' ? parsed : {};
    } catch {
        return {};
    }
}

function addEdgeFields(data, sessionId) {
    const headers = yamlObject(data.custom_include_headers);
    headers['X-Roleplay-Session-ID'] = sessionId;
    // ST's server spreads these after its own Authorization, so the key wins.
    headers.Authorization = `Bearer ${settings().key}`;
    data.custom_include_headers = JSON.stringify(headers);   // JSON is YAML
    const body = yamlObject(data.custom_include_body);
    const caps = Array.isArray(body.capabilities) ? body.capabilities : [];
    const ours = [...CAPABILITIES, ...(settings().recall ? [RECALL_CAPABILITY] : []),
        ...(settings().promptCache ? [PROMPT_CACHE_CAPABILITY] : [])];
    body.capabilities = [...caps, ...ours.filter(c => !caps.includes(c))];
    if (data.stream) askForUsage(body);
    data.custom_include_body = JSON.stringify(body);
}

// ------------------------------------------------------------ sliding window

const windowShare = () => Math.min(100, Math.max(1, Number(settings().windowPercent) || 75)) / 100;

function leftOutNotice(n) {
    return `${n} oldest message${n === 1 ? ' is' : 's are'} no longer sent to the model; they stay in your chat`;
}

/** The window's allowance for this chat once it started (it stays on for the chat: a new
 * session would otherwise be sent the same history into the same wall), else null. */
function windowLimit() {
    const state = chatState();
    if (!settings().slidingWindow || !state) return null;
    if (!state.window_limit && windowNeeded(state.figures, windowShare())) startWindow(state.figures.limit_bytes);
    return state.window_limit || null;
}

/** Leaves the oldest exchanges out of `data.messages` while the window is on, and says so.
 * `already`: messages this request's first pass left out (a request sent again is windowed
 * from what it already holds, so the count says how many the chat does not send). */
function applyWindow(data, already = 0) {
    const limit = windowLimit();
    if (!limit || !Array.isArray(data.messages)) {
        announceWindow(already);
        return already;
    }
    const budget = windowBudget({ limit_bytes: limit }, windowShare());
    // With the prompt cache the cut moves in steps: between them the request starts as
    // the last one did (README: the sliding-window recipe).
    const step = settings().promptCache ? windowStep(budget) : 0;
    const { messages, dropped } = slideWindow(data.messages, budget, step);
    data.messages = messages;
    announceWindow(already + dropped);
    return already + dropped;
}

function announceWindow(dropped) {
    const state = chatState();
    if (!state) return;
    if (dropped > 0 && !(state.left_out > 0)) toastr.info(leftOutNotice(dropped), 'MultiLLM: sliding window');
    if (state.left_out !== dropped) {
        state.left_out = dropped;
        ctx().saveMetadataDebounced();
    }
    showCount();
}

function startWindow(limitBytes) {
    const state = chatState();
    if (!state || !settings().slidingWindow) return;
    state.window_limit = Number(limitBytes) > 0 ? Number(limitBytes) : DEFAULT_ALLOWANCE;
    ctx().saveMetadataDebounced();
}

// Set when a request for the edge could not get its session: that request is answered
// locally with the reason instead of leaving without one.
let refused = null;

async function onSettingsReady(data) {
    refused = null;
    if (!targetsEdge(data)) return;
    try {
        addEdgeFields(data, await sessionForChat());
        applyWindow(data);
    } catch (err) {
        toastEdgeError(err, 'MultiLLM: no roleplay session');
        refused = err;
    }
}

// --------------------------------------------------------- response watcher

function showCount() {
    const el = document.getElementById('multillm_paging_indicator');
    if (!el) return;
    const state = chatState();
    const on = settings().enabled;
    const n = on ? Number(state?.pages || 0) : 0;
    const out = on ? Number(state?.left_out || 0) : 0;
    el.replaceChildren();
    if (n > 0) {
        const f = state.figures;
        el.append(iconLine('fa-box-archive', `${n} page${n === 1 ? '' : 's'} stored`
            + (f ? ` · ${kib(f.active_bytes)} of ${kib(f.limit_bytes)} KiB` : '')));
    }
    const recalled = on && settings().recall && Array.isArray(state?.recall) ? state.recall.length : 0;
    if (recalled > 0) {
        el.append(iconLine('fa-wand-magic-sparkles', `${recalled} moment${recalled === 1 ? '' : 's'} recalled`,
            'multillm-recall-note', 'Stored exchanges the edge brought back for the latest message (Extensions → Stored context lists them).'));
    }
    const cache = on ? usageText(state?.usage) : null;
    if (cache) {
        el.append(iconLine('fa-bolt', cache, 'multillm-cache-note',
            'What the provider reported for the latest request: its input, and the share its prompt cache served (billed at its cached price).'));
    }
    if (out > 0) {
        const note = document.createElement('div');
        note.className = 'multillm-window-note';
        note.textContent = leftOutNotice(out);
        el.append(note);
    }
    el.title = n > 0 ? 'Older exchanges of this chat are stored by the MultiLLM edge and retrievable by the model.' : '';
}

const kib = (bytes) => Math.round(Number(bytes) / 1024);

/** One line of the indicator: a Font Awesome icon, then `text` (never parsed as HTML). */
function iconLine(icon, text, className = '', title = '') {
    const line = document.createElement('div');
    line.className = className;
    line.title = title;
    line.innerHTML = `<i class="fa-solid ${icon}"></i> `;
    const span = document.createElement('span');
    span.textContent = text;
    line.append(span);
    return line;
}

/** The moments the edge recalled for the latest request ([] when none or not paged). */
function recordRecall(moments) {
    const state = chatState();
    if (state) {
        state.recall = moments;
        ctx().saveMetadataDebounced();
    }
    showCount();
    renderRecall();
}

/** What the provider's cache served for the latest request of the chat whose `state` it
 * is ({input, cached, written}, or null: the provider said nothing). */
function recordUsage(state, usage) {
    if (state && (state.usage ?? null) !== usage) {
        state.usage = usage;
        ctx().saveMetadataDebounced();
    }
    showCount();
    renderUsage();
}

/** Reads the rest of a stream's copy for its usage (its last events) without holding ST's
 * copy back: not awaited. A stream stopped or broken reports nothing. */
async function readStreamUsage(state, reader, decoder, text, ended) {
    const usage = new StreamUsage().push(text, ended);
    try {
        while (!ended) {
            const chunk = await reader.read();
            ended = chunk.done;
            usage.push(decoder.decode(chunk.value || new Uint8Array(), { stream: !ended }), ended);
        }
    } catch {
        return;
    }
    recordUsage(state, usage.usage);
}

/** The page count and, from an edge that reports them, the session's figures. */
function recordPages(count, session) {
    const state = chatState();
    if (!state) return showCount();
    state.pages = count;
    if (session) {
        state.figures = session;
        if (windowNeeded(session, windowShare())) startWindow(session.limit_bytes);
    }
    ctx().saveMetadataDebounced();
    showCount();
}

const WINDOW_CODES = new Set(['context_window_exceeded', 'context_session_limit_exceeded', 'context_page_too_large']);

/**
 * Reads what the edge said from the copy of ST's generate response → undefined, or the
 * edge's error {code, message, …}. `code` is 'payload_too_large' when ST's server kept
 * only the status text of a 413 (non-streaming).
 */
async function inspect(response) {
    if (!response.ok) {
        // Streaming requests: ST's server relays the edge's status and error body.
        const err = JSON.parse(await response.text())?.error;
        const retry = retryAfterSeconds(response.headers.get('retry-after'));
        return err ? { ...err, retry_after: err.retry_after ?? retry } : undefined;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let text = '';
    let ended = false;
    // A paged stream's comment lines may arrive in many reads: read until they end.
    let head = leadingComments(text);
    while (!ended && (text === '' || (text[0] !== '{' && !head.complete))) {
        const chunk = await reader.read();
        ended = chunk.done;
        text += decoder.decode(chunk.value || new Uint8Array(), { stream: !ended });
        head = leadingComments(text, ended);
    }
    if (!text.startsWith('{')) {
        // An unpaged stream carries no comment: the count stays, nothing was recalled.
        if (head.pages) recordPages(head.pages.length, head.session);
        recordRecall(head.recall || []);
        // The usage comes last: until then the latest request has none.
        recordUsage(chatState(), null);
        readStreamUsage(chatState(), reader, decoder, text, ended);
        return undefined;
    }
    while (!ended) {
        const chunk = await reader.read();
        ended = chunk.done;
        text += decoder.decode(chunk.value || new Uint8Array(), { stream: !ended });
    }
    const doc = JSON.parse(text);
    if (doc.error) {
        // Non-streaming: ST's server keeps only the edge's status text.
        const message = doc.error.message || '';
        if (/payload too large/i.test(message)) return { code: 'payload_too_large', message };
        if (/too many requests/i.test(message)) return { code: 'too_many_requests', message };
        return /^not found$/i.test(message) ? { code: 'session_not_found', message } : undefined;
    }
    recordPages(Array.isArray(doc.context_pages) ? doc.context_pages.length : 0, figures(doc.context_session));
    recordRecall(recallList(doc.context_recall));
    recordUsage(chatState(), cacheUsage(doc.usage));
    return undefined;
}

function reportTooLarge(err) {
    if (err?.code === 'payload_too_large') {
        toastr.error('The edge refused the request: the chat does not fit the model\'s context window or the session\'s page allowance. Turn on streaming to see the edge\'s exact message.',
            'MultiLLM edge: context too large');
    } else if (WINDOW_CODES.has(err?.code)) {
        toastr.error(err.message, 'MultiLLM edge: context too large');
    }
}

/**
 * Whether a refused request may be the session's allowance, which the window answers: the
 * edge said so (streaming), or, when ST kept only "Payload Too Large", the window is on
 * for this chat or would leave something out.
 */
function windowMayHelp(err, body) {
    if (!settings().slidingWindow) return false;
    if (err?.code === 'context_session_limit_exceeded') return true;
    if (err?.code !== 'payload_too_large') return false;
    const limit = chatState()?.figures?.limit_bytes || DEFAULT_ALLOWANCE;
    return !!windowLimit() || windowNeeded(chatState()?.figures, windowShare())
        || slideWindow(body.messages || [], windowBudget({ limit_bytes: limit }, windowShare())).dropped > 0;
}

/**
 * ST's status check of a Custom source pointing at the edge carries the roleplay key
 * (through the source's include-headers field, which ST's server merges into its
 * `GET {endpoint}/models`): the edge answers the models the key may use
 * (docs/design.md §2), so the check passes with the API key field left empty.
 */
function withStatusKey(init) {
    if (typeof init?.body !== 'string') return init;
    let data;
    try {
        data = JSON.parse(init.body);
    } catch {
        return init;
    }
    if (!targetsEdge(data)) return init;
    const headers = yamlObject(data.custom_include_headers);
    headers.Authorization = `Bearer ${settings().key}`;
    data.custom_include_headers = JSON.stringify(headers);   // JSON is YAML
    return { ...init, body: JSON.stringify(data) };
}

/**
 * Watches ST's own generate calls that this extension adjusted: a copy of the response is
 * read for the page count, the figures and the edge's errors; ST gets the original,
 * untouched. Sent again once, in a new session: a request whose session ended elsewhere
 * (404 session_not_found), and, with the window on, one refused for the session's
 * allowance (413 context_session_limit_exceeded), with the window applied.
 */
function watchGenerateResponses() {
    const send = window.fetch.bind(window);
    window.fetch = async (input, init) => {
        if (input === STATUS_URL) return send(input, withStatusKey(init));
        const ours = input === GENERATE_URL && typeof init?.body === 'string' ? JSON.parse(init.body) : null;
        if (!ours || !targetsEdge(ours)) return send(input, init);
        if (refused) {
            const message = `Not sent: ${refused.message}`;
            refused = null;
            return new Response(JSON.stringify({ error: { message } }),
                { status: 502, headers: { 'content-type': 'application/json' } });
        }
        if (!String(ours.custom_include_headers).includes('X-Roleplay-Session-ID')) return send(input, init);
        let response = await send(input, init);
        let err = await inspect(response.clone()).catch(() => undefined);
        const again = err?.code === 'session_not_found' || windowMayHelp(err, ours);
        if (again) {
            if (err.code !== 'session_not_found') {
                startWindow(err.limit_bytes ?? err.allowance_bytes ?? chatState()?.figures?.limit_bytes);
            }
            chatState().session_id = null;
            const already = Number(chatState().left_out) || 0;   // this request's first pass
            try {
                addEdgeFields(ours, await createSession());
                applyWindow(ours, already);
                response = await send(input, { ...init, body: JSON.stringify(ours) });
                err = await inspect(response.clone()).catch(() => undefined);
            } catch (e) {
                toastEdgeError(e, 'MultiLLM: no roleplay session');
                err = undefined;
            }
        }
        reportTooLarge(err);
        reportLimit(err);          // the usage line after every answer; a 429's toast
        return response;
    };
}

// ---------------------------------------------------------------------- tool

function decodeBase64Utf8(b64) {
    const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
}

/** The tool's `exchange` argument: absent → 1 (a page's oldest), else an integer ≥ 1,
 * or null when it is neither. */
function exchangeArg(exchange) {
    if (exchange === undefined || exchange === null) return 1;
    const n = typeof exchange === 'string' && /^\d{1,6}$/.test(exchange) ? Number(exchange) : exchange;
    return Number.isInteger(n) && n >= 1 && n <= 999999 ? n : null;
}

/** One exchange of a stored page (docs/design.md §6: `exchange=N`). */
function fetchExchange(pageId, exchange) {
    const sessionId = chatState()?.session_id || '';
    return edgeFetch('GET', `/v1/context/pages/${pageId}`
        + `?roleplay_session_id=${encodeURIComponent(sessionId)}&exchange=${exchange}`);
}

async function retrievePage({ page_id: pageId, exchange: arg } = {}) {
    if (typeof pageId !== 'string' || !PAGE_ID.test(pageId)) {
        return 'No such page: page_id must be one of the cp_… ids named in the stored-context note.';
    }
    const exchange = exchangeArg(arg);
    if (exchange === null) return 'Not retrieved: exchange must be an integer from 1 (1 = the page\'s oldest).';
    try {
        // The exact stored bytes of that exchange: a JSON array of its original messages.
        // Never the whole page: a block of exchanges can be larger than the model's window.
        return decodeBase64Utf8((await fetchExchange(pageId, exchange)).body_base64);
    } catch (err) {
        if (err.code === 'context_page_not_found') {
            return `Page ${pageId} is no longer available (expired or its session ended). Continue without it.`;
        }
        const held = err.details?.exchanges;
        if (err.code === 'invalid_request' && err.details?.param === 'exchange' && Number.isInteger(held)) {
            return `Page ${pageId} holds ${held} exchange${held === 1 ? '' : 's'}: exchange must be from 1 to ${held}.`;
        }
        toastEdgeError(err, 'MultiLLM: page retrieval failed');
        return `Page ${pageId} could not be retrieved (${err.code}).`;
    }
}

const QUERY_MAX = 1000;

/** POST /v1/context/search in this chat's session → the edge's answer (throws EdgeError). */
async function searchStored(query, limit) {
    const sessionId = chatState()?.session_id;
    if (!sessionId) throw new EdgeError(404, 'session_not_found', 'This chat has no stored context yet.');
    return edgeFetch('POST', '/v1/context/search',
        { json: { query, limit }, headers: { 'X-Roleplay-Session-ID': sessionId } });
}

/** The tool's arguments checked before anything reaches the edge, or an error text. */
function searchArgs({ query, limit } = {}) {
    if (typeof query !== 'string' || !query.trim() || query.length > QUERY_MAX) {
        return { error: `query must be 1–${QUERY_MAX} characters of words to look for.` };
    }
    const n = limit === undefined || limit === null ? 5 : Number(limit);
    if (!Number.isInteger(n) || n < 1 || n > 10) return { error: 'limit must be an integer from 1 to 10.' };
    return { query, limit: n };
}

/** The exchange of the page a hit quotes (1 from an edge that names none). */
const hitExchange = (h) => (Number.isInteger(h?.exchange) && h.exchange >= 1 ? h.exchange : 1);

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

/** What a search went through: "N exchanges in M pages" (an edge before exchange-level
 * search reports pages only: "M pages"). */
function searched(doc, stored = '') {
    const pages = Number.isInteger(doc?.pages_searched) ? doc.pages_searched : 0;
    if (!Number.isInteger(doc?.exchanges_searched)) return plural(pages, `${stored}page`);
    return `${plural(doc.exchanges_searched, `${stored}exchange`)} in ${plural(pages, 'page')}`;
}

/** The hits as compact text for the model: one line per hit (page id, exchange, role,
 * excerpt), the two arguments retrieval takes first. A hit is one exchange; a page may
 * give several. */
function hitsText(query, doc) {
    const hits = Array.isArray(doc?.data) ? doc.data : [];
    if (!hits.length) return `No stored exchange matches "${query}" (${searched(doc)} searched).`;
    const lines = hits.map(h => `${h.page_id} exchange=${hitExchange(h)} ${h.excerpt?.role ?? '?'}: `
        + String(h.excerpt?.text ?? '').replace(/\s+/g, ' '));
    return [`Stored exchanges matching "${query}", best first (${hits.length} of ${searched(doc)} searched):`,
        ...lines, `Call ${TOOL} with a page_id and its exchange to read that exchange whole.`].join('\n');
}

async function searchPages(args) {
    const a = searchArgs(args);
    if (a.error) return `Search not run: ${a.error}`;
    try {
        return hitsText(a.query, await searchStored(a.query, a.limit));
    } catch (err) {
        if (err.code === 'session_not_found') return 'No stored context for this chat (yet): nothing to search.';
        toastEdgeError(err, 'MultiLLM: search failed');
        return `The stored context could not be searched (${err.code}).`;
    }
}

function registerTool() {
    ctx().registerFunctionTool({
        name: TOOL,
        displayName: 'Retrieve stored context',
        description: 'Retrieve an earlier exchange of this conversation stored by the MultiLLM edge.',
        parameters: {
            type: 'object',
            properties: {
                page_id: { type: 'string', description: 'A page_id (cp_...) named in the stored-context note.' },
                exchange: { type: 'integer', minimum: 1, description: 'Which exchange of the page (1 = its oldest; search results name it). Default 1.' },
            },
            required: ['page_id'],
        },
        action: retrievePage,
        formatMessage: () => 'Retrieving stored context…',
        // The edge adds the tool's schema itself when it pages; sending it too would
        // duplicate the function name. Registered only to be invocable.
        shouldRegister: () => false,
    });
    ctx().registerFunctionTool({
        name: SEARCH_TOOL,
        displayName: 'Search stored context',
        description: 'Search the earlier exchanges of this conversation stored by the MultiLLM edge, by words they contain.',
        parameters: {
            type: 'object',
            properties: {
                query: { type: 'string', description: 'Words to look for: names, places, events, promises.' },
                limit: { type: 'integer', minimum: 1, maximum: 10, description: 'How many exchanges (default 5).' },
            },
            required: ['query'],
        },
        action: searchPages,
        formatMessage: () => 'Searching stored context…',
        // As for retrieval: the edge adds this schema itself to paged requests.
        shouldRegister: () => false,
    });
}

// ------------------------------------------------------- stored-context panel

function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;     // page text is never parsed as HTML
    return node;
}

function messageText(m) {
    if (typeof m?.content === 'string') return m.content;
    if (Array.isArray(m?.content)) return m.content.map(p => (typeof p?.text === 'string' ? p.text : JSON.stringify(p))).join('\n');
    if (m?.tool_calls) return JSON.stringify(m.tool_calls);
    return JSON.stringify(m?.content ?? m);
}

/** Opens the exchange a hit quotes (only that one: a page may hold many). */
async function openExchange(pageId, exchange, into) {
    into.replaceChildren(el('small', 'multillm-paging-note', 'Opening…'));
    try {
        const doc = await fetchExchange(pageId, exchange);
        const messages = JSON.parse(decodeBase64Utf8(doc.body_base64));
        const held = Number.isInteger(doc.exchanges) ? doc.exchanges : null;
        const note = el('small', 'multillm-paging-note multillm-page-where',
            held > 1 ? `Exchange ${exchange} of the ${held} stored in this page:` : 'The stored exchange:');
        into.replaceChildren(note, ...messages.map(m => {
            const row = el('div', 'multillm-page-message');
            row.append(el('b', null, `${m?.role ?? '?'}: `), el('span', null, messageText(m)));
            return row;
        }));
    } catch (err) {
        into.replaceChildren(el('small', 'multillm-paging-note',
            err.code === 'context_page_not_found' ? 'This page is no longer available.' : err.message));
    }
}

function renderHits(doc) {
    const list = document.getElementById('multillm_search_results');
    const hits = Array.isArray(doc?.data) ? doc.data : [];
    list.replaceChildren(el('small', 'multillm-paging-note',
        hits.length ? `${hits.length} of ${searched(doc, 'stored ')} match.` : `No stored exchange matches (${searched(doc)} searched).`));
    for (const h of hits) {
        const item = el('div', 'multillm-search-hit');
        const { head, view } = momentHead(h.page_id, hitExchange(h), el('b', 'multillm-search-role', h.excerpt?.role ?? '?'));
        item.append(head, el('div', 'multillm-search-excerpt', h.excerpt?.text ?? ''), view);
        list.append(item);
    }
}

/** One stored exchange's line in the panel: `lead`, "exchange N of page cp_…", an Open
 * button that shows it whole (only that exchange: a page may hold many) in `view`. */
function momentHead(pageId, exchange, lead) {
    const head = el('div', 'multillm-search-hit-head');
    const where = el('span', 'multillm-search-where');
    where.append(el('span', 'multillm-search-exchange', `exchange ${exchange}`), ' of page ',
        el('code', 'multillm-search-id', pageId));
    where.title = `${pageId}, exchange ${exchange}`;
    head.append(lead, where);
    const open = el('button', 'menu_button multillm-search-open', 'Open');
    open.type = 'button';
    open.title = 'Show this whole exchange as it was stored';
    head.append(open);
    const view = el('div', 'multillm-page-view');
    open.addEventListener('click', () => (view.childElementCount ? view.replaceChildren() : openExchange(pageId, exchange, view)));
    return { head, view };
}

/** What the provider's cache served for the latest request, in the Stored context panel. */
function renderUsage() {
    const line = document.getElementById('multillm_cache_usage');
    if (!line) return;
    const text = settings().enabled ? usageText(chatState()?.usage) : null;
    line.textContent = text ? `Latest request: ${text}.` : '';
}

/** The open chat's figures: the indicator, and the panel's recalled moments and cache use. */
function showChat() {
    showCount();
    renderRecall();
    renderUsage();
    renderSpending();
}

/** The moments the edge recalled for the latest message, in the Stored context panel. */
function renderRecall() {
    const list = document.getElementById('multillm_recall_list');
    if (!list) return;
    const state = chatState();
    const moments = settings().enabled && settings().recall && Array.isArray(state?.recall) ? state.recall : [];
    list.replaceChildren();
    if (!moments.length) return;
    list.append(el('small', 'multillm-paging-note',
        `${plural(moments.length, 'moment')} brought back for the latest message, most relevant first:`));
    for (const m of moments) {
        const item = el('div', 'multillm-search-hit multillm-recall-moment');
        const score = Number.isFinite(m.score) ? `score ${m.score.toFixed(2)}` : 'recalled';
        const { head, view } = momentHead(m.page_id, m.exchange, el('b', 'multillm-recall-score', score));
        item.append(head, view);
        list.append(item);
    }
}

async function runPanelSearch() {
    const list = document.getElementById('multillm_search_results');
    const query = String($('#multillm_search_query').val() || '');
    const a = searchArgs({ query, limit: 10 });
    if (a.error) return list.replaceChildren(el('small', 'multillm-paging-note', `Type what to look for (${a.error})`));
    list.replaceChildren(el('small', 'multillm-paging-note', 'Searching…'));
    try {
        renderHits(await searchStored(a.query, a.limit));
    } catch (err) {
        list.replaceChildren(el('small', 'multillm-paging-note', err.message));
    }
}

// ------------------------------------------------------------------ settings UI

function renderKeyState() {
    const stored = !!settings().key;
    $('#multillm_paging_key_state').text(stored ? 'A key is stored. Paste a new one to replace it.' : 'No key stored.');
}

async function mountSettings() {
    const html = await (await fetch(SETTINGS_HTML)).text();
    $('#extensions_settings2').append(html);
    const s = settings();
    $('#multillm_paging_enabled').prop('checked', s.enabled).on('change', function () {
        settings().enabled = this.checked;
        ctx().saveSettingsDebounced();
        showChat();
    });
    $('#multillm_paging_proxy').prop('checked', s.viaProxy).on('change', function () {
        settings().viaProxy = this.checked;
        ctx().saveSettingsDebounced();
    });
    $('#multillm_paging_url').val(s.edgeUrl).on('change', function () {
        settings().edgeUrl = String(this.value).trim();
        ctx().saveSettingsDebounced();
    });
    // The key is taken on change and the field emptied at once: it is never shown again.
    $('#multillm_paging_key').on('change', function () {
        const key = String(this.value).trim();
        this.value = '';
        if (!key) return;
        settings().key = key;
        ctx().saveSettingsDebounced();
        renderKeyState();
    });
    $('#multillm_paging_recall').prop('checked', s.recall).on('change', function () {
        settings().recall = this.checked;
        ctx().saveSettingsDebounced();
        showCount();
        renderRecall();
    });
    $('#multillm_paging_prompt_cache').prop('checked', s.promptCache).on('change', function () {
        settings().promptCache = this.checked;
        ctx().saveSettingsDebounced();
    });
    $('#multillm_paging_window').prop('checked', s.slidingWindow).on('change', function () {
        settings().slidingWindow = this.checked;
        ctx().saveSettingsDebounced();
    });
    $('#multillm_paging_window_percent').val(s.windowPercent).on('change', function () {
        const n = Math.round(Number(this.value));
        settings().windowPercent = Number.isFinite(n) ? Math.min(100, Math.max(1, n)) : DEFAULTS.windowPercent;
        this.value = settings().windowPercent;
        ctx().saveSettingsDebounced();
    });
    $('#multillm_search_form').on('submit', (e) => { e.preventDefault(); runPanelSearch(); });
    renderKeyState();
}

// ------------------------------------------------------------------------ init

jQuery(async () => {
    const { eventSource, eventTypes } = ctx();
    await mountSettings();
    $('#sheld').append('<div id="multillm_paging_indicator" aria-live="polite"></div>');
    registerTool();
    watchGenerateResponses();
    eventSource.on(eventTypes.CHAT_COMPLETION_SETTINGS_READY, onSettingsReady);
    eventSource.on(eventTypes.CHAT_CHANGED, () => {
        showChat();
        $('#multillm_search_results').empty();
    });
    eventSource.on(eventTypes.CHAT_DELETED, endSession);
    refreshSpending();
    eventSource.on(eventTypes.GROUP_CHAT_DELETED, endSession);
    showChat();
});
