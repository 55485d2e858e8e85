import sys

from ._cli.main import console

sys.exit(console())
