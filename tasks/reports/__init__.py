"""What people read about runs and models: every page and artifact of the house. The per-run HTML pages, the
monitoring pages, the model card, the pieces they share (html_parts), the Prefect artifacts' contents (artifacts)
and the summaries of what was scored. The numbers come from the layers below (tasks/monitoring/ keeps the numbers,
the pages here draw them)."""
