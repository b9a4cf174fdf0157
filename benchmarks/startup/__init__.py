"""The start-up suite: how long the command line and the package imports take to start."""
