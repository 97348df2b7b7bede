#!/usr/bin/env python3
"""bench/tune_turns.py: the tuner's pick judged over several turns of the same
tunes (turns: each an exhaustive and a pruned `coconet tune` of the same
workloads and sizes, in its own process, as bench/tune.sh's EXH and PRUNED
parts run them, one WORK folder a turn).

One exhaustive tune's times carry its process's noise: at steps of
microseconds one candidate's time can move from one tune to the next by more
than the 3 % the pick is judged by. So each candidate's time here is its
median over the turns' exhaustive tables, the best is the least of those
medians, and each turn's pruned pick is judged by its own median: within 3 %
of the best, or not.

    python3 bench/tune_turns.py TURN_DIR... > turns.md

Each TURN_DIR holds runs/WORKLOAD.exhaustive.txt and runs/WORKLOAD.pruned.txt
(bench/tune.sh's WORK, or its tune-runs.tgz unpacked). Prints a markdown table
per workload and size; exit status 1 when a turn lacks a table the first has.
"""
import os
import re
import statistics
import sys

HEADER = re.compile(r"^(\w+) at (\S+), \d+ ranks?: ")
ROW = re.compile(r"^\s+\d+\s+(\S+)\s+(\S+)\s+([0-9.]+) ms")
BEST = re.compile(r"^best at (\S+): (\S+) with knobs (\S+),")


def exhaustive_times(path):
    """{size: {candidate: ms}} from one exhaustive tune's output"""
    times, size = {}, None
    with open(path) as f:
        for line in f:
            m = HEADER.match(line)
            if m:
                size = m.group(2).rstrip(",")
                times[size] = {}
                continue
            m = ROW.match(line)
            if m and size:
                times[size][m.group(1) + "/" + m.group(2)] = float(m.group(3))
    return times


def pruned_picks(path):
    """{size: candidate} from one pruned tune's output"""
    picks = {}
    with open(path) as f:
        for line in f:
            m = BEST.match(line)
            if m:
                picks[m.group(1)] = m.group(2) + "/" + m.group(3)
    return picks


def workloads(turn):
    runs = os.path.join(turn, "runs")
    names = sorted(f[: -len(".exhaustive.txt")] for f in os.listdir(runs)
                   if f.endswith(".exhaustive.txt"))
    return [w for w in names if os.path.exists(os.path.join(runs, w + ".pruned.txt"))]


def main(turns):
    if not turns:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    status = 0
    print(f"Over {len(turns)} turns ({', '.join(os.path.basename(t.rstrip('/')) for t in turns)}): "
          "each candidate's median time over the turns' exhaustive tunes; each turn's pruned "
          "pick at its median, against the best median.\n")
    print("| workload | size | best (median over the turns) | ms | pruned picks: median / best "
          "| all within 3 % |")
    print("|---|---|---|---|---|---|")
    for w in workloads(turns[0]):
        ex, pr = [], []
        for t in turns:
            runs = os.path.join(t, "runs")
            try:
                ex.append(exhaustive_times(os.path.join(runs, w + ".exhaustive.txt")))
                pr.append(pruned_picks(os.path.join(runs, w + ".pruned.txt")))
            except OSError as e:
                print(f"tune_turns.py: {t}: {e}", file=sys.stderr)
                return 1
        for size in ex[0]:
            if any(size not in e for e in ex):
                print(f"tune_turns.py: {w} at {size}: not in every turn", file=sys.stderr)
                status = 1
                continue
            common = set.intersection(*(set(e[size]) for e in ex))
            median = {c: statistics.median(e[size][c] for e in ex) for c in common}
            if not median:
                continue
            best = min(median, key=median.get)
            judged = []
            for p in pr:
                pick = p.get(size)
                if pick is None or pick not in median:
                    judged.append((pick or "none", None))
                else:
                    judged.append((pick, median[pick] / median[best]))
            within = all(r is not None and r <= 1.03 for _, r in judged)
            cells = ", ".join(f"{pick} {r:.3f}" if r is not None else f"{pick} (not timed)"
                              for pick, r in judged)
            print(f"| {w} | {size} | {best} | {median[best]:.4f} | {cells} | "
                  f"{'yes' if within else 'no'} |")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
