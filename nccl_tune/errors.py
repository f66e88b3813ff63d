"""The one domain exception. Library code raises it with a one-line message that names the
file, key or value at fault and how to fix it; only ``cli.py`` maps it to an exit code."""

from __future__ import annotations


class NcclTuneError(Exception):
    """A usage or configuration error the user can fix (exit code 1 unless ``exit_code`` says otherwise)."""

    exit_code: int = 1

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class GpuGateError(NcclTuneError):
    """GPU memory or marked processes did not come back to the baseline between trials."""
