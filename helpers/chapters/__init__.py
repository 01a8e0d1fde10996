"""The glue each notebook calls, one module per idea, named like the notebooks.

Chapter 2: ch02_combining. Chapter 4: ch04_config. Chapter 5: ch05_launch. Chapter 6:
ch06_frameworks. Chapter 7: ch07_memory. Chapter 8: ch08_troubleshooting, ch08_labs, ch08_figures,
ch08_flagship, ch08_tuning, ch08_one_gpu. Chapter 9: ch09_records, ch09_resnet, ch09_hybrid_layouts,
ch09_nan_study, ch09_moe, ch09_sequence_parallel, ch09_legacy_launch. Chapter 10: ch10_pitfalls,
ch10_shown, ch10_costs, ch10_layout_rules, ch10_data_parallel, ch10_runs. Chapter 11:
ch11_interview, ch11_numeric_dimensions, ch11_numeric_costs, ch11_concepts_dimensions,
ch11_concepts_planning, ch11_concepts_systems.
"""
