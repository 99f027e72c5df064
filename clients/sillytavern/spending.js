// What the player has spent and may still spend (docs/design.md §4.1): the line the
// Stored context panel shows from `GET /v1/roleplay/usage`, and the toast of a 429 that
// names the limit and when it frees. Pure: no SillyTavern, no DOM (node --test runs it).
import { tokens } from './usage.js';

/** The edge's 429 codes, each with the limit it names (docs/design.md §4.1). */
export const LIMIT_CODES = {
    rate_limit_exceeded: { title: 'request rate limit', what: 'requests_per_minute' },
    token_budget_exceeded: { title: 'daily token budget', what: 'tokens_per_day' },
    session_limit_reached: { title: 'daily session limit', what: 'sessions_per_day' },
};

/** "today: 412k of 1M tokens" (or "today: 412k tokens" with no budget), the day's
 * requests, and whether the provider left some figures to the edge's estimate. */
export function spendingText(doc) {
    const today = Array.isArray(doc?.days) ? doc.days[0] : null;
    if (!today) return null;
    const used = (Number(today.input_tokens) || 0) + (Number(today.output_tokens) || 0);
    const budget = doc?.limits?.tokens_per_day;
    const of = Number.isFinite(budget) ? ` of ${tokens(budget)}` : '';
    const requests = Number(today.requests) || 0;
    const count = `${requests} request${requests === 1 ? '' : 's'}`;
    const estimated = today.estimated ? ', partly estimated' : '';
    const rate = doc?.limits?.requests_per_minute;
    const perMinute = Number.isFinite(rate) ? `; at most ${rate} a minute` : '';
    return `today: ${tokens(used)}${of} tokens, ${count}${estimated}${perMinute}`;
}

/** Whole seconds → "in 42 s", "in 3 min", "in 5 h 12 min"; null when unknown. */
export function freesIn(seconds) {
    if (seconds === null || seconds === undefined || seconds === '') return null;
    const s = Math.ceil(Number(seconds));
    if (!Number.isFinite(s) || s < 0) return null;
    if (s < 60) return `in ${s} s`;
    const minutes = Math.ceil(s / 60);
    if (minutes < 60) return `in ${minutes} min`;
    const h = Math.floor(minutes / 60), m = minutes % 60;
    return `in ${h} h${m ? ` ${m} min` : ''}`;
}

/** A `Retry-After` value (delta seconds, or an HTTP date against `now` in ms) → seconds. */
export function retryAfterSeconds(value, now = Date.now()) {
    if (value === null || value === undefined || value === '') return null;
    const text = String(value).trim();
    if (/^\d{1,10}$/.test(text)) return Number(text);
    const at = Date.parse(text);
    return Number.isFinite(at) ? Math.max(0, Math.ceil((at - now) / 1000)) : null;
}

/** Seconds until the next UTC midnight, when the daily limits start over. */
export function untilUtcMidnight(now = Date.now()) {
    return Math.ceil((86400000 - (now % 86400000)) / 1000);
}

/** Which limit a 429 without its code was (SillyTavern keeps only "Too Many Requests" of a
 * non-streamed answer): the one the usage route shows spent, else null. */
export function spentLimit(doc) {
    const left = doc?.remaining || {};
    if (left.tokens_per_day === 0) return 'token_budget_exceeded';
    if (left.requests_per_minute === 0) return 'rate_limit_exceeded';
    if (left.sessions_per_day === 0) return 'session_limit_reached';
    return null;
}

/** The toast of a 429: {title, message} naming the limit and when it frees, or null when
 * `code` is not one of the edge's limits. `retryAfter`: seconds (the edge's Retry-After),
 * else a daily limit frees at UTC midnight and the rate within a minute. `limit` is the
 * figure if known. */
export function limitToast(code, retryAfter, limit, now = Date.now()) {
    const known = LIMIT_CODES[code];
    if (!known) return null;
    const seconds = retryAfter ?? (code === 'rate_limit_exceeded' ? null : untilUtcMidnight(now));
    const when = freesIn(seconds);
    const frees = when ? ` It frees ${when}.` : ' It frees within a minute.';
    const n = Number.isFinite(limit) ? limit : null;
    let message;
    if (code === 'rate_limit_exceeded') {
        message = `This key may send ${n ?? 'only so many'} request${n === 1 ? '' : 's'} a minute, and has.`;
    } else if (code === 'token_budget_exceeded') {
        message = `Today's token budget${n !== null ? ` (${tokens(n)} tokens)` : ''} is spent (UTC day).`;
    } else {
        message = `This key may start ${n ?? 'only so many'} new session${n === 1 ? '' : 's'} a day (UTC), and has.`;
    }
    return { title: `MultiLLM: ${known.title} reached`, message: message + frees };
}
