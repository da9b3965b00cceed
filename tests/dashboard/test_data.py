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
