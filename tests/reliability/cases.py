#!/usr/bin/env python3
# Hostile and mistaken inputs to the sparsebench CLI, one ctest test per case: each asserts the exit code (user
# errors exit 2, never a signal, a hang or an internal error) and that the message names the option, file or
# JSON pointer at fault; cases that must succeed check what they wrote.
# usage: cases.py SPARSEBENCH WORK_DIR (--list | CASE...)
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sbtest import RUNS, TRAIN_TINY, Failure, run, text_data, write  # noqa: E402

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def attention_doc(**extra):
    doc = {"kind": "attention", "repeats": 1, "warmup": 0,
           "axes": {"patterns": [{"name": "window", "w": 4}], "lengths": [16], "batch": 1, "modes": "forward"}}
    doc.update(extra)
    return doc


def train_doc(data, **train):
    t = {"data": data, "steps": 2, "batch": 2, "eval_every": 0, "eval_bytes": 256}
    t.update(train)
    return {"kind": "train", "seed": 3, "model": {"layers": 1, "dim": 16, "heads": 2, "ffn": 32},
            "axes": {"patterns": [{"name": "window", "w": 4}], "lengths": [32], "threads": 1}, "train": t}


def scenario(w, name, doc):
    return write(os.path.join(w.dir, name), json.dumps(doc) if not isinstance(doc, str) else doc)


class Work:
    def __init__(self, binary, root, name):
        self.b = binary
        self.dir = os.path.join(root, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.data = text_data(os.path.join(self.dir, "text.bin"))

    def run(self, args, rc, *mentions, **kw):
        return run(self.b, args, rc, mentions, cwd=self.dir, **kw)

    def train(self, out, *extra, rc=0, mentions=(), **kw):
        return self.run(["train", "--data", self.data, "--out", out] + TRAIN_TINY + list(extra), rc, *mentions, **kw)


# 1. Deep nesting never reaches a recursive printer: refused with the place it starts.
@case
def deep_json_file(w):
    for depth in (100000, 70000):
        path = write(os.path.join(w.dir, f"deep{depth}.json"), "[" * depth + "]" * depth)
        w.run(["run", path, "--dry-run"], 2, "nested deeper than", f"deep{depth}.json:1:")


@case
def deep_json_values(w):
    deep = "[" * 5000 + "]" * 5000
    body = json.dumps(attention_doc())
    for where, text in (("description", body[:-1] + ', "description": ' + deep + "}"),
                        ("label", body.replace('"w": 4', '"w": 4, "label": ' + deep))):
        w.run(["run", scenario(w, f"deep_{where}.json", text), "--dry-run"], 2, "nested deeper than")
    # Shallow enough to parse, still printed only as a short excerpt in the message.
    shallow = "[" * 40 + "1" + "]" * 40
    out = w.run(["run", scenario(w, "deepish.json", body[:-1] + ', "description": ' + shallow + "}"), "--dry-run"],
                2, "/description: expected a string")
    if len(out) > 400:
        raise Failure(f"the message dumps the whole value ({len(out)} characters)")
    w.run(["run", scenario(w, "ok.json", attention_doc()), "--dry-run", "--set", "description=" + deep], 2,
          "--set description", "nested deeper than")


@case
def duplicate_keys(w):
    text = '{"kind": "attention", "axes": {"patterns": [{"name": "window", "w": 4, "w": 8}], "lengths": [16]}}'
    w.run(["run", scenario(w, "dup.json", text), "--dry-run"], 2, "/axes/patterns/0/w", "duplicate key")
    w.run(["run", scenario(w, "dup2.json", '{"kind": "attention", "kind": "model"}'), "--dry-run"], 2,
          "dup2.json: /kind", "duplicate key")


# 2. A finished run is never replaced without --resume or --overwrite.
@case
def train_into_existing_run(w):
    w.train("run", "--steps", "2")
    before = {f: open(os.path.join(w.dir, "run", f), "rb").read() for f in ("metrics.jsonl", "result.json")}
    w.train("run", "--steps", "1", rc=2, mentions=("--out run", "--resume", "--overwrite"))
    after = {f: open(os.path.join(w.dir, "run", f), "rb").read() for f in before}
    if before != after:
        raise Failure("the refused run changed the earlier run's files")
    w.train("run", "--steps", "1", "--overwrite")
    result = json.load(open(os.path.join(w.dir, "run", "result.json")))
    if result["steps"] != 1:
        raise Failure(f"--overwrite did not replace the run: steps {result['steps']}")
    w.train("run", "--steps", "1", "--overwrite", "--resume", rc=2, mentions=("--overwrite", "--resume"))


@case
def run_into_existing_run(w):
    s = scenario(w, "a.json", attention_doc())
    w.run(["run", s, "--out", "r", "--no-plot"], 0)
    w.run(["run", s, "--out", "r", "--no-plot"], 2, "already holds records", "--overwrite")
    w.run(["run", s, "--out", "r", "--no-plot", "--overwrite"], 0)
    lines = [l for l in open(os.path.join(w.dir, "r", "records.jsonl")) if l.strip()]
    if len(lines) != 1:
        raise Failure(f"--overwrite left {len(lines)} records, expected 1")


# 3. Thread counts are capped, with a message naming --threads, before any thread starts.
@case
def thread_caps(w):
    w.train("t", "--steps", "1", "--threads", "100000", rc=2, mentions=("--threads", "1024"), timeout=20)
    w.train("t", "--steps", "1", "--threads", "-1", rc=2, mentions=("--threads",), timeout=20)
    w.run(["bench", "graphs", "--threads", "x"], 2, "--threads", timeout=20)
    w.run(["bench", "graphs", "--threads=5000"], 2, "--threads", timeout=20)
    w.run(["bench", "graphs", "--threads"], 2, "--threads", timeout=20)
    doc = attention_doc()
    doc["axes"]["threads"] = [1, 5000]
    w.run(["run", scenario(w, "thr.json", doc), "--dry-run"], 2, "/axes/threads/1", timeout=20)


# 4. A write that fails (here: the file-size limit) stops the run with the file named; nothing claims success.
@case
def write_errors_stop_the_run(w):
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a signal, as on a full device
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
    w.train("full", "--steps", "40", "--log-every", "1", "--checkpoint-every", "0", rc=2,
            mentions=("metrics.jsonl", "File too large"), preexec_fn=limit)
    if os.path.exists(os.path.join(w.dir, "full", "result.json")):
        raise Failure("a run whose metrics could not be written left a result.json")


# 5a. Killed during the final evaluation (checkpoint saved, no result): --resume completes the result.
@case
def resume_after_final_checkpoint(w):
    w.train("fin", "--steps", "4")
    ref = json.load(open(os.path.join(w.dir, "fin", "result.json")))
    metrics = os.path.join(w.dir, "fin", "metrics.jsonl")
    ref_lines = open(metrics).read()
    # Killed after the end-of-run lines (final evaluation, context lens) but before result.json, and killed before.
    for keep_end_lines in (True, False):
        os.remove(os.path.join(w.dir, "fin", "result.json"))
        if not keep_end_lines:
            write(metrics, "".join(l for l in ref_lines.splitlines(True) if '"final"' not in l and '"lens"' not in l))
        w.train("fin", "--steps", "4", "--resume")
        got = json.load(open(os.path.join(w.dir, "fin", "result.json")))
        for key in ("steps", "final_loss", "valid_bpc", "test_bpc", "status", "context_lens"):
            if got[key] != ref[key]:
                raise Failure(f"result.json after resume: {key} {got[key]!r}, uninterrupted {ref[key]!r}")
        if open(metrics).read() != ref_lines:
            raise Failure(f"metrics.jsonl after resume differs from the uninterrupted run's (end lines kept: "
                          f"{keep_end_lines}):\n{open(metrics).read()[-600:]}")


# 5b. The first progress line after a resume covers the same steps as without the interruption.
@case
def resume_progress_window(w):
    args = ("--steps", "9", "--log-every", "3", "--checkpoint-every", "5", "--eval-every", "0", "--no-final-eval")
    w.train("ref", *args)
    w.train("cut", *args, "--stop-after", "7")
    w.train("cut", *args, "--resume")
    def train_lines(d):
        out = []
        for line in open(os.path.join(w.dir, d, "metrics.jsonl")):
            r = json.loads(line)
            if r["kind"] == "train":
                out.append((r["step"], r["loss"], r["lr"]))
        return out
    if train_lines("ref") != train_lines("cut"):
        raise Failure(f"progress lines differ after resume:\n{train_lines('ref')}\n{train_lines('cut')}")


# 5c. Resuming with other settings is refused, naming them; --allow-changes records old and new.
@case
def resume_with_changed_settings(w):
    w.train("c", "--steps", "2", "--lr", "0.003", "--seed", "3")
    w.train("c", "--steps", "3", "--lr", "0.1", "--seed", "99", "--resume", rc=2,
            mentions=("lr 0.003 -> 0.1", "seed 3 -> 99", "--allow-changes"))
    w.train("c", "--steps", "3", "--lr", "0.1", "--seed", "99", "--resume", "--allow-changes")
    r = json.load(open(os.path.join(w.dir, "c", "result.json")))
    changed = r["config_changes"][-1]["changed"]
    if changed["lr"] != {"before": 0.003, "after": 0.1} or changed["seed"] != {"before": 3, "after": 99}:
        raise Failure(f"result.json config_changes: {r['config_changes']}")
    w.train("c", "--steps", "3", "--allow-changes", rc=2, mentions=("--allow-changes", "--resume"))

    s = scenario(w, "a.json", attention_doc())
    w.run(["run", s, "--out", "r", "--no-plot"], 0)
    w.run(["run", s, "--out", "r", "--no-plot", "--resume", "--set", "repeats=2"], 2, "repeats 1 -> 2",
          "--allow-changes")
    w.run(["run", s, "--out", "r", "--no-plot", "--resume", "--set", "repeats=2", "--allow-changes"], 0)
    run_json = json.load(open(os.path.join(w.dir, "r", "run.json")))
    if run_json["resumed"][-1]["changed"] != {"repeats": {"before": 1, "after": 2}}:
        raise Failure(f"run.json resumed: {run_json['resumed']}")


# 6. Names are confined to the results root.
@case
def scenario_name_escapes(w):
    for name in ("..", "."):
        w.run(["run", scenario(w, "esc.json", attention_doc(name=name)), "--results", "res/inner", "--no-plot"], 2,
              "/name")
    if os.path.exists(os.path.join(w.dir, "res")):
        raise Failure("a refused scenario created directories")


# 7. User mistakes get messages that name the thing, exit 2.
@case
def data_not_a_file(w):
    os.makedirs(os.path.join(w.dir, "adir"), exist_ok=True)
    for data, says in (("adir", "is a directory"), ("/dev/zero", "not a regular file"),
                       ("missing.bin", "cannot open")):
        w.run(["train", "--data", data, "--out", "o"] + TRAIN_TINY, 2, f"data file '{data}'", says)


@case
def scenario_path_is_directory(w):
    os.makedirs(os.path.join(w.dir, "sdir"), exist_ok=True)
    w.run(["run", "sdir", "--dry-run"], 2, "sdir: is a directory")


@case
def checkpoint_not_a_file(w):
    os.makedirs(os.path.join(w.dir, "ck", "checkpoint.pt"), exist_ok=True)
    w.train("ck", "--steps", "1", "--resume", rc=2, mentions=("checkpoint.pt", "not a regular file"))


@case
def unknown_last_flag(w):
    w.train("u", "--steps", "1", "--resum", rc=2, mentions=("unknown option --resum", "--resume?"))
    w.run(["run", "x.json", "--dry-rn"], 2, "unknown option --dry-rn")
    w.train("u", "--steps", rc=2, mentions=("--steps needs a value",))


@case
def set_messages(w):
    out = w.train("s", "--pattern", "window", "--set", "w=abc", rc=2, mentions=("--set w",))
    if out.count("--set") != 1:
        raise Failure(f"the message repeats its prefix: {out.strip()}")
    w.train("s", "--pattern", "window", "--set", "=3", rc=2, mentions=("--set",))


@case
def absurd_sizes(w):
    for option, value in (("--batch", "100000000"), ("--dim", "1000000"), ("--layers", "100000"),
                          ("--context", "100000000"), ("--ffn", "100000000"), ("--eval-batch", "100000000")):
        w.train("z", option, value, rc=2, mentions=(option,), timeout=30)
    # Each within its range, together more than any machine here holds.
    w.train("z", "--layers", "1024", "--dim", "65536", rc=2, mentions=("--layers", "--dim", "GiB"), timeout=30)


@case
def degree_range(w):
    doc = attention_doc()
    doc["axes"]["patterns"] = [{"name": "window", "degree": 1e300}]
    out = w.run(["run", scenario(w, "deg.json", doc), "--dry-run"], 2, "/axes/patterns/0/degree")
    if len(out) > 400:
        raise Failure("the degree is printed in full")


# 8. Everything knowable is checked before the first point.
@case
def checked_before_running(w):
    doc = train_doc(w.data)
    doc["model"]["positions"] = "sinusoid"
    w.run(["run", scenario(w, "pos.json", doc), "--dry-run"], 2, "/model/positions")
    for data, says in (("nowhere.bin", "nowhere.bin"), ("/dev/zero", "not a regular file")):
        w.run(["run", scenario(w, "nodata.json", train_doc(data)), "--dry-run"], 2, "point 0", says)
    doc = train_doc(w.data)
    del doc["train"]["data"]
    w.run(["run", scenario(w, "nokey.json", doc), "--dry-run"], 2, "/train/data")
    w.run(["run", scenario(w, "lr.json", train_doc(w.data, lr=20)), "--dry-run"], 2, "/train/lr")
    w.run(["run", scenario(w, "short.json", train_doc(write(os.path.join(w.dir, "short.bin"), "abc"))),
           "--dry-run"], 2, "too short")
    # Nothing ran: no run directory was made.
    if os.path.exists(os.path.join(w.dir, "results")):
        raise Failure("a refused scenario created a run directory")


# 9. A huge graph says what it is about to take, or is refused naming --n when it cannot fit.
@case
def large_pattern_builds(w):
    w.run(["pattern", "dense", "--n", "100000000"], 2, "--n 100000000", "GiB", timeout=180)
    w.run(["pattern", "window", "--n", "2000000", "--set", "w=2", "--causal"], 0, "building window at n=2000000",
          "GiB", timeout=240)
    w.run(["pattern", "window", "--n", "0"], 2, "--n")


# Corrupt checkpoints: refused with the file named, whatever the damage.
@case
def corrupt_checkpoints(w):
    w.train("k", "--steps", "1")
    path = os.path.join(w.dir, "k", "checkpoint.pt")
    good = open(path, "rb").read()
    header = 8 + 64 + 1
    damaged = [good[:n] for n in (0, 5, header, header + 100, len(good) // 2)]
    damaged += [good[:header] + b"x" + good[header + 1:], b"SBCKPT1\n" + b"0" * 64 + b"\n"]
    failures = []

    def resume(blob, label, rc=2, mentions=("checkpoint",)):
        open(path, "wb").write(blob)
        try:
            w.train("k", "--steps", "2", "--resume", rc=rc, mentions=mentions)
        except Failure as e:
            failures.append(f"{label}: {e}")

    for i, blob in enumerate(damaged):
        resume(blob, f"damage {i}")
    # Forged files: damage behind a valid checksum must be refused by the reader's own checks.
    payload = good[header:]
    hlen = int.from_bytes(payload[:8], "little")
    meta = json.loads(payload[8:8 + hlen])
    data = payload[8 + hlen:]

    def forge(body):
        return b"SBCKPT2\n" + hashlib.sha256(body).hexdigest().encode() + b"\n" + body

    def with_header(h, rest=data):
        text = json.dumps(h).encode()
        return forge(len(text).to_bytes(8, "little") + text + rest)

    resume(forge((2**63).to_bytes(8, "little") + payload[8:]), "forged length 2^63", mentions=("header length",))
    resume(forge((0).to_bytes(8, "little") + payload[8:]), "forged length 0", mentions=("header",))
    resume(forge(b"\x01\x00"), "forged short payload", mentions=("header length",))
    edits = [("offset", 2**40, "outside"), ("offset", len(data), "outside"), ("nbytes", 2**62, "nbytes"),
             ("offset", -1, "offset"), ("dtype", "float16", "dtype"), ("shape", [2**41], "shape"),
             ("shape", [-3], "shape"), ("shape", [2**20] * 4, "2^44"), ("name", "", "name"), ("nbytes", 1.5, "nbytes")]
    for j, (key, value, says) in enumerate(edits):
        h = json.loads(json.dumps(meta))
        h["tensors"][j % len(h["tensors"])][key] = value
        resume(with_header(h), f"forged {key}={value}", mentions=(says,))
    h = json.loads(json.dumps(meta))
    h["tensors"][1]["shape"] = list(reversed(h["tensors"][1]["shape"])) + [1]
    resume(with_header(h), "forged shape of another model", mentions=("different model",))
    h = json.loads(json.dumps(meta))
    del h["tensors"][0]
    resume(with_header(h), "forged missing tensor", mentions=("no tensor",))
    h = json.loads(json.dumps(meta))
    h["tensors"].append(dict(h["tensors"][0]))
    resume(with_header(h), "forged duplicate tensor", mentions=("twice",))
    for key, value in (("step", -1), ("info", []), ("data_rng", 5)):
        h = json.loads(json.dumps(meta))
        h["meta"][key] = value
        resume(with_header(h), f"forged meta {key}", mentions=(f"/meta/{key}",))
    h = json.loads(json.dumps(meta))
    h["meta"]["data_rng"] = "not an engine state"
    resume(with_header(h), "forged data_rng text")
    # Random bytes anywhere behind a valid checksum: refused (2), or accepted as other weights (0); never a crash.
    rng = random.Random(5)
    for k in range(12):
        body = bytearray(payload)
        for _ in range(rng.choice((1, 4, 64))):
            body[rng.randrange(len(body))] = rng.randrange(256)
        resume(forge(bytes(body)), f"forged random bytes {k}", rc=(0, 2), mentions=())
    if failures:
        raise Failure("\n".join(failures))


# Generated tasks: a bad task, parameter or a task with a data file exits 2 naming the field; nothing is written.
@case
def task_bad_input(w):
    base = ["train", "--out", "t"] + TRAIN_TINY + ["--steps", "2"]
    w.run(base + ["--task", "copy"], 2, "--task", "recall_distance")
    w.run(base + ["--task", "mqar", "--task-pairs", "9"], 2, "task_pairs")  # 9 pairs: 36 tokens > context 32
    w.run(base + ["--task", "mqar", "--task-pairs", "5", "--task-vocab", "16"], 2, "task_pairs", "task_vocab 16")
    w.run(base + ["--task", "recall_distance", "--task-distances", "4,32"], 2, "task_distances", "distance 32")
    w.run(base + ["--task", "recall_distance", "--task-distances", "4;8"], 2, "task_distances")
    w.run(base + ["--task", "mqar", "--data", w.data], 2, "task", "--data")
    w.run(base + ["--task", "khop", "--task-hops", "300"], 2, "--task-hops")
    w.run(base + ["--task", "khop", "--task-answers", "hidden"], 2, "task_answers", "only mqar and recall_distance")
    w.run(base + ["--task", "mqar", "--task-answers", "shown"], 2, "--task-answers", "'revealed' or 'hidden'")
    if os.path.exists(os.path.join(w.dir, "t")):
        raise Failure("a refused task run left --out t behind")
    doc = train_doc(w.data, task="mqar")
    w.run(["run", scenario(w, "task_data.json", doc), "--out", "r"], 2, "task", "/train/data")
    if os.path.exists(os.path.join(w.dir, "r")):
        raise Failure("a refused task scenario left its run directory behind")
    # A task run trains without --data and records accuracy, never a BPC.
    w.run(base + ["--task", "recall_distance", "--task-distances", "4,8", "--task-pairs", "2", "--task-eval", "8"], 0)
    with open(os.path.join(w.dir, "t", "result.json")) as f:
        result = json.load(f)
    if "test_bpc" in result or result.get("task", {}).get("name") != "recall_distance" or \
            not isinstance(result.get("test_accuracy"), float):
        raise Failure(f"task result.json: {sorted(result)}")


# 10. One writer per run directory (RUN_DIR/.lock): a second run, train, --resume, --overwrite or merge into a
# directory that a live process writes is refused at once (exit 2) naming the directory, the holder's pid and host;
# the first run loses nothing; a killed holder's lock is taken over.
def start(w, args):
    return subprocess.Popen([w.b] + args, cwd=w.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(proc, ready, what, timeout=120):
    t0 = time.time()
    while not ready():
        if proc.poll() is not None:
            raise Failure(f"the first writer ended (exit {proc.returncode}) before {what}:\n{proc.stdout.read()[-2000:]}")
        if time.time() - t0 > timeout:
            proc.kill()
            raise Failure(f"no {what} within {timeout} s")
        time.sleep(0.05)


def finish(proc, rc=0, timeout=600):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise Failure(f"the first writer did not finish within {timeout} s")
    if proc.returncode != rc:
        raise Failure(f"the first writer exited {proc.returncode}, expected {rc}:\n{out[-2000:]}")
    return out


def lock_holder(path):
    try:
        return open(path).read().split()
    except OSError:
        return []


@case
def concurrent_runs_same_out(w):
    doc = train_doc(w.data, steps=60)
    doc["axes"]["patterns"] = [{"name": "window", "w": [2, 4, 8]}]
    doc["axes"]["seeds"] = [1, 2]
    del doc["seed"]
    s = scenario(w, "sweep.json", doc)
    first = start(w, ["run", s, "--out", "r", "--no-plot", "--jobs", "2"])
    lock = os.path.join(w.dir, "r", ".lock")
    wait_for(first, lambda: lock_holder(lock)[:1] == [str(first.pid)], "a lock naming the first run")
    first.send_signal(signal.SIGSTOP)  # frozen holding its lock, however fast this machine runs its points
    holder = (f"pid {first.pid} on host {socket.gethostname()}",)
    for extra in ([], ["--resume"], ["--overwrite"], ["--jobs", "2"]):
        w.run(["run", s, "--out", "r", "--no-plot"] + extra, 2, "r: another process writes this run directory",
              *holder, timeout=30)
    w.run(["merge", "elsewhere", "--out", "r", "--no-plot", "--overwrite"], 2, "merge --out r", *holder, timeout=30)
    # A point process started by hand inside the live run is not its child: refused too.
    w.run(["run-point", "--run-dir", "r", "--index", "0", "--id", "x"], 2, "run-point --run-dir r", *holder, timeout=30)
    first.send_signal(signal.SIGCONT)
    finish(first)
    records = [json.loads(l) for l in open(os.path.join(w.dir, "r", "records.jsonl")) if l.strip()]
    points = [r["point"] for r in records]
    if len(points) != 6 or len(set(points)) != 6 or any(r["status"] != "ok" for r in records):
        raise Failure(f"expected 6 ok records, one per point: {[(r['point'], r['status']) for r in records]}")
    if open(lock).read() != "":
        raise Failure(f"the finished run left its name in {lock}: {open(lock).read()!r}")
    # Released: the directory is free again.
    w.run(["run", s, "--out", "r", "--no-plot", "--resume"], 0, "6 already recorded", timeout=60)


@case
def train_against_live_train(w):
    args = ["--steps", "200", "--checkpoint-every", "5", "--eval-every", "0", "--no-final-eval", "--lens-bytes", "0"]
    first = start(w, ["train", "--data", w.data, "--out", "t"] + TRAIN_TINY + args)
    ckpt = os.path.join(w.dir, "t", "checkpoint.pt")
    wait_for(first, lambda: os.path.exists(ckpt), "a checkpoint")
    first.send_signal(signal.SIGSTOP)
    holder = ("--out t: another process writes this run directory",
              f"pid {first.pid} on host {socket.gethostname()}")
    w.train("t", *args, "--resume", rc=2, mentions=holder, timeout=60)
    w.train("t", *args, "--overwrite", rc=2, mentions=holder, timeout=60)
    w.train("t", *args, rc=2, mentions=holder, timeout=60)
    if not os.path.exists(os.path.join(w.dir, "t", "metrics.jsonl")):
        raise Failure("the refused --overwrite removed the live run's files")
    first.send_signal(signal.SIGCONT)
    finish(first)
    result = json.load(open(os.path.join(w.dir, "t", "result.json")))
    if result["steps"] != 200 or result.get("resumed_at_steps"):
        raise Failure(f"the live run's result was disturbed: steps {result['steps']}, "
                      f"resumed at {result.get('resumed_at_steps')}")
    # kill -9 leaves the lock file naming a dead process: --resume takes it over and finishes.
    victim = start(w, ["train", "--data", w.data, "--out", "k2"] + TRAIN_TINY + args)
    wait_for(victim, lambda: os.path.exists(os.path.join(w.dir, "k2", "checkpoint.pt")), "a checkpoint")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    if lock_holder(os.path.join(w.dir, "k2", ".lock"))[:1] != [str(victim.pid)]:
        raise Failure("the killed run's lock file does not name it")
    w.train("k2", *args, "--resume", timeout=300)
    if json.load(open(os.path.join(w.dir, "k2", "result.json")))["steps"] != 200:
        raise Failure("the resumed run did not finish")


# 11. Axes are counted before anything is expanded: a product over /max_points is refused at once, naming the count
# and the axes; a value given twice in one axis is refused naming both places.
@case
def huge_axes_refused_fast(w):
    def timed(args, rc, *mentions, limit):
        t0 = time.time()
        out = w.run(args, rc, *mentions, timeout=120)
        took = time.time() - t0
        print(f"  {' '.join(a[:40] for a in args)[:100]}: exit {rc} in {took:.2f} s")
        if took > limit:
            raise Failure(f"took {took:.1f} s, more than {limit} s")
        return out

    doc = attention_doc()
    doc["axes"]["lengths"] = [16] * 1000000
    timed(["run", scenario(w, "dup.json", doc), "--dry-run"], 2, "/axes/lengths/1", "repeats /axes/lengths/0", limit=10)
    doc["axes"]["lengths"] = list(range(1, 1000001))
    timed(["run", scenario(w, "million.json", doc), "--dry-run"], 2, "1000000 points", "lengths 1000000 (/axes/lengths)",
          "/max_points 100000", limit=10)
    doc = attention_doc()
    doc["axes"]["patterns"] = [{"name": "longformer", "w": list(range(1, 1001)), "d": list(range(1, 1001)),
                                "g": list(range(0, 1001))}]
    timed(["run", scenario(w, "product.json", doc), "--dry-run"], 2, "1001000000 points", "/axes/patterns/0",
          "d 1000 x g 1001 x w 1000", limit=10)
    # The cap is the scenario's own: raised, the same axes run; the count comes first.
    doc = attention_doc(max_points=4)
    doc["axes"]["lengths"] = [16, 32, 64, 128, 256]
    out = w.run(["run", scenario(w, "five.json", doc), "--dry-run"], 2, "5 points", "/max_points 4")
    out = w.run(["run", scenario(w, "five.json", doc), "--dry-run", "--set", "max_points=5"], 0)
    if not out.startswith("five: 5 points ("):
        raise Failure(f"the dry run does not print the count first:\n{out[:300]}")
    # Two entries making the very same point.
    doc = attention_doc()
    doc["axes"]["patterns"] = [{"name": "window", "w": 4}, {"name": "window", "w": 4, "label": "again"}]
    w.run(["run", scenario(w, "twice.json", doc), "--dry-run"], 2, "/axes/patterns/0 and /axes/patterns/1",
          "make the same point")
    # 100,000 distinct points are printed in time.
    doc = attention_doc()
    doc["axes"]["patterns"] = [{"name": "window", "w": list(range(1, 101))}]
    doc["axes"]["lengths"] = list(range(16, 16 + 10 * 100, 100))
    doc["axes"]["threads"] = list(range(1, 101))
    out = timed(["run", scenario(w, "lakh.json", doc), "--dry-run"], 0, "lakh: 100000 points", limit=60)
    if out.count("\n") < 100000:
        raise Failure(f"{out.count(chr(10))} lines printed for 100000 points")


# 12. merge reads every line with the guarded parser: corrupt or truncated lines are named FILE:LINE and refused
# unless --skip-corrupt, which lists them in the merged run.json; a source without records.jsonl is named.
@case
def merge_corrupt_lines(w):
    doc = attention_doc()
    doc["axes"]["lengths"] = [16, 32, 64, 128]
    s = scenario(w, "m.json", doc)
    for i in range(2):
        w.run(["run", s, "--shard", f"{i}/2", "--out", "sh", "--no-plot"], 0)
    good = [l for l in open(os.path.join(w.dir, "sh", "shard-1-of-2", "records.jsonl"))]
    bad = os.path.join(w.dir, "sh", "shard-1-of-2", "records.jsonl")
    write(bad, good[0] + "junk\n" + "[" * 100000 + "]" * 100000 + "\n" + "".join(good[1:]) + '{"point": "cut')
    shards = ["sh/shard-0-of-2", "sh/shard-1-of-2"]
    rel = "sh/shard-1-of-2/records.jsonl"
    w.run(["merge"] + shards + ["--out", "m", "--no-plot"], 2, "3 corrupt or truncated lines", f"{rel}:2: not a JSON record",
          f"{rel}:3: not a JSON record (JSON nested deeper than 64 levels)", f"{rel}:{len(good) + 3}: truncated last line",
          "--skip-corrupt")
    if os.path.exists(os.path.join(w.dir, "m", "records.jsonl")):
        raise Failure("a refused merge wrote records")
    w.run(["merge"] + shards + ["--out", "m", "--no-plot", "--skip-corrupt"], 0, "skipped (--skip-corrupt)",
          "merge: complete")
    skipped = json.load(open(os.path.join(w.dir, "m", "run.json")))["merged"]["skipped_lines"]
    if len(skipped) != 3 or not skipped[0].startswith(f"{rel}:2:"):
        raise Failure(f"run.json merged.skipped_lines: {skipped}")
    os.remove(bad)
    w.run(["merge"] + shards + ["--out", "m3", "--no-plot"], 1, "sh/shard-1-of-2: no records.jsonl", "INCOMPLETE")


# 13. Smaller messages: each names the thing and its reason.
@case
def export_write_failed(w):
    if not os.path.exists("/dev/full"):
        return
    w.run(["pattern", "window", "--n", "64", "--export", "/dev/full"], 2, "--export /dev/full: write failed",
          "No space left on device")


@case
def data_reports_size_zero(w):
    w.train("p", "--steps", "1", "--data", "/proc/self/status", rc=2,
            mentions=("data file '/proc/self/status'", "reports size 0"))


@case
def long_scenario_name(w):
    w.run(["run", scenario(w, "long.json", attention_doc(name="n" * 300)), "--dry-run"], 2, "/name", "300 characters")
    w.run(["run", scenario(w, "ok.json", attention_doc(name="n" * 255)), "--dry-run"], 0)


@case
def padded_numbers(w):
    for value in (" 1", "1 ", "\t1"):
        w.train("t", "--steps", "1", "--threads", value, rc=2, mentions=("--threads", "expected an integer"))
        w.run(["bench", "graphs", "--threads", value], 2, "--threads", timeout=20)
    w.train("t", "--steps", "1", "--lr", " 0.01", rc=2, mentions=("--lr",))
    w.train("t", "--steps", "1", "--lr", "0.01 ", rc=2, mentions=("--lr",))


@case
def set_index_leading_zero(w):
    s = scenario(w, "a.json", attention_doc())
    for index in ("00", "01", "+0", "-0"):
        w.run(["run", s, "--dry-run", "--set", f"axes/patterns/{index}/w=4"], 2, f"'{index}' is not an array index")
    w.run(["run", s, "--dry-run", "--set", "axes/patterns/0/w=8"], 0, "window(w=8)")


@case
def number_overflow_pointer(w):
    text = json.dumps(attention_doc()).replace('"lengths": [16]', '"lengths": [16, 1e400]')
    w.run(["run", scenario(w, "big.json", text), "--dry-run"], 2, "big.json:1:", "number overflow", "(at /axes/lengths/1)")


# A full disk or file-size limit is a user error (exit 2) everywhere, as for train above: the run names the file.
@case
def full_disk_exit_codes(w):
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
    s = scenario(w, "a.json", attention_doc())
    w.run(["run", s, "--out", "full", "--no-plot"], 2, "full/", "File too large", preexec_fn=limit)
    w.run(["run", s, "--out", "ok", "--no-plot"], 0)
    w.run(["merge", "ok", "--out", "mfull", "--no-plot"], 2, "mfull/", "File too large", preexec_fn=limit)


def main():
    binary, root = sys.argv[1], sys.argv[2]
    if sys.argv[3:] == ["--list"]:
        print(";".join(CASES))
        return 0
    failed = 0
    for name in sys.argv[3:]:
        before = RUNS[0]
        try:
            CASES[name](Work(os.path.abspath(binary), os.path.abspath(root), name))
            print(f"ok: {name} ({RUNS[0] - before} command lines)")
        except Failure as e:
            print(f"FAILED: {name}: {e}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
