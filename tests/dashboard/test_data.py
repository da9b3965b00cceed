"""dashboard/data.py: what the app keeps between reruns, and how much of it."""

from dashboard import data


def _inputs(tag: str, n: int) -> list:
    """``n`` texts of the same length that no other test traces."""
    return [data.Input("minilm", f"Sentence {chr(97 + i)} of the {tag} test, kept or dropped by size.", None, "hf",
                       "eager", False) for i in range(n)]


def test_traces_are_kept_within_their_bytes_least_recently_used_first(monkeypatch):
    """A server keeps traces up to a size in bytes, not a count: a long text on SmolLM2 holds hundreds of MiB,
    a sentence a few. Past the size, the trace used longest ago goes, and is run again when asked for."""
    a, b, c = _inputs("bytes", 3)
    first = data.trace(a)
    monkeypatch.setattr(data, "TRACE_BYTES", int(2.5 * first.nbytes))  # room for two of these, not three
    second = data.trace(b)
    assert data.trace(a) is first  # both fit; a is now the more recently used
    third = data.trace(c)  # three do not: b, used longest ago, goes
    assert data.trace(c) is third and data.trace(a) is first
    assert data.trace(b) is not second  # run again
    assert data.trace(b).nbytes == second.nbytes


def test_a_public_server_keeps_less_and_traces_long_texts_lazily(monkeypatch):
    """On a public deployment the traces kept hold at most ``PUBLIC_TRACE_BYTES`` (the newest always stays), and
    a trace keeps at most ``PUBLIC_ATTENTION_BUDGET`` bytes of probabilities (past it, a logsumexp per row)."""
    monkeypatch.setenv("PROBES_PUBLIC", "1")
    monkeypatch.setattr(data, "PUBLIC_ATTENTION_BUDGET", 1024)
    monkeypatch.setattr(data, "PUBLIC_TRACE_BYTES", 1)  # smaller than any trace: only the newest is kept
    a, b = _inputs("public", 2)
    first = data.trace(a)
    assert first.lazy and data.ATTENTION_BUDGET > 1024  # the public budget, not the app's
    assert data.trace(a) is first  # the newest is kept, even over the size
    data.trace(b)
    assert data.trace(a) is not first


def test_a_public_parity_badge_keeps_only_the_trace_the_page_shows(monkeypatch):
    """The sidebar's parity badge compares Hugging Face with our pass; on a public app our pass's trace, which the
    page does not show, is compared and dropped, not kept beside the one shown."""
    monkeypatch.setenv("PROBES_PUBLIC", "1")
    shown = _inputs("badge", 1)[0]
    report = data.parity_report(shown)
    assert report.passed
    assert shown in data._held
    assert data.replace(shown, source="scratch") not in data._held


def test_a_public_app_keeps_no_logits_in_its_traces_and_its_badge_still_compares_the_rest(monkeypatch):
    """SmolLM2's logits are half a long text's trace, and no page draws them from it: a public app leaves them out
    (the parity badge compares attention, hidden states and q, k, v, and says the logits were not compared)."""
    text = "The public trace of this sentence keeps no logits."
    private = data.trace(data.Input("smollm2", text, None, "hf", "eager", False))
    assert private.logits is not None and private.logits.shape[-1] == 49152
    monkeypatch.setenv("PROBES_PUBLIC", "1")
    shown = data.Input("smollm2", text, None, "hf", "eager", True)  # the same tokens (a short text: nothing cut)
    public = data.trace(shown)
    assert public.logits is None
    assert private.nbytes - public.nbytes == private.logits.nbytes
    report = data.parity_report(shown)
    assert report.passed and report.logits_max_rel_diff is None and report.attention_max_abs_diff is not None


def test_a_public_computation_is_stopped_at_the_first_step_past_its_seconds(monkeypatch):
    """``watched`` reads :data:`data.clock`: with a clock this test moves itself, the bound trips at exactly the step
    that comes more than ``PUBLIC_SECONDS`` after the start (a step at exactly the bound still runs), whatever the
    machine's speed; off a public deployment no time stops the work."""
    import pytest

    now = [1000.0]
    monkeypatch.setattr(data, "clock", lambda: now[0])
    monkeypatch.setenv("PROBES_PUBLIC", "1")
    done = []
    step = data.watched(lambda *args: done.append(args), "shorten the text")
    for i, at in enumerate([0, 1, 59.5, data.PUBLIC_SECONDS]):
        now[0] = 1000.0 + at
        step(i, 5)
    assert done == [(0, 5), (1, 5), (2, 5), (3, 5)]
    now[0] = 1000.0 + data.PUBLIC_SECONDS + 0.001
    with pytest.raises(data.TookTooLong, match=rf"longer than the {data.PUBLIC_SECONDS:g} seconds the public app gives "
                                               r"one computation, so it was stopped: shorten the text, or run the app"):
        step(4, 5)
    assert len(done) == 4  # the step past the bound reported nothing

    monkeypatch.delenv("PROBES_PUBLIC")
    step = data.watched(lambda *args: done.append(args))
    now[0] += 10**6
    step(5, 5)
    assert done[-1] == (5, 5)
