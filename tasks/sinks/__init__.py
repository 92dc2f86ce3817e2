"""Where a run's outputs go besides the Parquet store and the warehouse."""
