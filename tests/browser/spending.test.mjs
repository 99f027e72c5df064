// The extension's usage line and 429 toasts (clients/sillytavern/spending.js), run by
// `node --test` from tests/browser/test_extension_window.py.
import test from 'node:test';
import assert from 'node:assert/strict';
import { freesIn, limitToast, retryAfterSeconds, spendingText, spentLimit, untilUtcMidnight } from '../../clients/sillytavern/spending.js';

const NULLS = { requests_per_minute: null, tokens_per_day: null, sessions_per_day: null, active_bytes: null };
const day = (input, output, requests, estimated = false) =>
    ({ date: '2027-01-15', input_tokens: input, cached_input_tokens: 0, output_tokens: output, requests, estimated });

test('the usage line: today, of the budget when there is one', () => {
    assert.equal(spendingText({ days: [day(400000, 12000, 37)], limits: { ...NULLS, tokens_per_day: 1000000 } }),
        'today: 412k of 1M tokens, 37 requests');
    assert.equal(spendingText({ days: [day(900, 12, 1, true)], limits: NULLS }),
        'today: 912 tokens, 1 request, partly estimated');
    assert.equal(spendingText({ days: [day(0, 0, 0)], limits: { ...NULLS, requests_per_minute: 10 } }),
        'today: 0 tokens, 0 requests; at most 10 a minute');
    assert.equal(spendingText({ days: [] }), null);
    assert.equal(spendingText(null), null);
    assert.equal(spendingText({ error: { code: 'invalid_api_key' } }), null);
});

test('when a limit frees, in words', () => {
    assert.equal(freesIn(42), 'in 42 s');
    assert.equal(freesIn(0), 'in 0 s');
    assert.equal(freesIn(61), 'in 2 min');
    assert.equal(freesIn(3600), 'in 1 h');
    assert.equal(freesIn(5 * 3600 + 11 * 60 + 5), 'in 5 h 12 min');
    assert.equal(freesIn(null), null);
    assert.equal(freesIn('x'), null);
    assert.equal(freesIn(-1), null);
});

test('Retry-After as seconds or a date', () => {
    assert.equal(retryAfterSeconds('17'), 17);
    assert.equal(retryAfterSeconds(' 17 '), 17);
    const now = Date.parse('Fri, 15 Jan 2027 08:00:00 GMT');
    assert.equal(retryAfterSeconds('Fri, 15 Jan 2027 08:01:30 GMT', now), 90);
    assert.equal(retryAfterSeconds('', now), null);
    assert.equal(retryAfterSeconds(null), null);
    assert.equal(retryAfterSeconds('soon'), null);
});

test('a 429 names its limit and when it frees; anything else is not a limit', () => {
    assert.deepEqual(limitToast('rate_limit_exceeded', 42, 10), {
        title: 'MultiLLM: request rate limit reached',
        message: 'This key may send 10 requests a minute, and has. It frees in 42 s.' });
    assert.deepEqual(limitToast('token_budget_exceeded', 5 * 3600, 1000000), {
        title: 'MultiLLM: daily token budget reached',
        message: "Today's token budget (1M tokens) is spent (UTC day). It frees in 5 h." });
    // no Retry-After: a daily limit frees at UTC midnight, the rate within a minute
    const now = Date.parse('2027-01-15T22:30:00Z');
    assert.equal(untilUtcMidnight(now), 5400);
    assert.deepEqual(limitToast('session_limit_reached', null, 1, now), {
        title: 'MultiLLM: daily session limit reached',
        message: 'This key may start 1 new session a day (UTC), and has. It frees in 1 h 30 min.' });
    assert.equal(limitToast('rate_limit_exceeded', null).message,
        'This key may send only so many requests a minute, and has. It frees within a minute.');
    assert.equal(limitToast('rate_limit_exceeded', 3).message,
        'This key may send only so many requests a minute, and has. It frees in 3 s.');
    assert.equal(limitToast('context_window_exceeded', 3), null);
    assert.equal(limitToast(undefined, 3), null);
});

test('a 429 without its code: the limit the usage shows spent', () => {
    const doc = (left) => ({ remaining: { requests_per_minute: null, tokens_per_day: null, sessions_per_day: null, ...left } });
    assert.equal(spentLimit(doc({ tokens_per_day: 0, requests_per_minute: 0 })), 'token_budget_exceeded');
    assert.equal(spentLimit(doc({ requests_per_minute: 0, tokens_per_day: 5 })), 'rate_limit_exceeded');
    assert.equal(spentLimit(doc({ sessions_per_day: 0 })), 'session_limit_reached');
    assert.equal(spentLimit(doc({})), null);
    assert.equal(spentLimit(null), null);
});
