"""The app, driven headless by Streamlit's AppTest on the offline default."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def _chart_spec(at) -> str:
    charts = at.get("vega_lite_chart")
    assert len(charts) == 1
    return charts[0].proto.spec


def _app():
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    return at


def test_opens_on_the_offline_default_with_a_heatmap_and_parity():
    at = _app()
    assert not at.exception
    assert at.sidebar.selectbox[0].value == "minilm"
    assert at.header[0].value == "minilm: layer 0, head 0"
    assert any("Parity: PASS" in s.value for s in at.success)
    assert '"Layer 0, head 0"' in _chart_spec(at)


def test_changing_the_head_changes_the_view():
    at = _app()
    at.sidebar.slider[1].set_value(7).run()
    assert not at.exception
    assert at.header[0].value == "minilm: layer 0, head 7"
    assert '"Layer 0, head 7"' in _chart_spec(at)
    assert at.sidebar.slider[1].max == 11 and at.sidebar.slider[0].max == 5


def test_empty_text_shows_advice_not_a_traceback():
    at = _app()
    at.sidebar.text_area[0].set_value("   ").run()
    assert not at.exception
    assert any("empty" in e.value for e in at.error)


def test_unknown_model_shows_advice(tmp_path):
    at = _app()
    at.sidebar.selectbox[0].set_value("another hub id or local directory…").run()
    at.sidebar.text_input[0].set_value(str(tmp_path / "missing")).run()
    assert not at.exception
    assert any("no model directory" in e.value for e in at.error)


def test_scratch_backends_say_which_kernel_ran(monkeypatch):
    from probes.scratch import flash

    monkeypatch.setattr(flash, "interpreting", lambda: False)  # as on a CPU-only machine
    at = _app()
    at.sidebar.radio[0].set_value("scratch").run()
    at.sidebar.radio[1].set_value("flash").run()
    assert not at.exception
    assert "sdpa:flash_attention_cpu attention" in at.caption[0].value
    assert any("flash needs CUDA" in i.value for i in at.info)
    assert '"Layer 0, head 0"' in _chart_spec(at)
