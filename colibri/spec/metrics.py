"""The metrics table (spec/metrics.yaml) as typed objects: the scheduler's series, their
types and help, and the histogram buckets. The server defines its Prometheus metrics from it
and the conformance suite checks /metrics against it (rule ops.metrics.names)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .tables import METRICS_FILE, table

FILE = METRICS_FILE


@dataclass(frozen=True)
class MetricSeries:
    name: str  # without the prefix; a counter's samples add `_total`
    type: str  # gauge | counter | histogram
    help: str


@dataclass(frozen=True)
class MetricsTable:
    prefix: str
    buckets: tuple[float, ...]
    series: tuple[MetricSeries, ...]

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> MetricsTable:
        m = doc["metrics"]
        return cls(m["prefix"], tuple(float(b) for b in m["buckets"]),
                   tuple(MetricSeries(s["name"], s["type"], s["help"]) for s in m["series"]))

    def names(self, kind: str | None = None) -> list[str]:
        """The series' short names, in table order; only those of `kind` when given."""
        return [s.name for s in self.series if kind is None or s.type == kind]

    def families(self) -> dict[str, str]:
        """Full family name -> type, as a Prometheus text parser reports them."""
        return {self.prefix + s.name: s.type for s in self.series}


def read_metrics(root: Path | str | None = None) -> MetricsTable:
    """The table alone, without loading the rest of spec/ (a scheduler built without a Service)."""
    return MetricsTable.from_doc(table(FILE, Path(root) if root else None))
