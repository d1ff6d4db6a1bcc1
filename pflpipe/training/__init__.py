"""What a training stage does around the engine: set up, run the rounds, write its results.

`stage_setup` puts the partition, the seeded model, its context and trainer on the engine's
device; `resumable_rounds` runs the rounds with checkpoints and resumes them; `score_rows` turns
the engine's scores into the tables' rows and `results_dir` writes a results directory;
`csv_tables` reads and writes those tables without importing torch.
"""
