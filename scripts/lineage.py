#!/usr/bin/python3
"""Lineage of a paramwin population from its JSON-lines event logs.

    scripts/lineage.py LOG... --out DIR [--population N] [--title TEXT]

LOG: the event logs of one run (AgentOptions::event_log, e.g. "events.rank{rank}.jsonl":
one file per rank, or one merged file). Every line is one JSON event; events that died carry
"rank", "step", "generation", "donors" [{"rank", "version", "weight", "skipped", ...}],
"version" and "published", and, with hyperparameters declared, "hyper" (after the step) and
"hyper_before" (docs/agent.md, "Event log").

Writes to DIR:
  lineage.png      agents x steps: each life of an agent (from its birth to its next death)
                   coloured by its ancestor (by first donor), and an edge from every parent
                   (donor rank, version read) to the rebirth it fed
  hyper.png        hyperparameter trajectories per agent (only when the logs carry "hyper")
  survivors.csv    the table printed on stdout
and prints which initial agent's descendants are alive at the end.

Ancestry (docs/agent.md, "Lineage"): a life is one agent between two rebirths; the initial
lives are the agents themselves. A rebirth's parents are the lives its donors were living
when they published the versions it read: a donor's life that began with the publish
version V holds every version >= V until its next rebirth (a rebirth republishes at once;
if that publish was skipped the new life starts at the next version). Two measures:
  * by first donor: a life descends from its first (best-ranked, non-skipped) donor's
    ancestor -- one ancestor per life, as Ray Tune's and LTFB's "copy the best" lineage;
  * by weight share: a life's share of initial agent i is the mixing-weight average of its
    parents' shares (k donors of a mean: 1/k each), so shares of a life sum to 1.
The table counts, per initial agent, the final lives descending from it by first donor and
the sum of their weight shares (in agents: the population's total is the population size).

Exit status 2 with "lineage.py: FILE:LINE: ..." on a malformed log (not JSON, a missing or
mistyped field), an unreadable file, or a donor version no life of that agent holds.
"""

import argparse
import csv
import json
import os
import sys


class LogError(Exception):
    """A malformed log: the message names the file and the line."""


def fail(message):
    print(f"lineage.py: {message}", file=sys.stderr)
    sys.exit(2)


def field(event, name, kinds, where):
    if name not in event:
        raise LogError(f"{where}: missing field '{name}'")
    value = event[name]
    # bool is an int in Python: refuse it where a number is expected, and vice versa.
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok:
        raise LogError(f"{where}: field '{name}' is {type(value).__name__}, "
                       f"expected {' or '.join(k.__name__ for k in kinds)}")
    return value


def read_events(paths):
    """All events of all logs, each with its origin ("file:line")."""
    events = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
        except OSError as e:
            raise LogError(f"{path}: cannot read: {e.strerror}") from e
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                event = json.loads(line)
            except json.JSONDecodeError as e:
                raise LogError(f"{where}: not a JSON object ({e.msg} at column {e.colno})") from e
            if not isinstance(event, dict):
                raise LogError(f"{where}: not a JSON object")
            field(event, "rank", (int,), where)
            field(event, "step", (int,), where)
            field(event, "died", (bool,), where)
            if event["rank"] < 0:
                raise LogError(f"{where}: field 'rank' is negative")
            if event["died"]:
                field(event, "generation", (int,), where)
                field(event, "version", (int,), where)
                donors = field(event, "donors", (list,), where)
                for i, d in enumerate(donors):
                    dw = f"{where}: donors[{i}]"
                    if not isinstance(d, dict):
                        raise LogError(f"{dw}: not an object")
                    field(d, "rank", (int,), dw)
                    field(d, "version", (int,), dw)
                    field(d, "weight", (int, float), dw)
            for key in ("hyper", "hyper_before"):
                if key in event:
                    h = field(event, key, (dict,), where)
                    for name, value in h.items():
                        if value is not None and (isinstance(value, bool)
                                                  or not isinstance(value, (int, float))):
                            raise LogError(f"{where}: {key}.{name} is not a number")
            event["_where"] = where
            events.append(event)
    return events


class Life:
    """One agent between two rebirths."""

    def __init__(self, agent, generation, start_step, start_version, parents):
        self.agent = agent
        self.generation = generation
        self.start_step = start_step
        self.start_version = start_version
        self.parents = parents  # [(agent, version, weight)], first donor first
        self.end_step = None
        self.first_ancestor = None
        self.share = None


def build_lives(events, population):
    """Per agent, its lives in order (generation 0 first)."""
    deaths = sorted((e for e in events if e["died"]), key=lambda e: (e["rank"], e["step"]))
    lives = {a: [Life(a, 0, 0, 0, [])] for a in range(population)}
    for e in deaths:
        parents = [(d["rank"], d["version"], float(d["weight"]))
                   for d in e["donors"] if not d.get("skipped", False)]
        for d, _, _ in parents:
            if d >= population:
                raise LogError(f"{e['_where']}: donor rank {d} outside the population "
                               f"of {population} (see --population)")
        # The rebirth republishes at once: its version is the new life's first (unless that
        # publish was skipped for a reader's pin; then the next one is).
        start_version = e["version"] + (0 if e.get("published", True) else 1)
        own = lives[e["rank"]]
        own[-1].end_step = e["step"]
        own.append(Life(e["rank"], e["generation"], e["step"], start_version, parents))
        own[-1].where = e["_where"]
    return lives


def life_holding(lives, agent, version, where):
    """The life of @agent that published @version."""
    holder = None
    for life in lives[agent]:
        if life.start_version <= version:
            holder = life
    if holder is None:
        raise LogError(f"{where}: no life of agent {agent} published version {version}")
    return holder


def resolve(lives, population):
    """Fills first_ancestor and share of every life (parents before children)."""
    def visit(life, depth=0):
        if life.share is not None:
            return
        if depth > 100000:
            raise LogError("lineage has a cycle (a donor version read before it was published)")
        if not life.parents:
            # An initial agent, or a rebirth without a usable donor (MixingKind::reset, every
            # donor skipped): its own ancestor.
            life.first_ancestor = life.agent
            life.share = [1.0 if i == life.agent else 0.0 for i in range(population)]
            return
        share = [0.0] * population
        total = sum(w for _, _, w in life.parents) or 1.0
        first = None
        for d, v, w in life.parents:
            parent = life_holding(lives, d, v, getattr(life, "where", "?"))
            if parent is life:
                raise LogError(f"{life.where}: agent {life.agent} read its own new life")
            visit(parent, depth + 1)
            if first is None:
                first = parent.first_ancestor
            for i in range(population):
                share[i] += (w / total) * parent.share[i]
        life.first_ancestor = first
        life.share = share

    for agent_lives in lives.values():
        for life in agent_lives:
            visit(life)


def survivors_table(lives, population):
    """Per initial agent: final lives descending from it (first donor), and weight share."""
    rows = []
    finals = [lives[a][-1] for a in range(population)]
    for i in range(population):
        by_first = [f.agent for f in finals if f.first_ancestor == i]
        share = sum(f.share[i] for f in finals)
        rows.append({"ancestor": i, "survivors_by_first_donor": len(by_first),
                     "agents": ";".join(str(a) for a in by_first),
                     "weight_share": round(share, 4)})
    return rows


def plot_lineage(lives, population, last_step, out_png, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.7 * population))
    for agent_lives in lives.values():
        for life in agent_lives:
            end = life.end_step if life.end_step is not None else last_step
            ax.plot([life.start_step, end], [life.agent, life.agent], lw=6, solid_capstyle="butt",
                    color=colours(life.first_ancestor % 10), alpha=0.85)
            if life.generation > 0:
                ax.plot([life.start_step], [life.agent], marker="o", ms=5, color="black")
                for n, (d, v, w) in enumerate(life.parents):
                    ax.annotate("", xy=(life.start_step, life.agent), xytext=(life.start_step, d),
                                arrowprops={"arrowstyle": "->", "lw": 0.6 + 1.2 * w,
                                            "color": "black" if n == 0 else "gray",
                                            "connectionstyle": "arc3,rad=0.15"})
    for i in range(population):
        ax.plot([], [], lw=6, color=colours(i % 10), label=f"descends from agent {i}")
    ax.set_yticks(range(population))
    ax.set_yticklabels([f"agent {a}" for a in range(population)])
    ax.set_ylim(population - 0.5, -0.5)
    ax.set_xlim(0, max(last_step, 1))
    ax.set_xlabel("step (edges: donor -> rebirth, at the step the donor's version was read; "
                  "black: first donor)")
    ax.set_title(title or "lineage (colour: ancestor by first donor)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=min(population, 4),
              fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


def hyper_series(events):
    """{name: {agent: [(step, value), ...]}} from "hyper_before"/"hyper" of every event."""
    series = {}
    for e in sorted(events, key=lambda e: (e["rank"], e["step"])):
        for key in ("hyper_before", "hyper"):
            if key == "hyper_before" and not e["died"]:
                continue
            for name, value in e.get(key, {}).items():
                if value is None:
                    continue
                series.setdefault(name, {}).setdefault(e["rank"], []).append((e["step"], value))
    return series


def plot_hyper(series, population, last_step, out_png, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted(series)
    colours = plt.get_cmap("tab10")
    fig, axes = plt.subplots(len(names), 1, figsize=(10, 2.8 * len(names)), squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        positive = True
        for agent in range(population):
            points = series[name].get(agent, [])
            if not points:
                continue
            xs = [s for s, _ in points] + [last_step]
            ys = [v for _, v in points] + [points[-1][1]]
            positive = positive and all(y > 0 for y in ys)
            ax.step(xs, ys, where="post", color=colours(agent % 10), label=f"agent {agent}")
            ax.plot(xs[:-1], ys[:-1], ".", color=colours(agent % 10), ms=3)
        if positive:
            ax.set_yscale("log")
        ax.set_ylabel(name)
        ax.legend(fontsize=7, ncol=min(population, 8), loc="best")
    axes[-1, 0].set_xlabel("step (values at each rebirth: before and after)")
    axes[0, 0].set_title(title or "hyperparameters per agent")
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", metavar="LOG", help="JSON-lines event logs")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument("--population", type=int, default=0,
                        help="number of agents (default: highest rank seen + 1)")
    parser.add_argument("--steps", type=int, default=0,
                        help="last step of the run (default: the last step in the logs)")
    parser.add_argument("--title", default="", help="title prefix of the plots")
    args = parser.parse_args(argv)

    try:
        events = read_events(args.logs)
        seen = [e["rank"] for e in events]
        seen += [d["rank"] for e in events if e["died"] for d in e["donors"]]
        population = args.population or (max(seen) + 1 if seen else 0)
        if population <= 0:
            raise LogError("no events in " + ", ".join(args.logs) +
                           " (and no --population): nothing to draw")
        if seen and max(seen) >= population:
            raise LogError(f"rank {max(seen)} appears in the logs but --population is {population}")
        lives = build_lives(events, population)
        resolve(lives, population)
    except LogError as e:
        fail(str(e))

    last_step = max([args.steps] + [e["step"] for e in events])
    os.makedirs(args.out, exist_ok=True)
    rows = survivors_table(lives, population)
    deaths = sum(len(v) - 1 for v in lives.values())
    print(f"lineage: {population} agents, {deaths} rebirths, last step {last_step}")
    print(f"{'ancestor':>8}  {'survivors (first donor)':>23}  {'agents':<16}  {'weight share':>12}")
    for r in rows:
        print(f"{r['ancestor']:>8}  {r['survivors_by_first_donor']:>23}  {r['agents'] or '-':<16}  "
              f"{r['weight_share']:>12.4f}")
    with open(os.path.join(args.out, "survivors.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plot_lineage(lives, population, last_step, os.path.join(args.out, "lineage.png"), args.title)
    print(f"wrote {os.path.join(args.out, 'lineage.png')}")
    series = hyper_series(events)
    if series:
        plot_hyper(series, population, last_step, os.path.join(args.out, "hyper.png"), args.title)
        print(f"wrote {os.path.join(args.out, 'hyper.png')}")
    else:
        print("no hyperparameters in the logs: hyper.png not written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
