"""Exceptions of sluice. Every message names the operator, the argument, or the sample and its file."""

from __future__ import annotations

__all__ = ["SluiceError", "ArgumentError", "MissingDependencyError", "PipelineError", "PipelineBrokenError",
           "SampleError", "EndOfEpoch"]


class SluiceError(Exception):
    """Base class of sluice's own errors."""


class ArgumentError(SluiceError, ValueError, TypeError):
    """A wrong argument to an operator or a pipeline: unknown, of the wrong type, or out of range."""


class MissingDependencyError(SluiceError, ImportError):
    """An optional package that an operator or a command needs is not installed. The message names the operator
    (or command), the package and the extra that brings it: ``pip install 'sluice[image]'``."""


class PipelineError(SluiceError, RuntimeError):
    """An operator failed while the pipeline ran. The message names the operator, the sample and its file."""

    def __init__(self, message: str, op_name: str = "", sample: int | None = None, source: str = ""):
        super().__init__(message)
        self.op_name = op_name
        self.sample = sample
        self.source = source


class PipelineBrokenError(PipelineError):
    """The pipeline failed earlier and cannot run again; build a new one."""


class SampleError(Exception):
    """Raised inside kernels' wrappers: the sample index and file of the failing sample, around the cause."""

    def __init__(self, index: int, source: str, cause: BaseException):
        super().__init__(str(cause))
        self.index = index
        self.source = source
        self.cause = cause


class EndOfEpoch(Exception):
    """Raised by sources (external_source) when their data ends: the iteration becomes StopIteration."""
