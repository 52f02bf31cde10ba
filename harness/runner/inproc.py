"""Many cases in this process, one after another (world size 1), plus the isolation oracle.

Each case: build, steps, destroy, collect, in this process, after every case before it (that is
the point: TE's tests share a process across cases). Then the same case runs alone in a fresh
child of a pristine zygote, and the two results must agree.
"""

from __future__ import annotations

import os

from harness.case.spec import CaseSpec
from harness.oracles.findings import Failure
from harness.oracles.isolation import compare_runs
from harness.report.model import RunReport, repro_command, skipped, verdict
from harness.runner.case_exec import RankResult, execute_case
from harness.runner.config import RunConfig
from harness.runner.zygote import Zygote
from harness.idreuse.tracker import freeze_imports
from harness.stacks import load_stack
from harness.stacks.capabilities import declined_by


def repro_for(cfg: RunConfig, case: CaseSpec, previous: CaseSpec | None = None, failures=()) -> str:
    """The command that reruns this case: alone, or after the case before it when the failure
    depends on what that case left behind (isolation: the previous model's ids)."""
    extra = []
    if cfg.sut_options.get("inject"):
        extra += ["--inject", cfg.sut_options["inject"]]
    if cfg.case_file:
        extra += ["--case-file", cfg.case_file]
    if cfg.options.deadline_s != 10.0:
        extra += ["--deadline", f"{cfg.options.deadline_s:g}"]
    if cfg.options.strict:
        extra += ["--strict"]
    from harness.comm.link import ENV_LINK_GBPS

    link = os.environ.get(ENV_LINK_GBPS, "").strip()
    if link:
        # the modelled Userbuffers link changes when chunks arrive: part of what reproduces a failure
        extra += ["--ub-link-gbps", link]
    names = case.name
    if previous is not None and any(f.oracle == "isolation" for f in failures):
        names = f"{previous.name},{case.name}"
    return repro_command(sut=cfg.sut, launcher=cfg.launcher, world_size=cfg.world_size,
                         reuse=cfg.options.reuse.text(), seed=cfg.options.run_seed, cases=names, extra=extra)


class InprocSession:
    """Cases one by one in this process (world size 1), each also re-run alone by the zygote."""

    def __init__(self, cfg: RunConfig, freeze: bool = True):
        import torch

        torch.set_num_threads(1)   # bit-reproducible GEMMs, and no OpenMP pool across the zygote's fork
        self.cfg = cfg
        self.stack = load_stack(cfg.sut, cfg.sut_options or None)
        if freeze:
            freeze_imports()
        self.zygote = Zygote().start() if cfg.isolation else None
        self.previous: CaseSpec | None = None

    def run(self, case: CaseSpec):
        cfg = self.cfg
        reason = declined_by(self.stack, case, 1)
        if reason is not None:      # decided once, before the case runs here or in the zygote
            return skipped(case.name, reason, repro_for(cfg, case))
        res = execute_case(case, self.stack, 0, 1, None, cfg.options)
        failures = list(res.failures)
        if self.zygote is not None:
            answer = self.zygote.run({"case": case.to_dict(), "sut": cfg.sut, "sut_options": cfg.sut_options,
                                      "options": cfg.options.to_dict(), "rank": 0, "world_size": 1},
                                     timeout=cfg.options.deadline_s * 4 + 30)
            if "ok" in answer:
                alone = RankResult.from_dict(answer["ok"])
                failures += [Failure("isolation", line, rank=0) for line in compare_runs(res, alone)]
            else:
                failures.append(Failure("isolation", f"the isolated run failed: {answer['error']}", rank=0))
        previous, self.previous = self.previous, case
        return verdict(case.name, failures, reuse_events=res.reuse_events, reuse_misses=res.reuse_misses,
                       repro=repro_for(cfg, case, previous, failures),
                       warnings=res.warnings, steps_compared=res.steps_compared, models_built=res.models_built,
                       digest=res.digest, duration_s=res.duration_s)

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None


def run_inproc(cfg: RunConfig, on_case=None) -> RunReport:
    report = RunReport(cfg.sut, "inproc", 1, cfg.options.run_seed, cfg.options.reuse.text())
    session = InprocSession(cfg)
    try:
        report.run_all(session, cfg.cases, on_case)
    except KeyboardInterrupt:
        report.interrupted = "interrupted (SIGINT)"
    finally:
        session.close()
    return report
