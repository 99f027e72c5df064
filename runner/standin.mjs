// The stand-in provider for `npm start` with no provider key (docs/design.md §9): with
// EDGE_STANDIN=1 the runner starts devkit/standin.py as its child and adds it to the
// Worker's PROVIDERS as `standin`, for this run only. Nothing here reaches the upload:
// a deployed Worker serves the stand-in only if an operator configures it.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";

export const STANDIN = "standin";
const KEY_SECRET = "STANDIN_API_KEY";

// The Worker's PROVIDERS (a JSON string or a TOML table) as an object, or null if invalid.
function providersOf(value) {
  if (value === undefined || value === null || value === "") return {};
  if (typeof value === "object") return Array.isArray(value) ? null : value;
  try {
    const parsed = JSON.parse(value);
    return parsed && typeof parsed === "object" && !Array.isArray(parsed) ? parsed : null;
  } catch {
    return null;
  }
}

// Start the stand-in (at the runner's start, while Pyodide loads); resolves to its URL
// and a stop. The child exits when its stdin closes, so it never outlives the runner.
export async function startStandIn(root) {
  const venv = join(root, ".venv", "bin", "python");
  const child = spawn(existsSync(venv) ? venv : "python3", ["-m", "devkit.standin"],
    { cwd: root, stdio: ["pipe", "pipe", "inherit"] });
  const stop = () => { if (child.exitCode === null) child.kill("SIGTERM"); };
  process.on("exit", stop);
  const first = await new Promise((done, fail) => {
    createInterface({ input: child.stdout }).once("line", done);
    child.once("exit", (code) => fail(new Error(`the stand-in exited (${code})`)));
    child.once("error", fail);          // no Python to start it with
  });
  return { ...JSON.parse(first), stop };
}

// The vars that point the Worker at a started stand-in ({} and the stand-in stopped if
// PROVIDERS is invalid or already names one).
export function standInVars(started, vars, log) {
  const providers = providersOf(vars.PROVIDERS);
  if (providers === null || STANDIN in providers) {
    started.stop();
    log(JSON.stringify({ runner: "standin", served: false,
      reason: providers === null ? "PROVIDERS is invalid" : "PROVIDERS already names standin" }));
    return {};
  }
  const { url, model } = started;
  log(JSON.stringify({ runner: "standin", served: true, url, model }));
  const entry = { base_url: `${url}/v1`, formats: ["chat", "responses", "messages"], api_key_secret: KEY_SECRET };
  return { PROVIDERS: JSON.stringify({ ...providers, [STANDIN]: entry }), [KEY_SECRET]: "standin-local-only" };
}
