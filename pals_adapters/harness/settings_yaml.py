"""Reading settings and grid files written in YAML: numbers as people write them.

PyYAML follows YAML 1.1, where a float needs a dot: ``lr: 1e-4`` reads as the text ``"1e-4"``, and a setting
that takes a number would refuse it. YAML 1.2 (and every other reader of these files) reads it as 0.0001; so
does `safe_load` here. Nothing else changes: quoted text stays text.
"""

from __future__ import annotations

import re

import yaml


class _Loader(yaml.SafeLoader):
    """The safe loader, with YAML 1.2's floats (an exponent without a dot: ``1e-4``, ``2E5``)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def safe_load(text: str):
    """``yaml.safe_load`` that reads ``1e-4`` as a number (as YAML 1.2 does)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
