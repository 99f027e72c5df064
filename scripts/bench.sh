#!/usr/bin/env bash
# npm run bench: the paging, turn, capacity, storage, prompt-cache, forward-guard, first-keep and long-chain benchmarks in CPython and in Pyodide (same code, same tables), then the runner benches (search, the isolate's memory).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -d node_modules/pyodide ] || npm install --no-audit --no-fund
rc=0
echo "== CPython =="
"$PY" bench/bench_paging.py || rc=1
"$PY" bench/bench_turn.py || rc=1
"$PY" bench/bench_recall.py || rc=1
"$PY" bench/bench_capacity.py || rc=1
"$PY" bench/bench_storage.py || rc=1    # in-process platform: CPython only
"$PY" bench/bench_cache.py || rc=1      # bytes, not time: the same in Pyodide
"$PY" bench/bench_forward_guard.py || rc=1
"$PY" bench/bench_waiting_request.py || rc=1   # what a waiting request holds (tracemalloc)
"$PY" bench/bench_keep_first.py || rc=1     # a session's first turn in an isolate, kept
"$PY" bench/bench_long_chain.py || rc=1     # recalling turns past the corpus's bound (3,000-6,000 exchanges)
echo
echo "== Pyodide =="
node bench/pyodide_bench.mjs || rc=1
node bench/pyodide_bench.mjs bench_turn || rc=1
node bench/pyodide_bench.mjs bench_recall || rc=1
node bench/pyodide_bench.mjs bench_capacity || rc=1
node bench/pyodide_bench.mjs bench_forward_guard || rc=1
node bench/pyodide_bench.mjs bench_keep_first || rc=1
node bench/pyodide_bench.mjs bench_long_chain || rc=1
echo
echo "== Search over a full session, through the runner =="
"$PY" bench/bench_search.py || rc=1
echo
echo "== A busy minute in one isolate, through the runner, its 128 MiB limit on =="
"$PY" bench/bench_isolate_memory.py || rc=1
exit $rc
