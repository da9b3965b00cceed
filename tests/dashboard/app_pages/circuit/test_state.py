"""The Circuit page's part of the link."""

from dashboard.app_pages.circuit.state import CircuitState


def test_the_circuit_view_round_trips_and_bad_ones_are_explained():
    """Circuit's grid, convention, corrupted text and patched part live in the link; a link's unknown value is said
    and the default kept."""
    state = CircuitState(circuit_grid="text q", convention="transformerlens", patch_text="the dog sat", patch_into="v")
    back, problems = CircuitState.from_query(state.to_query())
    assert back == state and problems == []
    assert CircuitState().to_query() == {}
    bad, problems = CircuitState.from_query({"circuit_grid": "weights z", "convention": "tl", "patch_into": "o",
                                             "patch_text": "x" * 20_001})
    assert bad == CircuitState() and len(problems) == 4, problems
    assert any("a corrupted text is at most 20,000 characters" in p for p in problems)
