// The extension's sliding window (clients/sillytavern/window.js), run by `node --test`
// from tests/browser/test_extension_window.py.
import test from 'node:test';
import assert from 'node:assert/strict';
import { exchanges, isGenuineUser, messageBytes, slideWindow, windowBudget, windowNeeded }
    from '../../clients/sillytavern/window.js';

const sys = (t) => ({ role: 'system', content: t });
const user = (t) => ({ role: 'user', content: t });
const bot = (t) => ({ role: 'assistant', content: t });
const call = (id) => ({ role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name: 'multillm_context_search', arguments: '{"query":"bridge"}' } }] });
const result = (id) => ({ role: 'tool', tool_call_id: id, content: 'cp_x user: the bridge' });
const claudeResult = (id) => ({ role: 'user', content: [{ type: 'tool_result', tool_use_id: id, content: 'x' }] });

function chat(n, size = 100) {
    const out = [sys('card'), bot('greeting')];
    for (let i = 0; i < n; i++) out.push(user(`u${i} ` + 'x'.repeat(size)), bot(`a${i} ` + 'y'.repeat(size)));
    return out;
}
const bytes = (ms) => ms.filter(m => m.role !== 'system').reduce((n, m) => n + messageBytes(m), 0);

test('figures: budget is share × allowance, needed once active bytes pass it', () => {
    const f = { active_bytes: 700, limit_bytes: 1000, active_pages: 3 };
    assert.equal(windowBudget(f, 0.75), 750);
    assert.equal(windowNeeded(f, 0.75), false);
    assert.equal(windowNeeded({ ...f, active_bytes: 751 }, 0.75), true);
    assert.equal(windowBudget(null, 0.75), null);
    assert.equal(windowNeeded({ active_bytes: 5 }, 0.75), false);
    assert.equal(windowBudget(f, 0), null);
});

test('under the budget nothing is left out', () => {
    const ms = chat(5);
    const r = slideWindow(ms, bytes(ms));
    assert.equal(r.dropped, 0);
    assert.deepEqual(r.messages, ms);
});

test('oldest complete exchanges leave first, system messages stay, history ends under budget', () => {
    const ms = chat(20);
    const budget = Math.floor(bytes(ms) / 2);
    const r = slideWindow(ms, budget);
    assert.ok(bytes(r.messages) <= budget);
    assert.ok(r.dropped > 0 && r.dropped === ms.length - r.messages.length);
    assert.deepEqual(r.messages[0], sys('card'));
    // What stays is a suffix of the history, starting at a user turn.
    const rest = r.messages.slice(1);
    assert.deepEqual(rest, ms.slice(ms.length - rest.length));
    assert.equal(rest[0].role, 'user');
    // One exchange more would have fit: the window leaves no more than needed.
    assert.ok(bytes(ms.slice(ms.length - rest.length - 2)) > budget);
});

test('the newest exchange stays even over budget', () => {
    const ms = chat(3);
    const r = slideWindow(ms, 0);
    assert.deepEqual(r.messages, [sys('card'), ...ms.slice(-2)]);
    assert.equal(r.dropped, ms.length - 3);
});

test('a tool call and its result never part; a tool-result user message is no new turn', () => {
    const ms = [sys('card'), user('u0 ' + 'x'.repeat(300)), call('c1'), result('c1'), bot('a0'),
        user('u1 ' + 'x'.repeat(300)), { role: 'assistant', content: [{ type: 'tool_use', id: 't1' }] }, claudeResult('t1'), bot('a1'),
        user('u2'), bot('a2')];
    assert.equal(isGenuineUser(claudeResult('t1')), false);
    assert.equal(isGenuineUser(user('hi')), true);
    assert.deepEqual(exchanges(ms), [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]);
    for (let budget = 0; budget < bytes(ms) + 10; budget += 37) {
        const r = slideWindow(ms, budget);
        const ids = new Set(r.messages.filter(m => m.tool_calls).map(m => m.tool_calls[0].id));
        const results = new Set(r.messages.filter(m => m.role === 'tool').map(m => m.tool_call_id));
        assert.deepEqual(ids, results);
        const uses = r.messages.filter(m => Array.isArray(m.content) && m.content[0]?.type === 'tool_use').length;
        const answers = r.messages.filter(m => !isGenuineUser(m) && m.role === 'user').length;
        assert.equal(uses, answers);
    }
});

test('system messages inside the history are kept where they are', () => {
    const ms = [sys('card'), user('u0 ' + 'x'.repeat(500)), sys('note'), bot('a0'), user('u1'), bot('a1')];
    const r = slideWindow(ms, 100);
    assert.deepEqual(r.messages, [sys('card'), sys('note'), user('u1'), bot('a1')]);
    assert.equal(r.dropped, 2);
});

import { leadingComments, figures } from '../../clients/sillytavern/stream.js';

test('stream head: comment lines count only once whole, in any cut', () => {
    const ids = Array.from({ length: 200 }, (_, i) => `cp_${String(i).padStart(43, 'A')}`);
    const session = { active_bytes: 90000, limit_bytes: 1048576, active_pages: 200 };
    const text = `: multillm-context-pages ${ids.join(',')}\n\n: multillm-context-session ${JSON.stringify(session)}\n\ndata: {"x":1}\n\n`;
    for (let cut = 0; cut < text.length; cut += 97) {
        const r = leadingComments(text.slice(0, cut));
        const dataAt = text.indexOf('data:');
        assert.equal(r.complete, cut > dataAt, `cut ${cut}`);
    }
    const whole = leadingComments(text);
    assert.deepEqual(whole.pages, ids);
    assert.deepEqual(whole.session, session);
    // A stream that ends right after its comments, one without figures, one without any.
    assert.deepEqual(leadingComments(text.slice(0, text.indexOf('data:')), true).session, session);
    assert.deepEqual(leadingComments(': multillm-context-pages cp_a,cp_b\n\ndata: x').pages, ['cp_a', 'cp_b']);
    assert.deepEqual(leadingComments(': multillm-context-pages cp_a,cp_b\n\ndata: x').session, null);
    assert.deepEqual(leadingComments('data: {}\n\n'), { complete: true, pages: null, session: null, recall: null });
    assert.equal(leadingComments('{"id":1}').complete, true);
    assert.equal(figures({ active_bytes: 1, limit_bytes: 'x', active_pages: 1 }), null);
});
