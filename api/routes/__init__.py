"""One router per resource: jobs, workers, switch, policy, metrics, events, bench runs,
tokens."""
