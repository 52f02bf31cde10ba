"""What an exception out of a case becomes: the oracle it stands for, its failure's identity and its
text (which of the stack's methods raised it, the exception, the stack's own last frames)."""

from __future__ import annotations

from harness.errors import DeadlineExceeded, HarnessError
from harness.frames import innermost_site, user_traceback
from harness.oracles.findings import Oracle
from harness.stacks.protocol import StackReturnError

__harness_hidden__ = True


def exception_identity(exc: BaseException) -> dict:
    """The identity of the failure an exception out of the stack's code becomes: what the
    harness's own error says of itself, else its type and where it was raised."""
    if isinstance(exc, HarnessError) and exc.kind:
        return {"kind": f"{type(exc).__name__}: {exc.kind}", "site": exc.site, "collective": exc.collective}
    return {"kind": type(exc).__name__, "site": innermost_site(exc)}


def describe_exception(exc: BaseException, method: str | None, stack) -> str:
    """A case's failure text for ``exc``: which of the stack's methods raised it (``method``, None
    when it came from the harness between two calls), the exception, and the last frames of the
    stack's own code (the harness's frames left out)."""
    text = f"{type(exc).__name__}: {exc}"
    if method is not None and not isinstance(exc, StackReturnError) and classify(exc) == Oracle.ERROR:
        text = f"{type(stack).__name__}.{method}() raised {text}"
    frames = user_traceback(exc)
    return f"{text}\n{frames}" if frames else text


def classify(exc: BaseException) -> str:
    """The oracle an exception out of the stack's code stands for."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, DeadlineExceeded) or "Timed out" in text or "timed out" in text:
        return Oracle.LIVENESS
    if type(exc).__name__ == "CollectiveMismatch":
        return Oracle.CROSS_RANK
    if type(exc).__name__ == "PeerLeftCase":
        return Oracle.ERROR          # the peer's own failure is the finding; this rank only saw it go
    if type(exc).__name__ == "BufferIntegrityError":
        return Oracle.BUFFER_INTEGRITY
    if "Connection closed by peer" in text or "Connection reset" in text:
        return Oracle.LIVENESS       # the peer process is gone (the precheck keeps mismatches out of gloo)
    if "doesn't match" in text:
        return Oracle.CROSS_RANK
    return Oracle.ERROR
