"""Demo data and the demo models: what `score demo` sets up on a fresh machine."""
