"""Fail unless every installed workspace package is byte-identical to the wheel built in `dist`.

uv can serve a wheel from its cache instead of the file on disk when the version is unchanged;
this check turns that into a clear failure instead of a confusing ImportError in the tests.
"""

import hashlib
import importlib.metadata as md
import sys
import zipfile
from pathlib import Path


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _stale_files(wheel: Path) -> list[str]:
    dist = md.distribution(wheel.name.split("-")[0])
    stale = []
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if ".dist-info/" in name:
                continue
            installed = Path(str(dist.locate_file(name)))
            if not installed.is_file() or _sha(installed.read_bytes()) != _sha(zf.read(name)):
                stale.append(name)
    return stale


dist_dir = Path(sys.argv[1])
checked = []
for wheel in sorted(dist_dir.glob("*.whl")):
    try:
        stale = _stale_files(wheel)
    except md.PackageNotFoundError:
        continue
    if stale:
        sys.exit(
            f"{wheel.name}: the installed copy differs from the wheel just built in {dist_dir} "
            f"({len(stale)} files, e.g. {stale[:3]}); a stale cached wheel was installed. "
            "Install with `--refresh-package <name>` or clear the uv cache."
        )
    checked.append(wheel.name)
print(f"installed workspace packages match the built wheels: {checked}")
