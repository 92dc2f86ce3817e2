"""One partition of one job, scored chunk by chunk: guard → features → inference → prediction.

`prepared` loads and cross-checks the job for a run, `units` cuts the raw partition into work
units of whole row groups, `unit_pass` runs a unit's inference pass and its prediction pass, and
`summary` merges the units into the run's summary and staged reports, `progress` reports how far it
got. The run around that loop (ticket, lease, page, artifacts, failure record) is tasks/runs/. Nothing here
knows Prefect: flows/ wraps these functions in tasks.
"""
