"""Find heads' part of the link."""

from dashboard.app_pages.find.state import FindState


def test_find_heads_colour_and_sink_round_trip_and_bad_ones_are_explained():
    state = FindState(find_measure="norm", count_sink=True)
    assert FindState.from_query(state.to_query()) == (state, [])
    assert FindState().to_query() == {}
    bad, problems = FindState.from_query({"find_measure": "colour"})
    assert bad == FindState() and len(problems) == 1
