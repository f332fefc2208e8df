"""Exception types of the Python binding.

A failed library call raises one of the `Error` subclasses below; each carries the library's
own message (which names the parameter, the expected and the actual value), the numeric
`dsa_status` as `.status` and its name as `.status_name`. They also derive from the built-in
exception that cuDNN-frontend's `indexer_forward_wrapper` raises for the same kind of problem,
so code written against that wrapper keeps catching them:

=============================  ========================================  ==============
C status                       Python class                              built-in bases
=============================  ========================================  ==============
DSA_STATUS_INVALID_ARGUMENT    InvalidArgument                           ValueError
DSA_STATUS_UNSUPPORTED_CONFIG  UnsupportedConfig                         NotImplementedError, ValueError
DSA_STATUS_COMPILE_ERROR       CompileError                              RuntimeError
DSA_STATUS_DRIVER_ERROR        DriverError                               RuntimeError
DSA_STATUS_CACHE_ERROR         CacheError                                RuntimeError
DSA_STATUS_INTERNAL_ERROR      InternalError                             RuntimeError
=============================  ========================================  ==============

`UnsupportedConfig` (a well-formed call this build does not implement, e.g. H = 48 or
D = 64) is both a NotImplementedError and a ValueError: cuDNN-frontend reports such
configurations with NotImplementedError on some paths and ValueError on others, and either
`except` clause should keep working. Note that NotImplementedError is itself a RuntimeError.

Problems with finding or loading the shared library raise `LibraryError` (an OSError, the
type ctypes itself raises), never one of the call errors.
"""

from __future__ import annotations

__all__ = [
    "Error",
    "InvalidArgument",
    "UnsupportedConfig",
    "CompileError",
    "DriverError",
    "CacheError",
    "InternalError",
    "LibraryError",
    "LibraryNotFoundError",
    "LibraryDependencyError",
    "LibraryABIError",
    "STATUS_OK",
    "STATUS_NAMES",
    "error_for_status",
]

STATUS_OK = 0
STATUS_INVALID_ARGUMENT = 1
STATUS_UNSUPPORTED_CONFIG = 2
STATUS_COMPILE_ERROR = 3
STATUS_DRIVER_ERROR = 4
STATUS_CACHE_ERROR = 5
STATUS_INTERNAL_ERROR = 6

STATUS_NAMES = {
    STATUS_OK: "DSA_STATUS_OK",
    STATUS_INVALID_ARGUMENT: "DSA_STATUS_INVALID_ARGUMENT",
    STATUS_UNSUPPORTED_CONFIG: "DSA_STATUS_UNSUPPORTED_CONFIG",
    STATUS_COMPILE_ERROR: "DSA_STATUS_COMPILE_ERROR",
    STATUS_DRIVER_ERROR: "DSA_STATUS_DRIVER_ERROR",
    STATUS_CACHE_ERROR: "DSA_STATUS_CACHE_ERROR",
    STATUS_INTERNAL_ERROR: "DSA_STATUS_INTERNAL_ERROR",
}


class Error(Exception):
    """Base of every error a library call reports; `str(e)` is the library's message."""

    status: int = -1

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    @property
    def status_name(self) -> str:
        return STATUS_NAMES.get(self.status, f"DSA_STATUS_UNKNOWN({self.status})")


class InvalidArgument(Error, ValueError):
    """Malformed input: wrong rank, shape, dtype, stride, alignment, device or scalar value."""

    status = STATUS_INVALID_ARGUMENT


class UnsupportedConfig(Error, NotImplementedError, ValueError):
    """A well-formed call outside what this build implements (e.g. H not in {16, 32, 64})."""

    status = STATUS_UNSUPPORTED_CONFIG


class CompileError(Error, RuntimeError):
    """NVRTC failed on a variant the dispatcher accepted; the message holds the log."""

    status = STATUS_COMPILE_ERROR


class DriverError(Error, RuntimeError):
    """The CUDA driver failed (no driver, no device, a launch or memory error)."""

    status = STATUS_DRIVER_ERROR


class CacheError(Error, RuntimeError):
    """The kernel cache could not produce a module."""

    status = STATUS_CACHE_ERROR


class InternalError(Error, RuntimeError):
    """An unexpected failure inside the library (a bug: please report the message)."""

    status = STATUS_INTERNAL_ERROR


_BY_STATUS = {
    cls.status: cls
    for cls in (InvalidArgument, UnsupportedConfig, CompileError, DriverError, CacheError, InternalError)
}


def error_for_status(status: int, message: str) -> Error:
    """The exception object for a non-OK status; unknown codes become InternalError."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        return InternalError(f"unknown dsa_status {status}: {message}", status)
    return cls(message)


class LibraryError(OSError):
    """libdsa_indexer.so could not be found, loaded or does not match this binding."""


class LibraryNotFoundError(LibraryError):
    """No candidate path held a loadable libdsa_indexer.so; `.tried` lists (path, reason)."""

    def __init__(self, message: str, tried: list[tuple[str, str]]):
        super().__init__(message)
        self.tried = tried


class LibraryDependencyError(LibraryNotFoundError):
    """libdsa_indexer.so was found but a library it needs (NVRTC, usually) could not be loaded;
    `.dependency` names it (e.g. "libnvrtc.so.13"), `.tried` as in LibraryNotFoundError."""

    def __init__(self, message: str, tried: list[tuple[str, str]], dependency: str):
        super().__init__(message, tried)
        self.dependency = dependency


class LibraryABIError(LibraryError):
    """The loaded library's structs differ from the ctypes mirrors in this package."""
