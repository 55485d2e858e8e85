"""gpt-models: GPT language models on paramspec, lox, optax and orbax; train, resume, evaluate, sample.

The CLI ``gpt`` (``gpt train``, ``gpt sample``, ``gpt eval``) is the usual entry point; the library
exposes the same pieces: configs and presets, the byte and BPE tokenizers and data, the model's ``forward``,
``generate`` and ``train``.
"""

from ._bpe import BPETokenizer as BPETokenizer
from ._config import PRESETS as PRESETS
from ._config import Config as Config
from ._config import DataConfig as DataConfig
from ._config import LogConfig as LogConfig
from ._config import MeshConfig as MeshConfig
from ._config import ModelConfig as ModelConfig
from ._config import SampleConfig as SampleConfig
from ._config import TrainConfig as TrainConfig
from ._config import load_config as load_config
from ._data import default_corpus as default_corpus
from ._errors import ConfigError as ConfigError
from ._errors import DataError as DataError
from ._errors import TrainingDivergedError as TrainingDivergedError
from ._errors import UsageError as UsageError
from ._loop import train as train
from ._mfu import PEAK_FLOPS as PEAK_FLOPS
from ._mfu import peak_flops as peak_flops
from ._model import GPT as GPT
from ._model import forward as forward
from ._model import init_params as init_params
from ._sample import generate as generate
from ._tokenizer import ByteTokenizer as ByteTokenizer

__version__ = "0.1.0"
