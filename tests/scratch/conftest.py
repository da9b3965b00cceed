"""The family checkpoints the conformance suite, ``test_family.py`` and the families' own tests share."""

import pytest
from scratch.conformance import FamilyModels


@pytest.fixture(scope="session")
def _family_models(tmp_path_factory):
    return FamilyModels(tmp_path_factory.mktemp("families"))


@pytest.fixture
def family_model(request, _family_models):
    """``family_model(family, option)``: the loaded tiny checkpoint of that option of that family's spec
    (``conformance.SPECS``), made once a session. Shared: a test must not change it (``model._scratch = …``)."""
    return lambda family, option: _family_models.get(family, option, request.getfixturevalue)
