// The local runner (docs/design.md §9): the Worker in real Pyodide, real local D1 and R2
// through wrangler's getPlatformProxy(), served over HTTP on PORT.
//
// Environment:
//   PORT              listen port (default 8787; 0 picks a free one)
//   EDGE_HOST         listen address (default 127.0.0.1; 0.0.0.0 lets a SillyTavern in
//                     Docker reach the runner through the host's address)
//   EDGE_STATE_DIR    local state, as `wrangler … --persist-to` (default .wrangler/state)
//   EDGE_VARS_FILE    dotenv file overlaid on [vars], replacing .dev.vars (tests)
//   EDGE_UNBIND       comma-separated bindings/vars to remove (tests: missing bindings)
//   EDGE_CONFIG       another wrangler.toml for the bindings and [vars] (tests: TOML values)
//   EDGE_TEST_CONTROL=1 enables /__runner/* (tests only): clock offset, operation
//                     counts, memory, faults, a body's parse floor and cProfile in the
//                     Worker's Pyodide (benches), and direct access to the same local D1
//                     and R2; and GET /cdn-cgi/handler/scheduled, which fires the Worker's
//                     `scheduled` handler as `wrangler dev --test-scheduled` does
//   EDGE_MAIN         another main module to load instead of src/entry.py (tests only)
//   EDGE_STANDIN=1    also serve the stand-in provider (devkit/standin.py) as `standin`
//                     in PROVIDERS; `npm start` sets it when no provider key is configured
//   EDGE_MEMORY_LIMIT_MB the isolate's memory limit, as workerd's (default 128, in MiB; 0 =
//                     none): Pyodide's wasm heap plus the bodies of the Worker's fetches in
//                     flight (runner/isolate.mjs). Past it the isolate is lost as on Cloudflare:
//                     its requests in flight get 503 `isolate_memory_exceeded`, one line
//                     {"runner":"isolate_memory_exceeded",…} is logged and a fresh isolate
//                     loads (requests wait for it); GET /__runner/memory reports
//                     wasm_peak_bytes and isolates_lost
//   EDGE_BUNDLE_DIR   run the upload instead of src/: a `wrangler deploy --dry-run --outdir`
//                     directory (entry.py, multillm_edge/, python_modules/); no wheel
//                     from .cache is installed (docs/deploy.md)
import { execFile } from "node:child_process";
import { copyFileSync, readFileSync } from "node:fs";
import http from "node:http";
import zlib from "node:zlib";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { getPlatformProxy } from "wrangler";
import { counts, faults, presentEnv } from "./bindings.mjs";
import { IsolateLost, Isolates, LOST_BODY } from "./isolate.mjs";
import { loadWorker } from "./pyodide-host.mjs";
import { startStandIn, standInVars } from "./standin.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const log = (line) => process.stdout.write(line.endsWith("\n") ? line : line + "\n");
const started = performance.now();

function parseDotenv(text) {
  const out = {};
  for (const raw of text.split(/\r?\n/)) {
    const m = raw.match(/^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/);
    if (!m) continue;
    let v = m[2].trim();
    if (/^(['"]).*\1$/.test(v)) v = v.slice(1, -1);
    out[m[1]] = v;
  }
  return out;
}

// Binding names declared in wrangler.toml (the runner needs only these two kinds).
function declaredBindings(toml) {
  const d1 = [...toml.matchAll(/\[\[d1_databases\]\][^[]*?binding\s*=\s*"([^"]+)"/g)].map((m) => m[1]);
  const r2 = [...toml.matchAll(/\[\[r2_buckets\]\][^[]*?binding\s*=\s*"([^"]+)"/g)].map((m) => m[1]);
  return { d1, r2 };
}

const stateDir = resolve(root, process.env.EDGE_STATE_DIR ?? ".wrangler/state");
const wranglerBin = join(root, "node_modules", "wrangler", "bin", "wrangler.js");

// Migrations through wrangler itself, into the same state the proxy reads; Pyodide
// loads meanwhile (the two are independent), bindings are attached after both.
const migrated = new Promise((done, fail) => execFile(process.execPath,
  [wranglerBin, "d1", "migrations", "apply", "INTELLIGENCE_DB", "--local", "--persist-to", stateDir],
  { cwd: root, env: { ...process.env, CI: "true", WRANGLER_SEND_METRICS: "false" } },
  (err, _out, stderr) => (err ? fail(new Error(`migrations failed: ${stderr}`)) : done())));
const standIn = process.env.EDGE_STANDIN === "1" ? startStandIn(root) : null;
const loadIsolate = () => loadWorker({
  root, srcDir: join(root, "src"), mainPath: process.env.EDGE_MAIN && resolve(process.env.EDGE_MAIN),
  bundleDir: process.env.EDGE_BUNDLE_DIR && resolve(process.env.EDGE_BUNDLE_DIR),
  stdout: log,
});
const worker = loadIsolate();
await migrated;

// With EDGE_VARS_FILE (tests) the Worker sees wrangler.toml's [vars] plus that file only:
// the config is read from a copy in the state dir, so a developer's .dev.vars stays out.
// EDGE_CONFIG (tests) replaces wrangler.toml for the bindings and [vars] (vars as TOML values).
let configPath = process.env.EDGE_CONFIG ? resolve(process.env.EDGE_CONFIG) : join(root, "wrangler.toml");
if (process.env.EDGE_VARS_FILE) {
  const source = configPath;
  configPath = join(stateDir, "wrangler.toml");
  copyFileSync(source, configPath);
}
const startProxy = () => getPlatformProxy({ configPath, persist: { path: join(stateDir, "v3") } });
const overrides = process.env.EDGE_VARS_FILE ? parseDotenv(readFileSync(process.env.EDGE_VARS_FILE, "utf8")) : {};
for (const name of (process.env.EDGE_UNBIND ?? "").split(",").filter(Boolean)) overrides[name] = null;
const declared = declaredBindings(readFileSync(join(root, "wrangler.toml"), "utf8"));
let proxy = await startProxy();
if (standIn) Object.assign(overrides, standInVars(await standIn, { ...proxy.env, ...overrides }, log));
// Each isolate gets its own env: a lost one's bindings refuse every call.
const isolates = new Isolates({
  limitMb: Number(process.env.EDGE_MEMORY_LIMIT_MB ?? 128), load: loadIsolate, first: worker, log,
  makeEnv: (alive) => presentEnv(proxy.env, declared, overrides, alive),
});
await isolates.ready;

// The platform proxy runs in a child workerd. If it dies, every binding call fails
// for the rest of the run: a watchdog probes it, logs the loss and starts a new one
// (exiting non-zero, for a supervisor, if that fails too).
const PROBE_MS = Number(process.env.EDGE_PROXY_PROBE_MS ?? 2000);
const within = (promise, ms) => Promise.race([promise,
  new Promise((_, fail) => setTimeout(() => fail(new Error("probe timed out")), ms).unref())]);
let probing = false;
let failures = 0;

async function probeProxy() {
  const db = proxy.env[declared.d1[0]];
  if (probing || !db) return;
  probing = true;
  try {
    await within(db.prepare("SELECT 1").first(), 30_000);
    failures = 0;
  } catch (err) {
    // Twice in a row (or no answer in 30 s): one failed call on a loaded machine is not a lost proxy.
    if (++failures < 2) return;
    failures = 0;
    log(JSON.stringify({ runner: "platform_proxy_lost", error: String(err?.name ?? "Error") }));
    await within(proxy.dispose(), 5000).catch(() => {});
    try {
      // bounded: a start that hangs would leave every binding call failing, unnoticed
      proxy = await within(startProxy(), 120_000);
      const iso = isolates.current;
      if (iso) iso.env = presentEnv(proxy.env, declared, overrides, iso.alive);
      log(JSON.stringify({ runner: "platform_proxy_restarted" }));
    } catch (restartErr) {
      log(JSON.stringify({ runner: "platform_proxy_restart_failed", error: String(restartErr?.name ?? "Error") }));
      process.exit(1);
    }
  } finally {
    probing = false;
  }
}
setInterval(probeProxy, PROBE_MS).unref();

// Test clock: shifts Date.now, which Pyodide's time.time() reads.
const realNow = Date.now.bind(Date);
let clockOffsetMs = 0;
Date.now = () => realNow() + clockOffsetMs;

// Node's fetch (undici) adds request headers of its own — accept, accept-language,
// accept-encoding, sec-fetch-mode, user-agent — that workerd's fetch does not. The
// Worker's fetch sends exactly the headers it was given (plus the transport's host and
// framing): a dispatcher drops every other name before the request is written.
await fetch("data:,");                              // creates undici's global dispatcher
const undiciAgent = globalThis[Symbol.for("undici.globalDispatcher.1")];
if (typeof undiciAgent?.dispatch !== "function") throw new Error("runner: undici dispatcher not found");
const nodeFetch = globalThis.fetch;
const TRANSPORT = new Set(["host", "content-length", "transfer-encoding"]);

function exactDispatcher(given, sent) {
  const keep = (name) => given.has(name.toLowerCase()) || TRANSPORT.has(name.toLowerCase());
  return {
    dispatch(opts, handler) {
      let headers = opts.headers;
      if (Array.isArray(headers)) {
        const flat = [];
        for (let i = 0; i < headers.length; i += 2) if (keep(headers[i])) flat.push(headers[i], headers[i + 1]);
        headers = flat;
      } else if (headers) {
        headers = Object.fromEntries(Object.entries(headers).filter(([k]) => keep(k)));
      }
      // undici calls onRequestSent once the body is written: the isolate holds it no more.
      const watched = new Proxy(handler, { get: (target, key) => (key !== "onRequestSent" ? target[key]
        : function onRequestSent(...args) { sent(); return target.onRequestSent?.apply(this, args); }) });
      return undiciAgent.dispatch({ ...opts, headers }, watched);
    },
  };
}

// A body the Worker hands to fetch is JS memory its isolate holds until it is written to
// the connection: counted against the isolate's limit meanwhile (runner/isolate.mjs).
const byteLength = (body) => (body instanceof ArrayBuffer || ArrayBuffer.isView(body) ? body.byteLength
  : typeof body === "string" ? Buffer.byteLength(body) : 0);

globalThis.fetch = async (input, init = {}) => {
  const source = init.headers ?? (input instanceof Request ? input.headers : undefined);
  const given = new Set(new Headers(source).keys());
  const release = isolates.holdJs(byteLength(init.body));
  try {
    return await nodeFetch(input, { ...init, dispatcher: exactDispatcher(given, release) });
  } finally {
    release();
  }
};

const HOP_BY_HOP = new Set(["connection", "keep-alive", "transfer-encoding", "upgrade"]);

// As Cloudflare's front line does, connection-level headers never reach the Worker.
// The client going away aborts the request's signal, as workerd does for a disconnect
// (the Worker joins it to its upstream fetches).
function toWebRequest(req, base, signal) {
  const named = new Set((req.headers.connection ?? "").split(",").map((t) => t.trim().toLowerCase()));
  const headers = new Headers();
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i].toLowerCase();
    if (!HOP_BY_HOP.has(name) && !named.has(name)) headers.append(name, req.rawHeaders[i + 1]);
  }
  const body = ["GET", "HEAD"].includes(req.method) ? null : requestBody(req);
  const request = new Request(new URL(req.url, base), {
    method: req.method, headers, body: body?.stream, duplex: "half", signal,
  });
  return { request, discardBody: () => body?.discard() };
}

// The request body as a web stream, pulled with backpressure. Whatever the Worker leaves
// unread (a body refused as too large, or never looked at) is discarded rather than the
// socket destroyed, as Node and workerd do: the client finishes sending and reads the
// response instead of stalling on a full socket or being reset.
function requestBody(req) {
  let discarding = false;
  const discard = () => { discarding = true; req.resume(); };
  const stream = new ReadableStream({
    start(controller) {
      req.on("data", (chunk) => {
        if (discarding) return;
        // A plain Uint8Array, as workerd yields (Pyodide cannot convert a Buffer).
        controller.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
        if (controller.desiredSize <= 0) req.pause();
      });
      req.on("end", () => { if (!discarding) controller.close(); });
      req.on("error", (err) => { if (!discarding) controller.error(err); });
      req.pause();
    },
    pull() { req.resume(); },
    cancel: discard,
  }, { highWaterMark: 1 << 16, size: (chunk) => chunk.byteLength });
  return { stream, discard };
}

function sendJson(res, status, doc) {
  const body = JSON.stringify(doc);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

async function sendWebResponse(res, response) {
  const headers = {};
  response.headers.forEach((v, k) => {
    if (k === "set-cookie") return;
    if (!HOP_BY_HOP.has(k) && k !== "content-length") headers[k] = v;
  });
  const cookies = response.headers.getSetCookie?.() ?? [];
  if (cookies.length) headers["set-cookie"] = cookies;
  const length = response.headers.get("content-length");
  if (length !== null && !response.headers.get("content-encoding")) headers["content-length"] = length;
  res.writeHead(response.status, headers);
  const encoder = response.body ? bodyEncoder(response.headers.get("content-encoding")) : null;
  if (encoder) {
    encoder.pipe(res);
    await pipeBody(res, response.body, encoder);
    if (!res.destroyed) encoder.end();
    return;
  }
  if (response.body) await pipeBody(res, response.body);
  if (!res.destroyed) res.end();
}

// workerd encodes a Response's body to match its Content-Encoding on the way out
// (`encodeBody: "automatic"`, its default), and its fetch hands JavaScript the decoded
// body of a gzip or br response with the header kept. Node's fetch decodes too (and also
// deflate), so the Worker relays decoded bytes labelled as encoded: encode them here, as
// workerd would (docs/design.md §9). Each chunk is flushed, so a stream still streams.
const ENCODERS = { gzip: zlib.createGzip, "x-gzip": zlib.createGzip, deflate: zlib.createDeflate,
                   br: zlib.createBrotliCompress };

function bodyEncoder(coding) {
  const make = ENCODERS[(coding ?? "").trim().toLowerCase()];
  return make ? make() : null;
}

// Chunk by chunk: a streamed upstream reaches the client as it arrives. A client that
// closes its socket cancels the Worker's response stream, as workerd does, so the
// Worker can abort its upstream request instead of reading it for nobody.
async function pipeBody(res, body, encoder = null) {
  const reader = body.getReader();
  const gone = () => reader.cancel(new Error("client disconnected")).catch(() => {});
  res.on("close", () => { if (!res.writableFinished) gone(); });
  if (res.destroyed) gone();
  const out = encoder ?? res;
  for (;;) {
    const { done, value } = await reader.read();
    if (done || res.destroyed) return;
    out.write(value);
    if (encoder) await new Promise((r) => encoder.flush(r));
    if (out.writableNeedDrain) {        // checked after the flush: a drain may have come
      await new Promise((r) => { out.once("drain", r); res.once("close", r); });
    }
  }
}

async function readJson(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return chunks.length ? JSON.parse(Buffer.concat(chunks).toString("utf8")) : {};
}

const FLOOR_PY = `
import hashlib, json, time
raw = open("/tmp/runner-floor-body", "rb").read()
out = []
for _ in range(reps):
    t = time.perf_counter()
    hashlib.sha256(json.dumps(json.loads(raw), ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()
    out.append((time.perf_counter() - t) * 1000)
json.dumps(out)
`;
// kind=pages: the floor of verifying pages (the search bench): SHA-256 + UTF-8 decode +
// json.loads of each page, the body being the pages concatenated, \`lengths\` their sizes.
const FLOOR_PAGES_PY = `
import hashlib, json, time
raw = open("/tmp/runner-floor-body", "rb").read()
spans, at = [], 0
for n in lengths:
    spans.append((at, at + n))
    at += n
out = []
for _ in range(reps):
    t = time.perf_counter()
    for a, b in spans:
        page = raw[a:b]
        hashlib.sha256(page).hexdigest()
        json.loads(page.decode("utf-8"))
    out.append((time.perf_counter() - t) * 1000)
json.dumps(out)
`;
const PROFILE_PY = `
import cProfile, io, pstats, sys
state = sys.modules.setdefault("_runner_profile", type(sys)("_runner_profile"))
text = ""
if action == "start":
    state.p = cProfile.Profile()
    state.p.enable()
else:
    state.p.disable()
    buf = io.StringIO()
    pstats.Stats(state.p, stream=buf).sort_stats(sort).print_stats(top)
    text = buf.getvalue()
text
`;

// tracemalloc over the Worker's Python (bench: what requests in flight hold); "clear"
// empties the Worker's caches first, "probe" finds the largest block the Worker could
// allocate without growing the heap (its largest contiguous free room, under the
// footprint limit bindings.cap_heap sets; docs/design.md §7.2).
const HEAP_PY = `
import gc, json, sys, tracemalloc
import pyodide_js
if action == "start" and not tracemalloc.is_tracing():
    tracemalloc.start()
if action == "clear":
    sys.modules["multillm_edge.service.budget"].BUDGET.clear_caches()
gc.collect()
traced, peak = tracemalloc.get_traced_memory() if tracemalloc.is_tracing() else (0, 0)
if action == "stop":
    tracemalloc.stop()
budget = sys.modules["multillm_edge.service.budget"].BUDGET
out = {"traced": traced, "peak": peak, "reserve_held": budget._block is not None,
       "reserved_bytes": budget.cur, "caches_bytes": budget.held()}
if action == "probe" and free > 0:
    lo, hi = 0, free
    while hi - lo > 65536:
        mid = (lo + hi) // 2
        try:
            b = bytearray(mid)
            del b
            lo = mid
        except MemoryError:
            hi = mid
    out["largest_free_bytes"] = lo
json.dumps(out)
`;

// The allocator's view of the Worker's wasm heap (dlmalloc's mallinfo): in use, free,
// the free top, the heap's break, its footprint and the limit set on it.
function mallinfo(module) {
  const sp = module._stackSave();
  const p = module._stackAlloc(40);
  module._mallinfo(p);
  const view = new DataView(module.HEAPU8.buffer, p, 40);
  const field = (i) => view.getUint32(4 * i, true);
  const out = { heap_bytes: module.HEAPU8.length, in_use_bytes: field(7), free_bytes: field(8),
    top_free_bytes: field(9), break_bytes: module._sbrk(0), footprint_bytes: module._malloc_footprint(),
    footprint_limit_bytes: module._malloc_footprint_limit() };
  module._stackRestore(sp);
  return out;
}

const MODULES_PY = `
import json, os, site, sys
files = {name: getattr(m, "__file__", None) for name, m in list(sys.modules.items())}
sites = [p for p in site.getsitepackages() if os.path.isdir(p)]
json.dumps({"files": {k: v for k, v in files.items() if v}, "sys_path": sys.path,
            "site_packages": sorted(f for p in sites for f in os.listdir(p))})
`;

// Test control, outside the Worker: nothing here is reachable unless EDGE_TEST_CONTROL=1.
async function testControl(req, res, url) {
  const db = proxy.env.INTELLIGENCE_DB, bucket = proxy.env.multillm_media;
  const route = `${req.method} ${url.pathname}`;
  if (route === "POST /__runner/clock") {
    clockOffsetMs = Math.round(Number((await readJson(req)).offset ?? 0) * 1000);
    return sendJson(res, 200, { offset: clockOffsetMs / 1000 });
  }
  if (route === "GET /__runner/stats") { await quiet(); return sendJson(res, 200, counts); }
  if (route === "GET /__runner/memory") {
    // The Worker's whole Python heap lives in Pyodide's wasm memory (it grows, never
    // shrinks); the peak is across isolates, a lost one included.
    await isolates.ready;
    return sendJson(res, 200, { ...isolates.memory(), rss_bytes: process.memoryUsage().rss });
  }
  const { pyodide } = await isolates.ready;
  if (route === "POST /__runner/floor") {
    // The floor of a body (json.loads + compact json.dumps + SHA-256), timed in the
    // Worker's own Pyodide: the yardstick for the Worker's CPU per turn (bench).
    const chunks = [];
    for await (const c of req) chunks.push(c);
    pyodide.FS.writeFile("/tmp/runner-floor-body", new Uint8Array(Buffer.concat(chunks)));
    const reps = Number(url.searchParams.get("reps") ?? 1);
    if (url.searchParams.get("kind") === "pages") {
      const lengths = (url.searchParams.get("lengths") ?? "").split(",").filter(Boolean).map(Number);
      return sendJson(res, 200, { ms: JSON.parse(pyodide.runPython(FLOOR_PAGES_PY, { globals: pyodide.toPy({ reps, lengths }) })) });
    }
    return sendJson(res, 200, { ms: JSON.parse(pyodide.runPython(FLOOR_PY, { globals: pyodide.toPy({ reps }) })) });
  }
  if (route === "POST /__runner/profile") {
    // cProfile over the Worker's Python while enabled (bench: top entries of a turn).
    const { action = "start", top = 25, sort = "tottime" } = await readJson(req);
    const text = pyodide.runPython(PROFILE_PY, { globals: pyodide.toPy({ action, top, sort }) });
    return sendJson(res, 200, { text });
  }
  if (route === "POST /__runner/heap") {
    const { action = "read" } = await readJson(req);
    const limit = mallinfo(pyodide._module).footprint_limit_bytes;   // -1: none
    const limited = limit > 0 && limit < 2 ** 32 - 1;
    const free = action === "probe" && limited ? mallinfo(pyodide._module).free_bytes : 0;
    const py = JSON.parse(pyodide.runPython(HEAP_PY, { globals: pyodide.toPy({ action, free }) }));
    return sendJson(res, 200, { ...py, ...mallinfo(pyodide._module) });
  }
  if (route === "GET /__runner/modules") {
    // Where each loaded module came from, and what site-packages holds (bundle tests).
    return sendJson(res, 200, JSON.parse(pyodide.runPython(MODULES_PY)));
  }
  if (route === "POST /__runner/faults") {
    Object.assign(faults, await readJson(req));
    return sendJson(res, 200, faults);
  }
  if (route === "POST /__runner/d1") {
    const { sql, params = [] } = await readJson(req);
    const { results, meta } = await db.prepare(sql).bind(...params).all();
    return sendJson(res, 200, { results, changes: meta.changes });
  }
  if (route === "GET /__runner/r2/list") {
    const keys = [];
    let cursor;
    do {
      const page = await bucket.list({ prefix: url.searchParams.get("prefix") ?? "", cursor });
      keys.push(...page.objects.map((o) => ({ key: o.key, size: o.size })));
      cursor = page.truncated ? page.cursor : undefined;
    } while (cursor);
    return sendJson(res, 200, { objects: keys });
  }
  const key = url.searchParams.get("key");
  if (route === "GET /__runner/r2") {
    const obj = await bucket.get(key);
    if (!obj) return sendJson(res, 404, { missing: true });
    const data = Buffer.from(await obj.arrayBuffer());
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": data.length });
    return res.end(data);
  }
  if (route === "PUT /__runner/r2") {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    await bucket.put(key, new Uint8Array(Buffer.concat(chunks)));
    return sendJson(res, 200, { stored: true });
  }
  if (route === "DELETE /__runner/r2") {
    await bucket.delete(key);
    return sendJson(res, 200, { deleted: true });
  }
  return sendJson(res, 404, { unknown: route });
}

// ctx.waitUntil as workerd keeps it (docs/design.md §4.1): the promise runs on after the
// response, the runner awaits every one before it lets the request go (those added while
// it waits included), and a rejection is one log line naming its kind, never a message
// (the Worker rejects with the exception's type name only).
// GET /__runner/stats first waits (up to 10 s) until no such promise is pending, so a
// test's figures after an answer include the work that follows it.
let pendingWaits = 0;

function executionContext() {
  const waits = [];
  const waitUntil = (p) => {
    pendingWaits++;
    waits.push(Promise.resolve(p).catch((err) => {
      const kind = /^[A-Za-z_][A-Za-z0-9_.]{0,100}$/.test(err?.message ?? "") ? err.message : String(err?.name ?? "Error");
      log(JSON.stringify({ runner: "wait_until_failed", error: kind }));
    }).finally(() => { pendingWaits--; }));
  };
  return { ctx: { waitUntil, passThroughOnException: () => {}, props: {} }, waits };
}

async function quiet(ms = 10_000) {
  for (const until = Date.now() + ms; pendingWaits > 0 && Date.now() < until;) {
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function settled(waits) {
  for (let done = 0; done < waits.length;) {
    const batch = waits.slice(done);
    done = waits.length;
    await Promise.allSettled(batch);
  }
}

// A Cron Trigger's invocation, as wrangler's --test-scheduled route makes it.
async function runScheduled(instance, env, url, ctx, waits, res) {
  const controller = { scheduledTime: Date.now(), cron: url.searchParams.get("cron") ?? "", noRetry() {} };
  try {
    await instance.scheduled(controller, env, ctx);
    await settled(waits);
  } finally {
    instance.destroy?.();
  }
  res.writeHead(200, { "content-type": "text/plain" });
  res.end("Ran scheduled event");
}

const server = http.createServer(async (req, res) => {
  let discardBody = () => {};
  let iso = null, entry = null;
  try {
    const base = `http://${req.headers.host ?? "localhost"}`;
    if (process.env.EDGE_TEST_CONTROL === "1" && req.url.startsWith("/__runner/")) {
      return await testControl(req, res, new URL(req.url, base));
    }
    iso = await isolates.ready;            // while a lost isolate is replaced, requests wait
    const { ctx, waits } = executionContext();
    const instance = iso.Default(ctx, iso.env);
    const client = new AbortController();
    entry = iso.enter(res, client);
    if (process.env.EDGE_TEST_CONTROL === "1" && req.method === "GET"
        && req.url.split("?")[0] === "/cdn-cgi/handler/scheduled") {
      return await iso.racing(runScheduled(instance, iso.env, new URL(req.url, base), ctx, waits, res));
    }
    res.on("close", () => { if (!res.writableFinished) client.abort(); });
    const converted = toWebRequest(req, base, client.signal);
    discardBody = converted.discardBody;
    let result;
    try {
      result = await iso.racing(instance.fetch(converted.request));
    } finally {
      if (!iso.dead) instance.destroy?.();
    }
    if (iso.dead) throw new IsolateLost();      // an answer made as its isolate was lost
    const response = result?.js_object ?? result;
    if (typeof result?.destroy === "function") result.destroy();
    await iso.racing(sendWebResponse(res, response));
    discardBody();
    await iso.racing(settled(waits));
  } catch (err) {
    if (err instanceof IsolateLost || iso?.dead) {
      // As Cloudflare's error 1102: the request dies with its isolate (runner/isolate.mjs).
      if (!res.headersSent) sendJson(res, 503, LOST_BODY);
      else res.destroy();
      return;
    }
    // As workerd: an uncaught Worker exception is a 500, and the runner keeps serving.
    log(JSON.stringify({ runner: "worker_exception", error: String(err?.type ?? err?.name ?? "Error") }));
    if (process.env.EDGE_RUNNER_DEBUG === "1") log(String(err?.stack ?? err));
    if (!res.headersSent) sendJson(res, 500, { error: { type: "server_error", code: "worker_exception", message: "The Worker raised an exception." } });
    else res.destroy();
  } finally {
    if (entry) iso.leave(entry);
    discardBody();
  }
});

// Node closes idle keep-alive connections after 5 s, the same moment httpx-based clients
// (the openai/anthropic SDKs, the tests) reuse them: a request sent into that race gets
// ECONNRESET. Keep idle connections well past any client's expiry, as production edges do.
server.keepAliveTimeout = 75_000;
server.headersTimeout = 76_000;

const HOST = (process.env.EDGE_HOST ?? "").trim() || "127.0.0.1";
// The URL this machine reaches it at: a wildcard address is reached on the loopback.
const urlHost = ["0.0.0.0", "::"].includes(HOST) ? "127.0.0.1" : HOST.includes(":") ? `[${HOST}]` : HOST;

server.on("error", (err) => {   // a bad EDGE_HOST or a taken PORT: say which, and stop
  log(JSON.stringify({ runner: "listen_failed", host: HOST, port: process.env.PORT ?? "8787", error: err.code ?? String(err) }));
  process.exit(1);
});
server.listen(Number(process.env.PORT ?? 8787), HOST, () => {
  const { port } = server.address();
  log(JSON.stringify({ runner: "listening", url: `http://${urlHost}:${port}`, host: HOST, port,
    start_ms: Math.round(performance.now() - started) }));
});

for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, async () => { server.close(); await proxy.dispose(); process.exit(0); });
}
