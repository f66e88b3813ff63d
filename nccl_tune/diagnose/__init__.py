"""Failure classification from logs, exit codes and Flight Recorder dumps (pure: text in, verdict out)."""
