"""The dated chronicle: views of the records, Markdown and PDF rendering, plots, notes, review and reports."""
