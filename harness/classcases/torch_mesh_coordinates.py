"""torch 2.13, ``torch/distributed/_local_tensor/__init__.py``: ``LocalTensorMode`` caches
each mesh's per-rank coordinates in ``_coordinate_cache``, keyed by ``id(mesh)``
(``_LocalDeviceMesh.get_coordinate``), and never prunes it. ``mesh["dp"]`` builds a new
submesh on every call; once one dies, the next mesh born at its address -- ``mesh["tp"]`` --
is answered with the dead submesh's coordinates, so ``mesh["tp"].get_local_rank()`` returns
the dp ranks.

:func:`run` builds a 2x2 ("dp", "tp") mesh of four simulated ranks on a fake process group
(CPU, one process), asks a dp submesh for its local ranks, lets it die as ``mesh["tp"]``
makes its submesh, and has that submesh born on the dead one's address
(:func:`~harness.idreuse.landing.born_on_death_of`). The fixed form prunes each cache entry
when its mesh dies.
"""

from __future__ import annotations

import contextlib
import functools
import weakref

from harness.classcases.realbug import Form, Outcome
from harness.errors import SetupError
from harness.idreuse.landing import born_on_death_of, seed_pools
from harness.idreuse.morgue import quiet_allocator
from harness.oracles.hygiene import stale_ids

WORLD = 4
SHAPE = (2, 2)
REGISTRY = "LocalTensorMode._coordinate_cache"


def truth_of(dim: int) -> dict[int, int]:
    """Each rank's coordinate along mesh dimension ``dim`` of a row-major 2x2 mesh."""
    return {rank: (rank // SHAPE[1], rank % SHAPE[1])[dim] for rank in range(WORLD)}


@contextlib.contextmanager
def fake_world():
    """A four-rank fake process group in this process, destroyed on exit."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise SetupError("a default process group is already initialized in this process; run this case alone")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def pruned_cache():
    """The fixed form: every entry of ``_coordinate_cache`` is popped when its mesh dies."""
    from torch.distributed import _local_tensor

    local_mesh = _local_tensor._LocalDeviceMesh
    released = vars(local_mesh)["get_coordinate"]

    def get_coordinate(mesh):
        mode = _local_tensor.enabled_local_tensor_mode()
        fresh = mode is not None and id(mesh) not in mode._coordinate_cache
        coordinates = released.__func__(mesh)
        if fresh:
            weakref.finalize(mesh, functools.partial(mode._coordinate_cache.pop, id(mesh), None))
        return coordinates

    local_mesh.get_coordinate = staticmethod(get_coordinate)
    try:
        yield
    finally:
        local_mesh.get_coordinate = released


def run(form: Form, reuse: bool = True) -> Outcome:
    """One reproduction: the tp submesh's local ranks, after a dp submesh died on its address.
    ``reuse=False`` is the control: the dp submesh stays alive, so no address comes back."""
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    fix = pruned_cache() if form is Form.FIXED else contextlib.nullcontext()
    with fake_world(), fix, LocalTensorMode(WORLD) as mode:
        mesh = init_device_mesh("cpu", SHAPE, mesh_dim_names=("dp", "tp"))
        with quiet_allocator():
            kept = seed_pools(lambda: object.__new__(DeviceMesh))
            box = [mesh["dp"]]
            box[0].get_local_rank()     # caches the dp coordinates under id(box[0])
            placing = born_on_death_of(DeviceMesh, box) if reuse else contextlib.nullcontext()
            with placing as landing:
                tp = mesh["tp"]
            dead = {landing.address: "dp submesh"} if reuse else {}
            stale = stale_ids({REGISTRY: mode._coordinate_cache}, dead)
        answer = dict(tp.get_local_rank().node._local_ints)
        del kept, box
        return Outcome(answer, truth_of(1), reuse and landing.born is tp, tuple(stale))
