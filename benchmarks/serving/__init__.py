"""The serving suite: one base answering requests for many tasks."""
