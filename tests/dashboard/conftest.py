"""One app server for the browser modules (``xdist_group("browser")``: one worker runs them all, one after the
other): ``streamlit run dashboard/serve.py`` as :func:`browser.app_server` starts it, once a session, not once a
module. Every page a test opens is a new session of that server, as a visitor's tab is; what the modules share is
what a real server shares between its visitors (the models it has loaded and the results it has cached), so the
second module to open SmolLM2 does not load it again. The public server of ``test_closed_tab.py`` (other settings,
hooks that slow its loops) is its own."""

from __future__ import annotations

import pytest
from browser import app_server


@pytest.fixture(scope="session")
def app_url(tmp_path_factory):
    with app_server(tmp_path_factory.mktemp("streamlit")) as url:
        yield url
