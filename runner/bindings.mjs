// Present getPlatformProxy()'s bindings the way workerd does.
//
// The runtime SDK picks its wrapper by JS constructor name (`D1Database`, `R2Bucket`, …),
// and the proxy's objects carry other names. These façades only rename and delegate:
// every call still reaches Miniflare's real local D1 and R2.

// Operation counts, read by tests and benchmarks (GET /__runner/stats).
// d1_rows_changed sums meta.changes of statements that changed the database (rows
// inserted, updated or deleted); d1_rows_written sums meta.rows_written (index entries too).
// The usage upsert a turn makes after its answer (docs/design.md §4.1) is counted apart,
// in usage_statements / usage_rows_written: the d1_* figures are a turn's own work.
export const counts = { d1_statements: 0, d1_batches: 0, d1_rows_changed: 0, d1_rows_written: 0,
  r2_puts: 0, r2_gets: 0, r2_heads: 0, r2_deletes: 0, usage_statements: 0, usage_rows_written: 0 };
const USAGE_UPSERT = "INSERT INTO principal_usage";

// Faults a test may inject where no real local failure can be provoked (POST /__runner/faults).
// d1_sql: a statement whose SQL contains this text fails (e.g. a write after the R2 put);
// d1_slow_sql: one containing this text runs d1_slow_ms late (a slow write after the answer).
export const faults = { r2_put: false, r2_get: false, r2_delete: false, d1_sql: "",
  d1_slow_sql: "", d1_slow_ms: 0 };

const later = (ms, run) => new Promise((resolve) => setTimeout(resolve, ms)).then(run);

function metered(promise, usage = false) {
  return promise.then((res) => {
    const meta = res?.meta;
    if (meta && usage) {
      counts.usage_rows_written += meta.rows_written ?? 0;
    } else if (meta) {
      counts.d1_rows_written += meta.rows_written ?? 0;
      if (meta.changed_db) counts.d1_rows_changed += meta.changes ?? 0;
    }
    return res;
  });
}

// A lost isolate (runner/isolate.mjs) reaches no binding again: `alive()` is false then.
const always = () => true;
const lost = () => Promise.reject(new Error("isolate lost"));

class D1PreparedStatement {
  #stmt;
  #sql;
  #alive;
  constructor(stmt, sql, alive) { this.#stmt = stmt; this.#sql = sql; this.#alive = alive; }
  #fault() {
    if (!this.#alive()) return lost();
    return faults.d1_sql && this.#sql.includes(faults.d1_sql) ? Promise.reject(new Error("injected D1 fault")) : null;
  }
  #slow(run) {
    return faults.d1_slow_sql && this.#sql.includes(faults.d1_slow_sql) ? later(faults.d1_slow_ms, run) : run();
  }
  bind(...values) { return new D1PreparedStatement(this.#stmt.bind(...values), this.#sql, this.#alive); }
  first(column) {
    counts.d1_statements++;
    return this.#fault() ?? (column === undefined ? this.#stmt.first() : this.#stmt.first(column));
  }
  #count() {
    const usage = this.#sql.includes(USAGE_UPSERT);
    if (usage) counts.usage_statements++; else counts.d1_statements++;
    return usage;
  }
  all() { const u = this.#count(); return this.#fault() ?? this.#slow(() => metered(this.#stmt.all(), u)); }
  run() { const u = this.#count(); return this.#fault() ?? this.#slow(() => metered(this.#stmt.run(), u)); }
  raw(options) { counts.d1_statements++; return this.#fault() ?? this.#stmt.raw(options); }
  get inner() { return this.#stmt; }
  get faulty() { return Boolean(faults.d1_sql && this.#sql.includes(faults.d1_sql)); }
}

export class D1Database {
  #db;
  #alive;
  constructor(db, alive = always) { this.#db = db; this.#alive = alive; }
  prepare(sql) { return new D1PreparedStatement(this.#db.prepare(sql), sql, this.#alive); }
  // One round trip (counted as one batch, its statements not again); its writes are metered.
  batch(statements) {
    counts.d1_batches++;
    if (!this.#alive()) return lost();
    const fault = statements.find((s) => s.faulty);
    if (fault) return Promise.reject(new Error("injected D1 fault"));
    return this.#db.batch(statements.map((s) => s.inner)).then((results) => Promise.all(results.map((r) => metered(Promise.resolve(r)))));
  }
  exec(sql) { return this.#alive() ? this.#db.exec(sql) : lost(); }
  dump() { return this.#db.dump(); }
}

// Copy an R2 object's metadata so Python sees plain attributes, as on workerd.
function describe(target, obj) {
  for (const k of ["key", "version", "size", "etag", "httpEtag", "uploaded",
    "httpMetadata", "customMetadata", "checksums", "storageClass", "range"]) {
    target[k] = obj[k];
  }
  return target;
}

export class R2Object {
  constructor(obj) { describe(this, obj); }
}

export class R2ObjectBody {
  #obj;
  constructor(obj) { describe(this, obj); this.#obj = obj; }
  get body() { return this.#obj.body; }
  get bodyUsed() { return this.#obj.bodyUsed; }
  arrayBuffer() { return this.#obj.arrayBuffer(); }
  text() { return this.#obj.text(); }
  json() { return this.#obj.json(); }
  blob() { return this.#obj.blob(); }
}

// The proxy transport serializes arguments; it accepts what workerd accepts for
// bytes (ArrayBuffer views, strings) but not Pyodide proxies. Nothing is converted
// here: the Worker must hand over real JS bytes, as it must in production.
export class R2Bucket {
  #bucket;
  #alive;
  constructor(bucket, alive = always) { this.#bucket = bucket; this.#alive = alive; }
  #check() { if (!this.#alive()) throw new Error("isolate lost"); }
  async head(key) { this.#check(); counts.r2_heads++; const o = await this.#bucket.head(key); return o && new R2Object(o); }
  async get(key, options) {
    this.#check();
    counts.r2_gets++;
    if (faults.r2_get) throw new Error("injected R2 get fault");
    const o = await (options === undefined ? this.#bucket.get(key) : this.#bucket.get(key, options));
    if (!o) return null;
    return new R2ObjectBody(o);
  }
  async put(key, value, options) {
    this.#check();
    counts.r2_puts++;
    if (faults.r2_put) throw new Error("injected R2 put fault");
    const o = await (options === undefined ? this.#bucket.put(key, value) : this.#bucket.put(key, value, options));
    return o && new R2Object(o);
  }
  async delete(keys) {
    this.#check();
    counts.r2_deletes++;
    if (faults.r2_delete) throw new Error("injected R2 delete fault");
    return this.#bucket.delete(keys);
  }
  async list(options) { this.#check(); return this.#bucket.list(options); }
}

// Wrap the proxy env: D1 and R2 bindings by their wrangler.toml declarations; `alive`
// says whether the isolate given this env still runs.
export function presentEnv(proxyEnv, config, overrides, alive = always) {
  const env = { ...proxyEnv };
  for (const db of config.d1 ?? []) if (env[db]) env[db] = new D1Database(proxyEnv[db], alive);
  for (const b of config.r2 ?? []) if (env[b]) env[b] = new R2Bucket(proxyEnv[b], alive);
  for (const [k, v] of Object.entries(overrides)) {
    if (v === null) delete env[k]; else env[k] = v;
  }
  return env;
}
