# Helpers for the reliability tests: run the sparsebench binary, assert its exit code and message, make tiny inputs.
import inspect
import os
import random
import signal
import subprocess
import sys
import time

SKIP = 77
TRAIN_TINY = ["--layers", "1", "--dim", "16", "--heads", "2", "--ffn", "32", "--context", "32", "--batch", "2",
              "--threads", "1", "--eval-bytes", "256", "--eval-batch", "4", "--quiet"]


class Failure(AssertionError):
    pass


RUNS = [0]  # command lines tried, reported by the drivers


def run(binary, args, expect_rc, mentions=(), timeout=60, cwd=None, preexec_fn=None, env=None):
    """Runs `binary args`; asserts no signal, the exit code (or one of a tuple of codes) and that stdout+stderr mention every string."""
    t0 = time.time()
    RUNS[0] += 1
    try:
        p = subprocess.run([binary] + list(args), capture_output=True, text=True, errors="replace", timeout=timeout,
                           cwd=cwd, preexec_fn=preexec_fn, env=env)
    except subprocess.TimeoutExpired:
        raise Failure(f"{' '.join(args)[:200]}: no answer within {timeout} s (hang)")
    out = p.stdout + p.stderr
    shown = f"$ sparsebench {' '.join(a[:80] for a in args)[:300]}\nexit {p.returncode} after {time.time() - t0:.1f} s\n{out[-2000:]}"
    if p.returncode < 0:
        raise Failure(f"killed by signal {-p.returncode}\n{shown}")
    allowed = expect_rc if isinstance(expect_rc, (tuple, frozenset, set)) else (expect_rc,)
    if p.returncode not in allowed:
        raise Failure(f"expected exit {' or '.join(map(str, sorted(allowed)))}\n{shown}")
    for m in mentions:
        if m not in out:
            raise Failure(f"the output does not mention {m!r}\n{shown}")
    return out


def drive(main, usage):
    """A driver's entry point: main(*arguments), its return value the exit status; a count of arguments other than
    main's prints `usage` and exits 2, a Failure prints FAIL and exits 1."""
    args = sys.argv[1:]
    if len(args) != len(inspect.signature(main).parameters):
        print(usage, file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(main(*args))
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)


def write(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def text_data(path, size=65536, seed=7):
    """A seeded text-like byte file for tiny training runs (no download needed)."""
    rng = random.Random(seed)
    words = ["the", "graph", "attention", "sparse", "token", "node", "edge", "model", "of", "and", "a", "<page>",
             "[[link]]", "1999", "is", "in"]
    out = []
    n = 0
    while n < size:
        w = rng.choice(words) + (" " if rng.random() < 0.9 else "\n")
        out.append(w)
        n += len(w)
    write(path, "".join(out)[:size])
    return path


def kill_at_random(cmd, rng, max_kills, lo_s, hi_s, log):
    """Starts `cmd()` (a fresh argument list each time) and SIGKILLs it after a seeded random delay, up to max_kills
    times; returns how many kills landed before a run finished."""
    kills = 0
    while kills < max_kills:
        delay = rng.uniform(lo_s, hi_s)
        p = subprocess.Popen(cmd(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            kills += 1
            log.append(f"killed after {delay:.2f} s")
            continue
        err = p.stderr.read()
        if p.returncode != 0:
            raise Failure(f"a restarted run failed (exit {p.returncode}):\n{err[-2000:]}")
        log.append(f"finished within {delay:.2f} s")
        return kills
    return kills
