"""The scheduler's Prometheus metrics, defined from the spec's table (spec/metrics.yaml): the
names, types, help texts and buckets are stated there once; this module only makes them. A
registry is injected so tests read their own values."""
from __future__ import annotations

from typing import Any

from ..spec.metrics import MetricsTable, read_metrics


class Metrics:
    """The colibri_scheduler_* series by short name: `metrics["admitted"].inc()`."""

    def __init__(self, registry: Any = None, table: MetricsTable | None = None):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

        disable_created_metrics()  # the spec names exactly the series it wants; no *_created

        self.table = table or read_metrics()
        self.registry = registry or CollectorRegistry()
        kinds = {"gauge": Gauge, "counter": Counter, "histogram": Histogram}
        self.series: dict[str, Any] = {}
        for s in self.table.series:
            extra = {"buckets": self.table.buckets} if s.type == "histogram" else {}
            self.series[s.name] = kinds[s.type](self.table.prefix + s.name, s.help, registry=self.registry, **extra)

    def __getitem__(self, name: str) -> Any:
        return self.series[name]

    def counts(self) -> dict[str, int]:
        """Every counter's value by short name, in table order (the /health snapshot)."""
        return {name: int(self.registry.get_sample_value(f"{self.table.prefix}{name}_total") or 0)
                for name in self.table.names("counter")}
