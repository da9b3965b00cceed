"""dashboard/core/budgets.py: what a deployment allows, and the watch that stops work past it."""

import pytest

from dashboard.core import budgets


def test_a_public_computation_is_stopped_at_the_first_step_past_its_seconds(monkeypatch):
    """``watched`` reads :data:`budgets.clock`: with a clock this test moves itself, the bound trips at exactly the step
    that comes more than ``PUBLIC_SECONDS`` after the start (a step at exactly the bound still runs), whatever the
    machine's speed; off a public deployment no time stops the work."""
    now = [1000.0]
    monkeypatch.setattr(budgets, "clock", lambda: now[0])
    monkeypatch.setenv("PROBES_PUBLIC", "1")
    done = []
    step = budgets.watched(lambda *args: done.append(args), "shorten the text")
    for i, at in enumerate([0, 1, 59.5, budgets.PUBLIC_SECONDS]):
        now[0] = 1000.0 + at
        step(i, 5)
    assert done == [(0, 5), (1, 5), (2, 5), (3, 5)]
    now[0] = 1000.0 + budgets.PUBLIC_SECONDS + 0.001
    with pytest.raises(budgets.TookTooLong, match=rf"longer than the {budgets.PUBLIC_SECONDS:g} seconds the public app "
                                                  r"gives one computation, so it was stopped: shorten the text, or run "
                                                  r"the app"):
        step(4, 5)
    assert len(done) == 4  # the step past the bound reported nothing

    monkeypatch.delenv("PROBES_PUBLIC")
    step = budgets.watched(lambda *args: done.append(args))
    now[0] += 10**6
    step(5, 5)
    assert done[-1] == (5, 5)
