"""The logit lens's part of the link."""

from dashboard.app_pages.lens.state import LensState


def test_the_lens_view_round_trips_and_bad_ones_are_explained():
    state = LensState(lens_view="heads", lens_from=0)
    assert LensState.from_query(state.to_query()) == (state, [])
    assert LensState().to_query() == {}
    bad, problems = LensState.from_query({"lens_view": "mlp", "lens_from": "-2"})
    assert bad == LensState() and len(problems) == 2
    assert any("lens_from='-2' ignored: expected -1 or more" in p for p in problems)
