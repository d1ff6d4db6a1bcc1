"""Compute added up: the one place that sums what the engine counted.

The engine counts what each round cost each client as it runs (`pflpipe.engine.accounting`,
the names in `pflpipe.engine.records`); everything that adds those counts up lives here:
`totals` (per client, per model, per MLflow run, against samples) and `in_all` (the warm start
a model started from, the schedule the spec set, unequal compute between models). The stages
write, the tracking logs and the report shows what these return.
"""
