"""Shared pytest set-up: import the package from this checkout and validate every report against the schema."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for entry in (ROOT, ROOT / "site_models"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))
