"""A registry the sentinel watches: ``MODULE:ATTR.PATH``, looked up afresh at every check."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import pytest


@dataclasses.dataclass(frozen=True)
class RegistrySpec:
    """``MODULE:ATTR.PATH``, resolved afresh at every check (a ``reset()`` that rebinds it is followed)."""

    module: str
    path: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.module}:{'.'.join(self.path)}"

    @classmethod
    def parse(cls, text: str) -> "RegistrySpec":
        module, colon, attribute = text.partition(":")
        path = tuple(attribute.split(".")) if attribute else ()
        if not colon or not module or not path or not all(part.isidentifier() for part in path):
            raise pytest.UsageError(
                f"sentinel registry {text!r} is not MODULE:ATTR; write e.g. "
                f"'pkg.fp8:Manager.fp8_param_to_autocast' (a module global or a class attribute)"
            )
        return cls(module, path)

    def resolve(self) -> Any:
        """The registry object; LookupError says what is missing and what to check."""
        try:
            target = importlib.import_module(self.module)
        except Exception as error:
            raise LookupError(
                f"cannot import {self.module!r} for sentinel registry {self.name}: "
                f"{type(error).__name__}: {error}; check the module name and sys.path"
            ) from error
        for depth, part in enumerate(self.path):
            try:
                target = getattr(target, part)
            except AttributeError:
                owner = ".".join((self.module, *self.path[:depth]))
                raise LookupError(
                    f"{owner} has no attribute {part!r} (sentinel registry {self.name}); check the spelling"
                ) from None
        return target
