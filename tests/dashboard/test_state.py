from dashboard.state import DEFAULT_TEXT, ViewState


def test_a_link_round_trips_every_field():
    state = ViewState(model="gpt2", text="她很饿 🙂\tok", pair="", source="scratch", backend="sdpa", layer=3,
                      head=7, query=2, words=True, truncate=True, page="qkv")
    params = state.to_query()
    assert params["layer"] == "3" and params["words"] == "1" and params["page"] == "qkv"
    back, problems = ViewState.from_query(params)
    assert back == state and problems == []


def test_defaults_stay_out_of_the_link_but_the_model_is_always_named():
    assert ViewState().to_query() == {"model": "minilm"}
    assert ViewState.from_query({}) == (ViewState(), [])
    assert ViewState.from_query({})[0].text == DEFAULT_TEXT


def test_a_hand_edited_link_keeps_what_it_can_and_says_what_it_ignored():
    state, problems = ViewState.from_query({"layer": "two", "head": "-1", "page": "nowhere", "backend": "fast",
                                            "words": "maybe", "model": " ", "query": "4"})
    assert (state.layer, state.head, state.page, state.backend, state.words, state.model) == (0, 0, "explore",
                                                                                                "eager", False, "minilm")
    assert state.query == 4
    assert len(problems) == 6
    assert any("layer='two'" in p and "whole number" in p for p in problems)
    assert any("page='nowhere'" in p and "explore" in p for p in problems)


def test_clamp_keeps_layer_head_and_query_inside_the_model():
    state, problems = ViewState(layer=9, head=20, query=3).clamp(n_layers=6, n_heads=12, n_tokens=3)
    assert (state.layer, state.head, state.query) == (5, 11, 2)
    assert len(problems) == 3 and "layer 9 does not exist here (0–5): showing 5" in problems[0]
    assert ViewState(layer=2).clamp(6, 12) == (ViewState(layer=2), [])


def test_generate_settings_round_trip_and_bad_numbers_are_explained():
    state = ViewState(page="generate", prompt="她很饿，因为", new_tokens=30, step=4, sample=True, seed=7,
                      temperature=0.7, top_k=40, top_p=0.9)
    back, problems = ViewState.from_query(state.to_query())
    assert back == state and problems == []
    assert "prompt" not in ViewState().to_query() and "temperature" not in ViewState().to_query()
    state, problems = ViewState.from_query({"temperature": "hot", "top_p": "-1", "step": "x"})
    assert (state.temperature, state.top_p, state.step) == (1.0, 1.0, 0)
    assert len(problems) == 3 and any("temperature='hot'" in p and "number" in p for p in problems)


def test_hide_the_first_token_is_part_of_the_link():
    state = ViewState(hide_first=True)
    assert state.to_query()["hide_first"] == "1" and "hide_first" not in ViewState().to_query()
    back, problems = ViewState.from_query({"hide_first": "1"})
    assert back.hide_first and not problems
    _, problems = ViewState.from_query({"hide_first": "maybe"})
    assert problems and "hide_first" in problems[0]


def test_a_link_number_in_other_digits_is_ignored_with_a_reason():
    """int('٣') is 3: a link's layer written in Arabic-Indic digits was taken as layer 3 (issue 40). Numbers in a
    link are ASCII digits; anything else is kept out, and said."""
    state, problems = ViewState.from_query({"layer": "٣", "head": "²", "query": "３"})
    assert (state.layer, state.head, state.query) == (0, 0, ViewState().query)
    assert len(problems) == 3 and all("whole number" in p for p in problems), problems


def test_the_kv_pages_settings_round_trip_and_bad_ones_are_explained():
    """What if it attended less?: the text, its length, the policies and budgets swept (comma-separated, in one
    order), the sinks and the one policy and budget shown; a link's budget of 0 or unknown policy is said, the
    default kept."""
    state = ViewState(page="kv", kv_text="sidebar", kv_tokens=512, kv_policies="window,tova,strided",
                      kv_budgets="8,64", kv_sinks=2, kv_policy="tova", kv_budget=8)
    back, problems = ViewState.from_query(state.to_query())
    assert back == state and problems == []
    assert not any(name.startswith("kv_") for name in ViewState().to_query())
    messy, problems = ViewState.from_query({"kv_policies": "tova, window,tova", "kv_budgets": "64, 8,8"})
    assert (messy.kv_policies, messy.kv_budgets, problems) == ("window,tova", "8,64", [])  # one spelling each
    state, problems = ViewState.from_query({"kv_budgets": "0,16", "kv_budget": "0", "kv_policies": "lru",
                                            "kv_text": "web", "kv_sinks": "0", "kv_policy": "full"})
    default = ViewState()
    assert (state.kv_budgets, state.kv_budget, state.kv_policies, state.kv_text, state.kv_sinks, state.kv_policy) == (
        default.kv_budgets, default.kv_budget, default.kv_policies, default.kv_text, default.kv_sinks,
        default.kv_policy)
    assert len(problems) == 6
    assert any("kv_budgets='0,16'" in p and "from 1 to 8,192" in p for p in problems)
    assert any("kv_budget='0'" in p and "1 or more" in p for p in problems)


def test_the_views_of_heads_circuit_lens_and_effects_round_trip_and_bad_ones_are_explained():
    """What a page shows besides the sidebar lives in the link: the work run (which a link runs again), Circuit's
    grid, convention, corrupted text and patched part, the lens's view and window, Does it matter?'s measure and
    ablation, Find heads' colour and sink; a link's unknown value is said and the default kept."""
    state = ViewState(page="circuit", ran="heads,patch", circuit_grid="text q", convention="transformerlens",
                      patch_text="the dog sat", patch_into="v", lens_view="heads", lens_from=0,
                      effects_measure="loss", effects_how="mean", find_measure="norm", count_sink=True)
    back, problems = ViewState.from_query(state.to_query())
    assert back == state and problems == []
    assert back.has_run("patch") and back.has_run("heads") and not ViewState().has_run("heads")
    assert ViewState().with_run("patch").with_run("heads").with_run("patch").ran == "heads,patch"  # one spelling
    assert set(ViewState().to_query()) == {"model"}  # none of them in a link until changed
    bad, problems = ViewState.from_query({"ran": "everything", "circuit_grid": "weights z", "convention": "tl",
                                          "patch_into": "o", "lens_view": "mlp", "lens_from": "-2",
                                          "effects_measure": "speed", "effects_how": "resample",
                                          "patch_text": "x" * 20_001, "find_measure": "colour"})
    assert bad == ViewState() and len(problems) == 10, problems
    assert "ran='everything' ignored: expected some of heads, patch" in problems[0]
    assert any("lens_from='-2' ignored: expected -1 or more" in p for p in problems)
