"""Launchers: how a controller starts the W processes of a rank group. One file each."""

from harness.runner.launchers.protocol import GroupProcesses, Launcher

__harness_hidden__ = True


def get_launcher(name: str) -> Launcher:
    if name == "spawn":
        from harness.runner.launchers.spawn import SpawnLauncher
        return SpawnLauncher()
    if name == "torchrun":
        from harness.runner.launchers.torchrun import TorchrunLauncher
        return TorchrunLauncher()
    if name == "mpirun":
        from harness.runner.launchers.mpirun import MpirunLauncher
        return MpirunLauncher()
    from harness.errors import UsageError
    raise UsageError(f"unknown launcher {name!r}")


__all__ = ["GroupProcesses", "Launcher", "get_launcher"]
