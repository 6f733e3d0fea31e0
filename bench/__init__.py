"""Benchmarks of attncert (speed and cost are measured here, never asserted in tests); see bench/README.md."""
