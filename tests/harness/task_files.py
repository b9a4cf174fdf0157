"""What the tests of task files share: the GLUE folder, and files written byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import glue_dir

GLUE_DIR = glue_dir()
needs_glue = pytest.mark.skipif(GLUE_DIR is None, reason="GLUE data not found: set GLUE_DIR or provide ../shared/glue")


def write(path: Path, text: str | bytes) -> Path:
    """Write exactly these bytes (no newline translation)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path
