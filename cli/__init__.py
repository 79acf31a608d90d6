"""``inasched``: the project's command line (service, switch, PS, workers, jobs, benchmarks)."""
