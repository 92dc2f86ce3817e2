"""The `score` command line: a thin entry point over the flows, for people at a terminal."""
