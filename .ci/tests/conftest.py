"""The CI scripts are plain files in .ci/, not a package: make them importable here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
