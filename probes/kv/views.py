"""Deprecated: the KV lab's tables are :mod:`probes.kv.sweep` (the word "views" names the app's pages). This module
re-exports its names, the same objects, and warns once on import."""

from __future__ import annotations

import warnings

from .sweep import (
    BINS,
    KINDS,
    SINKS,
    Plan,
    Planned,
    heads_frame,
    kept_picture,
    kv_head,
    memory_frame,
    policy_at,
    summary,
    sweep_frame,
    sweep_plan,
)

__all__ = ["BINS", "KINDS", "SINKS", "Plan", "Planned", "heads_frame", "kept_picture", "kv_head", "memory_frame",
           "policy_at", "summary", "sweep_frame", "sweep_plan"]

warnings.warn("probes.kv.views is now probes.kv.sweep (the word 'views' names the app's pages): import from "
              "probes.kv.sweep", DeprecationWarning, stacklevel=2)
