"""TE's Userbuffers for the harness: one set of communicators per process and group, made with
``initialize_ub`` and released with ``destroy_ub``, as TE's own Userbuffers test does.

``initialize_ub(shape, tp_size, ...)`` creates, for every layer name TE knows (``qkv``,
``proj``, ``fc1``, ``fc2``) and GEMM (``_fprop``, ``_dgrad``, ``_wgrad``), a communicator with
one buffer of ``shape`` on every rank, each mapping every peer's buffer (CUDA IPC). The
buffer's chunking is fixed at creation: a ring exchange sends ``shape[0] / tp`` rows per
chunk whatever the tensor, so every model that uses them must have the global input shape
``[batch * tp, hidden]`` of the buffer. The harness keeps them for the life of the process
and group, across models and cases (that sharing is what made TE's Userbuffers test
fragile), and makes new ones (``destroy_ub``, then ``initialize_ub``) when the group or the
shape changes, and at :meth:`UbCommunicators.destroy` (the stack's ``reset()``).

Set-up, as TE's test ``tests/pytorch/distributed/test_fusible_ops_with_userbuffers.py`` does it:
FP8 buffers (``UserBufferQuantizationMode.FP8``), bf16 for what is not FP8 (TE's Userbuffers
reduce-scatter kernels add bf16), and ``fc1_dgrad`` as a ring-exchange reduce-scatter
without FP8 buffer (a column-parallel layer whose weight is frozen reduce-scatters its dgrad
there). The bootstrap (``torch.distributed.new_group`` over every rank, then an all-gather of
the IPC handles) runs on gloo, beside the harness's own group.

Environment, set before the first communicator unless the user already set it:

* ``UB_SKIPMC=1``: CUDA IPC instead of NVLink multicast (``cuMulticastCreate``): the cases
  need no multicast, and hosts whose GPUs are shared between jobs keep it off (as they keep
  NCCL's, ``NCCL_NVLS_ENABLE=0``);
* ``UB_TIMEOUT`` (seconds, read by TE when a communicator is made): TE's kernels wait for a
  peer's chunk that long (default 110 s), then print a line and go on with whatever the buffer
  holds. The harness sets it to twice its deadline plus 10 s, so that its own deadline comes
  first and its report shows the wait as it is (:mod:`.gpu_wait`);
* ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (set by :func:`harness.stacks.te.stack.load`, before CUDA
  starts): TE's Userbuffers test runs with it.

What TE does not release: ``destroy_ub`` drops its communicators (their buffers, IPC mappings,
streams and events go with them), but the gloo group ``initialize_ub`` makes for the
bootstrap stays registered with torch.distributed until the process ends (one per
``initialize_ub``), and the compiled-graph cache is reset (``torch.compiler.reset``).
"""

from __future__ import annotations

import math
import os

import torch

ACT_DTYPE = torch.bfloat16            # activations, gradients and TE's non-FP8 Userbuffers buffers
UB_CFGS = {"fc1_dgrad": {"method": "ring_exchange", "fp8_buf": False}}


def comm_name(layout: str, weight_grad: bool) -> str:
    """The layer name (TE's ``userbuffers_options["comm_name"]``) a model's exchanges use.

    As TE's test: column-parallel ``qkv`` (forward ring all-gather ``qkv_fprop``, backward bulk
    all-gather ``qkv_dgrad`` and bulk reduce-scatter ``qkv_wgrad``), ``fc1`` when the weight is
    frozen (``fc1_fprop``, then the dgrad reduce-scatter on ``fc1_dgrad``), row-parallel ``proj``
    (pipelined reduce-scatter ``proj_fprop``, ring all-gather of the output gradient ``proj_dgrad``).
    """
    if layout == "row":
        return "proj"
    return "qkv" if weight_grad else "fc1"


def ub_timeout_s(deadline_s: float) -> int:
    """``UB_TIMEOUT`` for a run with this deadline: long enough that the harness's comes first."""
    return int(math.ceil(2 * deadline_s)) + 10


def environment(deadline_s: float, env=None) -> dict:
    """The variables :meth:`UbCommunicators.ensure` sets, less those ``env`` already has."""
    env = os.environ if env is None else env
    wanted = {"UB_SKIPMC": "1", "UB_TIMEOUT": str(ub_timeout_s(deadline_s))}
    return {k: v for k, v in wanted.items() if k not in env}


class UbCommunicators:
    """This process's Userbuffers communicators: for which group and buffer shape, if any."""

    def __init__(self):
        self.group = None        # the harness group they were made for (held, compared by identity)
        self.shape: tuple[int, int] | None = None
        self.created = 0         # how many times initialize_ub ran in this process

    @property
    def live(self) -> bool:
        return self.shape is not None

    def ensure(self, base, group, shape: tuple[int, int], tp_size: int, deadline_s: float) -> None:
        """Communicators for ``group`` with buffers of ``shape`` (every rank calls this together)."""
        if self.live and self.group is group and self.shape == tuple(shape):
            return
        self.destroy(base)
        os.environ.update(environment(deadline_s))
        if base._ub_communicators is not None:     # made by someone else in this process
            base.destroy_ub()
        base.initialize_ub(list(shape), tp_size, quantization_modes=[base.UserBufferQuantizationMode.FP8],
                           dtype=ACT_DTYPE, ub_cfgs=UB_CFGS, bootstrap_backend="gloo")
        self.group, self.shape = group, tuple(shape)
        self.created += 1

    def destroy(self, base) -> None:
        """``destroy_ub``; the caller has made sure no GPU work still uses the buffers."""
        if self.live:
            base.destroy_ub()
        self.group, self.shape = None, None

    def name_of(self, base, comm) -> str:
        """The name (``qkv_fprop``, ...) TE registered ``comm`` under, or ``"?"``."""
        for (name, _mode), obj in (base._ub_communicators or {}).items():
            if obj is comm:
                return name
        return "?"
