// The extension's sliding window (clients/sillytavern/window.js), run by `node --test`
// from tests/browser/test_extension_window.py.
import test from 'node:test';
import assert from 'node:assert/strict';
import { WINDOW_STEP, exchanges, isGenuineUser, messageBytes, slideWindow, windowBudget, windowCut,
    windowNeeded, windowStep }
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

test('stepped cut: only where an exchange reaches a new grid line, the first that fits', () => {
    // Ends 30, 60, 90, 120, 150, 180; lines every 50: reached after exchanges 2 (60), 4 (120), 5 (150).
    const sizes = [30, 30, 30, 30, 30, 30, 30];
    assert.equal(windowCut(sizes, 200, 0), 1);       // as few as fit: 1 (rest 180)…
    assert.equal(windowCut(sizes, 200, 50), 2);      // …but the grid's first stop is 2
    assert.equal(windowCut(sizes, 150, 50), 2);
    assert.equal(windowCut(sizes, 119, 50), 4);      // 3 would fit; 4 is the next stop
    assert.equal(windowCut(sizes, 60, 50), 5);
    assert.equal(windowCut(sizes, 59, 50), 6);       // no stop fits: as few as fit
    assert.equal(windowCut(sizes, 10, 50), 6);       // nothing fits: all but the newest
    assert.equal(windowCut(sizes, 210, 50), 0);      // the whole history fits: nothing
    assert.equal(windowCut([500], 10, 50), 0);       // the newest alone stays
    assert.equal(windowCut([], 0, 50), 0);
    assert.equal(windowStep(786432), Math.floor(786432 * WINDOW_STEP));
    assert.equal(WINDOW_STEP, 0.2);
});

/** A chat grown turn by turn well past `budget`, windowed each turn: what each request sent. */
function grow(turns, budget, step, size = 300) {
    const chat = [sys('card'), bot('greeting, ночь')];
    const sent = [];
    for (let t = 0; t < turns; t++) {
        chat.push(user(`u${t} ` + 'ü'.repeat(size + (t * 37) % 200)));
        sent.push(slideWindow(chat, budget, step));
        chat.push(bot(`a${t} ` + 'y'.repeat(size + (t * 53) % 300)));
    }
    return sent;
}

test('past the allowance a stepped window keeps its prefix between steps; the unstepped one never', () => {
    const budget = 100000, step = windowStep(budget);
    const sent = grow(300, budget, step);
    let kept = 0, moved = 0, windowed = 0;
    for (let t = 1; t < sent.length; t++) {
        const [a, b] = [sent[t - 1].messages, sent[t].messages];
        if (!sent[t - 1].dropped) continue;
        windowed++;
        const shared = a.slice(0, -1).every((m, i) => b[i] === m);   // all but the latest turn
        if (sent[t].dropped === sent[t - 1].dropped) {
            assert.ok(shared, `turn ${t}: the cut stayed, the prefix must too`);
            kept++;
        } else {
            assert.ok(sent[t].dropped > sent[t - 1].dropped);       // it only moves on
            moved++;
        }
        const history = bytes(b);
        assert.ok(history <= budget && history > budget - step - 2000, `turn ${t}: ${history}`);
        assert.deepEqual(b[0], sys('card'));
        assert.equal(b.at(-1).role, 'user');
    }
    // ~1.4 KB an exchange against a 20,000-byte step: the cut moves about once in 14 turns.
    assert.ok(windowed > 200 && moved >= 10 && moved <= windowed / 10, `${moved} moves in ${windowed} turns`);
    assert.equal(kept + moved, windowed);
    // The same chat unstepped leaves one exchange more out nearly every turn.
    const plain = grow(300, budget, 0);
    const plainMoves = plain.filter((r, t) => t && plain[t - 1].dropped && r.dropped !== plain[t - 1].dropped).length;
    assert.ok(plainMoves >= 0.9 * windowed, `${plainMoves}`);
});

test('a stepped cut keeps every guarantee: system messages, the newest exchange, tool pairs', () => {
    const ms = [sys('card'), user('u0 ' + 'x'.repeat(300)), call('c1'), result('c1'), bot('a0'),
        user('u1 ' + 'x'.repeat(300)), { role: 'assistant', content: [{ type: 'tool_use', id: 't1' }] }, claudeResult('t1'), bot('a1'),
        sys('note'), user('u2 ' + 'x'.repeat(200)), bot('a2'), user('u3'), bot('a3')];
    for (const step of [1, 50, 333, 5000]) {
        for (let budget = 0; budget < bytes(ms) + 10; budget += 29) {
            const r = slideWindow(ms, budget, step);
            assert.deepEqual(r.messages.filter(m => m.role === 'system'), [sys('card'), sys('note')]);
            assert.deepEqual(r.messages.slice(-2), [user('u3'), bot('a3')]);
            const ids = new Set(r.messages.filter(m => m.tool_calls).map(m => m.tool_calls[0].id));
            assert.deepEqual(ids, new Set(r.messages.filter(m => m.role === 'tool').map(m => m.tool_call_id)));
            const uses = r.messages.filter(m => Array.isArray(m.content) && m.content[0]?.type === 'tool_use').length;
            assert.equal(uses, r.messages.filter(m => !isGenuineUser(m) && m.role === 'user').length);
            const plain = slideWindow(ms, budget);
            assert.ok(r.dropped >= plain.dropped, 'never less left out than needed');
            if (bytes(plain.messages) <= budget) assert.ok(bytes(r.messages) <= budget);
        }
    }
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
