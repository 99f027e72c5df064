// The client sliding window (docs/design.md, the session allowance): pure functions, no
// SillyTavern or DOM, so they run under `node --test` as well as in the browser.
//
// When the session's stored pages near its allowance, the oldest complete exchanges are
// left out of the request until the history sent is under share × allowance. System
// messages (the prompt, the character card) always stay; an exchange runs from a genuine
// user message to the next one, so a tool call and its result never part.

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

/**
 * Leaves the oldest complete exchanges out until the non-system history is at most
 * `budget` bytes; the newest exchange always stays. Returns the kept messages (a new
 * array, order unchanged) and how many were left out.
 */
export function slideWindow(messages, budget) {
    const groups = exchanges(messages);
    const size = groups.map(g => g.reduce((n, i) => n + messageBytes(messages[i]), 0));
    let total = size.reduce((a, b) => a + b, 0);
    const out = new Set();
    for (let g = 0; g < groups.length - 1 && total > budget; g++) {
        groups[g].forEach(i => out.add(i));
        total -= size[g];
    }
    return { messages: messages.filter((_, i) => !out.has(i)), dropped: out.size };
}
