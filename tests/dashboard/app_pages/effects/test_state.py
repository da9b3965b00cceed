"""Does it matter?'s part of the link."""

from dashboard.app_pages.effects.state import EffectsState


def test_the_measure_and_the_ablation_round_trip_and_bad_ones_are_explained():
    state = EffectsState(effects_measure="loss", effects_how="mean")
    assert EffectsState.from_query(state.to_query()) == (state, [])
    assert EffectsState().to_query() == {}
    bad, problems = EffectsState.from_query({"effects_measure": "speed", "effects_how": "resample"})
    assert bad == EffectsState() and len(problems) == 2
