"""Evidence behind every answer: a claim about a head is chosen on some items and judged on others, against the
baselines that would explain it without the head, with an interval, and earns a verdict in words.

* :mod:`.stats`: the seeded split-half and the intervals (Wilson, bootstrap; SciPy's);
* :mod:`.record`: :class:`Evidence`, one record for every claim, and :func:`verdict`;
* :mod:`.questions`, :mod:`.controls`, :mod:`.claims`: "who is 'she'?" asked of a sentence, its controls, and the
  head that answers it, judged (``python -m probes claim``, the app's answer box);
* :mod:`.probes`: every probe label's best head, chosen on half the data and judged on the other (``profile``);
* :mod:`.edges`: the noise floors of composition and path-patching edges (``compose``, ``patch``, Circuit).

This floor sits above the readers that produce the scores (heads, effects) and below what explains them to people
(:mod:`probes.explain`, the CLI, the app): an answer shown to a person is built from an evidence record.
"""

from .record import BASELINE, MIN_ITEMS, SUPPORTED, TOO_FEW, Baseline, Evidence, verdict
from .stats import LEVEL, Split, bootstrap_mean, bootstrap_ratio, split_half, wilson

__all__ = ["BASELINE", "LEVEL", "MIN_ITEMS", "SUPPORTED", "TOO_FEW", "Baseline", "Evidence", "Split",
           "bootstrap_mean", "bootstrap_ratio", "split_half", "verdict", "wilson"]
