"""The plugin's hooks: its options, what they add up to, and which of its objects this process
registers (the per-test :class:`Watch` where tests run, the :class:`SessionReport` where the
session is reported, the xdist :class:`Controller` on a controller)."""

from __future__ import annotations

import pytest

from harness.sentinel import distributed, standins, zero_setup
from harness.sentinel.registries import Registries
from harness.sentinel.report import SessionReport, plural
from harness.sentinel.spec import RegistrySpec
from harness.sentinel.watch import Watch

INI_REGISTRIES = "sentinel_registries"
INI_SCAN = "sentinel_scan"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sentinel", "id()-keyed registry sentinel (harness.sentinel)")
    group.addoption("--sentinel-registry", action="append", default=[], metavar="MODULE:ATTR",
                    help="a registry to watch, e.g. pkg.fp8:Manager.fp8_param_to_autocast (repeatable)")
    group.addoption("--sentinel-scan", action="append", default=[], metavar="PKG[,PKG...]",
                    help="scan these installed packages at session start and watch the registries the scan "
                         "names (repeatable; the source is found without importing the package)")
    group.addoption("--sentinel-no-id-hook", action="store_true", default=False,
                    help="do not wrap the builtin id() during tests (only heap walks tie keys to objects)")
    group.addoption("--te1-onnx-standins", action="store_true", default=False,
                    help="install the TE 1.x stack's stand-ins for the torch.onnx modules torch >= 2.11 "
                         "removed, before any conftest imports TE")
    parser.addini(INI_REGISTRIES, type="linelist", default=[], help="registries to watch, one MODULE:ATTR per line")
    parser.addini(INI_SCAN, type="args", default=[], help="installed packages to scan for registries to watch")
    parser.addini(standins.OPTION, type="bool", default=False, help="as --te1-onnx-standins")


_STANDINS = pytest.StashKey[list]()   # header lines of --te1-onnx-standins


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    early_config.stash[_STANDINS] = standins.install(early_config) if standins.wanted(early_config) else []


def _packages(config: pytest.Config) -> list[str]:
    names = [*config.getini(INI_SCAN), *config.getoption("sentinel_scan")]
    return list(dict.fromkeys(n.strip() for text in names for n in text.split(",") if n.strip()))


def _plan(config: pytest.Config):
    """(registry specs, the names the scan chose, header lines), or None when nothing is asked."""
    texts = [*config.getini(INI_REGISTRIES), *config.getoption("sentinel_registry")]
    by_hand = [RegistrySpec.parse(t) for t in dict.fromkeys(t.strip() for t in texts if t.strip())]
    packages = _packages(config)
    if not by_hand and not packages:
        if config.getoption("sentinel_no_id_hook"):
            raise pytest.UsageError("--sentinel-no-id-hook: nothing to watch; give --sentinel-registry or "
                                    "--sentinel-scan (or sentinel_registries / sentinel_scan in the ini file)")
        return None
    scans = [zero_setup.scan(name) for name in packages]   # every package, before anything is watched
    header = [line for scanned in scans for line in scanned.header()]
    specs = list(by_hand)
    scanned = {s for p in scans for s in p.specs} - {spec.name for spec in by_hand}
    specs += [RegistrySpec.parse(name) for name in dict.fromkeys(s for p in scans for s in p.specs)
              if name in scanned]
    names = ", ".join(spec.name for spec in specs) or "nothing"
    header.append(f"sentinel: watching {plural(len(specs), 'registry', 'registries')}: {names}")
    return specs, scanned, header


def pytest_configure(config: pytest.Config) -> None:
    hook_id = not config.getoption("sentinel_no_id_hook")
    standin_header = config.stash.get(_STANDINS, [])
    handed = distributed.worker_watch(config)
    if handed is not None:
        names, scanned, hook_id = handed
        specs, header = [RegistrySpec.parse(name) for name in names], []
    else:
        plan = _plan(config)
        if plan is None:
            if standin_header:
                config.pluginmanager.register(SessionReport(standin_header, []), "harness-sentinel-report")
            return
        specs, scanned, header = plan
    names = [spec.name for spec in specs]
    report = None
    if not distributed.is_worker(config):
        report = SessionReport([*standin_header, *header], names)
        config.pluginmanager.register(report, "harness-sentinel-report")
    if distributed.distributes(config):
        config.pluginmanager.register(distributed.Controller(report, names, scanned, hook_id), "harness-sentinel-xdist")
        return
    if not specs:
        return   # the header says why nothing is watched
    if report is None:
        note = lambda text: distributed.worker_note(config, text)  # noqa: E731
        late = lambda stale: distributed.worker_late(config, [s.describe() for s in stale])  # noqa: E731
    else:
        note = report.add_note
        late = lambda stale: report.add_late([s.describe() for s in stale])  # noqa: E731
    config.pluginmanager.register(Watch(Registries(specs), hook_id, scanned, note, late), "harness-sentinel")
