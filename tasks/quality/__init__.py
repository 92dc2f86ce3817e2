"""How far a run's outputs can be trusted: drift against the training reference and the previous
partition, and the fallback report that counts every substitution, exclusion and degraded path."""
