import pytest

from devkit import roleplay as rp
from tests.support.inprocess import LocalEdge

# The admin CLI's format, rpk_ + 43 URL-safe characters: only such a key can be live (§2).
KEY, SESSION = "rpk_" + "handler_key".ljust(43, "0"), "rps_handler_session"
MODEL = "fake:rp-small"
WINDOW = 6000


@pytest.fixture
def edge():
    with LocalEdge(rp.edge_vars("http://provider.test", "http://origin.test")) as edge:
        edge.seed_player("p_handlers", KEY, SESSION)
        edge.set_model(MODEL, WINDOW, 1000)
        yield edge


@pytest.fixture
def headers():
    return {"Authorization": f"Bearer {KEY}", "X-Roleplay-Session-ID": SESSION}
