#!/usr/bin/env bash
# Re-runs results/kernels/cpu-2core-zen4-bwd (README.md there) from the repository root: a build of commit 3d0e77a
# (wide tiles in the forward, and in the backward by destination only with one relation table) against a build with
# the backward's wide tiles by column, the backward by source's wide tiles and the blocked relation gradients, both
# pinned to each of TARGETS, ROUNDS interleaved rounds of 3 repetitions: the same cases and loop as
# cpu-2core-zen4-wide/run.sh.
set -u
export OLD=${OLD:-../old-3d0e77a/build/harness/sparsebench}  # git worktree add ../old-3d0e77a 3d0e77a; cmake; build
export OUT=${OUT:-results/kernels/cpu-2core-zen4-bwd}
exec bash results/kernels/cpu-2core-zen4-wide/run.sh
