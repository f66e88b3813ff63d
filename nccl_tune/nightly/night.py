"""One night of a series, as stored with its study: when it ran, on what (its fingerprint), the
best stable config it found, the baseline it was compared with, and the verdict."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nccl_tune.nightly.fingerprint import Fingerprint
from nccl_tune.nightly.regression import RegressionVerdict


@dataclass(frozen=True)
class Baseline:
    """The config a night is compared with: the previous best of its series, or a tuned YAML."""

    source: str
    """``series`` (the latest earlier night of the series on the same hardware) or ``file``."""
    origin: str
    """The study name (series) or the file's path (file)."""
    values: Mapping[str, Any]
    """The baseline config's parameter values."""
    runs_per_s: tuple[float, ...]
    """Throughput of each of its stable runs when it was measured."""
    space: str
    unit: str = "samples/s"

    @property
    def throughput_per_s(self) -> float | None:
        return statistics.median(self.runs_per_s) if self.runs_per_s else None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "origin": self.origin,
            "values": dict(self.values),
            "runs_per_s": list(self.runs_per_s),
            "space": self.space,
            "unit": self.unit,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Baseline:
        return cls(
            data["source"],
            data["origin"],
            dict(data.get("values") or {}),
            tuple(data.get("runs_per_s") or ()),
            data.get("space", ""),
            data.get("unit") or "samples/s",
        )


@dataclass(frozen=True)
class Night:
    study: str
    series: str
    started_at: str
    """ISO time (UTC) the run started."""
    fingerprint: Fingerprint | None
    best_runs_per_s: tuple[float, ...] = ()
    """Throughput of each stable run of the night's best config (empty: nothing stable)."""
    best_values: Mapping[str, Any] = field(default_factory=dict)
    best_trial: int | None = None
    baseline: Baseline | None = None
    verdict: RegressionVerdict | None = None
    """None when the night was not compared (first night, or no --fail-on-regression/--warm-start)."""
    finished: bool = False
    """False while the night runs, or when it was interrupted."""
    unit: str = "samples/s"
    """The unit of its throughput (``samples/s``, ``tokens/s``, ``steps/s``)."""

    @property
    def best_per_s(self) -> float | None:
        return statistics.median(self.best_runs_per_s) if self.best_runs_per_s else None

    def to_json(self) -> dict[str, Any]:
        return {
            "study": self.study,
            "series": self.series,
            "started_at": self.started_at,
            "fingerprint": self.fingerprint.to_json() if self.fingerprint else None,
            "best_per_s": self.best_per_s,
            "best_runs_per_s": list(self.best_runs_per_s),
            "best_values": dict(self.best_values),
            "best_trial": self.best_trial,
            "baseline": self.baseline.to_json() if self.baseline else None,
            "verdict": self.verdict.to_json() if self.verdict else None,
            "finished": self.finished,
            "unit": self.unit,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Night:
        return cls(
            study=data["study"],
            series=data["series"],
            started_at=data["started_at"],
            fingerprint=Fingerprint.from_json(data["fingerprint"]) if data.get("fingerprint") else None,
            best_runs_per_s=tuple(data.get("best_runs_per_s") or ()),
            best_values=dict(data.get("best_values") or {}),
            best_trial=data.get("best_trial"),
            baseline=Baseline.from_json(data["baseline"]) if data.get("baseline") else None,
            verdict=RegressionVerdict.from_json(data["verdict"]) if data.get("verdict") else None,
            finished=bool(data.get("finished")),
            unit=data.get("unit") or "samples/s",
        )
