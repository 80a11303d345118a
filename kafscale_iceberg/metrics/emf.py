"""CloudWatch EMF: the Lambdas' sink, through each handler's Powertools `Metrics` object."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from kafscale_iceberg.metrics.definitions import Sample


class PowertoolsMetrics(Protocol):
    """What `EmfMetricsSink` uses of an `aws_lambda_powertools.Metrics` object."""

    metric_set: dict[str, Any]

    def add_metric(self, name: str, unit: str, value: float) -> None: ...

    def add_dimension(self, name: str, value: str) -> None: ...

    def add_metadata(self, key: str, value: Any) -> None: ...

    def flush_metrics(self, raise_on_empty_metrics: bool = False) -> None: ...


class EmfMetricsSink:
    """Samples as CloudWatch EMF through a handler's Powertools `Metrics` object (namespace, `service`
    dimension, `POWERTOOLS_METRICS_DISABLED` and stdout printing are Powertools').

    EMF puts one dimension set on every metric of a log record, so samples are grouped by their
    dimension values (and EMF properties): one record per group. Only a definition's
    `emf_dimensions` are dimensions (`topic` only on the per-topic metrics, and labels with a fixed
    set of values); the other labels (`partition`, an aggregated metric's `topic`, `reason`, ...) are
    properties of the record - each value would otherwise be a billed custom metric - and stay
    queryable with Logs Insights.

    Each `emit` prints its groups at once except the last, which stays in the `Metrics` object for
    `@metrics.log_metrics` to print at the end of the invocation (or the next `emit`, or `flush()`).
    Don't add metrics to the `Metrics` object directly after an `emit`: they would share that
    group's dimensions.
    """

    def __init__(self, metrics: PowertoolsMetrics) -> None:
        self._metrics = metrics

    def emit(self, samples: Sequence[Sample]) -> None:
        """Group the samples by dimensions and properties; one EMF record per group."""
        groups = _emf_groups(samples)
        if not groups:
            return
        self.flush()  # whatever is pending keeps its own dimensions
        for index, ((dimensions, properties), items) in enumerate(groups.items()):
            if index:
                self._metrics.flush_metrics()
            for name, value in dimensions:
                self._metrics.add_dimension(name=name, value=value)
            for name, value in properties:
                self._metrics.add_metadata(key=name, value=int(value) if value.isdigit() else value)
            for item in items:
                self._metrics.add_metric(name=item.metric.name, unit=item.metric.unit, value=item.value)

    def flush(self) -> None:
        """Print what is pending (for callers outside a `@metrics.log_metrics` handler)."""
        if self._metrics.metric_set:
            self._metrics.flush_metrics()


_GroupKey = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]


def _emf_groups(samples: Sequence[Sample]) -> dict[_GroupKey, list[Sample]]:
    groups: dict[_GroupKey, list[Sample]] = {}
    for item in samples:
        dimensions = tuple((name, item.labels[name]) for name in item.metric.emf_dimensions)
        properties = tuple((name, item.labels[name]) for name in item.metric.emf_properties)
        groups.setdefault((dimensions, properties), []).append(item)
    return groups
