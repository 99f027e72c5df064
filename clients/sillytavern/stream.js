// The figures at the head of a paged stream (docs/design.md, streaming): pure, no DOM.
// A paged SSE stream starts with comment lines
//   : multillm-context-pages cp_a,cp_b
//   : multillm-context-session {"active_bytes":N,"limit_bytes":N,"active_pages":N}
//   : multillm-context-recall cp_a:3,cp_b:1      (capability multillm_context_recall)
// that may reach the page in many network reads: they count only once whole.

const PAGES = ': multillm-context-pages ';
const SESSION = ': multillm-context-session ';
const RECALL = ': multillm-context-recall';
// Page ids are opaque; anything else never reaches a URL or the DOM as an id.
const PAGE_ID = /^cp_[A-Za-z0-9_-]{1,128}$/;

/**
 * Reads the leading comment lines of `text` (the stream so far). `complete` is false
 * while a comment line may still be cut or followed by another; then read more.
 * `pages` is the list of page ids (null when no such line), `session` the figures.
 */
export function leadingComments(text, ended = false) {
    const out = { complete: false, pages: null, session: null, recall: null };
    let pos = 0;
    for (;;) {
        while (text[pos] === '\n' || text[pos] === '\r') pos++;
        if (pos >= text.length) return { ...out, complete: ended };
        if (text[pos] !== ':') return { ...out, complete: true };
        const nl = text.indexOf('\n', pos);
        if (nl < 0) return { ...out, complete: ended };
        const line = text.slice(pos, nl).replace(/\r$/, '');
        if (line.startsWith(PAGES)) out.pages = line.slice(PAGES.length).split(',').filter(Boolean);
        if (line.startsWith(SESSION)) out.session = figures(safeJson(line.slice(SESSION.length)));
        if (line === RECALL || line.startsWith(RECALL + ' ')) out.recall = recallPairs(line.slice(RECALL.length));
        pos = nl + 1;
    }
}

function safeJson(text) {
    try { return JSON.parse(text); } catch { return null; }
}

/** `{active_bytes, limit_bytes, active_pages}` as numbers, or null if not all there. */
export function figures(doc) {
    if (!doc || typeof doc !== 'object') return null;
    const f = { active_bytes: doc.active_bytes, limit_bytes: doc.limit_bytes, active_pages: doc.active_pages };
    return Object.values(f).every(v => Number.isFinite(v) && v >= 0) ? f : null;
}

/** A recalled moment `{page_id, exchange, score}` (score null when the source has none),
 * or null when `m` is not one: a cp_… id and a whole exchange number from 1. */
function moment(pageId, exchange, score = null) {
    if (typeof pageId !== 'string' || !PAGE_ID.test(pageId)) return null;
    if (!Number.isInteger(exchange) || exchange < 1) return null;
    return { page_id: pageId, exchange, score: Number.isFinite(score) ? score : null };
}

/** The stream comment's `cp_a:3,cp_b:1` (possibly empty) as moments. */
export function recallPairs(text) {
    return String(text).trim().split(',').filter(Boolean).map((pair) => {
        const at = pair.lastIndexOf(':');
        const n = pair.slice(at + 1);
        return at > 0 && /^\d{1,6}$/.test(n) ? moment(pair.slice(0, at), Number(n)) : null;
    }).filter(Boolean);
}

/** A whole answer's `context_recall` as moments, most relevant first; [] when absent
 * (nothing recalled). */
export function recallList(list) {
    if (!Array.isArray(list)) return [];
    const moments = list.map(m => moment(m?.page_id, m?.exchange, m?.score)).filter(Boolean);
    return moments.sort((a, b) => (b.score ?? -Infinity) - (a.score ?? -Infinity) || 0);
}
