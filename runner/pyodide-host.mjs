// Load the Worker into real Pyodide with the pinned runtime SDK, as workerd would.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { loadPyodide } from "pyodide";

// A pure-Python wheel pinned in pyproject.toml `dependencies`, as `pywrangler` vendors
// it at deploy; downloaded once into .cache/wheels.
export function pinnedWheel(root, project) {
  const pin = new RegExp(`"${project}==([^"]+)"`);
  const version = readFileSync(join(root, "pyproject.toml"), "utf8").match(pin)?.[1];
  if (!version) throw new Error(`pyproject.toml does not pin ${project}==<version>`);
  const dir = join(root, ".cache", "wheels");
  const name = `${project.replaceAll("-", "_")}-${version}-py3-none-any.whl`;
  if (!existsSync(join(dir, name))) {
    mkdirSync(dir, { recursive: true });
    execFileSync(process.env.PYTHON ?? "python3", ["-m", "pip", "download", "--quiet", "--no-deps",
      "--only-binary=:all:", "-d", dir, `${project}==${version}`], { stdio: "inherit" });
  }
  return readFileSync(join(dir, name));
}

// The runtime SDK and the search's stemmer (docs/design.md §6.1).
export const PURE_WHEELS = ["workers-runtime-sdk", "snowballstemmer"];

export function sdkWheel(root) {
  return pinnedWheel(root, "workers-runtime-sdk");
}

// Unpack the pinned pure wheels into Pyodide's site-packages.
export function installWheels(pyodide, root) {
  const site = pyodide.runPython("import site; site.getsitepackages()[0]");
  for (const project of PURE_WHEELS) {
    pyodide.FS.writeFile("/tmp/wheel.whl", pinnedWheel(root, project));
    pyodide.runPython(`import zipfile; zipfile.ZipFile("/tmp/wheel.whl").extractall(${JSON.stringify(site)})`);
  }
}

// Modules that only workerd provides; interfaces from the SDK's .pyi stubs.
const RUNTIME_SHIMS = `
import sys, types, contextlib
flags = types.ModuleType("_cloudflare_compat_flags")
flags.__getattr__ = lambda name: False
sys.modules["_cloudflare_compat_flags"] = flags
helper = types.ModuleType("_pyodide_entrypoint_helper")
helper.patchWaitUntil = lambda ctx: None
helper.patch_env_helper = contextlib.contextmanager(lambda kwds: (yield))
helper.doAnImport = lambda name: None
helper.cloudflareWorkersModule = None
helper.cloudflareSocketsModule = None
sys.modules["_pyodide_entrypoint_helper"] = helper
`;

// workerd's search path for an upload (its setup_python_search_path): the Worker's
// modules first, python_modules/ just before site-packages, its .pth files processed.
const BUNDLE_PATH = `
import site, sys
vendored = "/session/metadata/python_modules"
at = next(i for i, p in enumerate(sys.path) if "site-packages" in p)
sys.path.insert(at, vendored)
site.addsitedir(vendored)
`;

// `mainPath` defaults to src/entry.py; tests may load another module beside src/.
// With `bundleDir` (a `wrangler deploy --dry-run --outdir` directory) the Worker runs from
// exactly what deploy uploads: nothing is installed from .cache into site-packages.
export async function loadWorker({ root, srcDir, bundleDir, mainPath, stdout }) {
  const pyodide = await loadPyodide({ stdout, stderr: stdout });
  if (!bundleDir) installWheels(pyodide, root);
  pyodide.runPython(RUNTIME_SHIMS);
  // The Worker's src/ (or the upload) as deployed, mounted read-only from disk.
  pyodide.FS.mkdirTree("/session/metadata");
  pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, { root: bundleDir ?? srcDir }, "/session/metadata");
  pyodide.runPython(`import sys; sys.path.insert(0, "/session/metadata")`);
  if (bundleDir) pyodide.runPython(BUNDLE_PATH);
  let mainModule = "entry";
  if (mainPath) {
    pyodide.FS.mkdirTree("/session/extra");
    pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, { root: dirname(mainPath) }, "/session/extra");
    pyodide.runPython(`import sys; sys.path.append("/session/extra")`);
    mainModule = basename(mainPath).replace(/\.py$/, "");
  }
  const main = pyodide.pyimport(mainModule);
  return { pyodide, main };
}
