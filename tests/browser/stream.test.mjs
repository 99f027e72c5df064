// The extension's stream head reader (clients/sillytavern/stream.js), run by `node --test`
// from tests/browser/test_extension_window.py: the page list, the session's figures and the
// recalled moments (docs/design.md §6.2) from the leading SSE comments, whole or in pieces.
import test from 'node:test';
import assert from 'node:assert/strict';
import { leadingComments, recallList, recallPairs } from '../../clients/sillytavern/stream.js';

const ids = Array.from({ length: 225 }, (_, i) => `cp_${String(i).padStart(43, 'A')}`);
const HEAD = `: multillm-context-pages ${ids.join(',')}\n`
    + ': multillm-context-session {"active_bytes":1000,"limit_bytes":1048576,"active_pages":225}\n'
    + `: multillm-context-recall ${ids[3]}:2,${ids[0]}:1\n\n`;
const STREAM = HEAD + 'data: {"choices":[]}\n\n';

test('a paged stream head gives pages, figures and the recalled moments', () => {
    const head = leadingComments(STREAM);
    assert.equal(head.complete, true);
    assert.deepEqual(head.pages, ids);
    assert.deepEqual(head.session, { active_bytes: 1000, limit_bytes: 1048576, active_pages: 225 });
    assert.deepEqual(head.recall, [{ page_id: ids[3], exchange: 2, score: null },
        { page_id: ids[0], exchange: 1, score: null }]);
});

test('cut anywhere, the head is incomplete or whole: never a partial list', () => {
    const whole = leadingComments(STREAM);
    for (let cut = 0; cut <= STREAM.length; cut++) {
        const head = leadingComments(STREAM.slice(0, cut));
        if (head.complete) assert.deepEqual(head, whole, `cut at ${cut}`);
    }
    assert.deepEqual(leadingComments(HEAD, true).recall, whole.recall);   // the stream ended there
});

test('an empty recall line is nothing recalled; no line is not known', () => {
    assert.deepEqual(leadingComments(': multillm-context-pages cp_a\n: multillm-context-recall\r\ndata: x').recall, []);
    assert.deepEqual(leadingComments(': multillm-context-pages cp_a\ndata: x').recall, null);
    assert.deepEqual(leadingComments('data: x').recall, null);
    assert.equal(leadingComments(': multillm-context-recall-count 3\ndata: x').recall, null);
});

test('malformed pairs and entries are left out', () => {
    assert.deepEqual(recallPairs(' cp_a:1,cp_b:0,cp_c:x,:3,cp_d,cp_e:2.5,bad id:1,cp_f:12 '),
        [{ page_id: 'cp_a', exchange: 1, score: null }, { page_id: 'cp_f', exchange: 12, score: null }]);
    assert.deepEqual(recallList([{ page_id: 'cp_a', exchange: 3, score: 1.2345 }, { page_id: 'x', exchange: 1 },
        { page_id: 'cp_b', exchange: 0 }, null, { page_id: 'cp_c', exchange: 2, score: 'high' }]),
    [{ page_id: 'cp_a', exchange: 3, score: 1.2345 }, { page_id: 'cp_c', exchange: 2, score: null }]);
    assert.deepEqual(recallList(undefined), []);
    // Most relevant first, whatever order the answer lists them in.
    assert.deepEqual(recallList([{ page_id: 'cp_a', exchange: 1, score: 0.5 }, { page_id: 'cp_b', exchange: 2, score: 2 }])
        .map(m => m.page_id), ['cp_b', 'cp_a']);
});
