"""gpt-models: GPT language models built from blox modules, sharded by paramspec rules, logged by
lox, with optax and orbax; train, resume, evaluate, sample.

The CLI ``gpt`` (``gpt train``, ``gpt sample``, ``gpt eval``, ``gpt config show``) is the usual
entry
point; the library exposes the same pieces: configs and presets, the byte and BPE tokenizers and
data,
the model (``GPT``, ``forward``, ``loss_fn``, ``generate``), the train step's parts (optimizer,
state,
compiled steps, mesh and rules, checkpoints), ``resolve_run`` (a run as one value), ``train`` and
``load_run``.
"""

from typing import TYPE_CHECKING

from core_primitives import lazy_exports

# The public names, imported when first used: `gpt --help` and `gpt --version` answer without
# importing JAX. This block is the one list of them (type checkers and the docs read it too).
if TYPE_CHECKING:
    from ._cli.main import main as main
    from ._cli.train import plan_training as plan_training
    from ._cli.train import train as train
    from ._compute.host_memory import await_scratch as await_scratch
    from ._compute.host_memory import keep_host_memory as keep_host_memory
    from ._compute.host_memory import tune_host_allocator as tune_host_allocator
    from ._compute.preflight import Plan as Plan
    from ._config.lora import LoRAConfig as LoRAConfig
    from ._config.model import ModelConfig as ModelConfig
    from ._config.preference import PreferenceConfig as PreferenceConfig
    from ._config.presets import PRESETS as PRESETS
    from ._config.schema import Config as Config
    from ._config.schema import DataConfig as DataConfig
    from ._config.schema import EvalConfig as EvalConfig
    from ._config.schema import InitConfig as InitConfig
    from ._config.schema import LogConfig as LogConfig
    from ._config.schema import MeshConfig as MeshConfig
    from ._config.schema import SampleConfig as SampleConfig
    from ._config.schema import TrainConfig as TrainConfig
    from ._config.sources import DataSource as DataSource
    from ._config.toml import apply_overrides as apply_overrides
    from ._config.toml import load_config as load_config
    from ._data.bpe import BPETokenizer as BPETokenizer
    from ._data.byte_tokenizer import ByteTokenizer as ByteTokenizer
    from ._data.corpus import Dataset as Dataset
    from ._data.corpus import default_corpus as default_corpus
    from ._data.corpus import eval_batches as eval_batches
    from ._data.corpus import load_dataset as load_dataset
    from ._data.corpus import train_batch as train_batch
    from ._data.prepare import PrepareResult as PrepareResult
    from ._data.prepare import prepare as prepare
    from ._distributed.mesh import RULES as RULES
    from ._distributed.mesh import make_mesh as make_mesh
    from ._errors import CheckpointFormatError as CheckpointFormatError
    from ._errors import ConfigError as ConfigError
    from ._errors import DataError as DataError
    from ._errors import DiskFullError as DiskFullError
    from ._errors import OutOfMemoryError as OutOfMemoryError
    from ._errors import TrainingDivergedError as TrainingDivergedError
    from ._errors import UsageError as UsageError
    from ._inference.eval_step import compile_eval_step as compile_eval_step
    from ._inference.lm_eval import HarnessScore as HarnessScore
    from ._inference.lm_eval import evaluate_lm_eval as evaluate_lm_eval
    from ._inference.lm_eval import register_lm_eval_model as register_lm_eval_model
    from ._inference.tasks import TaskScore as TaskScore
    from ._inference.tasks import evaluate_task as evaluate_task
    from ._inference.text_eval import TextScore as TextScore
    from ._inference.text_eval import evaluate_text as evaluate_text
    from ._model.block import Block as Block
    from ._model.block import compute_dtype as compute_dtype
    from ._model.flops import flops_per_token as flops_per_token
    from ._model.generate import generate as generate
    from ._model.generate import sample_token as sample_token
    from ._model.gpt import GPT as GPT
    from ._model.gpt import abstract_params as abstract_params
    from ._model.gpt import forward as forward
    from ._model.gpt import gpt as gpt
    from ._model.gpt import init_params as init_params
    from ._model.gpt import param_count as param_count
    from ._model.gpt import param_specs as param_specs
    from ._model.loss import loss_fn as loss_fn
    from ._model.loss import train_loss as train_loss
    from ._runs.adapter_export import export_adapter as export_adapter
    from ._runs.checkpoint import Checkpointer as Checkpointer
    from ._runs.checkpoint import CheckpointWarning as CheckpointWarning
    from ._runs.folders import load_run as load_run
    from ._runs.hf_export import export_hf as export_hf
    from ._runs.hf_import import import_hf as import_hf
    from ._runs.lock import RunInUseError as RunInUseError
    from ._runs.run import Run as Run
    from ._runs.run import resolve_run as resolve_run
    from ._training.loop import RunResult as RunResult
    from ._training.mfu import PEAK_FLOPS as PEAK_FLOPS
    from ._training.mfu import peak_flops as peak_flops
    from ._training.muon import muon_dimension_numbers as muon_dimension_numbers
    from ._training.progress import plot_losses as plot_losses
    from ._training.signals import TrainingInterrupted as TrainingInterrupted
    from ._training.step import TrainState as TrainState
    from ._training.step import abstract_state as abstract_state
    from ._training.step import compile_train_step as compile_train_step
    from ._training.step import from_items as from_items
    from ._training.step import init_state as init_state
    from ._training.step import make_optimizer as make_optimizer
    from ._training.step import make_schedule as make_schedule
    from ._training.step import to_items as to_items

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
__version__ = "0.1.0"
