"""After a partition is published: its decisions against the trailing window before any label
exists, the realized outcomes once labels arrive, and the history of a range that the monitoring pages
(tasks/reports/) draw. Numbers only: no page is made here."""
