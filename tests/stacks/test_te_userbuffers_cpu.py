"""TE's Userbuffers cases, the parts that run without TE or a GPU: the catalogue and its shapes, what is
compared, how a model is built (TE's fusible ops faked), the communicators' set-up, and how a stuck
rank is described (which exchange, which chunk of which rank)."""

from __future__ import annotations

import contextlib
import math
import pickle
import types

import pytest
import torch

from harness.case.catalog import userbuffers_cases as catalogue_ub_cases
from harness.case.data import initial_weights, tp_shapes, tp_tensor
from harness.stacks.protocol import BuildContext
from harness.stacks.te import ub_cases, ub_model, ub_progress, userbuffers
from harness.stacks.te_common import gpu_wait
from harness.stacks.te.cases import DeclinedCase
from harness.stacks.te.stack import expected_model


def ub_case(name: str):
    return next(c for c in ub_cases.builtin_cases() if c.name == name)


# --- catalogue and shapes ---------------------------------------------------------------------
def test_family_keeps_names_and_fits_te_shapes_up_to_eight_ranks():
    names = [c.name for c in ub_cases.builtin_cases()]
    assert names == [c.name for c in catalogue_ub_cases() if c.name != "userbuffers/init-cast-margin3"]
    for case in ub_cases.builtin_cases():
        assert case.model.userbuffers and case.model.dims == (128, 128) and case.batch == 32, case.name
        for world in (2, 4, 8):
            assert ub_cases.shape_reason(case.model.dims, world, case.model.overlap, case.batch) is None
    assert set(ub_cases.declined_cases()) == {"userbuffers/init-cast-margin3"}
    assert "records its construction cast's amax" in ub_cases.declined_cases()["userbuffers/init-cast-margin3"]


@pytest.mark.parametrize("dims,world,overlap,batch,needle", [
    ((128, 128), 1, True, 32, "at least 2 ranks"),
    ((128, 64), 2, True, 32, "one square layer"),
    ((128, 128, 128), 2, True, 32, "one square layer"),
    ((32, 32), 2, True, 32, "hidden 32 in the 4 splits"),
    ((96, 96), 4, False, 32, "each rank's share of hidden 96 over 4 ranks"),
    ((128, 128), 2, True, 8, "batch 8 per rank"),
])
def test_shapes_te_refuses_are_named(dims, world, overlap, batch, needle):
    assert needle in ub_cases.shape_reason(dims, world, overlap, batch)


def test_a_userbuffers_case_on_one_rank_is_declined_before_te_is_touched():
    from harness.stacks.te.stack import TEStack

    case = ub_case("userbuffers/column")
    ctx = BuildContext(rank=0, world_size=1, group=None, device=torch.device("cpu"),
                       initial_weights=initial_weights(case, 0, 0), deadline_s=10.0)
    with pytest.raises(DeclinedCase, match="at least 2 ranks"):
        TEStack().build(case.model, ctx)


def test_comm_names_and_environment():
    assert userbuffers.comm_name("column", True) == "qkv"
    assert userbuffers.comm_name("column", False) == "fc1"
    assert userbuffers.comm_name("row", True) == userbuffers.comm_name("row", False) == "proj"
    assert userbuffers.ub_timeout_s(60) == 130 and userbuffers.ub_timeout_s(2.5) == 15
    assert userbuffers.environment(60, env={}) == {"UB_SKIPMC": "1", "UB_TIMEOUT": "130"}
    assert userbuffers.environment(60, env={"UB_SKIPMC": "0", "UB_TIMEOUT": "5"}) == {}


# --- what is compared -----------------------------------------------------------------------
def test_compared_roles_and_bf16_data():
    case = ub_case("userbuffers/column")
    world, rank = 2, 1
    expected = expected_model(case, 0, world, rank, 0)
    assert set(expected.steps[0]) == {"layer0.input", "layer0.grad_output", "layer0.weight"}
    assert all(set(s) == {"layer0.input", "layer0.grad_output"} for s in expected.steps[1:])
    assert expected.final == {}
    assert expected.steps[0]["layer0.weight"].fp8_bytes is not None
    assert expected.steps[0]["layer0.input"].fp8_bytes is None and expected.steps[0]["layer0.input"].scale_inv is None
    # The input's amax at step 0, reduced over the group: of the data rounded to bf16, as TE sees them.
    shape = tp_shapes(case, world)["x"]
    xs = [tp_tensor(case, 0, "x", 0, r, 0, shape, std=1.0) for r in range(world)]
    rounded = max(float(x.to(torch.bfloat16).float().abs().max()) for x in xs)
    exact = max(float(x.abs().max()) for x in xs)
    assert rounded != exact                       # the rounding matters for these data
    history = expected.steps[0]["layer0.input"].amax_history
    assert float(history[-1]) == rounded, (float(history[-1]), rounded, exact)


# --- building with TE's fusible ops faked ----------------------------------------------------
class FakeWeight:
    def __init__(self):
        self._data = torch.empty(4, dtype=torch.uint8)
        self.copied = None
        self.requires_grad = True

    def copy_(self, src):
        self.copied = src.detach().clone()
        return self

    def requires_grad_(self, flag):
        self.requires_grad = flag
        return self


class FakeOps:
    def __init__(self):
        self.made = []

    def BasicLinear(self, in_features, out_features, **kwargs):
        initial = torch.empty(out_features, in_features)
        torch.nn.init.kaiming_uniform_(initial, a=math.sqrt(5))      # what TE's reset_parameters does
        op = types.SimpleNamespace(kind="BasicLinear", args=(in_features, out_features), kwargs=kwargs,
                                   initial=initial, weight=FakeWeight())
        self.made.append(op)
        return op

    def Bias(self, size, **kwargs):
        op = types.SimpleNamespace(kind="Bias", args=(size,), kwargs=kwargs)
        self.made.append(op)
        return op

    def ReduceScatter(self, group):
        op = types.SimpleNamespace(kind="ReduceScatter", args=(group,), kwargs={})
        self.made.append(op)
        return op

    def Sequential(self, *parts):
        return types.SimpleNamespace(kind="Sequential", parts=list(parts))


def fake_te(ops):
    inits = []

    @contextlib.contextmanager
    def quantized_model_init(enabled, recipe):
        inits.append((enabled, recipe))
        yield

    recipe_module = types.SimpleNamespace(Format=types.SimpleNamespace(HYBRID="HYBRID", E4M3="E4M3"),
                                          DelayedScaling=lambda **kw: ("DelayedScaling", tuple(sorted(kw.items()))))

    class Float8Quantizer:
        def quantize_impl(self, tensor):
            return tensor

    te = types.SimpleNamespace(quantized_model_init=quantized_model_init)
    return types.SimpleNamespace(te=te, recipe=recipe_module, ops=ops, Float8Quantizer=Float8Quantizer), inits


@pytest.mark.parametrize("name,kinds,linear_args,comm", [
    ("userbuffers/column", ["BasicLinear"], (128, 128), "qkv"),
    ("userbuffers/column-bias-frozen", ["BasicLinear", "Bias"], (128, 128), "fc1"),
    ("userbuffers/row-bias", ["BasicLinear", "Bias", "ReduceScatter"], (64, 128), "proj"),
    ("userbuffers/column-no-overlap", ["BasicLinear"], (128, 128), None),
])
def test_build_passes_te_what_its_own_test_does(name, kinds, linear_args, comm):
    case = ub_case(name)
    ops = FakeOps()
    mods, inits = fake_te(ops)
    full = initial_weights(case, 0, 0)
    ctx = BuildContext(rank=1, world_size=2, group="harness-group", device=torch.device("cpu"),
                       initial_weights=full, deadline_s=7.0)
    hooked = []
    kaiming = torch.nn.init.kaiming_uniform_
    model = ub_model.build_model(case.model, ctx, mods, "nccl-group", torch.device("cpu"),
                                 layer_setup=lambda module, weight: hooked.append((module, weight())))
    assert torch.nn.init.kaiming_uniform_ is kaiming               # the zero initialiser is undone
    assert [op.kind for op in ops.made] == kinds and model.module.parts == ops.made
    linear = ops.made[0]
    assert linear.args == linear_args and linear.kwargs["dtype"] == torch.bfloat16
    assert linear.kwargs["userbuffers_options"] == ({"comm_name": comm} if comm else None)
    if case.model.tp_layout == "column":
        assert linear.kwargs["tensor_parallel_mode"] == "column" and linear.kwargs["sequence_parallel"]
        assert linear.kwargs["tensor_parallel_group"] == "nccl-group"
        shard = full[0][64:128]
    else:
        assert ops.made[-1].args == ("nccl-group",) and "tensor_parallel_mode" not in linear.kwargs
        shard = full[0][:, 64:128]
    if case.model.bias:
        assert ops.made[1].args == ((128 // 2,) if case.model.tp_layout == "column" else (128,))
    assert torch.count_nonzero(linear.initial) == 0                # construction cast of zeros: amax 0
    rounded = shard.to(torch.bfloat16).float()
    assert torch.equal(linear.weight.copied, rounded) and not torch.equal(rounded, shard)
    assert torch.equal(model.master[0], rounded)
    assert linear.weight.requires_grad == case.model.weight_grad
    assert hooked == [(model.module, linear.weight)]
    assert inits == [(True, mods.recipe.DelayedScaling(margin=0, fp8_format="HYBRID", amax_history_len=16,
                                                        amax_compute_algo="max", reduce_amax=True))]
    assert model.weight_data == [linear.weight._data] and model.comm == comm and model.deadline_s == 7.0


def _fused(fwd, bwd, overlap=True):
    def named(name):
        return type(name, (), {})()

    fuser = types.SimpleNamespace(_forward_ops=[(named(n), [0]) for n in fwd],
                                  _backward_ops=[(named(n), [0]) for n in bwd])
    return types.SimpleNamespace(module=types.SimpleNamespace(_module_groups=[fuser]), overlap=overlap,
                                 fused_checked=False)


def test_a_layer_te_did_not_fuse_fails_the_case():
    ok = _fused(["UserbuffersForwardLinear"], ["UserbuffersBackwardLinear"])
    ub_model.check_fused(ok)
    assert ok.fused_checked
    with pytest.raises(RuntimeError, match="did not fuse the Userbuffers linear layer: forward ops"):
        ub_model.check_fused(_fused(["BasicLinear"], ["BasicLinear"]))
    ub_model.check_fused(_fused(["BasicLinear"], ["BasicLinear"], overlap=False))
    with pytest.raises(RuntimeError, match="overlap off"):
        ub_model.check_fused(_fused(["UserbuffersForwardLinear"], ["BasicLinear"], overlap=False))


# --- communicators ---------------------------------------------------------------------------
class FakeBase:
    class UserBufferQuantizationMode:
        FP8 = "fp8"

    def __init__(self):
        self._ub_communicators = None
        self.calls = []

    def initialize_ub(self, shape, tp_size, **kwargs):
        if self._ub_communicators is not None:
            raise RuntimeError("UB communicators are already initialized.")
        self.calls.append(("init", tuple(shape), tp_size, kwargs))
        self._ub_communicators = {("qkv_fprop", "fp8"): object(), ("proj_fprop", "fp8"): object()}

    def destroy_ub(self):
        self.calls.append(("destroy",))
        self._ub_communicators = None


def test_communicators_are_made_once_per_group_and_shape(monkeypatch):
    monkeypatch.delenv("UB_SKIPMC", raising=False)
    monkeypatch.setenv("UB_TIMEOUT", "3")
    base, comms = FakeBase(), userbuffers.UbCommunicators()
    comms.ensure(base, "g1", (64, 128), 2, 60.0)
    import os

    assert os.environ["UB_SKIPMC"] == "1" and os.environ["UB_TIMEOUT"] == "3"   # the user's timeout stays
    monkeypatch.delenv("UB_SKIPMC")
    assert base.calls == [("init", (64, 128), 2, {"quantization_modes": ["fp8"], "dtype": torch.bfloat16,
                                                    "ub_cfgs": userbuffers.UB_CFGS, "bootstrap_backend": "gloo"})]
    comms.ensure(base, "g1", (64, 128), 2, 60.0)
    assert len(base.calls) == 1                                    # same group and shape: kept
    qkv = base._ub_communicators[("qkv_fprop", "fp8")]
    assert comms.name_of(base, qkv) == "qkv_fprop" and comms.name_of(base, object()) == "?"
    comms.ensure(base, "g2", (64, 128), 2, 60.0)                   # a recycled group: new ones
    comms.ensure(base, "g2", (128, 128), 2, 60.0)                  # another shape: new ones
    assert [c[0] for c in base.calls] == ["init", "destroy", "init", "destroy", "init"]
    comms.destroy(base)
    comms.destroy(base)
    assert [c[0] for c in base.calls][-1] == "destroy" and len(base.calls) == 6 and not comms.live


# --- where a stuck rank is -------------------------------------------------------------------
def test_exchange_kinds_follow_te_defaults_and_the_adapter_config():
    assert ub_progress.kind_of("qkv_fprop", "AG", False) == "ring-exchange all-gather"
    assert ub_progress.kind_of("proj_dgrad", "CommOverlapType.AG", False) == "ring-exchange all-gather"
    assert ub_progress.kind_of("proj_fprop", "RS", False) == "pipelined reduce-scatter"
    assert ub_progress.kind_of("fc1_dgrad", "RS", False) == "ring-exchange reduce-scatter"
    assert ub_progress.kind_of("qkv_dgrad", "AG", True) == "bulk all-gather"
    assert ub_progress.kind_of("qkv_wgrad", "RS", True) == "bulk reduce-scatter"


def test_the_chunk_a_rank_waits_for_follows_te_schedules():
    ring = "ring-exchange all-gather"
    assert ub_progress.waiting_for(ring, 1, 2) == "rank 1 waiting for chunk 0 from rank 0"
    assert ub_progress.waiting_for(ring, 0, 2) == "rank 0 waiting for chunk 1 from rank 1"
    assert ub_progress.waiting_for(ring, 0, 4) == "rank 0 waiting for chunks [3, 2, 1] from rank 3, in that order"
    assert ub_progress.waiting_for("ring-exchange reduce-scatter", 1, 2) == \
        "rank 1 waiting for rank 0's partial sum of chunk 1"
    assert ub_progress.waiting_for("ring-exchange reduce-scatter", 2, 4) == \
        "rank 2 waiting for the partial sums of chunk 2 from ranks [1, 0, 3], in that order"
    assert ub_progress.waiting_for("pipelined reduce-scatter", 0, 4) == \
        "rank 0 waiting for the partial sums of chunk 0 from rank(s) [1, 2, 3]"
    assert ub_progress.waiting_for("bulk all-gather", 1, 2) == "rank 1 waiting for the chunks of rank(s) [0]"


class FakeEvent:
    """A CUDA event whose completion the test decides (``states``: what query() answers)."""

    script: list = []

    def __init__(self):
        self.done = FakeEvent.script.pop(0) if FakeEvent.script else True

    def record(self, *_):
        pass

    def query(self):
        if isinstance(self.done, Exception):
            raise self.done
        return self.done


def test_pending_names_the_exchange_in_progress_and_those_queued_behind():
    progress = ub_progress.UbProgress(event=FakeEvent)
    # (ready, done) per exchange: finished; in progress; not started; query failing
    FakeEvent.script = [True, True, True, False, False, False, RuntimeError("cuda"), False]
    with progress.at("model #3, step 0, forward", rank=1, tp=2):
        for comm in ("qkv_fprop", "qkv_fprop", "qkv_dgrad"):
            kind = ub_progress.kind_of(comm, "AG", comm == "qkv_dgrad")
            assert progress.record(comm, kind, lambda: "gemm out") == "gemm out"
    with progress.at("model #3, step 0, backward", rank=1, tp=2):
        progress.record("qkv_wgrad", "bulk reduce-scatter", lambda: None)
    assert progress.where == "outside any model step"
    assert progress.pending() == [
        "userbuffers 'qkv_fprop' ring-exchange all-gather (model #3, step 0, forward) in progress: "
        "rank 1 waiting for chunk 0 from rank 0",
        "userbuffers 'qkv_dgrad' bulk all-gather (model #3, step 0, forward) not started: "
        "earlier GPU work on this rank has not finished",
        "userbuffers 'qkv_wgrad' bulk reduce-scatter (model #3, step 0, backward): state unknown "
        "(CUDA event query failed)",
    ]


def test_install_records_only_calls_with_a_communicator(monkeypatch):
    progress = ub_progress.UbProgress(event=FakeEvent)
    monkeypatch.setattr(ub_progress, "PROGRESS", progress)
    comm = object()
    module = types.SimpleNamespace(general_gemm=lambda *a, **k: ("gemm", a, tuple(sorted(k))))
    ub_progress.install([module], lambda c: "proj_fprop" if c is comm else "?")
    ub_progress.install([module], lambda c: "again")                  # idempotent
    FakeEvent.script = []
    assert module.general_gemm(1, 2, ub=None)[0] == "gemm" and len(progress.ops) == 0
    assert module.general_gemm(1, 2, ub=comm, ub_type=types.SimpleNamespace(name="RS"))[0] == "gemm"
    (op,) = progress.ops
    assert (op.comm, op.kind) == ("proj_fprop", "pipelined reduce-scatter")


def test_a_bounded_wait_returns_when_the_gpu_finishes_and_says_why_when_it_does_not():
    class Later:
        def __init__(self, polls):
            self.polls = polls

        def query(self):
            self.polls -= 1
            return self.polls <= 0

    assert gpu_wait.idle_within(Later(50), 5.0)
    assert not gpu_wait.idle_within(Later(10 ** 9), 0.05)
    detail = gpu_wait.stall_detail(["userbuffers 'qkv_fprop' ring-exchange all-gather (...) in progress: x"],
                                   "nccl flight recorder: ...")
    assert detail.splitlines()[0] == "Userbuffers exchanges not finished on this rank:"
    assert "no Userbuffers exchange pending" in gpu_wait.stall_detail([], "fr")
    exc = gpu_wait.GpuStalled("rank 1, model #3, step 0, forward and backward: the GPU work", 60.0, detail)
    assert str(exc).startswith("rank 1, model #3, step 0, forward and backward: the GPU work did not complete "
                               "within 60 s\nUserbuffers exchanges not finished")
    again = pickle.loads(pickle.dumps(exc))
    assert str(again) == str(exc)
    from harness.runner.rank.execute import classify

    assert classify(exc) == "liveness"


def test_the_buggy_hook_registers_the_weight_a_getter_gives():
    from harness.stacks.te import id_hook

    hooks = []
    module = types.SimpleNamespace(register_forward_pre_hook=hooks.append)
    weight = types.SimpleNamespace(_data=torch.empty(2))
    manager = types.SimpleNamespace(is_fp8_enabled=lambda: True, get_fp8_recipe=lambda: "r",
                                    get_fp8_group=lambda: "g", get_unique_autocast_key=lambda r, g: f"{r}:{g}")
    id_hook.attach(module, manager, weight=lambda: weight)
    try:
        hooks[0](module, ())
        assert id_hook.REGISTERED_FP8_PARAMS == {"r:g": {id(weight._data)}}
        assert id_hook.FP8_PARAM_TO_AUTOCAST == {id(weight._data): "r:g"}
    finally:
        id_hook.reset()
