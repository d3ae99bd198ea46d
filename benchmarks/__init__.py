"""fp8lab benchmark scripts (run as files; importable for tests)."""
