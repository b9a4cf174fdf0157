"""Scores: the metrics (`metrics`, `evaluate_metric`), evaluating a model on dev sets (`evaluation`)
and the report tables of a run (`report`)."""
