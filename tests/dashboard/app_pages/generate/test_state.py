"""Generate's part of the link."""

from dashboard.app_pages.generate.state import GenerateState


def test_generate_settings_round_trip_and_bad_numbers_are_explained():
    state = GenerateState(prompt="她很饿，因为", new_tokens=30, step=4, sample=True, seed=7, temperature=0.7, top_k=40,
                          top_p=0.9)
    back, problems = GenerateState.from_query(state.to_query())
    assert back == state and problems == []
    assert "prompt" not in GenerateState().to_query() and "temperature" not in GenerateState().to_query()
    state, problems = GenerateState.from_query({"temperature": "hot", "top_p": "-1", "step": "x"})
    assert (state.temperature, state.top_p, state.step) == (1.0, 1.0, 0)
    assert len(problems) == 3 and any("temperature='hot'" in p and "number" in p for p in problems)
