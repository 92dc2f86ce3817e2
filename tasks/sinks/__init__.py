"""Where a run's outputs go and how they get there whole: the Parquet store (staged, then published
as one version), the warehouse, the optional sinks a job declares (Delta Lake), the partition lease
that lets one run publish at a time, and the recovery of runs that died on the way."""
