// The Worker's isolate and the memory limit workerd enforces on it (docs/design.md §7.2, §9).
//
// Cloudflare kills an isolate whose JavaScript heap plus WebAssembly memory pass 128 MB,
// with every request in flight (error 1102). The runner counts, per isolate:
//   - wasm: Pyodide's whole linear memory (the Worker's Python heap; it grows, never shrinks);
//   - js:   the bodies of the Worker's outbound fetches not yet written to their connection
//           (the one large JS object a request hands the runtime; undici's onRequestSent
//           ends it). wrangler's platform proxy, Node and undici are the host's, as
//           workerd's own memory is not the Worker's.
// Every growth of the wasm heap goes through WebAssembly.Memory.prototype.grow (Emscripten's
// growMemory), hooked here: the growth that would pass the limit is refused (Python gets a
// MemoryError and unwinds), the isolate is lost at that instant, so no spike between two
// checks is missed; a fetch body is counted (and checked) before the fetch is made.
// A lost isolate's requests in flight get 503 `isolate_memory_exceeded` (a stream already
// answering is cut), their signals abort (so its Python makes no further fetch), its D1/R2
// bindings refuse every call, one line is logged, and a fresh isolate (Pyodide + Worker) is
// loaded; requests arriving meanwhile wait for it.

const MiB = 1 << 20;
const PAGE = 65536;

export class IsolateLost extends Error {
  constructor() { super("isolate lost"); this.name = "IsolateLost"; }
}

class Isolate {
  constructor(pyodide, main, makeEnv) {
    this.pyodide = pyodide;
    this.Default = main.Default;
    this.dead = false;
    this.alive = () => !this.dead;
    this.env = makeEnv(this.alive);
    this.jsBytes = 0;
    this.inflight = new Set();
    this.lost = new Promise((_, fail) => { this.kill = fail; });
    this.lost.catch(() => {});
  }

  get wasmBytes() { return this.pyodide._module.HEAPU8.byteLength; }
  get heap() { return this.pyodide._module.HEAPU8.buffer; }

  // A request in flight here: `lose` cuts it if the isolate is lost.
  enter(res, client) {
    const entry = { res, client };
    this.inflight.add(entry);
    return entry;
  }

  leave(entry) { this.inflight.delete(entry); }

  // `promise`, or IsolateLost as soon as the isolate is (a lost isolate answers nobody).
  racing(promise) { return Promise.race([promise, this.lost]); }
}

export class Isolates {
  // load(): a promise of { pyodide, main } (a fresh Pyodide with the Worker imported);
  // makeEnv(alive): the Worker's env, its bindings refusing calls once alive() is false.
  constructor({ limitMb, load, makeEnv, log, first }) {
    this.limit = limitMb > 0 ? limitMb * MiB : Infinity;
    this.limitMb = limitMb;
    this.load = load;
    this.makeEnv = makeEnv;
    this.log = log;
    this.peak = 0;
    this.jsPeak = 0;
    this.lostCount = 0;
    this.current = null;
    this.dying = [];            // lost isolates (weakly: freed once their Python is done): never grow again
    hookGrowth(this);
    this.ready = this.#start(first ?? load());
    setInterval(() => this.poll(), 250).unref();
  }

  async #start(loading) {
    const { pyodide, main } = await loading;
    const iso = new Isolate(pyodide, main, this.makeEnv);
    this.current = iso;
    this.peak = Math.max(this.peak, iso.wasmBytes);
    return iso;
  }

  // The isolate whose heap `buffer` is (before a growth, its current buffer).
  owning(buffer) {
    if (this.current && this.current.heap === buffer) return this.current;
    for (const ref of this.dying) {
      const iso = ref.deref();
      if (iso && iso.heap === buffer) return iso;
    }
    return null;
  }

  // Whether `iso` may hold `wasmAfter` bytes of wasm (and its JS side) → lost if not.
  admits(iso, wasmAfter) {
    if (iso.dead) return false;
    if (wasmAfter + iso.jsBytes <= this.limit) return true;
    this.lose(iso, wasmAfter);
    return false;
  }

  // Count `bytes` of JS the current isolate hands the runtime; → a release, or throws
  // IsolateLost if that passes the limit (or the isolate is gone).
  holdJs(bytes) {
    const iso = this.current;
    if (!iso) throw new IsolateLost();
    iso.jsBytes += bytes;
    if (!this.admits(iso, iso.wasmBytes)) { iso.jsBytes -= bytes; throw new IsolateLost(); }
    this.jsPeak = Math.max(this.jsPeak, iso.jsBytes);
    let held = bytes;
    return () => { iso.jsBytes -= held; held = 0; };
  }

  poll() {
    const iso = this.current;
    if (!iso || iso.dead) return;
    this.peak = Math.max(this.peak, iso.wasmBytes);
    this.admits(iso, iso.wasmBytes);
  }

  lose(iso, wasmBytes) {
    if (iso.dead) return;
    iso.dead = true;
    this.lostCount++;
    this.peak = Math.max(this.peak, wasmBytes);       // what the isolate asked for, refused
    this.log(JSON.stringify({ runner: "isolate_memory_exceeded", wasm_bytes: wasmBytes,
      js_bytes: iso.jsBytes, limit_bytes: this.limit, requests_lost: iso.inflight.size }));
    this.dying = [...this.dying.filter((ref) => ref.deref()), new WeakRef(iso)];
    if (this.current === iso) {
      this.current = null;
      this.ready = this.#start(this.load());
    }
    // Outside the growth's own stack (it runs inside the Worker's Python).
    queueMicrotask(() => {
      for (const { res, client } of iso.inflight) {
        client.abort();
        if (res.headersSent) res.destroy();
      }
      iso.kill(new IsolateLost());
    });
  }

  memory() {
    const iso = this.current;
    const wasm = iso ? iso.wasmBytes : null;
    if (wasm !== null) this.peak = Math.max(this.peak, wasm);
    return { wasm_bytes: wasm, wasm_peak_bytes: this.peak, js_bytes: iso ? iso.jsBytes : null,
      js_peak_bytes: this.jsPeak,
      isolates_lost: this.lostCount, limit_bytes: Number.isFinite(this.limit) ? this.limit : 0 };
  }
}

// Every wasm memory's growth passes here: the isolates' heaps are checked, others (undici's
// parser) pass untouched.
function hookGrowth(isolates) {
  const proto = WebAssembly.Memory.prototype;
  const grow = proto.grow;
  proto.grow = function (pages) {
    const iso = isolates.owning(this.buffer);
    if (iso && !isolates.admits(iso, this.buffer.byteLength + pages * PAGE)) {
      throw new RangeError("isolate memory limit");
    }
    const out = grow.call(this, pages);
    if (iso) isolates.peak = Math.max(isolates.peak, this.buffer.byteLength);
    return out;
  };
}

export const LOST_BODY = {
  error: { type: "server_error", code: "isolate_memory_exceeded",
    message: "The Worker's isolate exceeded its memory limit; every request in flight was lost. Retry." },
};
