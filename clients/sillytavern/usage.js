// What the provider served from its prompt cache (README: Playing in SillyTavern): pure,
// no DOM or SillyTavern, so it runs under `node --test` as well as in the browser.
//
// Providers say it in their own usage fields (docs/design.md §5.7, the prompt cache):
//   OpenAI and routers  usage.prompt_tokens_details.cached_tokens, of usage.prompt_tokens
//   OpenAI Responses    usage.input_tokens_details.cached_tokens, of usage.input_tokens
//   Anthropic           usage.cache_read_input_tokens, cache_creation_input_tokens; its
//                       input_tokens counts neither: the input is the sum of the three
//   DeepSeek            usage.prompt_cache_hit_tokens, of usage.prompt_tokens
// A provider that names no cached figure says nothing about its cache: nothing is shown.

const count = (v) => (Number.isFinite(v) && v >= 0 ? v : null);

/** The first of `values` that is a token count, else null. */
const firstCount = (...values) => values.map(count).find(v => v !== null) ?? null;

/**
 * `{input, cached, written}` token counts from a response's `usage`, or null when it
 * reports no cache figure (or no input). `written`: Anthropic's cache writes (0 elsewhere).
 */
export function cacheUsage(usage) {
    if (!usage || typeof usage !== 'object') return null;
    const read = count(usage.cache_read_input_tokens);
    const written = count(usage.cache_creation_input_tokens);
    // A cache write alone (Anthropic, cold cache) says the cache served nothing yet.
    const cached = firstCount(usage.prompt_tokens_details?.cached_tokens,
        usage.input_tokens_details?.cached_tokens, read, usage.prompt_cache_hit_tokens, written === null ? null : 0);
    if (cached === null) return null;
    let input = count(usage.prompt_tokens);
    // `prompt_tokens` is the whole input wherever it is given (routers that add Anthropic's
    // fields too); Anthropic's own `input_tokens` leaves out what it read and wrote.
    if (input === null && count(usage.input_tokens) !== null) {
        const anthropic = read !== null || written !== null;
        input = usage.input_tokens + (anthropic ? (read ?? 0) + (written ?? 0) : 0);
    }
    if (!(input > 0)) return null;
    return { input, cached: Math.min(cached, input), written: written ?? 0 };
}

/** 850 → "850", 4,130 → "4.1k", 41,234 → "41k", 1,234,567 → "1.2M". */
export function tokens(n) {
    if (n < 1000) return String(Math.round(n));
    if (n < 10000) return `${+(n / 1000).toFixed(1)}k`;
    if (n < 999500) return `${Math.round(n / 1000)}k`;
    return `${+(n / 1e6).toFixed(1)}M`;
}

/** The player's line, e.g. "input 41k tokens, 92 % from the provider's cache", or null. */
export function usageText(u) {
    if (!u || !(u.input > 0)) return null;
    const share = Math.round((100 * u.cached) / u.input);
    const written = u.written > 0 ? `, ${tokens(u.written)} written to it` : '';
    return `input ${tokens(u.input)} tokens, ${share} % from the provider's cache${written}`;
}

/** A chat stream reports its usage only when asked: `stream_options.include_usage` is set
 * in the request's include `body`, unless it already says either way (or `stream_options`
 * is something else: the player's to mend). */
export function askForUsage(body) {
    const options = body.stream_options;
    if (options === undefined) body.stream_options = { include_usage: true };
    else if (options && typeof options === 'object' && !Array.isArray(options) && options.include_usage === undefined) {
        options.include_usage = true;
    }
    return body;
}

/**
 * Reads a server-sent event stream piece by piece, however it is cut, for its usage: the
 * last `data:` event whose `usage` (or Anthropic's `message.usage`) names a cache figure.
 * Holds only the unfinished line, so a long stream costs its length once.
 */
export class StreamUsage {
    constructor() {
        this.rest = '';
        this.usage = null;
    }

    /** Feeds the next piece of text; `ended`: the stream ended after it. */
    push(text, ended = false) {
        // A long line arriving in many pieces is split once, when it ends: linear.
        if (!ended && !text.includes('\n')) {
            this.rest += text;
            return this;
        }
        const lines = (this.rest + text).split('\n');
        this.rest = ended ? '' : lines.pop();
        for (const line of lines) this.line(line.replace(/\r$/, ''));
        return this;
    }

    line(line) {
        // Most events carry no usage (or `"usage":null`): only those naming one are parsed.
        if (!line.startsWith('data:') || !line.includes('"usage"')) return;
        let event;
        try { event = JSON.parse(line.slice(5)); } catch { return; }
        const found = cacheUsage(event?.usage) ?? cacheUsage(event?.message?.usage);
        if (found) this.usage = found;
    }
}
