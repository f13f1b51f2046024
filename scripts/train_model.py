#!/usr/bin/env python3
"""Trains the recommender's model: a LightGBM gradient-boosted tree ensemble, saved in LightGBM's text format
for tern-model to load and score in Rust (no Python at serve time).

The training CSV's header names its columns: an optional first column `group` (the viewer a candidate was
shown to; --objective lambdarank ranks within a group, whose rows must be contiguous), then the features in
the order the service computes them, then `label` (binary: 1 engaged, 0 not; lambdarank: a relevance grade).
An empty field or `nan` is a missing value. Training is deterministic: the same CSV and arguments write the
same model file.

--parity CSV_OUT writes the first --parity-rows rows' features and LightGBM's own prediction for them (a
probability for binary, the raw score for lambdarank) as a CSV with every float at full precision, so
tern-model's tests can check that Rust scores them the same.

    python3 scripts/train_model.py --train rows.csv --out models/recommend.txt
"""

import argparse
import csv
import math
import sys
import time

import lightgbm
import numpy as np


def fail(message):
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def log(message):
    print(message, flush=True)


def parse_value(text, where):
    text = text.strip()
    if text == "" or text.lower() == "nan":
        return math.nan
    try:
        return float(text)
    except ValueError:
        fail(f"{where}: `{text}` is not a number")


def read_training_rows(path):
    """The feature names, features (a float64 matrix, NaN = missing), labels and group ids (or None)."""
    with open(path, newline="") as file:
        reader = csv.reader(file)
        header = next(reader, None)
        if not header or header[-1] != "label":
            fail(f"{path}: the header's last column must be `label`")
        has_group = header[0] == "group"
        names = header[1 if has_group else 0 : -1]
        if not names:
            fail(f"{path}: no feature columns")
        for name in names:
            # The model file lists the names separated by spaces.
            if not name or any(c.isspace() for c in name) or name in ("group", "label"):
                fail(f"{path}: `{name}` cannot be a feature name")
        if len(set(names)) != len(names):
            fail(f"{path}: a feature name appears twice")
        features, labels, groups = [], [], []
        for line, record in enumerate(reader, start=2):
            if len(record) != len(header):
                fail(f"{path}:{line}: {len(record)} fields, the header has {len(header)}")
            where = f"{path}:{line}"
            features.append([parse_value(v, where) for v in record[1 if has_group else 0 : -1]])
            label = parse_value(record[-1], where)
            if math.isnan(label):
                fail(f"{where}: the label is missing")
            labels.append(label)
            if has_group:
                groups.append(record[0])
    if not labels:
        fail(f"{path}: no rows")
    return names, np.array(features, dtype=np.float64), np.array(labels), groups if has_group else None


def group_sizes(groups, path):
    """The sizes of the runs of equal group ids, which LightGBM takes as its query groups."""
    sizes, seen = [], set()
    for index, group in enumerate(groups):
        if index > 0 and group == groups[index - 1]:
            sizes[-1] += 1
            continue
        if group in seen:
            fail(f"{path}: the rows of group `{group}` are not contiguous (sort the CSV by group)")
        seen.add(group)
        sizes.append(1)
    return sizes


def write_parity(path, names, features, scores):
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(names + ["score"])
        for row, score in zip(features, scores):
            writer.writerow([repr(float(v)) for v in row] + [repr(float(score))])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", required=True, help="training rows (CSV)")
    parser.add_argument("--out", required=True, help="where to write the model (LightGBM text format)")
    parser.add_argument("--trees", type=int, default=150, help="boosting rounds")
    parser.add_argument("--leaves", type=int, default=31, help="leaves per tree")
    parser.add_argument("--max-depth", type=int, default=6,
                        help="deepest split of a tree (-1: none); scoring walks every row to the deepest leaf's depth")
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--objective", choices=["binary", "lambdarank"], default="binary")
    parser.add_argument("--zero-as-missing", action="store_true", help="treat 0 as missing, like NaN")
    parser.add_argument("--parity", help="write rows with LightGBM's predictions here (CSV)")
    parser.add_argument("--parity-rows", type=int, default=1000, help="how many rows --parity writes")
    args = parser.parse_args()

    names, features, labels, groups = read_training_rows(args.train)
    log(f"read {len(labels)} rows of {len(names)} features from {args.train}")
    params = {
        "objective": args.objective,
        "num_leaves": args.leaves,
        "max_depth": args.max_depth,
        "learning_rate": args.learning_rate,
        "seed": args.seed,
        "deterministic": True,
        "force_col_wise": True,
        "num_threads": 1,
        "zero_as_missing": args.zero_as_missing,
        "verbosity": -1,
    }
    group = None
    if args.objective == "lambdarank":
        if groups is None:
            fail(f"{args.train}: --objective lambdarank needs a first column `group`")
        group = group_sizes(groups, args.train)
        log(f"{len(group)} groups")
    dataset = lightgbm.Dataset(features, label=labels, group=group, feature_name=names)
    started = time.monotonic()
    booster = lightgbm.train(params, dataset, num_boost_round=args.trees)
    log(f"trained {booster.num_trees()} trees ({args.objective}) in {time.monotonic() - started:.1f} s")
    booster.save_model(args.out)
    log(f"wrote {args.out}")
    if args.parity:
        rows = features[: args.parity_rows]
        write_parity(args.parity, names, rows, booster.predict(rows))
        log(f"wrote {len(rows)} rows with LightGBM's scores to {args.parity}")


if __name__ == "__main__":
    main()
