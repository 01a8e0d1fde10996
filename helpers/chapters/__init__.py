"""The glue each notebook calls, named like the notebooks: ch02_combining, ch05_launch,
ch08_troubleshooting, ch08_figures, ch08_flagship, ch09_quick_demos, ch10_pitfalls, ch10_runs,
ch11_interview, ch11_concepts, ch11_numeric.
"""
