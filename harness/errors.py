"""One root exception; every error crosses process boundaries, so each pickles."""

from __future__ import annotations

import argparse


class HarnessError(Exception):
    """Root of every error the harness raises on purpose.

    An error that a case's failure is made of may name that failure's identity
    (:class:`harness.oracles.findings.Failure`): what went wrong (``kind``, words that stay the
    same from case to case), the call site (``path.py function``) and the collective."""

    kind: str = ""
    site: str | None = None
    collective: str | None = None

    def identify(self, kind: str, site: str | None = None, collective: str | None = None) -> "HarnessError":
        self.kind, self.site, self.collective = kind, site, collective
        return self


class UsageError(HarnessError):
    """Bad input from the user: the CLI prints one line on stderr and exits 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse for every command line of the harness: a usage error raises :class:`UsageError`
    (``PROG: message``) instead of printing the usage and exiting, so the entry point prints it
    as one line on stderr and exits 2."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


class SetupError(HarnessError):
    """The environment cannot run what was asked (no TE, no CUDA, no mpirun): exit 2."""


class DeadlineExceeded(HarnessError):
    """A collective or buffer wait did not finish before its deadline."""

    def __init__(self, what: str, seconds: float, where: str = ""):
        super().__init__(f"{what} did not complete within {seconds:g} s{(' at ' + where) if where else ''}")
        self.what = what
        self.seconds = seconds
        self.where = where
        self.identify("did not complete within the deadline", site_of(where))

    def __reduce__(self):
        return (DeadlineExceeded, (self.what, self.seconds, self.where))


def exit_code(main, needs: tuple = ()) -> int:
    """The one exit-status rule of every entry point: ``main()``'s code; for a
    :class:`HarnessError` (bad input, an environment that cannot run it), or a package this python
    lacks (``needs``, checked first, or one that ``main`` fails to import), its message as one line
    on stderr and code 2; 130 on Ctrl-C."""
    import importlib.util
    import sys

    try:
        for package in needs:
            if importlib.util.find_spec(package) is None:
                raise SetupError(_no_package(package))
        return main()
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.split(".")[0] == "harness":
            raise                      # the harness's own module: a bug, with its traceback
        print(f"error: {_no_package(exc.name.split('.')[0])}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _no_package(package: str) -> str:
    import sys

    return (f"this python ({sys.executable}) has no {package}: run from the project's .venv "
            f"(./scripts/setup && . .venv/bin/activate) or install the project into it (pip install -e .)")


def exit_from(main) -> None:
    """A ``python -m`` entry point's last line: exits with :func:`exit_code` of ``main``."""
    import sys

    sys.exit(exit_code(main))


def site_of(frame: str | None) -> str | None:
    """A call site as the ledger and tracebacks write it (``path.py:43 fn``) without its line
    number (``path.py fn``): lines move with every edit, the function does not."""
    if not frame:
        return None
    path, _, rest = frame.partition(":")
    return f"{path} {rest.partition(' ')[2]}".strip()
