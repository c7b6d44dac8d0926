"""Every error soloist raises derives from one root, ``SoloistError``, and keeps its standard base."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import actors
import cluster
import coordinators
from actors import OrchestratorNotFound, VersionConflict, WriteRefused
from cluster.storage import StoreError, WriterFenced
from coordinators import SoloistError


def _error_classes() -> list[type[BaseException]]:
    """Every public exception class defined in the three packages (imported module by module)."""
    found: dict[str, type[BaseException]] = {}
    for package in (coordinators, actors, cluster):
        for module_info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
            if module_info.name.endswith("__main__"):
                continue
            module = importlib.import_module(module_info.name)
            for name, value in vars(module).items():
                if (inspect.isclass(value) and issubclass(value, BaseException) and not name.startswith("_")
                        and value.__module__ == module.__name__):
                    found[f"{value.__module__}.{value.__qualname__}"] = value
    return list(found.values())


def test_every_soloist_error_derives_from_soloist_error() -> None:
    classes = _error_classes()
    assert len(classes) > 40  # the walk found them
    outside = sorted(f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, SoloistError))
    assert outside == [], "derive these from SoloistError (keeping their standard base)"


def test_soloist_errors_keep_the_standard_base_that_says_what_failed() -> None:
    assert issubclass(OrchestratorNotFound, LookupError) and issubclass(WriteRefused, PermissionError)
    assert issubclass(VersionConflict, RuntimeError) and issubclass(coordinators.TransitionError, ValueError)
    assert issubclass(WriterFenced, StoreError) and issubclass(WriterFenced, SoloistError)
    assert actors.SoloistError is cluster.SoloistError is SoloistError
