"""The Generate page, driven headless by AppTest: SmolLM2 writes after the story prompt, the step slider walks
through the tokens (and the link follows), the proof badge, the cache, sampling, escaping, and the note
an encoder gets instead of an error."""

from __future__ import annotations

import numpy as np
import pytest
from apptest import drawn, open_app as _app, texts as _texts

from dashboard.app_pages.generate.state import DEFAULT_PROMPT
from probes.scratch import generate as g


def _bars(at) -> list[dict]:
    from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

    chart = [c for c in at.get("vega_lite_chart") if "looks" in drawn(c).get("title", "")][0]
    return convert_arrow_bytes_to_pandas_df(chart.proto.datasets[0].data.data).to_dict("records")


@pytest.mark.numeric
def test_smollm2_writes_and_the_step_slider_walks_through_it(smollm2):
    at = _app(model="smollm2", page="generate", layer=29, head=3)
    assert at.header[0].value.startswith("Generate")
    expected = g.generate(smollm2, DEFAULT_PROMPT, 10)
    assert at.text_area(key="w_prompt").value == DEFAULT_PROMPT
    assert "Step 0 of 9: the prefill (the whole prompt) ended on ' was' and the model wrote ' the' · greedy" in \
        _texts(at.caption)
    badge = [m.value for m in at.markdown if "Cache proof" in m.value][0]
    assert badge.startswith(":green-badge") and "PASS" in badge and "generate writes the same tokens" in badge
    # the bars are the fed token's row of the chosen head, as the library computes it (the same call: exactly)
    weights = [r["weight"] for r in _bars(at)]
    np.testing.assert_array_equal(weights, expected.row(0, 29, 3).numpy())

    at.slider(key="w_step").set_value(4)
    at.run()
    assert not at.exception
    q = expected.query_position(4)
    fed, wrote = expected.tokens[q].text, expected.tokens[q + 1].text
    assert f"Step 4 of 9: fed {fed!r} and the model wrote {wrote!r}" in _texts(at.caption)
    assert at.query_params["step"] == ["4"] or at.query_params["step"] == "4"
    np.testing.assert_array_equal([r["weight"] for r in _bars(at)], expected.row(4, 29, 3).numpy())
    cache = [m for m in at.metric if m.label == "Cache at this step"][0]
    assert cache.value == f"{expected.cache_bytes[4] / 2**10:,.0f} KiB"
    assert [m.label for m in at.metric][1] == "Without grouped-query attention"


def test_a_link_reopens_a_seeded_sample_at_its_step(smollm2):
    at = _app(model="smollm2", page="generate", prompt="The capital of France is", new_tokens=5, sample=1, seed=3,
              temperature=0.8, top_k=20, step=2)
    expected = g.generate(smollm2, "The capital of France is", 5, g.Sampling(True, 3, 0.8, 20, 1.0))
    q = expected.query_position(2)
    assert f"model wrote {expected.tokens[q + 1].text!r} · sampled (seed 3, temperature 0.8, top-k 20)" in \
        _texts(at.caption)
    assert at.number_input(key="w_seed").value == 3
    badge = [m.value for m in at.markdown if "Cache proof" in m.value][0]
    assert "PASS" in badge and "Hugging Face" not in badge  # sampled: no single sequence to compare with


def test_an_encoder_gets_a_note_and_bad_prompts_get_advice(gpt2_dir):
    at = _app(page="generate")  # the offline default, a BERT encoder
    assert "is an encoder" in _texts(at.info) and not at.error
    at = _app(model=str(gpt2_dir), page="generate", prompt="   ")
    assert "empty" in _texts(at.error)
    at = _app(model=str(gpt2_dir), page="generate", prompt="cat " * 200)
    assert "at most 64: shorten the prompt" in _texts(at.error)
    at = _app(model=str(gpt2_dir), page="generate", new_tokens=500)  # clamped to what the widget takes (64)...
    assert at.number_input(key="w_new_tokens").value == 64
    assert "The link asks for new tokens 500 (this page takes 1 to 64: set to 64)." in _texts(at.warning)
    assert "ask for at most" in _texts(at.error)  # ...which the tiny GPT-2's 64 positions cannot hold
    at = _app(model=str(gpt2_dir), page="generate", new_tokens=4, step=99)  # a step beyond the text: the last
    assert at.slider(key="w_step").value == 3 and "Step 3 of 3" in _texts(at.caption)


def test_a_public_deployment_caps_the_prompt(gpt2_dir, monkeypatch):
    monkeypatch.setenv("PROBES_MAX_CHARS", "30")
    at = _app(model=str(gpt2_dir), page="generate", prompt="a prompt of rather more than thirty characters")
    assert "this deployment takes up to 30" in _texts(at.error)


def test_the_prompt_is_escaped(gpt2_dir):
    at = _app(model=str(gpt2_dir), page="generate", prompt="<b>bold</b> & <script>x</script>", new_tokens=3)
    body = at.get("html")[0].proto.body
    assert "<b>" not in body and "<script>" not in body and "&lt;" in body and "&amp;" in body


def test_a_public_deployment_skips_the_float64_copy_and_says_so(monkeypatch):
    monkeypatch.setenv("PROBES_PUBLIC", "1")
    at = _app(model="smollm2", page="generate", new_tokens=3)
    badge = [m.value for m in at.markdown if "Cache proof" in m.value][0]
    assert "PASS" in badge and "float64 check skipped on this deployment" in badge


def test_an_encoder_decoder_gets_its_own_note(ckpt_dir):
    from checkpoints import make_t5

    import probes

    path = ckpt_dir / "t5-generate"
    at = _app(model=str(make_t5(path)), page="generate")
    assert "is an encoder-decoder: the workbench shows its encoder's attention" in _texts(at.info)
    with pytest.raises(probes.UnsupportedModel, match="encoder-decoder"):
        g.generate(probes.load(str(path)), "hello there", 3)


def test_the_step_shows_the_logit_lens_at_the_fed_token(gpt2_dir):
    # the lens of the text so far at the fed token: one cell per layer; greedy, its last row is what the step wrote
    from apptest import rows as _rows

    import probes
    from dashboard.core.lens_charts import visible

    at = _app(model=str(gpt2_dir), page="generate", new_tokens=4, step=2)
    gen = g.generate(probes.load(str(gpt2_dir)), DEFAULT_PROMPT, 4)
    cells = _rows(at, "Top token after each layer")
    assert [c["stage"] for c in cells] == ["embeddings", "after layer 0", "after layer 1"]
    assert {c["position"] for c in cells} == {gen.query_position(2)}
    assert cells[-1]["shown"] == visible(gen.tokens[gen.query_position(2) + 1].text)


def test_a_links_sampling_settings_out_of_range_are_said_not_silently_moved(gpt2_dir):
    """A link with absurd numbers opens, every setting moved into its widget's range, and one warning says each."""
    at = _app(model=str(gpt2_dir), page="generate", new_tokens=3, sample=1, seed=2**70, temperature=100, top_p=5)
    said = _texts(at.warning)
    assert f"seed {2**70:,} (this page takes 0 to {2**31 - 1:,}: set to {2**31 - 1:,})" in said
    assert "temperature 100.0 (this page takes 0.05 to 5.0: set to 5.0)" in said
    assert "top-p 5.0 (this page takes 0.01 to 1.0: set to 1.0)" in said
    assert (at.number_input(key="w_seed").value, at.number_input(key="w_temperature").value) == (2**31 - 1, 5.0)
    assert not at.error and not at.exception


def test_the_cache_proof_is_computed_after_the_rest_of_the_page_and_drawn_in_its_place(gpt2_dir, monkeypatch):
    # the proof (a float64 rerun and Hugging Face's own generate) is most of a first open: the lens and the charts
    # are on screen before it runs, and its badge still sits under the step's caption, above the head's bars
    from dashboard.app_pages.generate import data

    calls: list[str] = []
    proof, lens = data.generation_proof, data.lens_column

    def proving(w):
        calls.append("proof")
        return proof(w)

    def reading(*args):
        calls.append("lens")
        return lens(*args)

    monkeypatch.setattr(data, "generation_proof", proving)
    monkeypatch.setattr(data, "lens_column", reading)
    at = _app(model=str(gpt2_dir), page="generate", new_tokens=3)
    assert calls == ["lens", "proof"]
    order = [getattr(e, "value", "") for e in at.main]
    badge = next(i for i, v in enumerate(order) if isinstance(v, str) and "Cache proof" in v)
    step = next(i for i, v in enumerate(order) if isinstance(v, str) and v.startswith("Step 0 of 2"))
    bars = next(i for i, v in enumerate(order) if isinstance(v, str) and "the fed token's attention" in v)
    assert step < badge < bars, order
