"""Explore's part of the link: the clicked cell, the word-level view, the colour and the first token hidden."""

from dashboard.app_pages.explore.state import ExploreState


def test_explores_settings_round_trip_and_stay_out_of_the_link_at_their_defaults():
    state = ExploreState(key=7, words=True, colour="norms", hide_first=True)
    assert state.to_query() == {"key": "7", "words": "1", "colour": "norms", "hide_first": "1"}
    assert ExploreState.from_query(state.to_query()) == (state, [])
    assert ExploreState().to_query() == {}


def test_hide_the_first_token_is_part_of_the_link():
    state = ExploreState(hide_first=True)
    assert state.to_query()["hide_first"] == "1" and "hide_first" not in ExploreState().to_query()
    back, problems = ExploreState.from_query({"hide_first": "1"})
    assert back.hide_first and not problems
    _, problems = ExploreState.from_query({"hide_first": "maybe"})
    assert problems and "hide_first" in problems[0]


def test_a_hand_edited_explore_link_is_said_and_the_default_kept():
    state, problems = ExploreState.from_query({"words": "maybe", "colour": "plaid", "key": "-1"})
    assert state == ExploreState() and len(problems) == 3
    assert "colour='plaid' ignored: expected one of weights, norms, rollout" in problems[2]
