// MultiLLM context paging for SillyTavern.
//
// The edge stores old exchanges of a long chat byte-exactly and hands the model a
// `multillm_context_retrieve` tool. This extension makes a stock SillyTavern a client
// of that contract, without touching ST's files:
// - CHAT_COMPLETION_SETTINGS_READY: requests of the Custom source aimed at the edge get
//   the chat's roleplay session header, the key and `capabilities` through the Custom
//   source's own "include headers / include body" fields, which ST's server merges into
//   the upstream request;
// - ToolManager: the tool's action fetches the page and returns its exact bytes;
// - ST's server drops response headers, so the page count is read from the response
//   ST relays to the page (`context_pages`, or the stream's leading SSE comment).
import { yaml } from '../../../../lib.js';

const NAME = 'multillm_paging';
const TOOL = 'multillm_context_retrieve';
const CAPABILITY = 'multillm_context_retrieve';
const GENERATE_URL = '/api/backends/chat-completions/generate';
// Page ids are opaque; anything else the model names never reaches a URL.
const PAGE_ID = /^cp_[A-Za-z0-9_-]{1,128}$/;
const DEFAULTS = { enabled: true, edgeUrl: '', key: '', viaProxy: true, sessions: {} };
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
    constructor(status, code, message) {
        super(message);
        this.status = status;
        this.code = code;
    }
}

/**
 * One call to the edge's public API with the roleplay key. Through ST's CORS proxy the
 * path and query travel inside one URL-encoded path segment (the proxy forwards only
 * the path) and a 401 arrives as 400, so errors are told apart by the edge's `code`.
 */
async function edgeFetch(method, pathAndQuery) {
    const s = settings();
    const target = edgeBase() + pathAndQuery;
    const url = s.viaProxy ? '/proxy/' + encodeURIComponent(target) : target;
    const headers = s.viaProxy ? ctx().getRequestHeaders() : {};
    headers.Authorization = `Bearer ${s.key}`;
    let response;
    try {
        response = await fetch(url, { method, headers, cache: 'no-store' });
    } catch {
        throw new EdgeError(0, 'edge_unreachable', `The MultiLLM edge at ${edgeBase()} cannot be reached.`);
    }
    const text = await response.text();
    let body = null;
    try { body = JSON.parse(text); } catch { /* not JSON: the proxy's own failure */ }
    if (response.ok && body) return body;
    const err = body?.error;
    if (err?.code) throw new EdgeError(response.status, err.code, err.message || err.code);
    throw new EdgeError(response.status, 'edge_unreachable', `The MultiLLM edge at ${edgeBase()} cannot be reached (HTTP ${response.status}).`);
}

const AUTH_CODES = new Set(['invalid_api_key', 'chat_not_granted', 'retention_zero']);

function toastEdgeError(err, title = 'MultiLLM edge') {
    const hint = AUTH_CODES.has(err.code) ? ' Check the roleplay key in the MultiLLM settings.' : '';
    toastr.error(`${err.message}${hint}`, title);
}

// ------------------------------------------------------------------ sessions

async function createSession() {
    const doc = await edgeFetch('POST', '/v1/roleplay/sessions');
    const state = chatState();
    state.session_id = doc.session_id;
    state.pages = 0;
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
    body.capabilities = caps.includes(CAPABILITY) ? caps : [...caps, CAPABILITY];
    data.custom_include_body = JSON.stringify(body);
}

// Set when a request for the edge could not get its session: that request is answered
// locally with the reason instead of leaving without one.
let refused = null;

async function onSettingsReady(data) {
    refused = null;
    if (!targetsEdge(data)) return;
    try {
        addEdgeFields(data, await sessionForChat());
    } catch (err) {
        toastEdgeError(err, 'MultiLLM: no roleplay session');
        refused = err;
    }
}

// --------------------------------------------------------- response watcher

function showCount() {
    const el = document.getElementById('multillm_paging_indicator');
    if (!el) return;
    const n = settings().enabled ? Number(chatState()?.pages || 0) : 0;
    el.innerHTML = n > 0 ? `<i class="fa-solid fa-box-archive"></i> <span>${n} page${n === 1 ? '' : 's'} stored</span>` : '';
    el.title = n > 0 ? 'Older exchanges of this chat are stored by the MultiLLM edge and retrievable by the model.' : '';
}

async function recordPages(count) {
    const state = chatState();
    if (!state || state.pages === count) return showCount();
    state.pages = count;
    ctx().saveMetadataDebounced();
    showCount();
}

const WINDOW_CODES = new Set(['context_window_exceeded', 'context_session_limit_exceeded', 'context_page_too_large']);

/** Reads what the edge said from the copy of ST's generate response. */
async function inspect(response) {
    if (!response.ok) {
        // Streaming requests: ST's server relays the edge's status and error body.
        const err = JSON.parse(await response.text())?.error;
        if (WINDOW_CODES.has(err?.code)) toastr.error(err.message, 'MultiLLM edge: context too large');
        return err?.code;
    }
    const reader = response.body.getReader();
    const { value } = await reader.read();
    const head = new TextDecoder().decode(value || new Uint8Array());
    const comment = /^: multillm-context-pages ([^\r\n]*)/.exec(head);
    if (comment) {
        reader.cancel();
        return recordPages(comment[1].split(',').filter(Boolean).length);
    }
    if (!head.startsWith('{')) {
        // A stream: its page list travels in headers ST does not relay; the count stays.
        reader.cancel();
        return undefined;
    }
    let text = head;
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
        text += new TextDecoder().decode(chunk.value, { stream: true });
    }
    const doc = JSON.parse(text);
    if (doc.error) {
        // Non-streaming: ST's server keeps only the edge's status text.
        if (/payload too large/i.test(doc.error.message || '')) {
            toastr.error('The edge refused the request: the chat does not fit the model\'s context window or the session\'s page allowance. Turn on streaming to see the edge\'s exact message.',
                'MultiLLM edge: context too large');
        }
        return /^not found$/i.test(doc.error.message || '') ? 'session_not_found' : undefined;
    }
    return recordPages(Array.isArray(doc.context_pages) ? doc.context_pages.length : 0);
}

/**
 * Watches ST's own generate calls that this extension adjusted: a copy of the response is
 * read for the page count and the edge's errors; ST gets the original, untouched. A
 * session ended elsewhere (404 session_not_found) is replaced once and the request sent
 * again with the new session.
 */
function watchGenerateResponses() {
    const send = window.fetch.bind(window);
    window.fetch = async (input, init) => {
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
        const code = await inspect(response.clone()).catch(() => undefined);
        if (code === 'session_not_found') {
            chatState().session_id = null;
            try {
                addEdgeFields(ours, await createSession());
                response = await send(input, { ...init, body: JSON.stringify(ours) });
                await inspect(response.clone()).catch(() => undefined);
            } catch (err) {
                toastEdgeError(err, 'MultiLLM: no roleplay session');
            }
        }
        return response;
    };
}

// ---------------------------------------------------------------------- tool

function decodeBase64Utf8(b64) {
    const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
}

async function retrievePage({ page_id: pageId } = {}) {
    if (typeof pageId !== 'string' || !PAGE_ID.test(pageId)) {
        return 'No such page: page_id must be one of the cp_… ids named in the stored-context note.';
    }
    const sessionId = chatState()?.session_id;
    try {
        const doc = await edgeFetch('GET',
            `/v1/context/pages/${pageId}?roleplay_session_id=${encodeURIComponent(sessionId || '')}`);
        // The exact stored bytes: a JSON array of the exchange's original messages.
        return decodeBase64Utf8(doc.body_base64);
    } catch (err) {
        if (err.code === 'context_page_not_found') {
            return `Page ${pageId} is no longer available (expired or its session ended). Continue without it.`;
        }
        toastEdgeError(err, 'MultiLLM: page retrieval failed');
        return `Page ${pageId} could not be retrieved (${err.code}).`;
    }
}

function registerTool() {
    ctx().registerFunctionTool({
        name: TOOL,
        displayName: 'Retrieve stored context',
        description: 'Retrieve an earlier exchange of this conversation stored by the MultiLLM edge.',
        parameters: {
            type: 'object',
            properties: { page_id: { type: 'string', description: 'A page_id (cp_...) named in the stored-context note.' } },
            required: ['page_id'],
        },
        action: retrievePage,
        formatMessage: () => 'Retrieving stored context…',
        // The edge adds the tool's schema itself when it pages; sending it too would
        // duplicate the function name. Registered only to be invocable.
        shouldRegister: () => false,
    });
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
        showCount();
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
    eventSource.on(eventTypes.CHAT_CHANGED, showCount);
    eventSource.on(eventTypes.CHAT_DELETED, endSession);
    eventSource.on(eventTypes.GROUP_CHAT_DELETED, endSession);
    showCount();
});
