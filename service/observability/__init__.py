"""What operators watch a Runyard server by: Prometheus metrics, structured logs carrying
each line's request and job, and health and readiness probes."""
