"""paramwin's averaging methods (paramwin_inline, paramwin_background, paramwin_symmetric): a
``paramwin.torch.TorchAveragingAgent`` over the model's parameters, reading the other ranks'
latest published parameters one-sidedly through shared memory and mixing them in
(``topology="all"``, uniform weights), every ``max(1, H // 4)`` steps: a round costs a read of
the peers' 400 KB snapshots and a mix, no rank waits for another, so it can run four times as
often as the synchronous methods' all-reduce. A peer whose version has not changed over 4 of
this rank's steps is skipped as stale (``stale_steps=4``: a rank stalled by a slowdown is not
mixed in while it stalls; a rank 2x slower publishes every 2 steps and is never skipped). No
warm-up (every rank starts from the same initial weights); ``finish`` is the agent's closing
collective mean. Each rank's optimizer state stays its own. paramwin_symmetric makes each round
a two-sided exchange that keeps the ranks' mean (``symmetric=True``: inline, default weights
1/(2u + 1) per peer). Needs this build's Python package (scripts/averaging_fashion.sh puts
``--build-dir``'s on the path)."""

from paramwin.torch import TorchAveragingAgent

STALE_STEPS = 4


class ParamwinAveraging:
    def __init__(self, run, background: bool, symmetric: bool = False):
        self.background = background
        self.symmetric = symmetric
        self.agent = None
        self.interval = max(1, run.period // 4)

    def wrap(self, run, model):
        self.agent = TorchAveragingAgent(model, run.comm.Dup(), topology="all",
                                         interval=self.interval, background=self.background,
                                         symmetric=self.symmetric,
                                         stale_steps=STALE_STEPS,
                                         name=f"averaging_fashion.{run.method}.{run.condition}")
        self.agent.publish()
        return model

    def after_step(self, run, step):
        r = self.agent.step()
        extra = run.extra
        extra["rounds"] = self.agent.agent.rounds
        mixed = sum(p.skipped == "none" for p in r.peers) if r.applied else 0
        extra["peers_mixed"] = extra.get("peers_mixed", 0) + mixed
        extra["averaging_seconds"] = extra.get("averaging_seconds", 0.0) + r.seconds

    def finish(self, run):
        self.agent.finish()
        self.agent.close()
