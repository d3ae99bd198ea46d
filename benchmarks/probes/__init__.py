"""Probes: scripts with absl flags that measure one question about the GEMV kernel."""
