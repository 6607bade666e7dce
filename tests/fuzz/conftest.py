"""Hypothesis keeps no example database here (`database=None` in the tests), and its other files (the cache
of constants it reads from source) go to the temporary directory, not into the checkout."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis.configuration import set_hypothesis_home_dir

set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "mlgate-hypothesis")
