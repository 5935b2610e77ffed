#!/usr/bin/env bash
# Re-runs results/kernels/cpu-2core-zen4-final (README.md there) from the repository root: the kernels of commit
# 6a50d7b (the start of this work) against a build of commit 287bbcf (relation terms by column, per-row tables of a
# row's distinct relations, row blocks in the graph's block order), pinned to AVX2 and AVX3, two interleaved rounds.
# The same runs and summaries as ../cpu-2core-zen4-colrel/run.sh, written here.
OUT=${OUT:-results/kernels/cpu-2core-zen4-final} exec bash results/kernels/cpu-2core-zen4-colrel/run.sh "$@"
