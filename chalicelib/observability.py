"""Powertools Logger, Metrics and Tracer, shared by the API and the jobs.

The tracer turns itself off outside Lambda; metrics are flushed only on AWS (see `flush_metrics`).
"""
from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

SERVICE = "recon"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace="Reconciliation", service=SERVICE)
tracer = Tracer(service=SERVICE)


def flush_metrics(enabled: bool) -> None:
    """Emit collected metrics as EMF on AWS; locally just drop them (no CloudWatch to read them)."""
    if enabled:
        metrics.flush_metrics(raise_on_empty_metrics=False)
    else:
        metrics.clear_metrics()
