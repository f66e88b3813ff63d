"""The twin's refusals: a configuration SkyRL (Hydra, OmegaConf, ``validate_cfg``) would refuse.

A refusal carries the lines the program prints before it exits with code 1, so the in-process
API, the model launcher and the program all show the same text.
"""

from __future__ import annotations

from nccl_tune.errors import NcclTuneError

HYDRA_FULL_ERROR_HINT = "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."


class SimConfigError(NcclTuneError):
    """The twin refused its configuration.

    ``kind`` says which rule refused it (``unknown_key``, ``append_existing``, ``delete_missing``,
    ``parse``, ``type``, ``validation``, ``unknown_model``, ``interpolation``, ``sim_env``);
    ``lines`` are the lines the program prints (stderr) before exiting with code 1; the exception's
    message is one line naming the key or value at fault.
    """

    def __init__(self, kind: str, summary: str, lines: tuple[str, ...] | list[str]) -> None:
        super().__init__(summary)
        self.kind = kind
        self.lines = tuple(lines)

    @property
    def root_line(self) -> str:
        """The line that names the cause: a Python traceback's last line (today's SkyRL, a validation
        refusal), else the first line (Hydra's own messages)."""
        lines = [ln for ln in self.lines if ln.strip() and ln != HYDRA_FULL_ERROR_HINT]
        if not lines:
            return ""
        if self.kind == "validation" or "Traceback (most recent call last):" in lines:
            return lines[-1]
        return lines[0]
