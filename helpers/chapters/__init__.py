"""The glue each notebook calls, one module per idea, named like the notebooks.

Chapter 1: ch01_hybrid, ch01_mask_trap, ch01_pp_schedules (its figures:
helpers.figures.ch01_dimensions, ch01_pp_schedules). Chapter 2: ch02_builder, ch02_combining,
ch02_torch_mesh, ch02_trace (its figures: helpers.figures.ch02_mesh, ch02_trace). Chapter 3:
ch03_strategy, ch03_numbers, ch03_earlier (its figures: helpers.figures.ch03_comm). Chapter 4:
ch04_config. Chapter 5: ch05_launch, ch05_dcp, ch05_multinode (its figures:
helpers.figures.ch05_resume). Chapter 6: ch06_frameworks, ch06_deepspeed, ch06_h2h,
ch06_choice. Chapter 7: ch07_memory, ch07_offload; its calculator page: calculator (a Sphinx
extension that packs helpers.cost.web for the browser). Chapter 8: ch08_troubleshooting,
ch08_tp_placement, ch08_labs, ch08_numbers, ch08_flight, ch08_flagship, ch08_tuning, ch08_one_gpu,
ch08_levers, ch08_lever_numbers (its figures: helpers.figures.ch08_runs, ch08_levers,
ch08_profile_split, ch08_flight, ch08_flagship).
Chapter 9: ch09_records, ch09_resnet, ch09_hybrid_layouts, ch09_nan_study,
ch09_moe, ch09_moe_balance, ch09_sequence_parallel, ch09_context_parallel, ch09_legacy_launch (its
figures: helpers.figures.ch09_hybrid, ch09_moe, ch09_sequence).
Chapter 10: ch10_pitfalls, ch10_shown, ch10_costs, ch10_layout_rules, ch10_data_parallel, ch10_runs
(the pitfalls are data: helpers/data/pitfalls.yaml). Chapter 11: ch11_bank (the questions are data:
helpers/data/interview/), ch11_answers_parallel, ch11_answers_cost, ch11_interview. Chapter 12:
ch12_published, ch12_sources, ch12_predict, ch12_gaps, ch12_planner, ch12_layouts (its figures:
helpers.figures.ch12_in_practice)."""
