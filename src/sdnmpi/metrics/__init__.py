"""Prometheus metrics of the daemons (docs/METRICS.md).

:mod:`~sdnmpi.metrics.server` serves a registry over HTTP from one OS thread with
bounded connections, request size and time (a hostile client cannot take the
controller's OpenFlow threads' processor time); :mod:`~sdnmpi.metrics.promql` reads the
metric names out of the shipped Grafana dashboards' queries, so a test can hold them to
what the code exports.  The daemons' metrics themselves are defined next to the code
that counts them: :mod:`sdnmpi.controller.metrics`, :mod:`sdnmpi.manager.metrics`.
"""
