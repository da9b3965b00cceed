"""dashboard/core/trace.py: the traces the app keeps between reruns, and how much of them."""

from dataclasses import replace

from dashboard.core import budgets, models, parity, trace


def _inputs(tag: str, n: int) -> list:
    """``n`` texts of the same length that no other test traces."""
    return [models.Input("minilm", f"Sentence {chr(97 + i)} of the {tag} test, kept or dropped by size.", None, "hf",
                       "eager", False) for i in range(n)]


def test_traces_are_kept_within_their_bytes_least_recently_used_first(monkeypatch):
    """A server keeps traces up to a size in bytes, not a count: a long text on SmolLM2 holds hundreds of MiB,
    a sentence a few. Past the size, the trace used longest ago goes, and is run again when asked for."""
    a, b, c = _inputs("bytes", 3)
    first = trace.trace(a)
    monkeypatch.setattr(trace, "TRACE_BYTES", int(2.5 * first.nbytes))  # room for two of these, not three
    second = trace.trace(b)
    assert trace.trace(a) is first  # both fit; a is now the more recently used
    third = trace.trace(c)  # three do not: b, used longest ago, goes
    assert trace.trace(c) is third and trace.trace(a) is first
    assert trace.trace(b) is not second  # run again
    assert trace.trace(b).nbytes == second.nbytes


def test_a_public_server_keeps_less_and_traces_long_texts_lazily(monkeypatch):
    """On a public deployment the traces kept hold at most ``PUBLIC_TRACE_BYTES`` (the newest always stays), and
    a trace keeps at most ``PUBLIC_ATTENTION_BUDGET`` bytes of probabilities (past it, a logsumexp per row)."""
    monkeypatch.setenv("PROBES_PUBLIC", "1")
    monkeypatch.setattr(budgets, "PUBLIC_ATTENTION_BUDGET", 1024)
    monkeypatch.setattr(trace, "PUBLIC_TRACE_BYTES", 1)  # smaller than any trace: only the newest is kept
    a, b = _inputs("public", 2)
    first = trace.trace(a)
    assert first.lazy and budgets.ATTENTION_BUDGET > 1024  # the public budget, not the app's
    assert trace.trace(a) is first  # the newest is kept, even over the size
    trace.trace(b)
    assert trace.trace(a) is not first


def test_a_public_parity_badge_keeps_only_the_trace_the_page_shows(monkeypatch):
    """The sidebar's parity badge compares Hugging Face with our pass; on a public app our pass's trace, which the
    page does not show, is compared and dropped, not kept beside the one shown."""
    monkeypatch.setenv("PROBES_PUBLIC", "1")
    shown = _inputs("badge", 1)[0]
    report = parity.parity_report(shown)
    assert report.passed
    assert shown in trace._held
    assert replace(shown, source="scratch") not in trace._held


def test_a_public_app_keeps_no_logits_in_its_traces_and_its_badge_still_compares_the_rest(monkeypatch):
    """SmolLM2's logits are half a long text's trace, and no page draws them from it: a public app leaves them out
    (the parity badge compares attention, hidden states and q, k, v, and says the logits were not compared)."""
    text = "The public trace of this sentence keeps no logits."
    private = trace.trace(models.Input("smollm2", text, None, "hf", "eager", False))
    assert private.logits is not None and private.logits.shape[-1] == 49152
    monkeypatch.setenv("PROBES_PUBLIC", "1")
    shown = models.Input("smollm2", text, None, "hf", "eager", True)  # the same tokens (a short text: nothing cut)
    public = trace.trace(shown)
    assert public.logits is None
    assert private.nbytes - public.nbytes == private.logits.nbytes
    report = parity.parity_report(shown)
    assert report.passed and report.logits_max_rel_diff is None and report.attention_max_abs_diff is not None
