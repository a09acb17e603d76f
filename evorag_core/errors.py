"""The project's error hierarchy: one module, small and explicit."""
from __future__ import annotations

__all__ = [
    "EvoRagError",
    "ConfigError",
    "DatasetFormatError",
    "EnvStateError",
    "ActionParseError",
    "RetrievalError",
    "ModelLoadError",
    "StoreError",
    "PermissionDenied",
    "AdapterError",
    "TrainingError",
    "DataAccessError",
    "GenerationInterrupted",
]


class EvoRagError(Exception):
    """Base class of every error the project raises on purpose."""


class ConfigError(EvoRagError):
    """A configuration file or override is malformed (unknown key, wrong type)."""


class DatasetFormatError(EvoRagError):
    """A data file cannot be read; the message names the file, the record and the field."""

    def __init__(self, path: str, record: str | int | None, field: str | None, problem: str):
        self.path, self.record, self.field, self.problem = str(path), record, field, problem
        where = f"{path}"
        if record is not None:
            where += f", record {record}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {problem}")


class EnvStateError(EvoRagError):
    """The environment was used out of order (step before reset, step after the end)."""


class ActionParseError(EvoRagError):
    """An action could not be built from its textual or JSON form."""


class RetrievalError(EvoRagError):
    """A retriever or index could not be built or loaded."""


class ModelLoadError(EvoRagError):
    """A language model or embedder could not be located or loaded."""


class StoreError(EvoRagError):
    """The database is unusable (e.g. its schema is newer than this code)."""


class AdapterError(EvoRagError):
    """A LoRA adapter is missing, corrupt or incompatible with the base model."""


class TrainingError(EvoRagError):
    """A training round cannot run: nothing to train on, or its inputs do not fit together."""


class DataAccessError(EvoRagError):
    """A data path outside the folders the studio may read (the message names none of the file's content)."""


class GenerationInterrupted(EvoRagError):
    """A generation was stopped on request before its end (the studio's Stop); nothing it wrote is returned."""


class PermissionDenied(EvoRagError):
    """The logged-in user's role may not do what was asked (the studio's server-side role check)."""
