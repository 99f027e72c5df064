// Runs a bench (bench/bench_paging.py by default) inside Pyodide (npm pyodide, the 0.28
// line production uses). Copies src/multillm_edge and bench/*.py into Pyodide's FS and
// prints the same table as the CPython run. Usage: node bench/pyodide_bench.mjs [bench_turn]
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { loadPyodide } from "pyodide";
import { installWheels } from "../runner/pyodide-host.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

function copyTree(py, hostDir, fsDir) {
  py.FS.mkdirTree(fsDir);
  for (const name of readdirSync(hostDir)) {
    if (name === "__pycache__") continue;
    const host = join(hostDir, name);
    const dest = `${fsDir}/${name}`;
    if (statSync(host).isDirectory()) copyTree(py, host, dest);
    else if (name.endsWith(".py")) py.FS.writeFile(dest, readFileSync(host));
  }
}

const t0 = performance.now();
const py = await loadPyodide({ stdout: (s) => console.log(s), stderr: (s) => console.error(s) });
const loadMs = performance.now() - t0;
installWheels(py, root);   // the pinned stemmer the search imports
copyTree(py, join(root, "src", "multillm_edge"), "/home/pyodide/src/multillm_edge");
py.FS.mkdirTree("/home/pyodide/bench");
for (const name of readdirSync(join(root, "bench")).filter((n) => n.endsWith(".py"))) {
  py.FS.writeFile(`/home/pyodide/bench/${name}`, readFileSync(join(root, "bench", name)));
}
// The real conversations (bench_recall.py's LoCoMo set, docs: bench/README.md) are read
// in place from the host, as in CPython: into Pyodide's in-memory FS, where the benches
// look for them (../shared/data next to the repository), never into the repository.
const locomo = process.env.LOCOMO_ZIP || join(root, "..", "shared", "data", "locomo-dev.zip");
if (existsSync(locomo)) {
  py.FS.mkdirTree("/home/shared/data");
  py.FS.writeFile("/home/shared/data/locomo-dev.zip", readFileSync(locomo));
}
// A before/after bench (bench_turn_ab) imports a second tree: AB_BEFORE names its
// src/multillm_edge, copied in beside the working tree's.
if (process.env.AB_BEFORE) copyTree(py, process.env.AB_BEFORE, "/home/pyodide/before/multillm_edge");
const bench = process.argv[2] || "bench_paging";
if (!/^bench_[a-z_]+$/.test(bench)) throw new Error(`not a bench module: ${bench}`);
console.log(`(pyodide ${py.version} loaded in ${(loadMs / 1000).toFixed(1)} s)`);
const rc = py.runPython(`
import os, sys
os.environ["AB_BEFORE_TREE"] = "/home/pyodide/before/multillm_edge"
os.environ["AB_AFTER_TREE"] = "/home/pyodide/src/multillm_edge"
os.environ["AB_SIZES"] = ${JSON.stringify(process.env.AB_SIZES || "")}
os.environ["AB_WINDOW"] = ${JSON.stringify(process.env.AB_WINDOW || "")}
os.environ["AB_CHAT"] = ${JSON.stringify(process.env.AB_CHAT || "")}
sys.path.insert(0, "/home/pyodide/src"); sys.path.insert(0, "/home/pyodide/bench")
import ${bench}
${bench}.main("Pyodide")
`);
process.exit(rc);
