"""The benchmark's tasks: what model.use_task switches between, and what
scripts/pbt_fashion.sh reads for a task's budget (this file imports nothing, so the script
reads it without starting PyTorch)."""

# The tasks (scripts/pbt_fashion.sh --task): the search space and the budget (steps per
# agent, steps per PBT interval) that the script passes unless told otherwise.
#   default: 2,000 steps (about 2.5 epochs), 20 intervals of 100.
#   schedule: twice as long (4,000 steps, about 5 epochs; 20 intervals of 200) over a range
#     of learning rates four decades wide, whose ends are clearly wrong (measured with
#     constant rates: about 79 % held-out accuracy at 1e-4 and 26-68 % at 0.17-0.19, against
#     88 % near 0.01): a task where a rate that falls as training goes on beats every
#     constant one (docs/pbt-fashion.md, "A task where the schedule matters").
#   drift: the schedule task's range and budget on a stream whose distribution shifts 3
#     times, at steps drawn per seed and told to no method (drift.py: a new pixel permutation
#     each time): the best rate moves in a way no fixed schedule follows (docs/pbt-fashion.md,
#     "A stream that shifts").
# "shifts" (0 when absent): the drift's shifts over the agent's steps.
TASKS = {
    "default": {"space": {"lr": (1e-3, 0.5), "weight_decay": (1e-6, 1e-2)},
                "steps": 2000, "interval": 100},
    "schedule": {"space": {"lr": (1e-4, 1.0), "weight_decay": (1e-6, 1e-2)},
                 "steps": 4000, "interval": 200},
    "drift": {"space": {"lr": (1e-4, 1.0), "weight_decay": (1e-6, 1e-2)},
              "steps": 4000, "interval": 200, "shifts": 3},
}
