// The client sliding window (docs/design.md, the session allowance): pure functions, no
// SillyTavern or DOM, so they run under `node --test` as well as in the browser.
//
// When the session's stored pages near its allowance, the oldest complete exchanges are
// left out of the request until the history sent is under share × allowance. System
// messages (the prompt, the character card) always stay; an exchange runs from a genuine
// user message to the next one, so a tool call and its result never part.
//
// With the prompt cache (README: the sliding-window recipe), the cut moves in steps: it
// falls only where an exchange reaches a new grid line of the history's bytes, counted
// from the chat's start, one line every WINDOW_STEP of the window. Between steps each
// request sends the same first messages plus what the chat added, so the provider's
// prefix cache (and the edge's stepped paging) keeps what it has.

const encoder = new TextEncoder();

/** UTF-8 bytes of one message as JSON: what the edge would page for it. */
export function messageBytes(message) {
    return encoder.encode(JSON.stringify(message)).length;
}

/** A user turn typed by the player, not a user message carrying only tool results. */
export function isGenuineUser(message) {
    if (message?.role !== 'user') return false;
    const c = message.content;
    return !(Array.isArray(c) && c.length > 0 && c.every(part => part?.type === 'tool_result'));
}

/** Indices of the non-system messages, grouped into exchanges, oldest first. What comes
 * before the first user message (a greeting) is a group of its own. */
export function exchanges(messages) {
    const groups = [];
    messages.forEach((m, i) => {
        if (m?.role === 'system') return;
        if (groups.length === 0 || isGenuineUser(m)) groups.push([]);
        groups.at(-1).push(i);
    });
    return groups;
}

/** Bytes of history the window allows, from the last figures the edge reported
 * (`context_session`), or null when there are none. */
export function windowBudget(figures, share) {
    const limit = Number(figures?.limit_bytes);
    if (!(limit > 0) || !(share > 0)) return null;
    return Math.floor(limit * Math.min(share, 1));
}

/** True when the session's stored pages passed share × allowance. */
export function windowNeeded(figures, share) {
    const budget = windowBudget(figures, share);
    return budget !== null && Number(figures.active_bytes) > budget;
}

/** The grid's spacing with the prompt cache: this share of the window's bytes (README:
 * the sliding-window recipe). The cut moves at most once per step of growth, and the
 * history sent stays within one step (and one exchange) of the window. */
export const WINDOW_STEP = 0.20;

/** Bytes between two grid lines for a window of `budget` bytes. */
export function windowStep(budget, share = WINDOW_STEP) {
    return Math.max(1, Math.floor(budget * share));
}

/**
 * How many of the oldest exchanges (their `sizes`, oldest first) to leave out so that
 * the rest is at most `budget` bytes; never the newest. `step` 0: as few as fit. `step`
 * > 0: the first cut that fits and ends on a grid line (its last exchange reaches a line
 * every `step` bytes from the chat's start that its predecessor did not), else as few as
 * fit, else all but the newest.
 */
export function windowCut(sizes, budget, step = 0) {
    let rest = sizes.reduce((a, b) => a + b, 0);
    if (rest <= budget) return 0;
    let end = 0, line = 0, least = null;
    for (let g = 0; g < sizes.length - 1; g++) {
        rest -= sizes[g];
        end += sizes[g];
        const reached = step > 0 && Math.floor(end / step) > line;
        if (step > 0) line = Math.floor(end / step);
        if (rest > budget) continue;
        if (!step || reached) return g + 1;
        least ??= g + 1;
    }
    return least ?? Math.max(sizes.length - 1, 0);
}

/**
 * Leaves the oldest complete exchanges out until the non-system history is at most
 * `budget` bytes, the cut on the `step` grid when `step` > 0 (windowCut); the newest
 * exchange always stays. Returns the kept messages (a new array, order unchanged) and
 * how many were left out.
 */
export function slideWindow(messages, budget, step = 0) {
    const groups = exchanges(messages);
    const sizes = groups.map(g => g.reduce((n, i) => n + messageBytes(messages[i]), 0));
    const out = new Set(groups.slice(0, windowCut(sizes, budget, step)).flat());
    return { messages: messages.filter((_, i) => !out.has(i)), dropped: out.size };
}
