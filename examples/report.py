"""Summarise a CSV of cities: rows, total population, the largest city and
the population per country. Standard library only.

    airlock run --file examples/data.csv examples/report.py -- data.csv
"""
import csv
import sys
from collections import Counter

with open(sys.argv[1], newline="") as f:
    rows = list(csv.DictReader(f))

per_country = Counter()
for row in rows:
    per_country[row["country"]] += int(row["population"])
largest = max(rows, key=lambda r: int(r["population"]))

print(f"{len(rows)} cities, {sum(per_country.values()):,} people")
print(f"largest: {largest['city']} ({int(largest['population']):,})")
for country, people in per_country.most_common():
    print(f"  {country:<10} {people:>12,}")
