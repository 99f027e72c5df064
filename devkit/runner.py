"""Start the local runner (node runner/dev.mjs) on a free port with isolated state."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def stop_process(proc: subprocess.Popen, grace: float = 15) -> None:
    """Terminate ``proc`` if it still runs; kill it if it outlives ``grace`` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Edge:
    """A running runner: its base URL, its state dir and everything it printed."""

    #: Every runner started and not yet stopped: a failing test shows their log tails
    #: (tests/conftest.py), so a flake on a loaded machine can be diagnosed.
    running: list["Edge"] = []

    def __init__(self, state_dir: Path, vars: dict[str, str] | None = None,
                 unbind: list[str] = (), extra_env: dict[str, str] | None = None,
                 control: bool = True, log_file: Path | None = None, start_timeout: float = 90):
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        vars_file = state_dir / "vars.env"
        vars_file.write_text("".join(f"{k}={v}\n" for k, v in (vars or {}).items()))
        env = {**os.environ, "PORT": "0", "EDGE_STATE_DIR": str(state_dir),
               "EDGE_VARS_FILE": str(vars_file), "EDGE_UNBIND": ",".join(unbind),
               "EDGE_TEST_CONTROL": "1" if control else "0", **(extra_env or {})}
        self.log_file = log_file.open("w", encoding="utf-8") if log_file else None
        self.lines: list[str] = []
        self._ready = threading.Event()
        self.proc = subprocess.Popen(["node", str(ROOT / "runner" / "dev.mjs")], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        Edge.running.append(self)
        threading.Thread(target=self._pump, daemon=True).start()
        if not self._ready.wait(start_timeout):
            self.stop()
            raise RuntimeError("runner did not start:\n" + "\n".join(self.lines[-20:]))
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def _pump(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            if self.log_file:
                self.log_file.write(line + "\n")
                self.log_file.flush()
            if '"runner":"listening"' in line:
                info = json.loads(line)
                self.url, self.start_ms = info["url"], info["start_ms"]
                self._ready.set()

    def output(self) -> str:
        return "\n".join(self.lines)

    def tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines the runner printed."""
        return "\n".join(self.lines[-lines:])

    def memory(self) -> dict:
        """GET /__runner/memory: wasm_bytes, wasm_peak_bytes, isolates_lost, js_bytes, …"""
        return self.client.get("/__runner/memory").json()

    def logs(self) -> list[dict]:
        """The Worker's structured log lines."""
        out = []
        for line in self.lines:
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def set_clock(self, offset_seconds: float):
        self.client.post("/__runner/clock", json={"offset": offset_seconds}).raise_for_status()

    def stats(self) -> dict:
        return self.client.get("/__runner/stats").json()

    def inject(self, **faults):
        self.client.post("/__runner/faults", json=faults).raise_for_status()

    def sql(self, sql: str, *params) -> list[dict]:
        """A statement against the runner's own local D1."""
        r = self.client.post("/__runner/d1", json={"sql": sql, "params": list(params)})
        r.raise_for_status()
        return r.json()["results"]

    def r2_get(self, key: str) -> bytes | None:
        r = self.client.get("/__runner/r2", params={"key": key})
        return r.content if r.status_code == 200 else None

    def r2_put(self, key: str, data: bytes):
        self.client.put("/__runner/r2", params={"key": key}, content=data).raise_for_status()

    def r2_delete(self, key: str):
        self.client.delete("/__runner/r2", params={"key": key}).raise_for_status()

    def r2_list(self, prefix: str = "") -> dict[str, int]:
        """Every object under `prefix` in the runner's local R2: key -> size."""
        r = self.client.get("/__runner/r2/list", params={"prefix": prefix})
        r.raise_for_status()
        return {o["key"]: o["size"] for o in r.json()["objects"]}

    def scheduled(self, cron: str = "0 * * * *"):
        """Fire the Worker's `scheduled` handler (a Cron Trigger), as wrangler's
        --test-scheduled route does."""
        return self.client.get("/cdn-cgi/handler/scheduled", params={"cron": cron})

    def stop(self):
        if self in Edge.running:
            Edge.running.remove(self)
        if getattr(self, "client", None):
            self.client.close()
        stop_process(self.proc)
        if self.log_file:
            self.log_file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def wait_for_log(self, predicate, timeout=5.0, since=0):
        """The log records after the first ``since`` that match ``predicate``, once one
        does ([] after ``timeout``): a request's line may follow its answer."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [r for r in self.logs()[since:] if predicate(r)]
            if found:
                return found
            time.sleep(0.05)
        return []
