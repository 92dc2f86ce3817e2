"""After a partition is published: its decisions against the trailing window before any label
exists, the realized outcomes once labels arrive, and the monitoring page people read."""
