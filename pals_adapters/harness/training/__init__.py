"""A training run: `runner.run` (validate, lock the run folder, train, evaluate, export), the
`Trainer` subclass (`trainer`), the run folder and resuming (`run_folder`, `checkpoints`), and the
export of any complete checkpoint (`export_checkpoint`)."""
