"""The Logit lens page, driven headless by AppTest: a tiny GPT-2's table of top tokens (its last row the model's own
prediction), the heads' direct effects of the sidebar's layer, a long text windowed, and the note an encoder (the
offline default) gets instead of an error."""

from __future__ import annotations

import torch
from apptest import open_app as _app, rerun as _rerun, rows as _rows, texts as _texts, titles as _titles

import probes
from dashboard.core import lens_charts
from dashboard.core.state import DEFAULT_TEXT
from probes.effects.lens import logit_lens

LAYERS = "Top token after each layer"


def test_an_encoder_gets_a_note():
    at = _app(page="lens")  # the offline default, minilm: a BERT without a language-model head
    assert at.header[0].value.startswith("Logit lens")
    note = _texts(at.info)
    assert "minilm has no language-model head (an encoder, BERT)" in note and "Pick smollm2" in note
    assert not at.error and not _titles(at)


def test_a_decoder_shows_every_layers_top_token(gpt2_dir):
    at = _app(model=str(gpt2_dir), page="lens")
    model = probes.models.load(str(gpt2_dir))
    lens = logit_lens(model, DEFAULT_TEXT)
    cells = _rows(at, LAYERS)
    n = len(lens.tokens)  # 21: the page opens on the last 16
    assert len(cells) == (model.n_layers + 1) * 16 and {c["position"] for c in cells} == set(range(n - 16, n))
    assert {c["stage"] for c in cells} == {"embeddings", "after layer 0", "after layer 1"}
    # the last row is the model's own prediction at every token: Hugging Face's argmax, as the cell's text
    enc = model.encode(DEFAULT_TEXT)
    with torch.inference_mode():
        argmax = model.hf(input_ids=enc.input_ids).logits[0].argmax(-1).tolist()
    last = sorted((c for c in cells if c["stage"] == "after layer 1"), key=lambda c: c["position"])
    top = lens.layers[(lens.layers.row == model.n_layers) & (lens.layers["rank"] == 1)]
    assert list(top.token_id) == argmax
    top = top[top.position >= n - 16]
    # a lone byte as ‹ae›, not � or \\xae
    assert [c["shown"] for c in last] == [lens_charts.visible(p) for p in top.piece]
    assert all(c["top5"] for c in last) and all(0 < c["probability"] <= 1 for c in cells)
    assert any("its logits, exactly" in c.value for c in at.caption)
    assert any("At the last token the model's prediction" in m.value for m in at.markdown)


def test_the_heads_view_shows_the_sidebars_layer(gpt2_dir):
    at = _app(model=str(gpt2_dir), page="lens", layer=1)
    at.segmented_control(key="w_lens_view").set_value("heads")
    _rerun(at)
    title = "What each head of layer 1 writes towards the vocabulary"
    assert title in _titles(at)
    cells = _rows(at, title)
    assert {c["head"] for c in cells} == {"1.0", "1.1", "1.2", "1.3"}
    assert any("not a probability (no softmax)" in c.value for c in at.caption)


def test_a_long_text_is_cut_and_windowed(gpt2_dir):
    text = "one two three four five six seven eight nine ten eleven twelve " * 3
    at = _app(model=str(gpt2_dir), page="lens", text=text, truncate=1)  # the tiny GPT-2 reads 64 tokens
    assert "The first 64 of" in _texts(at.caption)
    slider = at.slider(key="w_lens_from")
    assert slider.value == 64 - 16  # opens on the last positions
    assert {c["position"] for c in _rows(at, LAYERS)} == set(range(slider.value, slider.value + 16))
    slider.set_value(0)
    _rerun(at)
    assert {c["position"] for c in _rows(at, LAYERS)} == set(range(16))


def test_the_link_reopens_the_view_and_the_window(gpt2_dir):
    """The lens's view and its window on a long text are in the link: opened elsewhere, the same view and positions."""
    text = "one two three four five six seven eight nine ten eleven twelve " * 3
    at = _app(model=str(gpt2_dir), page="lens", text=text, truncate=1, layer=1)
    at.slider(key="w_lens_from").set_value(5)
    _rerun(at)
    at.segmented_control(key="w_lens_view").set_value("heads")
    _rerun(at)
    link = {k: v[-1] if isinstance(v, list) else v for k, v in at.query_params.items()}
    assert (link["lens_from"], link["lens_view"]) == ("5", "heads")
    shared = _app(**link)
    assert shared.slider(key="w_lens_from").value == 5 and shared.segmented_control(key="w_lens_view").value == "heads"
    title = "What each head of layer 1 writes towards the vocabulary"
    assert {c["position"] for c in _rows(shared, title)} == set(range(5, 21))
