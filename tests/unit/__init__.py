"""Tests of the code itself on synthetic data (tests/data/, tests/traced_profile.py): no committed
report, no model build, no command line, no GPU."""
