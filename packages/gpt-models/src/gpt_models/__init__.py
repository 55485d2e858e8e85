"""gpt-models: GPT language models built from blox modules, sharded by paramspec rules, logged by
lox, with optax and orbax; train, resume, evaluate, sample.

The CLI ``gpt`` (``gpt train``, ``gpt sample``, ``gpt eval``, ``gpt config show``) is the usual entry
point; the library exposes the same pieces: configs and presets, the byte and BPE tokenizers and data,
the model (``GPT``, ``forward``, ``loss_fn``, ``generate``), the train step's parts (optimizer, state,
compiled steps, mesh and rules, checkpoints), ``train`` and ``load_run``.
"""

from ._bpe import BPETokenizer as BPETokenizer
from ._checkpoint import Checkpointer as Checkpointer
from ._checkpoint import CheckpointWarning as CheckpointWarning
from ._cli import main as main
from ._config import PRESETS as PRESETS
from ._config import Config as Config
from ._config import DataConfig as DataConfig
from ._config import LogConfig as LogConfig
from ._config import MeshConfig as MeshConfig
from ._config import ModelConfig as ModelConfig
from ._config import SampleConfig as SampleConfig
from ._config import TrainConfig as TrainConfig
from ._config_io import apply_overrides as apply_overrides
from ._config_io import load_config as load_config
from ._data import Dataset as Dataset
from ._data import default_corpus as default_corpus
from ._data import eval_batches as eval_batches
from ._data import load_dataset as load_dataset
from ._data import train_batch as train_batch
from ._errors import ConfigError as ConfigError
from ._errors import DataError as DataError
from ._errors import TrainingDivergedError as TrainingDivergedError
from ._errors import UsageError as UsageError
from ._host_memory import keep_host_memory as keep_host_memory
from ._host_memory import tune_host_allocator as tune_host_allocator
from ._lock import RunInUseError as RunInUseError
from ._loop import RunResult as RunResult
from ._loop import train as train
from ._mfu import PEAK_FLOPS as PEAK_FLOPS
from ._mfu import peak_flops as peak_flops
from ._model import GPT as GPT
from ._model import Block as Block
from ._model import compute_dtype as compute_dtype
from ._model import flops_per_token as flops_per_token
from ._model import forward as forward
from ._model import gpt as gpt
from ._model import init_params as init_params
from ._model import loss_fn as loss_fn
from ._model import param_count as param_count
from ._model import param_specs as param_specs
from ._muon import muon_dimension_numbers as muon_dimension_numbers
from ._parallel import RULES as RULES
from ._parallel import make_mesh as make_mesh
from ._progress import plot_losses as plot_losses
from ._runs import load_run as load_run
from ._sample import generate as generate
from ._sample import sample_token as sample_token
from ._signals import TrainingInterrupted as TrainingInterrupted
from ._tokenizer import ByteTokenizer as ByteTokenizer
from ._train import TrainState as TrainState
from ._train import abstract_params as abstract_params
from ._train import abstract_state as abstract_state
from ._train import compile_eval_step as compile_eval_step
from ._train import compile_train_step as compile_train_step
from ._train import from_items as from_items
from ._train import init_state as init_state
from ._train import make_optimizer as make_optimizer
from ._train import make_schedule as make_schedule
from ._train import to_items as to_items

__version__ = "0.1.0"
