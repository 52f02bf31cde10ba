"""The link between peers: how long a transfer into a peer's buffer is in flight.

On a GPU, a Userbuffers transfer is done by the copy engines (or a few SMs) over NVLink while
the GEMM's SMs keep computing: the transfer takes time but not the GEMM's compute. On a CPU,
the emulation's transfer is a ``memcpy`` into the peer's shared-memory segment, which takes
CPU time. Where every core already runs a GEMM (two ranks on two cores), that copy can only
take its time from a GEMM, and no ordering of the work hides it.

:class:`LinkModel` restores the GPU's division of labour where asked to: the producer copies
the bytes, then holds the counter it bumps until the modelled transfer time has passed since
the copy started::

    transfer_s(n) = latency_s + n / bytes_per_s

so a consumer sees a chunk no earlier than a link of that bandwidth would have delivered it.
While the transfer is "in flight" the communication thread waits (off the GIL, no CPU), as a
copy engine would leave the SMs alone. The synchronisation itself stays on the counters;
the hold only delays when a counter is bumped, never replaces one.

``LinkModel()`` (no bandwidth) is the unmodelled link: a transfer takes exactly as long as its
copy. That is the default everywhere; ``HARNESS_UB_LINK_GBPS`` (read by the emulated stacks'
communicators) and ``python -m harness run --ub-link-gbps`` set a bandwidth, which slows every
chunk's arrival relative to the GEMMs and so changes which interleavings of producer and
consumer a run explores, as a slower interconnect would; a failure's repro command then carries
``--ub-link-gbps`` too.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time

from harness.errors import UsageError

ENV_LINK_GBPS = "HARNESS_UB_LINK_GBPS"


def positive_gbps(gbps: float, given_as: str) -> float:
    """``gbps`` if it is a finite number above 0, else a UsageError naming ``given_as``.

    For settings where 0 is a mistake (an option or variable that asks for a modelled link),
    not the unmodelled link it means to :meth:`LinkModel.from_gbps`.
    """
    if not (math.isfinite(gbps) and gbps > 0):
        raise UsageError(f"{given_as}: expected a positive number of GB/s, e.g. 0.5")
    return gbps


@dataclasses.dataclass(frozen=True)
class LinkModel:
    """A point-to-point link of ``bytes_per_s`` (``None``: as fast as the copy) and ``latency_s``."""

    bytes_per_s: float | None = None
    latency_s: float = 0.0

    def __post_init__(self):
        if self.bytes_per_s is not None and not (math.isfinite(self.bytes_per_s) and self.bytes_per_s > 0):
            raise UsageError(f"link bandwidth must be a positive number of bytes per second, got {self.bytes_per_s!r}")
        if not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise UsageError(f"link latency must be >= 0 seconds, got {self.latency_s!r}")

    @classmethod
    def from_gbps(cls, gbps: float | None, latency_s: float = 0.0) -> "LinkModel":
        """``gbps`` in gigabytes (10**9 bytes) per second; ``None`` or 0 for the unmodelled link."""
        if not gbps:
            return cls(None, latency_s)
        if not (math.isfinite(gbps) and gbps > 0):
            raise UsageError(f"link bandwidth must be a positive number of GB/s, got {gbps!r}")
        return cls(float(gbps) * 1e9, latency_s)

    @classmethod
    def from_env(cls) -> "LinkModel":
        """The link ``HARNESS_UB_LINK_GBPS`` asks for (unset or empty: unmodelled)."""
        text = os.environ.get(ENV_LINK_GBPS, "").strip()
        if not text:
            return cls()
        try:
            gbps = float(text)
        except ValueError:
            raise UsageError(f"{ENV_LINK_GBPS}={text!r}: expected a number of GB/s, e.g. 0.5") from None
        return cls.from_gbps(positive_gbps(gbps, f"{ENV_LINK_GBPS}={text!r}"))

    @property
    def modelled(self) -> bool:
        return self.bytes_per_s is not None or self.latency_s > 0

    def transfer_s(self, nbytes: int) -> float:
        """``latency_s + nbytes / bytes_per_s``; 0 for the unmodelled link (the copy's own time)."""
        if not self.modelled:
            return 0.0
        return self.latency_s + (nbytes / self.bytes_per_s if self.bytes_per_s is not None else 0.0)

    def hold(self, started: float, nbytes: int, cancel: threading.Event | None = None) -> None:
        """Return once ``transfer_s(nbytes)`` has passed since ``started`` (``time.perf_counter``).

        A set ``cancel`` (the operation failed on another thread) ends the hold at once: the
        caller's next wait notices the cancellation.
        """
        if not self.modelled:
            return
        remaining = started + self.transfer_s(nbytes) - time.perf_counter()
        if remaining <= 0:
            return
        if cancel is not None:
            cancel.wait(remaining)
        else:
            time.sleep(remaining)

    def describe(self) -> str:
        if not self.modelled:
            return "unmodelled link (a transfer takes as long as its copy)"
        bw = f"{self.bytes_per_s / 1e9:g} GB/s" if self.bytes_per_s is not None else "unlimited bandwidth"
        return f"modelled link: {bw}, latency {self.latency_s * 1e3:g} ms"

    def to_json(self) -> dict:
        return {"bytes_per_s": self.bytes_per_s, "latency_s": self.latency_s}
