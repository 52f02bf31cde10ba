"""Native (C/C++) stacks of a hung rank, where a tool that can take them is installed.

A rank stuck in NCCL, in a CUDA synchronisation or in gloo shows one Python frame for the
whole native call; the native stack says which library is waiting, and on what. Tools, in the
order tried (the first one on ``PATH`` is used):

* ``py-spy dump --native --pid PID``: Python and native frames interleaved;
* ``eu-stack -p PID`` (elfutils): native frames of every thread.

``gdb -p PID -batch -ex "thread apply all bt"`` is used only when asked for with
``HARNESS_NATIVE_STACKS=gdb``: it reads the symbols of every library the rank loaded, 10.1 s
for one process that had imported torch on the 2-core development machine (measured), too
slow for every hang report. ``HARNESS_NATIVE_STACKS=off`` takes none; ``py-spy`` or
``eu-stack`` picks that tool. ``cuda-gdb`` is never used: attaching it starts CUDA's debugger
on a live GPU context. Each tool runs bounded (terminate, then kill); attaching needs ptrace
permission over the rank (root, or ``kernel.yama.ptrace_scope`` 0), and a tool that is
refused says so in its output, which is reported as it is.

Called by the controller, for every live rank at once, when a case hangs.
"""

from __future__ import annotations

import os
import shutil
import subprocess

TOOLS = (
    ("py-spy", lambda pid: ["py-spy", "dump", "--native", "--pid", str(pid)]),
    ("eu-stack", lambda pid: ["eu-stack", "-p", str(pid)]),
    ("gdb", lambda pid: ["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"]),
)
AUTO = ("py-spy", "eu-stack")
ENV = "HARNESS_NATIVE_STACKS"
MAX_CHARS = 6000


def chosen_tools(env=None) -> tuple[str, ...]:
    """The tools ``HARNESS_NATIVE_STACKS`` allows, in order (unset: :data:`AUTO`)."""
    value = (os.environ if env is None else env).get(ENV, "").strip()
    if not value:
        return AUTO
    if value == "off":
        return ()
    return (value,) if value in dict(TOOLS) else ()


def available_tool(path: str | None = None, env=None) -> str | None:
    """The first allowed tool found on ``path`` (default: ``PATH``), or None."""
    for name in chosen_tools(env):
        if shutil.which(name, path=path):
            return name
    return None


def _none_reason(env=None) -> str:
    value = (os.environ if env is None else env).get(ENV, "").strip()
    if value == "off":
        return f"native stacks: none ({ENV}=off)"
    if value and value not in dict(TOOLS):
        return f"native stacks: none ({ENV}={value!r} is not one of {', '.join(dict(TOOLS))}, off)"
    return f"native stacks: none (no {' or '.join(chosen_tools(env))} on PATH)"


def _command(tool: str, pid: int) -> list[str]:
    return dict(TOOLS)[tool](pid)


def take(pids: dict[int, int], timeout_s: float = 15.0, path: str | None = None, env=None) -> dict[int, str]:
    """rank -> native stack text (or why there is none), for every rank of ``pids`` at once."""
    tool = available_tool(path, env)
    if tool is None:
        return {rank: _none_reason(env) for rank in pids}
    exe = shutil.which(tool, path=path)
    procs = {}
    for rank, pid in pids.items():
        argv = _command(tool, pid)
        argv[0] = exe
        try:
            procs[rank] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, text=True, errors="replace")
        except OSError as exc:
            procs[rank] = exc
    out = {}
    for rank, proc in procs.items():
        if isinstance(proc, OSError):
            out[rank] = f"native stacks ({tool}): could not start: {proc}"
            continue
        try:
            text, _ = proc.communicate(timeout=timeout_s)
            head = f"native stacks ({tool}, exit {proc.returncode}):"
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                text, _ = proc.communicate(timeout=2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                text, _ = proc.communicate()
            head = f"native stacks ({tool}): no answer within {timeout_s:g} s, stopped; what it wrote:"
        text = (text or "").strip()
        if len(text) > MAX_CHARS:
            text = text[:MAX_CHARS] + f"\n... ({len(text) - MAX_CHARS} more characters)"
        out[rank] = f"{head}\n{text}" if text else f"{head} (nothing)"
    return out
