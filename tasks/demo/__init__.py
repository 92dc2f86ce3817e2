"""Demo data and the demo model: what `score demo` sets up on a fresh machine."""
