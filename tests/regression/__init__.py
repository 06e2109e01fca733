"""Regression tests over the committed reports in reports/: what the code gives on real captures and
traces, checked against what those captures measured."""
