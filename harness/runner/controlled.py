"""The controller's backend: cases sent to a persistent rank group, and what to do after each.

Used by ``python -m harness run`` with the spawn, torchrun or mpirun launcher and by the pytest
plugin (one test, one case). The group is started on first use (start-up is tried at most
:data:`MAX_START_ATTEMPTS` times). After a case that leaves communication in doubt (cross-rank,
liveness or error) the group is recycled in place (:class:`~harness.runner.judge.Recycle`), and
respawned when a rank died or hung or when in-place recycling fails.
"""

from __future__ import annotations

from harness.errors import SetupError
from harness.phases import mark
from harness.runner.group import RankGroup
from harness.runner.judge import GroupOutcome, Recycle
from harness.runner.placement import one_host_reason

__harness_hidden__ = True

MAX_START_ATTEMPTS = 3


class GroupBackend:
    leader = True
    reference_by_judge = True      # its ranks record their state; the pipeline's judge compares it

    def __init__(self, cfg, events=None, stack=None):
        from harness.stacks import load_stack

        self.cfg = cfg
        # its declarations only: it runs on the ranks
        self.stack = stack if stack is not None else load_stack(cfg.sut, cfg.sut_options())
        mark("controller: stack loaded")
        self.events = events
        self.world_size = cfg.world_size
        self.group: RankGroup | None = None
        self.groups_started = 0

    def ensure_group(self) -> RankGroup:
        if self.group is not None:
            return self.group
        last = None
        for _ in range(MAX_START_ATTEMPTS):
            try:
                self.group = RankGroup(self.cfg, self.events).start()
                self.groups_started += 1
                return self.group
            except SetupError as exc:
                last = exc
        raise last

    def run_shared(self, index: int, case, meanwhile=None) -> GroupOutcome:
        return self.ensure_group().run_case(index, case, meanwhile)

    def run_isolated(self, index: int, case) -> GroupOutcome:
        return self.ensure_group().run_isolated(index, case)

    def agree(self, key: str, decide) -> str:
        return decide()

    def recycle(self, plan: Recycle) -> None:
        if plan is Recycle.KEEP or self.group is None:
            return
        if plan is Recycle.RESPAWN or not self.group.recycle(new_group=plan is Recycle.GROUP):
            self.restart()

    def skip_reason(self, case) -> str | None:
        return one_host_reason(case, lambda: self.ensure_group().hosts, self.stack)

    def restart(self) -> None:
        """Stop the group; the next case starts a fresh one."""
        if self.group is not None:
            self.group.stop()
            self.group = None

    def close(self) -> None:
        self.restart()
