// The extension's reading of the provider's cache usage (clients/sillytavern/usage.js), run
// by `node --test` from tests/browser/test_extension_window.py: the four usage shapes, whole
// answers and streams cut anywhere, and nothing when the provider says nothing.
import test from 'node:test';
import assert from 'node:assert/strict';
import { StreamUsage, askForUsage, cacheUsage, tokens, usageText } from '../../clients/sillytavern/usage.js';

const OPENAI = { prompt_tokens: 41234, completion_tokens: 80, total_tokens: 41314,
    prompt_tokens_details: { cached_tokens: 37888, audio_tokens: 0 } };
const ANTHROPIC = { input_tokens: 1200, cache_read_input_tokens: 36000, cache_creation_input_tokens: 2800,
    output_tokens: 90 };
const DEEPSEEK = { prompt_tokens: 20000, completion_tokens: 10, prompt_cache_hit_tokens: 19200,
    prompt_cache_miss_tokens: 800 };
const RESPONSES = { input_tokens: 5000, input_tokens_details: { cached_tokens: 4096 }, output_tokens: 9 };

test('the four usage shapes: input and what the cache served', () => {
    assert.deepEqual(cacheUsage(OPENAI), { input: 41234, cached: 37888, written: 0 });
    // Anthropic's input_tokens excludes reads and writes: the input is the sum of the three.
    assert.deepEqual(cacheUsage(ANTHROPIC), { input: 40000, cached: 36000, written: 2800 });
    assert.deepEqual(cacheUsage(DEEPSEEK), { input: 20000, cached: 19200, written: 0 });
    assert.deepEqual(cacheUsage(RESPONSES), { input: 5000, cached: 4096, written: 0 });
    // A router that adds Anthropic's fields to a chat usage: prompt_tokens is already the whole.
    assert.deepEqual(cacheUsage({ prompt_tokens: 40000, prompt_tokens_details: { cached_tokens: 36000 },
        cache_read_input_tokens: 36000, cache_creation_input_tokens: 2800 }), { input: 40000, cached: 36000, written: 2800 });
    // Anthropic on a cold cache: all written, nothing read.
    assert.deepEqual(cacheUsage({ input_tokens: 10, cache_creation_input_tokens: 9000 }), { input: 9010, cached: 0, written: 9000 });
});

test('the line the player reads', () => {
    assert.equal(usageText(cacheUsage(OPENAI)), "input 41k tokens, 92 % from the provider's cache");
    assert.equal(usageText(cacheUsage(ANTHROPIC)), "input 40k tokens, 90 % from the provider's cache, 2.8k written to it");
    assert.equal(usageText(cacheUsage(DEEPSEEK)), "input 20k tokens, 96 % from the provider's cache");
    assert.equal(usageText({ input: 850, cached: 0, written: 0 }), "input 850 tokens, 0 % from the provider's cache");
    assert.deepEqual([999, 1000, 4130, 9999, 41234, 999499, 999500, 1234567].map(tokens),
        ['999', '1k', '4.1k', '10k', '41k', '999k', '1M', '1.2M']);
    assert.equal(usageText(null), null);
});

test('nothing shown when the provider says nothing about its cache', () => {
    for (const usage of [undefined, null, 'x', 3, {}, { prompt_tokens: 41234, completion_tokens: 5 },
        { input_tokens: 100, output_tokens: 5 }, { prompt_tokens_details: { cached_tokens: 5 } },
        { prompt_tokens: 0, prompt_tokens_details: { cached_tokens: 0 } },
        { prompt_tokens: 100, prompt_tokens_details: { cached_tokens: -1 } },
        { prompt_tokens: 100, prompt_tokens_details: { cached_tokens: '90' } },
        { prompt_tokens: 100, prompt_tokens_details: null }]) {
        assert.equal(cacheUsage(usage), null, JSON.stringify(usage));
    }
    // A figure over the input (a provider's rounding) is capped: never over 100 %.
    assert.equal(usageText(cacheUsage({ prompt_tokens: 100, prompt_cache_hit_tokens: 130 })),
        "input 100 tokens, 100 % from the provider's cache");
});

const sse = (events) => events.map(e => `data: ${JSON.stringify(e)}\n\n`).join('') + 'data: [DONE]\n\n';
const chunk = (content, extra = {}) => ({ id: 'c1', object: 'chat.completion.chunk',
    choices: [{ index: 0, delta: { content }, finish_reason: null }], usage: null, ...extra });

/** Every way of cutting `text` in two, and in pieces of each size: the same usage. */
function readsAlike(text, expected) {
    for (let cut = 0; cut <= text.length; cut++) {
        const r = new StreamUsage().push(text.slice(0, cut)).push(text.slice(cut), true);
        assert.deepEqual(r.usage, expected, `cut at ${cut}`);
    }
    for (const size of [1, 7, 64]) {
        const r = new StreamUsage();
        for (let i = 0; i < text.length; i += size) r.push(text.slice(i, i + size));
        assert.deepEqual(r.push('', true).usage, expected, `pieces of ${size}`);
    }
}

test('a chat stream: the final usage chunk, however the stream is cut', () => {
    const head = ': multillm-context-pages cp_a,cp_b\n: multillm-context-recall cp_a:1\n\n';
    for (const usage of [OPENAI, ANTHROPIC, DEEPSEEK]) {
        const text = head + sse([chunk('Aurore '), chunk('nods, "usage" ночью.'),
            { id: 'c1', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: null },
            { id: 'c1', choices: [], usage }]);
        readsAlike(text, cacheUsage(usage));
        readsAlike(text.replaceAll('\n', '\r\n'), cacheUsage(usage));
    }
});

test('an Anthropic Messages stream: message_start holds the cache figures, message_delta only output', () => {
    const text = [
        'event: message_start', `data: ${JSON.stringify({ type: 'message_start', message: { id: 'm', usage: { ...ANTHROPIC, output_tokens: 1 } } })}`, '',
        'event: content_block_delta', 'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}', '',
        'event: message_delta', 'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":90}}', '',
        'event: message_stop', 'data: {"type":"message_stop"}', '', ''].join('\n');
    readsAlike(text, cacheUsage(ANTHROPIC));
});

test('a stream that reports no usage, or none about the cache, shows nothing', () => {
    readsAlike(sse([chunk('a'), chunk('b')]), null);
    readsAlike(sse([chunk('a'), { id: 'c1', choices: [], usage: { prompt_tokens: 10, completion_tokens: 2 } }]), null);
    readsAlike(': multillm-context-pages cp_a\n\n' + sse([chunk('"usage": {"prompt_cache_hit_tokens": 5}')]), null);
    readsAlike('data: {"usage": {broken\n\n', null);
    readsAlike('', null);
});

test('a stream asks for usage unless the include body already says', () => {
    assert.deepEqual(askForUsage({ capabilities: ['x'] }), { capabilities: ['x'], stream_options: { include_usage: true } });
    assert.deepEqual(askForUsage({ stream_options: { include_obfuscation: false } }),
        { stream_options: { include_obfuscation: false, include_usage: true } });
    assert.deepEqual(askForUsage({ stream_options: { include_usage: false } }), { stream_options: { include_usage: false } });
    for (const odd of [null, 'yes', [1]]) assert.deepEqual(askForUsage({ stream_options: odd }), { stream_options: odd });
    const asked = askForUsage({});
    assert.deepEqual(askForUsage(asked), { stream_options: { include_usage: true } });     // sent again: unchanged
});
