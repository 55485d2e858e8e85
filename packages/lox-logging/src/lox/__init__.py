"""lox: logging as a program transformation.

``lox.log`` anywhere in JAX code; then ``spool`` (return logs as outputs), ``tap`` (stream them to
the host) or ``strip``/``keep`` (remove sites). Loggers send logdicts to the console, to files,
to TensorBoard and to wandb, as pure ``init``/``log``/``finish`` functions of a state.
"""

from ._console import ConsoleLogger as ConsoleLogger
from ._events import LogStructureError as LogStructureError
from ._export import to_csv as to_csv
from ._log import log as log
from ._log import lox_p as lox_p
from ._logdict import logdict as logdict
from ._loggers import HostLogger as HostLogger
from ._loggers import Logger as Logger
from ._loggers import LoggerState as LoggerState
from ._loggers import MultiLogger as MultiLogger
from ._loggers import SaveLogger as SaveLogger
from ._save import load as load
from ._save import save as save
from ._save_index import DamagedSaveError as DamagedSaveError
from ._spool import spool as spool
from ._strip import keep as keep
from ._strip import strip as strip
from ._tap import tap as tap
from ._tensorboard import TensorBoardLogger as TensorBoardLogger
from ._wandb import WandbLogger as WandbLogger

__version__ = "0.1.0"
