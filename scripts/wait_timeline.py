#!/usr/bin/env python3
"""What runs while the other threads wait: a perf timeline of a multi-threaded run, from the samples of
`perf record -e cpu-clock` (software events, which every machine here has).

    perf record -e cpu-clock -F 999 -o run.data ./build/default/bench_model --kinds mag --threads 2 \
        --no-torch --no-infer --steps 4 --min-steps 4
    perf script -i run.data -F tid,time,ip,sym,dso | python3 scripts/wait_timeline.py [--skip 0.5]

Time is cut into 1 ms buckets; a bucket counts when every thread has a sample in it. A bucket where
some threads are in libgomp (waiting at a barrier or for work) and one is not is serial time: the
report gives its share of the counted buckets, and which function the working thread was in. --skip
drops the first part of the run (warm-up steps, which fault in their memory), as a fraction of its
span. The shares are of samples, ~1 ms apart: a rough picture, good to a few percent."""
import argparse
import collections
import re
import sys

LINE = re.compile(r"\s*(\d+)\s+([\d.]+):\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")


def read_samples(stream):
    """(thread id, seconds, function or shared object) per sample line."""
    out = []
    for line in stream:
        m = LINE.match(line)
        if m:
            tid, t, sym, dso = m.groups()
            out.append((int(tid), float(t), sym if sym != "[unknown]" else dso.rsplit("/", 1)[-1]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip", type=float, default=0.5, help="fraction of the run's span to drop at its start")
    ap.add_argument("--top", type=int, default=15, help="functions to list")
    args = ap.parse_args()
    samples = read_samples(sys.stdin)
    if not samples:
        sys.exit("wait_timeline: no samples read (perf script -F tid,time,ip,sym,dso expected on stdin)")
    t0, t1 = samples[0][1], samples[-1][1]
    start = t0 + args.skip * (t1 - t0)
    threads = {tid for tid, _, _ in samples}
    buckets = collections.defaultdict(dict)
    for tid, t, where in samples:
        if t >= start:
            buckets[int(t * 1000)][tid] = where
    counted = [b for b in buckets.values() if len(b) == len(threads)]
    if len(threads) < 2 or not counted:
        sys.exit("wait_timeline: need samples of at least two threads in the same milliseconds")
    serial = collections.Counter()
    all_wait = 0
    for b in counted:
        working = [w for w in b.values() if "libgomp" not in w]
        if len(working) == 0:
            all_wait += 1
        elif len(working) < len(b):
            serial[working[0] if len(working) == 1 else "(several working)"] += 1
    n = len(counted)
    print(f"{len(threads)} threads, {n} ms buckets with a sample of every thread (after skipping {args.skip:.0%})")
    print(f"some thread waits while another works: {100 * sum(serial.values()) / n:.1f}% of the time; "
          f"all wait: {100 * all_wait / n:.1f}%")
    for where, c in serial.most_common(args.top):
        print(f"  {100 * c / n:5.1f}%  {where}")


if __name__ == "__main__":
    main()
