"""The run's own wing: what orchestrates a partition run around its scoring, Prefect-free (flows/steps/ wraps it).

Its ticket, lease and start (`ticket`, `lease`), what dead runs left (`recovery`), its failure record (`failure`), its
page, key numbers and result (`page`, `key_numbers`, `result`), the monitoring steps after a publish (`monitoring`),
the days a run scores (`calendar`, `scheduling`)."""
