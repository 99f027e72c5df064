// The figures at the head of a paged stream (docs/design.md, streaming): pure, no DOM.
// A paged SSE stream starts with comment lines
//   : multillm-context-pages cp_a,cp_b
//   : multillm-context-session {"active_bytes":N,"limit_bytes":N,"active_pages":N}
// that may reach the page in many network reads: they count only once whole.

const PAGES = ': multillm-context-pages ';
const SESSION = ': multillm-context-session ';

/**
 * Reads the leading comment lines of `text` (the stream so far). `complete` is false
 * while a comment line may still be cut or followed by another; then read more.
 * `pages` is the list of page ids (null when no such line), `session` the figures.
 */
export function leadingComments(text, ended = false) {
    const out = { complete: false, pages: null, session: null };
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
