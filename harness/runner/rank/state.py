"""Everything one rank keeps from case to case, in one object with one :meth:`RankState.reset`.

A rank (a controlled worker, an SPMD rank, the in-process runner, a zygote's child) holds one
:class:`RankState`: the stack under test, the run's settings, the collective ledger and its
precheck, the morgue of parked objects and the shells of dead module objects, the graveyard of dead ones, where each registry entry was first seen, the registry sizes the last
case ended with, and the process group's generation. Between cases nothing is reset: what one
case leaves behind for the next is exactly what the harness measures. :meth:`reset` is the
soft recycle after a case that left communication in doubt.
"""

from __future__ import annotations

import datetime
import weakref

from harness.collectives.ledger import install
from harness.idreuse.morgue import MORGUE
from harness.idreuse.shells import SHELLS
from harness.idreuse.tracker import Graveyard
from harness.oracles.hygiene import EntryOrigins
from harness.oracles.retention import registry_sizes
from harness.runner.rank.settings import RankSettings

__harness_hidden__ = True


class LastRegistrySizes:
    """The registry sizes a case ended with, so the next case on the same stack starts from them.

    Walking the registries for bytes costs time in proportion to what they retain (TE-like
    stacks never prune their amax buffers): 7 % of a rank's samples after a few dozen small
    cases, when it ran at both ends of every case. Nothing of the stack runs between two cases
    of a rank, so the sizes at the end of one are those at the start of the next. Entry counts
    are cheap and are always taken afresh: a registry whose count changed (a reset, say) is
    walked again.
    """

    def __init__(self):
        self.stack_ref = None          # a weak reference: an id() could name a later stack
        self.sizes: dict | None = None

    def before_case(self, stack) -> dict:
        same = self.stack_ref is not None and self.stack_ref() is stack
        return registry_sizes(stack.registries(), known=self.sizes if same else None)

    def after_case(self, stack) -> dict:
        sizes = registry_sizes(stack.registries())
        try:
            self.stack_ref, self.sizes = weakref.ref(stack), sizes
        except TypeError:              # a stack without weak reference support: no caching
            self.forget()
        return sizes

    def forget(self) -> None:
        self.stack_ref = self.sizes = None


class RankState:
    """One rank's long-lived state. ``group`` is the torch process group of the current
    generation (None at world size 1)."""

    def __init__(self, settings: RankSettings, rank: int, stack):
        self.settings = settings
        self.rank = rank
        self.world = settings.world_size
        self.stack = stack
        self.ledger = install()
        self.morgue = MORGUE
        self.shells = SHELLS
        self.graveyard = Graveyard()
        self.entry_origins = EntryOrigins()
        self.registry_sizes = LastRegistrySizes()
        self.generation = 0
        self.group = None
        self.groups_made = 0      # process groups made for the stack (harness.runner.rank.group_death)
        self.dead_group = None    # the last one, destroyed at a case's end, until the next is made
        self._store = None

    @classmethod
    def load(cls, settings: RankSettings, rank: int, stack=None) -> "RankState":
        """Apply the settings to this process and load the stack (imports first, before any fork);
        ``stack``: the one this process loaded already for ``settings.sut``, used as it is.

        The ledger wraps ``torch.distributed`` before the stack is imported, so that a stack
        that binds a collective by name at import still goes through it."""
        from harness.phases import mark
        from harness.stacks import load_stack
        from harness.stacks.hooks import traits

        install()
        settings.apply_environment()
        mark(f"rank {rank}: torch and the harness imported")
        if stack is None:
            stack = load_stack(settings.sut, settings.sut_options())
        mark(f"rank {rank}: stack loaded")
        preload = traits(stack).preload
        if preload is not None:
            preload()          # before the zygote forks: no isolated run imports the stack's modules again
            mark(f"rank {rank}: stack preloaded")
        return cls(settings, rank, stack)

    # --- between cases -----------------------------------------------------------------------
    def reset(self) -> None:
        """Empty the stack's registries and forget every parked or dead object."""
        self.stack.reset()
        self.registry_sizes.forget()
        self.morgue.clear()
        self.shells.clear()
        self.graveyard.dead.clear()
        self.entry_origins.clear()

    # --- the process group ---------------------------------------------------------------------
    def join_group(self, store, prefix: str = "pg/", exchange=None) -> None:
        """Join this rank's gloo process group through ``store`` and set up the precheck
        (``exchange``: how its messages travel, :mod:`harness.collectives.exchange`; the store's
        keys unless given)."""
        from harness.collectives.precheck import CollectivePrecheck

        self._store = store
        self._init_process_group(prefix)
        if self.settings.precheck:
            self.ledger.precheck = CollectivePrecheck(store, self.rank, self.settings.deadline_s, exchange)
        self.group = self._stack_group()

    def renew_group(self, generation: int) -> None:
        """A fresh process group in the same processes (after a case left gloo in doubt)."""
        import torch.distributed as dist

        self.generation = generation
        self.dead_group = None
        dist.destroy_process_group()
        self._init_process_group(f"pg{generation}/")
        self.group = self._stack_group()

    def _stack_group(self, make=None):
        """The process group the stack receives: the default group, or, for a stack whose groups
        die (``renews_group``, :mod:`harness.runner.rank.group_death`), a group of every rank of
        its own, which can be destroyed while the default one lives (``make`` builds it)."""
        import torch.distributed as dist

        from harness.stacks.hooks import traits

        if not traits(self.stack).renews_group or self.world < 2:
            return dist.group.WORLD
        self.groups_made += 1
        ranks = list(range(self.world))
        return make(lambda: dist.new_group(ranks)) if make is not None else dist.new_group(ranks)

    def build_context(self, case, m: int):
        """What the stack's ``build`` receives for model ``m`` of ``case`` on this rank."""
        import torch

        from harness.case.data import initial_weights
        from harness.stacks.protocol import BuildContext

        return BuildContext(rank=self.rank, world_size=self.world, group=self.group, device=torch.device("cpu"),
                            initial_weights=initial_weights(case, m, self.settings.seed),
                            deadline_s=self.settings.deadline_s)

    def leave_group(self) -> None:
        import torch.distributed as dist

        try:
            dist.destroy_process_group()
        except Exception:
            pass
        self.group = self.dead_group = None

    def _init_process_group(self, prefix: str) -> None:
        import torch.distributed as dist

        dist.init_process_group("gloo", store=dist.PrefixStore(prefix, self._store), rank=self.rank,
                                world_size=self.world,
                                timeout=datetime.timedelta(seconds=self.settings.deadline_s))

    # --- one case ------------------------------------------------------------------------------
    def begin_case(self, token: str) -> None:
        if self.ledger.precheck is not None:
            self.ledger.precheck.begin_case(token)

    def end_case(self, collectives: int, failed: bool) -> None:
        if self.ledger.precheck is not None:
            self.ledger.precheck.end_case(collectives, failed=failed)
