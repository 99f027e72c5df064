"""A runner serving the stand-in provider (`EDGE_STANDIN=1`, as `npm start` does with no
provider key) and a player of it: what the stand-in's e2e and SDK tests share."""

from __future__ import annotations

import contextlib

from devkit import roleplay as rp
from devkit import standin
from devkit.runner import Edge


@contextlib.contextmanager
def standin_edge(state_dir):
    """A runner with paging on, no provider in PROVIDERS, the stand-in's model registered."""
    vars = {"CONTEXT_PAGING_ENABLED": "true", "MEDIA_SIGNING_SECRET": rp.SIGNING_SECRET}
    with Edge(state_dir, vars=vars, extra_env={"EDGE_STANDIN": "1"}) as e:
        rp.set_model(e, standin.MODEL, standin.WINDOW_TOKENS, standin.MAX_OUTPUT_TOKENS)
        yield e
