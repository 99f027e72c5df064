"""The runtime shell: the only package importing `js` / `pyodide` / `workers`."""
