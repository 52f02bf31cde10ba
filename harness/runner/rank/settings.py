"""What every rank needs to know about the run, sent to it once when it starts.

Built by :meth:`harness.runner.config.RunConfig.rank_settings` (every default lives there);
a controlled rank reads it from its group's run folder, an SPMD rank builds it from its own
command line, and the zygote's children inherit it with the fork. Plain data only.
"""

from __future__ import annotations

import dataclasses
import json
import os

from harness.files import write_atomic
from harness.idreuse.morgue import ReusePolicy

__harness_hidden__ = True

SETTINGS_FILE = "settings.json"


@dataclasses.dataclass(frozen=True)
class RankSettings:
    sut: str
    inject: str | None
    world_size: int
    seed: int
    reuse: ReusePolicy
    strict: bool
    deadline_s: float              # every collective, buffer wait and precheck wait of a case
    reset_between_cases: bool
    check_reference: bool
    precheck: bool                 # compare each collective's shape across ranks before issuing it
    ub_link_gbps: float | None     # the modelled Userbuffers link (None: as fast as the copy)
    reference_by_judge: bool       # ranks record their FP8 state; the judge compares (harness.oracles.recorded)
    isolate_alongside: bool        # start a case's isolated run with its shared one (world size 1: zygote.py)

    def starts_isolated_with_shared(self, case) -> bool:
        """Whether ``case``'s isolated run starts alongside its shared one (and is taken from the
        zygote when the shared run is judged)."""
        return self.isolate_alongside and case.reruns_isolated

    def sut_options(self) -> dict | None:
        return {"inject": self.inject} if self.inject else None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["reuse"] = self.reuse.text()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RankSettings":
        return cls(**dict(d, reuse=ReusePolicy.parse(d["reuse"])))

    def write(self, folder: str) -> str:
        path = os.path.join(folder, SETTINGS_FILE)
        write_atomic(path, json.dumps(self.to_dict()))
        return path

    @classmethod
    def read(cls, folder: str) -> "RankSettings":
        with open(os.path.join(folder, SETTINGS_FILE)) as fh:
            return cls.from_dict(json.load(fh))

    def apply_environment(self) -> None:
        """The Userbuffers emulation reads its link model from the environment of the rank."""
        from harness.comm.link import ENV_LINK_GBPS

        if self.ub_link_gbps is None:
            os.environ.pop(ENV_LINK_GBPS, None)
        else:
            os.environ[ENV_LINK_GBPS] = repr(self.ub_link_gbps)
