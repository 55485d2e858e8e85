import sys

from ._cli.launcher import console

sys.exit(console())
