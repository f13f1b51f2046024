"""Reads an admin endpoint's /metrics with the Prometheus project's own Python parser and prints what it
found as JSON: [{"name", "type", "samples": [[name, labels, value], ...]}, ...] in the order written.

Usage: python3 parse_metrics.py URL
"""
import json
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

with urllib.request.urlopen(sys.argv[1], timeout=10) as response:
    text = response.read().decode("utf-8")
families = [
    {
        "name": family.name,
        "type": family.type,
        "samples": [[sample.name, sample.labels, sample.value] for sample in family.samples],
    }
    for family in text_string_to_metric_families(text)
]
# Counts are finite: a NaN or an infinity fails here rather than becoming JSON that is not JSON.
json.dump(families, sys.stdout, allow_nan=False)
