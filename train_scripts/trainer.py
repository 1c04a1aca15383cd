"""``Trainer`` / ``Seq2SeqTrainer`` of the train scripts: transformers' own, with checkpoints that appear whole, a clear
error on a full disk, and no step past the end when resumed from the final checkpoint.

* Each checkpoint is written into ``output_dir/.checkpoint-staging/checkpoint-N`` and renamed to ``checkpoint-N``
  once complete, and a write that fails for lack of space is an ``OSError`` naming the folder and its free space
  (:func:`hf_seq.train_scripts.run_folder.staged_checkpoint`).
* Resumed from a checkpoint at ``max_steps``, ``Trainer`` (5.24) trains one more step before it checks the end (when
  the checkpoint is mid-epoch); here such a resume trains nothing and goes straight to the end of training.
* ``train_sampling_strategy="length_buckets"`` (:class:`~hf_seq.train_scripts.arguments.HfSeqTrainingArguments`): training
  batches from :class:`hf_seq.toolkit.samplers.LengthBucketSampler` — examples of similar length in each batch, the batches
  in random order — seeded by ``data_seed`` (else ``seed``).
* The language model's windows (:class:`hf_seq.toolkit.collators.LMWindowDataset`) and the rows of a ``datasets.Dataset``
  (translation, classifier, tagger) under ``train_sampling_strategy="random"`` are shuffled by
  :class:`hf_seq.toolkit.samplers.PermutationSampler`: the order of ``Trainer``'s default shuffle, without its Python list of
  every index.
* Every saved model (each checkpoint, the final folder) gets ``training_curves.png`` (:mod:`hf_seq.train_scripts.curves`).
* While it trains, the process keeps the memory it frees at the top of its heap (:func:`keep_heap_resident`): glibc
  would hand it back to the system after every step and fault it in again at the next one.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

import torch
from datasets import Dataset
from hf_seq.train_scripts.curves import write_training_curves
from hf_seq.train_scripts.processes import collective_timeouts, set_collective_timeout
from hf_seq.train_scripts.run_folder import staged_checkpoint
from transformers import Seq2SeqTrainer, Trainer

from hf_seq.toolkit.collators import LMWindowDataset
from hf_seq.toolkit.samplers import LengthBucketSampler, PermutationSampler

LENGTH_BUCKETS = "length_buckets"  # the train_sampling_strategy added here

# glibc's mallopt() parameters (malloc.h) and what keep_heap_resident sets them to
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
HEAP_MMAP_THRESHOLD = 32 << 20  # glibc's largest on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX), where its own rule ends
HEAP_TRIM_THRESHOLD = -1  # mallopt's "never trim"
# a user's own glibc malloc settings, which keep_heap_resident leaves as they are
GLIBC_MALLOC_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
GLIBC_MALLOC_TUNABLES = ("glibc.malloc.trim_threshold", "glibc.malloc.mmap_threshold", "glibc.malloc.top_pad")


def keep_heap_resident() -> bool:
    """Keep the memory this process frees at the top of glibc's heap mapped, instead of handing it back to the
    system; True where the setting was made (Linux with glibc, no malloc setting of the user's own), else False.

    glibc returns the free top of its heap (``brk``) once it exceeds ``M_TRIM_THRESHOLD``, which its dynamic rule
    raises to at most 64 MiB (twice the largest ``M_MMAP_THRESHOLD``, 32 MiB). A training step allocates and frees
    its activations, gradients and logits every step; when they lie at the top of the heap (a process whose data
    are memory-mapped Arrow files or token stores, not Python objects in the heap below them) every step gives
    them back and the next one faults them in again, page by page: the translation recipe took 16,000-38,000 minor
    page faults a step and ran at 0.8x the steps per second. Here trimming is switched off and the mmap threshold
    is fixed at 32 MiB (setting one of them ends the dynamic rule, so both are set). The resident memory stays at
    its peak instead of falling between steps, and the peak rises a little (buffers of 128 KiB-32 MiB that glibc's
    rule would have mapped and unmapped stay in the heap): 0.77 GB against 0.73-0.75 GB for the translation
    recipe's 1 M-pair second run. Nothing computed changes.

    Variables ``MALLOC_TRIM_THRESHOLD_`` / ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TOP_PAD_`` / ``MALLOC_MMAP_MAX_``
    or their ``GLIBC_TUNABLES`` are the user's choice: with any of them set nothing is changed. It is set when
    training starts (``train()``), not before: the memory that reading and tokenizing the data freed is still handed
    back as glibc would."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if any(os.environ.get(name) for name in GLIBC_MALLOC_VARIABLES) or any(
        t in tunables for t in GLIBC_MALLOC_TUNABLES
    ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD) != 1:  # refused: the dynamic rule stays
        return False
    return mallopt(_M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD) == 1


class HfSeqTrainerMixin:
    """The additions above, for any ``Trainer`` subclass (``class MyTrainer(HfSeqTrainerMixin, Trainer)``)."""

    _checkpoint_staging: str | None = None

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        super().save_model(output_dir, _internal_call=_internal_call)
        # each checkpoint (its staging folder) and the final folder (save_run's staging folder) gets its curves
        if self.args.should_save:
            write_training_curves(self.state, output_dir or self.args.output_dir, self.args.metric_for_best_model)

    def train(self, *args, **kwargs):
        keep_heap_resident()  # from here on the steps' memory stays mapped from one step to the next
        with collective_timeouts(self, "training"):
            output = super().train(*args, **kwargs)
            # Trainer's end of training deletes checkpoints on the main process alone (save_total_limit=1 keeps only
            # the best): no process reads the folder before that is done
            self.accelerator.wait_for_everyone()
        return output

    def evaluate(self, *args, **kwargs):
        with collective_timeouts(self, "evaluation"):
            return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        with collective_timeouts(self, "prediction"):
            return super().predict(*args, **kwargs)

    def _get_output_dir(self, trial) -> str:
        # while a checkpoint is written (only then), Trainer's run directory is the staging folder
        return self._checkpoint_staging or super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial) -> None:
        # private: Trainer writes a checkpoint in place and runs on_save after it; here it is staged and renamed whole
        with staged_checkpoint(self, trial):
            super()._save_checkpoint(model, trial)

    def create_accelerator_and_postprocess(self) -> None:
        super().create_accelerator_and_postprocess()
        # the process group exists from here on: ddp_timeout bounds its collectives on CPU too, and it is destroyed at
        # exit whoever made this trainer (a script, a driver of the user's own), so no gloo thread aborts the teardown
        set_collective_timeout(self.args.ddp_timeout)
        enable_fsdp_on_cpu(self)
        enable_deepspeed_on_cpu(self)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        # FSDP2 turns the model's class into a generated `FSDP<Class>` and its parameters into DTensors: saved as it
        # is, the folder gets torch's FSDP source files instead of the modelling code (and transformers' tied-weight
        # check runs a collective on one process only). The main process saves a plain copy of the model instead.
        # Under DeepSpeed ZeRO-1/2 Trainer passes accelerate's copy of the module's state dict, whose cloned tensors
        # no longer share storage: a tied output layer would be saved twice. Every process holds the full weights
        # there, so the model saves its own state dict (ZeRO-3's gathered one already leaves the tied copy out).
        if state_dict is not None and self.is_deepspeed_enabled and deepspeed_zero_stage(self) < 3:
            state_dict = None
        model = self.model
        if not is_fsdp2_module(model):
            return super()._save(output_dir, state_dict=state_dict)
        if not self.args.should_save:
            return None
        self.model = unsharded_copy(model, state_dict)
        try:
            return super()._save(output_dir, state_dict=None)
        finally:
            self.model = model

    def _get_train_sampler(self, train_dataset=None):
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if (
            self.args.train_sampling_strategy == "random"
            and isinstance(dataset, (LMWindowDataset, Dataset))
            and self.accelerator.dataloader_config.use_seedable_sampler
        ):  # accelerate's seeded shuffle without a Python list of every window / row
            seed = self.args.data_seed if self.args.data_seed is not None else torch.random.initial_seed()
            return PermutationSampler(dataset, seed)
        if self.args.train_sampling_strategy != LENGTH_BUCKETS:
            return super()._get_train_sampler(train_dataset)
        names = getattr(self.processing_class, "model_input_names", None) or ["input_ids"]
        args = self.args
        return LengthBucketSampler.from_dataset(
            dataset,
            self._train_batch_size,
            seed=args.data_seed if args.data_seed is not None else args.seed,
            drop_last=args.dataloader_drop_last,
            length_column_name=args.length_column_name,
            model_input_name=names[0],
        )

    def _run_epoch(self, *args, **kwargs):
        if self.state.global_step >= self.state.max_steps > 0:  # resumed from the last checkpoint: nothing to train
            self.control.should_training_stop = True
            return None
        return super()._run_epoch(*args, **kwargs)


class HfSeqTrainer(HfSeqTrainerMixin, Trainer):
    """``transformers.Trainer`` with :class:`HfSeqTrainerMixin`."""


class HfSeqSeq2SeqTrainer(HfSeqTrainerMixin, Seq2SeqTrainer):
    """``transformers.Seq2SeqTrainer`` with :class:`HfSeqTrainerMixin`."""


def fsdp_requested(args) -> bool:
    """FSDP asked for by ``TrainingArguments`` (``--fsdp``) or by ``accelerate launch`` (an FSDP config file /
    ``--use_fsdp``: ``ACCELERATE_USE_FSDP``)."""
    return args.fsdp_plugin_args is not None or os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def enable_fsdp_on_cpu(trainer) -> None:
    """Turn a multi-process CPU (gloo) run that asked for FSDP into an FSDP2 run; refuse what cannot shard.

    accelerate 1.15's ``AcceleratorState`` selects ``DistributedType.FSDP`` only for GPU-like process groups (NCCL,
    XCCL, ...): on CPU processes (``MULTI_CPU``, gloo) it keeps ``MULTI_CPU`` and drops the FSDP plugin, so the model is
    wrapped in DDP — every rank holds all parameters — with no word said. FSDP2 (``fully_shard``) itself works on CPU
    with gloo. So, right after ``Trainer`` created its ``Accelerator`` and before anything is prepared, the accelerator
    and process states get what ``AcceleratorState.__init__`` sets on GPUs: distributed type ``FSDP`` (in both shared
    states, as its last line does) and the plugin of the request (``--fsdp`` / ``fsdp_config``, or accelerate's
    ``FSDP_*`` variables); ``Trainer.is_fsdp_enabled`` is set; the rest is
    accelerate's and Trainer's own FSDP2 code path (``fully_shard`` per ``_no_split_modules`` unit, sharded
    checkpoints, a gathered final save). FSDP in a single process is refused with a ``ValueError`` (FSDP1 on CPU is
    refused by accelerate itself: its plugin raises "no available devices").
    """
    if not fsdp_requested(trainer.args):
        return
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    state = trainer.accelerator.state
    if state.distributed_type == DistributedType.FSDP:
        return  # GPUs: accelerate selected it
    if state.distributed_type == DistributedType.NO:
        raise ValueError(
            "FSDP was requested (--fsdp or an accelerate FSDP config) but this is a single process: FSDP shards "
            "the model across processes; launch several, e.g. `torchrun --nproc_per_node 2 ...` or "
            "`accelerate launch --config_file configs/accelerate/fsdp.yaml ...`"
        )
    if state.distributed_type != DistributedType.MULTI_CPU:
        raise ValueError(
            f"FSDP was requested but accelerate set up {state.distributed_type}; refusing to train without it"
        )
    plugin_args = trainer.args.fsdp_plugin_args
    plugin = (
        FullyShardedDataParallelPlugin(**plugin_args) if plugin_args is not None else FullyShardedDataParallelPlugin()
    )
    if state.mixed_precision != "no":
        plugin.set_mixed_precision(state.mixed_precision)
    state.distributed_type = DistributedType.FSDP
    state.fsdp_plugin = plugin
    # as AcceleratorState's own initialisation ends: the process state gets the same type (every later
    # `AcceleratorState()` copies it back)
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    trainer.is_fsdp_enabled = True
    if plugin.activation_checkpointing and trainer.args.activation_checkpointing:
        raise ValueError(
            "`fsdp_config['activation_checkpointing']` and the `activation_checkpointing` training argument can't both "
            "be set to True"
        )
    if trainer.args.save_only_model and trainer.args.load_best_model_at_end:
        raise ValueError("FSDP can't be used with `save_only_model` along with `load_best_model_at_end`.")
    if trainer.args.save_only_model and "SHARDED_STATE_DICT" in str(plugin.state_dict_type):
        raise ValueError("save_only_model option is not compatible with FSDP state dict type 'SHARDED_STATE_DICT'")


def deepspeed_requested(args) -> bool:
    """DeepSpeed asked for by ``TrainingArguments`` (``--deepspeed ds_config.json``) or by ``accelerate launch`` (a
    DeepSpeed config file / ``--use_deepspeed``: ``ACCELERATE_USE_DEEPSPEED``, read into ``args.deepspeed_plugin``)."""
    return getattr(args, "deepspeed_plugin", None) is not None


def start_deepspeed_comm_on_cpu(args) -> None:
    """Start ``deepspeed.comm`` on the process group of a multi-process CPU run that asked for DeepSpeed, right after
    the arguments are parsed (before any model is built).

    On GPUs accelerate's ``PartialState`` starts the process group through DeepSpeed; CPU processes get a plain gloo
    group, and ZeRO-3's ``deepspeed.zero.Init`` (what ``from_pretrained`` / ``from_config`` use under ZeRO-3) reads
    the world size before it starts ``deepspeed.comm`` itself: it counts one process and fails (``train_batch_size is
    not equal to micro_batch_per_gpu * gradient_acc_step * world_size 8 != 4 * 1 * 1``). Nothing else changes: DeepSpeed
    wraps the existing group."""
    if not deepspeed_requested(args) or torch.cuda.is_available():
        return
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    import deepspeed

    deepspeed.init_distributed(dist_backend=torch.distributed.get_backend())


def deepspeed_zero_stage(trainer) -> int:
    return int(trainer.accelerator.state.deepspeed_plugin.deepspeed_config.get("zero_optimization", {}).get("stage", 0))


def enable_deepspeed_on_cpu(trainer) -> None:
    """Turn a multi-process CPU (gloo) run that asked for DeepSpeed into a DeepSpeed run; refuse what cannot.

    On a machine without CUDA, transformers 5.x asks accelerate for DeepSpeed without a backend: ``PartialState``
    then lets DeepSpeed start the process group (gloo, DeepSpeed's CPU accelerator) but records no backend and hence
    *one* process (rank 0 everywhere), and DeepSpeed's batch check fails (``train_batch_size is not equal to
    micro_batch_per_gpu * gradient_acc_step * world_size 2 != 2 * 1 * 2``). The train scripts therefore start such
    runs as CPU processes (``ACCELERATE_USE_CPU``: ``MULTI_CPU``, gloo, the right world size, the DeepSpeed config's
    ``auto`` batch sizes filled for it), where ``AcceleratorState`` drops DeepSpeed (``... and not cpu``) and would
    train plain DDP without a word. So, right after ``Trainer`` created its ``Accelerator``, the states get what
    ``AcceleratorState.__init__`` sets for DeepSpeed (distributed type ``DEEPSPEED``, the selected plugin, mixed
    precision left to the DeepSpeed config) and ``Trainer`` its DeepSpeed post-processing; everything after that is
    accelerate's and Trainer's own DeepSpeed code (``deepspeed.initialize`` on the process group, ZeRO-partitioned
    optimizer state / gradients / parameters, DeepSpeed checkpoints, the gathered final save). DeepSpeed in a single
    CPU process started without a launcher is refused with a ``ValueError`` (``deepspeed.initialize`` would fail
    later, looking for MPI: ``No module named 'mpi4py'``)."""
    if not deepspeed_requested(trainer.args):
        return
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType
    from transformers.integrations.deepspeed import propagate_args_to_deepspeed

    state = trainer.accelerator.state
    if state.distributed_type == DistributedType.NO or (
        state.num_processes == 1 and "WORLD_SIZE" not in os.environ and not torch.cuda.is_available()
    ):
        raise ValueError(
            "DeepSpeed was requested (--deepspeed or an accelerate DeepSpeed config) but this is a single CPU "
            "process started without a launcher (DeepSpeed would look for MPI and fail: No module named 'mpi4py'); "
            "ZeRO partitions across processes: launch several, e.g. `torchrun --nproc_per_node 2 ... --deepspeed "
            "configs/accelerate/deepspeed_zero2.json` or `accelerate launch --config_file "
            "configs/accelerate/deepspeed_zero2.yaml --mixed_precision no ...`"
        )
    if state.distributed_type == DistributedType.DEEPSPEED:
        return  # GPUs (or one launched process): accelerate selected it
    if state.distributed_type != DistributedType.MULTI_CPU:
        raise ValueError(
            f"DeepSpeed was requested but accelerate set up {state.distributed_type}; refusing to train without it"
        )
    if trainer.is_fsdp_enabled:
        raise ValueError("DeepSpeed and FSDP were both requested; choose one")
    plugin = trainer.args.deepspeed_plugin
    plugin.set_mixed_precision(state.mixed_precision)
    plugin.select(_from_accelerator_state=True)
    state.distributed_type = DistributedType.DEEPSPEED
    state.deepspeed_plugins = plugin
    state._mixed_precision = "no"  # as AcceleratorState does: DeepSpeed's config holds the precision
    PartialState._shared_state["distributed_type"] = DistributedType.DEEPSPEED
    trainer.is_deepspeed_enabled = True
    # Trainer's own post-processing for DeepSpeed, skipped while the type was MULTI_CPU
    if getattr(trainer.args, "hf_deepspeed_config", None) is None:
        propagate_args_to_deepspeed(trainer.accelerator, trainer.args)
    if trainer.args.save_only_model and trainer.args.load_best_model_at_end:
        raise ValueError("DeepSpeed can't be used with `save_only_model` along with `load_best_model_at_end`.")
    if plugin.zero_stage == 3 and trainer.args.auto_find_batch_size:
        raise ValueError("`auto_find_batch_size` isn't supported yet with DeepSpeed Zero-3")


def is_fsdp2_module(model) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return False
    return isinstance(model, FSDPModule)


def unsharded_copy(model, state_dict: dict):
    """A plain (unsharded) model of ``model``'s own class and config holding ``state_dict`` — the full weights that
    ``accelerator.get_state_dict`` gathered on the main process — for ``save_pretrained``: built on the meta device,
    the weights assigned (no copy), ties restored, buffers that are not in the state dict taken from ``model``
    (FSDP does not shard buffers)."""
    import copy

    import torch
    from torch.distributed.fsdp import FSDPModule

    cls = next(base for base in type(model).__bases__ if not issubclass(base, FSDPModule))
    with torch.device("meta"):
        plain = cls(model.config)
    plain.load_state_dict(state_dict, assign=True, strict=False)
    buffers = dict(model.named_buffers())
    for name, buffer in list(plain.named_buffers()):
        if buffer.is_meta:
            owner, _, leaf = name.rpartition(".")
            plain.get_submodule(owner).register_buffer(leaf, buffers[name].detach().clone(), persistent=False)
    plain.tie_weights()
    missing = [name for name, param in plain.named_parameters() if param.is_meta]
    if missing:
        raise ValueError(f"the gathered FSDP state dict lacks {missing[:5]}; cannot save the final model")
    if getattr(model, "generation_config", None) is not None:
        plain.generation_config = copy.deepcopy(model.generation_config)
    return plain
