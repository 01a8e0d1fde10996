"""Concept figures drawn by the project's code: one module per figure family, called from a
chapter's notebook and glued for its page (``glue(key, fig, display=False)``)."""
