"""What people read about runs and models: the per-run HTML page (and the page style the
monitoring page shares), the model card, and the summaries of what was scored."""
