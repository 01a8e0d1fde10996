"""What a notebook needs around its runs: plots, tables (Markdown, HTML, and the table glued for the
chapter page), widgets (calculators),
live (where its runs happen on 0, 1, 2 and 8 GPUs), measured (machine-dependent numbers shown
with "≈"), store_outputs.
"""
