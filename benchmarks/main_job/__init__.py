"""The main job: the committed multi-task PALs run on the bundled MiniLM and five GLUE tasks."""
