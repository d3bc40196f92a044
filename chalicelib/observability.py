"""Powertools Logger and Metrics, shared by the API and the jobs.

Metrics are flushed only on AWS (see `flush_metrics`). Tracing is Lambda's active tracing
(`xray` in the stage's configuration), so no X-Ray SDK sits in the import path of a cold start.
"""
from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics

SERVICE = "recon"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace="Reconciliation", service=SERVICE)


def flush_metrics(enabled: bool) -> None:
    """Emit collected metrics as EMF on AWS; locally just drop them (no CloudWatch to read them)."""
    if enabled:
        metrics.flush_metrics(raise_on_empty_metrics=False)
    else:
        metrics.clear_metrics()
