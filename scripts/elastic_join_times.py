#!/usr/bin/python3
"""The time from each fault to the end of the joiner's first step, per test, from the verbose
output of the elastic spare tests (``ctest -R <tests> -V``; concatenate several runs).

The tests print ``fault: world rank R (slot S) ... at T`` when a member dies and ``world rank
R: joined slot S at iteration I (epoch E) at T: ...`` after a joiner's first step (T: the
monotonic clock in seconds, one clock for the node's processes). Each join is paired with the
last fault of its slot before it. Prints one line per test: joins, median (min-max) in ms.

    cd build-openmpi && ctest -R elastic_averaging -V | /usr/bin/python3 ../scripts/elastic_join_times.py
"""

import re
import statistics
import sys

LINE = re.compile(r"^(\d+): (.*)$")
FAULT = re.compile(r"fault: world rank \d+ \(slot (\d+)\) .* at ([0-9.]+)$")
JOIN = re.compile(r"world rank \d+: joined slot (\d+) at iteration \d+ \(epoch \d+\) at ([0-9.]+)")


def main() -> int:
    names = {}    # ctest number -> test name
    faults = {}   # (ctest number, run) -> {slot: time}
    times = {}    # test name -> [ms]
    runs = {}     # ctest number -> how many times its output began
    for raw in sys.stdin:
        raw = raw.rstrip("\n")
        start = re.match(r"^\s*Start\s+(\d+): (\S+)", raw)
        if start:
            number = start.group(1)
            names[number] = start.group(2)
            runs[number] = runs.get(number, 0) + 1
            continue
        m = LINE.match(raw)
        if not m or m.group(1) not in names:
            continue
        number, text = m.group(1), m.group(2)
        key = (number, runs[number])
        f = FAULT.search(text)
        if f:
            faults.setdefault(key, {})[int(f.group(1))] = float(f.group(2))
            continue
        j = JOIN.search(text)
        if j and int(j.group(1)) in faults.get(key, {}):
            dead = faults[key].pop(int(j.group(1)))
            times.setdefault(names[number], []).append(1000.0 * (float(j.group(2)) - dead))
    if not times:
        print("elastic_join_times.py: no fault and join lines found (run ctest with -V)")
        return 1
    for name in sorted(times):
        ms = times[name]
        print(f"{name}: {len(ms)} joins, {statistics.median(ms):.0f} ms "
              f"({min(ms):.0f}-{max(ms):.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
